"""CLI of the LLM layer: ``mock-llm`` serves a rules file as an OpenAI-compatible endpoint.

Mount into the main app either as a sub-app (``app.add_typer(llm_cli.app, name="mock-llm")``) or as a
command (``app.command("mock-llm")(llm_cli.mock_llm)``); both give ``coharden mock-llm --rules FILE``.
Standalone: ``python -m coharden.cli.llm --rules FILE``.
"""

from __future__ import annotations

import threading
from pathlib import Path

import typer
from rich.console import Console

from coharden.cli.options import ranged
from coharden.llm.mockrules import RulesError
from coharden.llm.mockserver import MockLLMServer, ReceivedRequest

_err = Console(stderr=True, soft_wrap=True)


def mock_llm(
    rules: Path = typer.Option(..., "--rules", "-r", help="YAML or JSON rules file.", dir_okay=False),
    host: str = typer.Option("127.0.0.1", "--host", help="Interface to bind (keep it on loopback)."),
    port: int = ranged("--port", default=0, help="Port to bind; 0 picks a free one.", lo=0, hi=65535),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Print one line per request to stderr."),
) -> None:
    """Serve an OpenAI-compatible mock LLM from a rules file until Ctrl-C.

    Prints the base URL (``http://HOST:PORT/v1``) alone on the first line of stdout; use it as the
    ``api_base`` of an ``openai/...`` or ``hosted_vllm/...`` model.
    """

    def log(entry: ReceivedRequest) -> None:
        rule = "no rule" if entry.rule_index is None else f"rule {entry.rule_index}"
        _err.print(f"{entry.method} {entry.path} -> {entry.status} ({rule})", highlight=False)

    try:
        server = MockLLMServer(rules, host=host, port=port, on_request=log if verbose else None)
        url = server.start()
    except RulesError as exc:
        _err.print(f"[red]error:[/red] {exc}", highlight=False)
        raise typer.Exit(2) from None
    except OSError as exc:
        _err.print(f"[red]error:[/red] cannot listen on {host}:{port}: {exc.strerror or exc}", highlight=False)
        raise typer.Exit(2) from None
    print(url, flush=True)
    _err.print(f"mock LLM: {len(server.rules)} rules from {rules} at {url}; Ctrl-C to stop", highlight=False)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


app = typer.Typer(add_completion=False, rich_markup_mode=None,
                  help="Serve an OpenAI-compatible mock LLM from a rules file.")
app.callback(invoke_without_command=True)(mock_llm)

if __name__ == "__main__":  # pragma: no cover
    app()
