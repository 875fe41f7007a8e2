"""Run a command with local services beside it, inside the same sandbox (so on its loopback network).

Usage: ``SERVICE_PYTHON -I service_main.py NAME=ENVVAR [...] -- COMMAND...``. For every ``NAME`` a server is
started on ``127.0.0.1`` at a free port, in a thread of this process; ``ENVVAR`` is set to its URL for the
command; the servers die with this process when the command ends. Executed by a service's own interpreter
(the one that has the service's packages), so this file imports nothing from coharden.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading


def _httpbin() -> object:
    from httpbin import app  # type: ignore[import-not-found]

    return app


APPS = {"httpbin": _httpbin}


def start(name: str) -> str:
    """Start service ``name`` on a free loopback port (serving before this returns); its URL."""
    from werkzeug.serving import WSGIRequestHandler, make_server  # type: ignore[import-not-found]

    class Quiet(WSGIRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive and chunked bodies, as a real server

        def log(self, *args: object, **kwargs: object) -> None:
            pass

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = make_server("127.0.0.1", 0, APPS[name](), threaded=True, request_handler=Quiet)
    threading.Thread(target=server.serve_forever, name=f"service-{name}", daemon=True).start()
    return f"http://127.0.0.1:{server.server_port}/"


def main(argv: list[str]) -> int:
    if "--" not in argv:
        print("usage: service_main.py NAME=ENVVAR... -- COMMAND...", file=sys.stderr)
        return 2
    at = argv.index("--")
    specs, command = argv[:at], argv[at + 1:]
    env = dict(os.environ)
    for spec in specs:
        name, _, variable = spec.partition("=")
        if name not in APPS or not variable:
            print(f"coharden service: unknown service {spec!r} (known: {', '.join(APPS)})", file=sys.stderr)
            return 2
        try:
            env[variable] = start(name)
        except Exception as exc:  # noqa: BLE001 - any failure to start is reported as such
            print(f"coharden service: {name} did not start: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 3
    return subprocess.call(command, env=env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
