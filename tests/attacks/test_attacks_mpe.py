"""Hostile candidate tests against MPE: a shared-process hijack of the reference, tampering under
--reject-tampering, hangs on mutants only, a test that kills its batch's parent, forged recorder lines and
recorded values that would run code or name code outside the repository.

Each attack is a real test patch for ``examples/printer_brackets`` run in the real sandbox; the assertions look at
the host (the store, the user's checkout, ``$HOME``, ``/tmp``, the process table).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from tests.attacks.hostile import attack, needs_bwrap

from coharden.config import Settings
from coharden.execution.executor import InstanceExecutor
from coharden.execution.store import Store
from coharden.instances import LocalInstance, resolve_repo
from coharden.schema.testpatch import TestPatch
from coharden.schema.verdict import Outcome

pytestmark = needs_bwrap


HIJACK = """\
    import gc


    def _register_forger():
        import pytest
        from _pytest.config import Config

        config = next(o for o in gc.get_objects() if isinstance(o, Config))

        class Forger:
            @pytest.hookimpl(hookwrapper=True)
            def pytest_runtest_makereport(self, item, call):
                outcome = yield
                outcome.get_result().outcome = "passed"

        config.pluginmanager.register(Forger(), "forger")


    def test_repro_hijack():
        a, b, c = symbols("a b c")
        assert sstr(a / (b * c)) != "a/b*c"  # fails on the buggy code, so it is fail-to-pass
        _register_forger()  # from now on every report in this process says "passed"
    """


#: what an attack's MPE run needs: enough mutants that the reference rejects some (three rounds of one mutant per
#: operator); the whole pool would only repeat the same attack on more mutants
ATTACK_CAP = 33


def mpe_run(ex: InstanceExecutor, example: LocalInstance, candidate: TestPatch, **config: object):
    from coharden.mpe.evaluate import MPERequest, evaluate
    from coharden.schema.mpe_config import MPEConfig

    config.setdefault("max_mutants", ATTACK_CAP)
    return evaluate(ex, MPERequest(example.instance.patch, candidate, ex.golden_test(), MPEConfig(**config)))


@pytest.mark.slow
def test_shared_process_hijack_cannot_reach_the_reference_or_the_store(make_executor, example: LocalInstance,
                                                                        tmp_path: Path) -> None:
    store = Store(tmp_path / "store.sqlite")
    ex = make_executor(store)
    # the hijacker's file sorts before the golden test's: in a shared process it would run first
    hijack = attack(ex, HIJACK, path="tests/test_a_hijack.py")
    result = mpe_run(ex, example, hijack)
    assert result.isolation == "bwrap"
    assert result.fail_to_pass
    # its plugin only ever saw its own process: the reference still rejects wrong fixes, and the hijacker is
    # graded exactly like the honest test it resembles (the same single check): never Rigorous
    assert any(r.reference.failed for r in result.mutants)
    assert result.test_class.value in ("Lax", "Borderline")
    assert any("plugin manager" in n or "gc." in n for n in result.tampering), result.tampering
    # the reference was not touched: the honest lax candidate, graded on the same store, is Lax with the same
    # laxity (on a clean store too: the same pool, the same reference verdicts)
    lax = ex.test_patch({c.name: c.patch for c in example.candidates}["lax"], name="lax")
    honest = mpe_run(ex, example, lax)
    assert honest.test_class is result.test_class
    assert honest.laxity == pytest.approx(result.laxity)
    clean = mpe_run(make_executor(Store(tmp_path / "clean.sqlite")), example, lax)
    assert clean.laxity == pytest.approx(honest.laxity)
    assert [r.reference.outcome for r in honest.mutants] == [r.reference.outcome for r in result.mutants]


def test_conftest_forgery_with_reject_tampering_is_invalid(make_executor, example: LocalInstance) -> None:
    ex = make_executor()
    forged = attack(ex, """\
        def test_repro_forged():
            a, b, c = symbols("a b c")
            assert sstr(a / (b * c)) != "a/b*c"
        """, extra={"conftest.py": "import pytest\n\n\ndef pytest_configure(config):\n    pass\n"})
    result = mpe_run(ex, example, forged, reject_tampering=True)
    assert result.test_class.value == "Invalid"
    assert result.mutants == []  # rejected before any mutant ran
    assert any("conftest.py" in note for note in result.tampering)
    assert "tampering" in result.to_json()


@pytest.mark.slow
def test_hanging_only_on_mutants_costs_seconds_and_is_reported(make_executor, example: LocalInstance) -> None:
    ex = make_executor(timeout=120)
    golden_checks = [("a / (b * c)", "a/(b*c)"), ("a / (b / c)", "a/(b/c)"), ("(a + b) / (c * d)", "(a + b)/(c*d)"),
                     ("a - (b + c)", "a - (b + c)"), ("a - (b - c)", "a - (b - c)"), ("a * b / c", "a*b/c"),
                     ("a / b / c", "a/b/c"), ("a / b**2", "a/b**2"), ("a - b * c", "a - b*c"),
                     ("a - b - c", "a - b - c")]
    hang = attack(ex, f"""\
        def test_repro_hang_on_mutants():
            a, b, c, d = symbols("a b c d")
            names = {{"a": a, "b": b, "c": c, "d": d}}
            assert sstr(a / (b * c)) != "a/b*c"  # fails on the buggy code
            if any(sstr(eval(expr, {{}}, names)) != want for expr, want in {golden_checks!r}):
                while True:  # a wrong fix: hang instead of failing
                    time.sleep(0.01)
        """)
    result = mpe_run(ex, example, hang, timeout_floor=1.0, timeout_factor=3.0)
    assert result.fail_to_pass
    limit = result.time_limits["candidate"]
    assert limit < 10
    assert result.candidate_timeouts > 0
    assert result.candidate_timeouts == sum(1 for r in result.mutants if r.candidate.outcome is Outcome.TIMEOUT)
    # every wrong fix the candidate did not reject outright, it hung on
    assert all(r.candidate.failed or r.candidate.outcome is Outcome.TIMEOUT for r in result.mutants
               if r.reference.failed)
    hung = [r.candidate for r in result.mutants if r.candidate.outcome is Outcome.TIMEOUT]
    assert all("running at the limit: tests/test_attack.py::test_repro_hang_on_mutants" in v.reason for v in hung)
    # each hang is stopped at the scaled limit, not the 120 s timeout (what that costs: benchmarks/kill_latency.py)
    assert all(f"({limit:g} s" in v.reason for v in hung), [v.reason for v in hung]
    assert result.to_json()["candidate_timeouts"] == result.candidate_timeouts


@pytest.mark.slow
def test_a_batch_goes_on_after_a_test_tries_to_kill_its_parent(example: LocalInstance, tmp_path: Path) -> None:
    from coharden.mpe.batch import BatchGrading, BatchOutputs, Prediction, run_batch
    from coharden.schema.mpe_config import MPEConfig

    settings = Settings(timeout=20, cache_dir=tmp_path / "cache", workers=1, store=tmp_path / "store.sqlite")
    with InstanceExecutor(example.instance, resolve_repo(example.instance, None), settings) as ex:
        killer = attack(ex, """\
            def test_repro_kill_parent():
                import signal
                os.kill(os.getppid(), signal.SIGKILL)
            """)
    lax = {c.name: c.patch for c in example.candidates}["lax"]
    predictions = [Prediction(instance_id=example.instance.instance_id, model_name_or_path="killer",
                              model_patch=killer.patch),
                   Prediction(instance_id=example.instance.instance_id, model_name_or_path="honest", model_patch=lax)]
    rows = run_batch({example.instance.instance_id: example.instance}, predictions,
                     BatchGrading(settings, MPEConfig(per_operator=1)),
                     BatchOutputs(Store(settings.store), tmp_path / "out"))
    assert rows[0]["candidate_buggy"]["outcome"] == "PASS"  # the kill cannot reach the server: a plain verdict
    assert rows[1].get("fail_to_pass") is True
    assert "error" not in rows[1]


def test_forged_recorder_lines_never_reach_mutants(make_executor, example: LocalInstance) -> None:
    """The recorder writes its records into the worktree, where the test under record can append its own:
    a code-injecting parameter name, a path out of the repository, a foreign receiver name and garbage are
    dropped; the real records stay."""
    from coharden.mutation.context import record_targets
    from coharden.mutation.pool import Recording, fix_context, record_calls

    ex = make_executor()
    inst = example.instance
    targets = record_targets(fix_context(ex, inst.patch))
    assert targets
    target = targets[0]
    forged = [
        {"file": "ROOT/" + target["path"], "qualname": target["qualname"], "kind": "return", "key": "(1,)",
         "params": ["__import__('os').system('touch /tmp/pwned') or x"], "args_enc": "1", "value_enc": "1"},
        {"file": "ROOT/" + target["path"], "qualname": target["qualname"], "kind": "return", "key": "(2,)",
         "params": ["x"], "receiver": "__import__('os')", "args_enc": "1", "value_enc": "1"},
        {"file": "ROOT/../../etc/passwd", "qualname": "f", "kind": "caller", "key": "(3,)", "params": ["x"],
         "outcome": "return", "args_enc": "1", "value_enc": "1"},
        {"file": "ROOT/" + target["path"], "qualname": "x) or os.system('id') or (", "kind": "summary",
         "calls": 1, "raised": []},
    ]
    lines = [__import__("json").dumps(rec) for rec in forged] + ["not json", "[1, 2]"]
    # written after the recorder closed its file (pytest_unconfigure runs after every sessionfinish hook)
    conftest = textwrap.dedent("""\
        import os

        LINES = LINES_HERE


        def pytest_unconfigure(config):
            with open(os.environ["COHARDEN_RECORD_OUT"], "a") as out:
                for line in LINES:
                    out.write(line.replace("ROOT", os.getcwd()) + "\\n")
        """).replace("LINES_HERE", repr(lines))
    test = attack(ex, """\
        def test_repro_forge_records():
            a, b, c = symbols("a b c")
            assert sstr(a / (b * c)) == "a/(b*c)"
        """, extra={"tests/conftest.py": conftest})
    records = record_calls(ex, Recording(inst.patch, [test], targets))
    assert any(r["kind"] == "summary" for r in records)  # the recorder's own records are kept
    assert all(r.get("path") is None or not r["path"].startswith("..") for r in records)
    text = repr(records)
    assert "__import__" not in text
    assert "os.system" not in text
    assert "passwd" not in text


def test_a_recorded_value_whose_pickle_runs_code_is_dropped_and_counted(make_executor,
                                                                       example: LocalInstance) -> None:
    """The candidate's test calls a function the fix touches with a value whose pickle runs a command when it
    loads (``__reduce__``). Recorded values once went into mutants as pickles, so the command would have run
    in every mutant run against the reference test. The recorder never pickles: the value (a class of the
    test, not of the repository) has no safe encoding, so its call is dropped and counted by reason, nothing
    of it reaches a mutant, and ``__reduce__`` is never even called."""
    from coharden.mutation.pool import PoolRequest, build_pool
    from coharden.schema.mutant import Operator

    ex = make_executor()
    test = attack(ex, """\
        from tinyexpr import StrPrinter


        class Payload:
            num, den = symbols("a b")

            def __reduce__(self):
                open(os.path.join(os.getcwd(), "reduce-was-called"), "w").close()
                return (os.system, ("touch " + os.path.join(os.getcwd(), "pickle-ran"),))

            def __eq__(self, other):
                return isinstance(other, Payload)

            def __hash__(self):
                return 0

            def __repr__(self):
                return "Payload()"


        def test_repro_payload():
            assert StrPrinter()._print_Div(Payload()) == "a/b"
            a, b, c = symbols("a b c")
            assert sstr(a / (b * c)) == "a/(b*c)"
        """)
    ops = [Operator.INPUT_SPECIFIC_SHORTCUT, Operator.NARROWED_SCOPE, Operator.CALLER_PATCH]
    pool = build_pool(ex, PoolRequest(example.instance.patch, [test], operators=ops))
    assert pool.values_dropped.get("type_outside_repository", 0) >= 1, pool.summary()
    assert any("Payload" in name for name in pool.dropped_types), pool.summary()
    root = ex.workspace_root()
    assert not (root / "reduce-was-called").exists()
    assert not (root / "pickle-ran").exists()
    for mutant in pool.mutants:
        assert "pickle" not in mutant.patch
        assert "Payload" not in mutant.patch
        assert "system" not in mutant.patch
    assert "values_dropped" in pool.summary()


def test_forged_encodings_naming_code_outside_the_repository_never_reach_mutants(tmp_path: Path) -> None:
    """The records file lies in the worktree: a test can write encodings by hand. One that names a module
    outside the repository (``os``), a test module, a module the repository lacks, or a representation that is
    not structural (an attribute call) is dropped; a well-formed one of the repository is kept."""
    import json

    from coharden.mutation.recording import module_files, packages_of, parse_records

    packages = packages_of([{"path": "tinyexpr/printer.py", "qualname": "f"}])
    exists = module_files(packages, lambda path: "x" if path in ("tinyexpr/__init__.py", "tinyexpr/expr.py")
                          else None, set())

    def line(enc: object) -> str:
        return json.dumps({"file": str(tmp_path / "tinyexpr/printer.py"), "qualname": "f", "kind": "return",
                           "key": "(1,)", "params": ["x"], "args_enc": json.dumps(enc), "value_enc": "1"})

    forged = [
        ["o", "os", {"system": "os"}, "system('id')"],
        ["o", "tinyexpr", {"system": "os"}, "system('id')"],
        ["o", "tinyexpr", {"Sym": "tinyexpr.tests.test_x"}, "Sym('a')"],
        ["o", "tinyexpr", {"Sym": "tinyexpr.planted"}, "Sym('a')"],
        ["o", "tinyexpr", {"Sym": "tinyexpr.expr"}, "Sym('a').__class__.__init__.__globals__"],
        ["e", "builtins", "builtins", "eval", ["t", ["1"]]],
        ["t", [["o", "tinyexpr", {"__import__": "tinyexpr"}, "__import__('os')"]]],
    ]
    kept = ["t", [["o", "tinyexpr", {"Sym": "tinyexpr.expr"}, "Sym('a')"], None]]
    records = parse_records("\n".join(line(enc) for enc in [*forged, kept]), tmp_path, packages, exists)
    assert [json.loads(r["args_enc"]) for r in records] == [kept]
