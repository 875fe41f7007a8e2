"""Services beside a test command, inside its sandbox: a local httpbin on loopback, network still off."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.conftest import make_patch, make_repo

from coharden.config import Settings
from coharden.execution import service_main
from coharden.execution.executor import InstanceExecutor
from coharden.execution.services import ServiceError, known, service_python, wrap
from coharden.schema.instance import Instance


def test_unknown_service_is_refused_with_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(ServiceError, match="known: httpbin"):
        known(["postgres"])
    assert wrap(["python", "-V"], [], tmp_path) == (["python", "-V"], ())
    assert service_main.main(["httpbin=HTTPBIN_URL", "python"]) == 2  # no '--'
    assert service_main.main(["postgres=PG_URL", "--", "true"]) == 2


FILES = {"widget/__init__.py": "def double(x):\n    return x + x + 1\n",
         "tests/test_widget.py": "from widget import double\n\ndef test_zero():\n    assert double(0) in (0, 1)\n"}


@pytest.mark.slow
def test_httpbin_answers_on_loopback_inside_the_sandbox_and_the_network_stays_off(tmp_path: Path) -> None:
    """The test reads HTTPBIN_URL (as requests' tests do) and talks to the local httpbin; a connection to an
    outside address still fails; the project's interpreter got no httpbin package."""
    cache = tmp_path / "cache"
    try:
        service_python(cache, ["httpbin"])
    except ServiceError as exc:
        pytest.skip(f"httpbin cannot be installed here: {exc}")
    repo, commit = make_repo(tmp_path / "repo", FILES)
    fix = make_patch(repo, {"widget/__init__.py": "def double(x):\n    return x + x\n"})
    test = make_patch(repo, {"tests/test_widget.py": FILES["tests/test_widget.py"] + """
import json, os, socket, urllib.request

def test_two_via_httpbin():
    url = os.environ["HTTPBIN_URL"] + "get?x=" + str(double(2))
    assert url.startswith("http://127.0.0.1:")
    assert json.load(urllib.request.urlopen(url, timeout=20))["args"] == {"x": "4"}

def test_outside_is_unreachable():
    try:
        socket.create_connection(("192.0.2.1", 80), timeout=5)
    except OSError:
        return
    raise AssertionError("the network is reachable")

def test_httpbin_is_not_in_the_project_environment():
    import importlib.util
    assert importlib.util.find_spec("httpbin") is None
"""})
    ids = ["tests/test_widget.py::test_two_via_httpbin", "tests/test_widget.py::test_outside_is_unreachable",
           "tests/test_widget.py::test_httpbin_is_not_in_the_project_environment"]
    instance = Instance(instance_id="acme__widget-1", repo=str(repo), base_commit=commit, patch=fix,
                        test_patch=test, FAIL_TO_PASS=ids[:1], PASS_TO_PASS=ids[1:])
    settings = Settings(cache_dir=cache, services=["httpbin"], timeout=120)
    with InstanceExecutor(instance, repo, settings) as executor:
        golden = executor.test_patch(test, ids=ids)
        fixed = executor.verdict(fix, golden)
        buggy = executor.verdict("", executor.test_patch(test, ids=ids[:1]))
    assert fixed.passed, fixed.reason + fixed.output_tail
    assert fixed.isolation != "none"
    assert buggy.failed  # the service answered: the assertion on the value failed, not the connection
    assert "{'x': '5'}" in buggy.reason or "'5'" in buggy.reason
