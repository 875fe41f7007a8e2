"""Critics: the OpenHands-compatible API, skill directories (critic.yaml + detectors), and the built-in gates with
real verdicts on a bundled example."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from coharden.config import Settings
from coharden.critic import (
    BUILTIN_SKILLS,
    CriticBase,
    CriticContext,
    CriticResult,
    DetectorError,
    EmptyPatchCritic,
    IterativeRefinementConfig,
    PassCritic,
    SkillCritic,
    SkillError,
    builtin_skill,
    default_critic,
    load_skill,
)
from coharden.critic import detectors as det
from coharden.critic.events import action, message, observation
from coharden.instances import LocalInstance, load_local
from coharden.patches import make_diff

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "boundary_check"
USER_SKILL = Path(__file__).parents[1] / "fixtures" / "critic_skill"

REPRO = textwrap.dedent("""\
    from throttle import is_allowed


    def test_limit_is_enforced():
        assert not is_allowed([0, 1, 2], now=5, limit=3, window=60)
    """)
NOT_REPRODUCING = REPRO.replace("assert not is_allowed([0, 1, 2]", "assert is_allowed([0, 1]")
SKIPPED = REPRO.replace("def test_limit", "@pytest.mark.skip\ndef test_limit").replace(
    "from throttle", "import pytest\nfrom throttle")
PRINTS = REPRO.replace("    assert", "    print('checking')\n    assert")


def new_test(content: str, path: str = "tests/test_repro.py") -> str:
    return make_diff(path, None, content)


@pytest.fixture(scope="module")
def boundary(tmp_path_factory: pytest.TempPathFactory) -> LocalInstance:
    return load_local(EXAMPLE, tmp_path_factory.mktemp("cache"))


@pytest.fixture
def context_for(boundary: LocalInstance, settings: Settings) -> Iterator:  # type: ignore[type-arg]
    """Build a CriticContext on the boundary_check example for a mode; all are closed at teardown."""
    opened: list[CriticContext] = []

    def make(mode: str, **kwargs: object) -> CriticContext:
        ctx = CriticContext.for_instance(mode, boundary.instance, Path(boundary.instance.repo), settings, **kwargs)
        opened.append(ctx)
        return ctx

    yield make
    for ctx in opened:
        ctx.close()


# --- the OpenHands-compatible API ----------------------------------------------------------------------------
def test_critic_result_is_a_probability() -> None:
    assert CriticResult(score=0.5, message=None).success
    assert not CriticResult(score=0.49, message="x").success
    with pytest.raises(ValueError, match="less than or equal to 1"):
        CriticResult(score=1.5, message=None)


def test_default_followup_and_refinement_follow_the_sdk() -> None:
    critic = EmptyPatchCritic(iterative_refinement=IterativeRefinementConfig(success_threshold=0.7, max_iterations=2))
    rejected = critic.evaluate([], "")
    assert (rejected.score, rejected.message) == (0.0, "Git patch is empty or missing")
    assert critic.get_followup_prompt(rejected, 1).startswith(
        "The task appears incomplete (iteration 1, predicted success likelihood: 0.0%).")
    assert critic.should_refine(rejected)
    assert not critic.accepts(rejected)
    assert critic.max_iterations == 2
    assert critic.accepts(critic.evaluate([], "diff"))
    # without a refinement config: never refine, accept on CriticResult.success, no follow-ups
    plain = EmptyPatchCritic()
    assert not plain.should_refine(rejected)
    assert not plain.accepts(rejected)
    assert plain.max_iterations == 0
    assert PassCritic().accepts(PassCritic().evaluate([], None))


def test_a_critic_subclass_needs_only_evaluate() -> None:
    class Scorer(CriticBase):
        bonus: float = 0.0

        def evaluate(self, events, git_patch=None):  # type: ignore[no-untyped-def]
            return CriticResult(score=min(1.0, len(events) / 4 + self.bonus), message=None)

    critic = Scorer(bonus=0.25, iterative_refinement=IterativeRefinementConfig())
    assert critic.evaluate([message("user", "hi")], "").score == 0.5
    assert critic.should_refine(critic.evaluate([message("user", "hi")], ""))  # 0.5 < 0.6


# --- a user-written skill ------------------------------------------------------------------------------------
def test_user_skill_hard_gate_short_circuits() -> None:
    critic = load_skill(USER_SKILL)
    assert critic.name == "team-test-style"
    assert [(s.name, s.type, s.weight) for s in critic.signals] == [("no_skip", "hard_gate", 1.0),
                                                                    ("no_print", "soft", 0.5)]
    assert critic.iterative_refinement == IterativeRefinementConfig(success_threshold=0.6, max_iterations=3)

    result = critic.evaluate([], new_test(SKIPPED + "print('x')\n"))

    assert result.score == 0.0
    assert result.metadata is not None
    assert result.metadata["hard_gate"] == "no_skip"
    assert [s["name"] for s in result.metadata["signals"]] == ["no_skip"]  # the soft signal never ran
    assert not critic.accepts(result)
    assert critic.get_followup_prompt(result, 1).startswith("Do not skip or xfail the reproduction test")


def test_user_skill_soft_weights_against_threshold() -> None:
    critic = load_skill(USER_SKILL / "critic.yaml")
    soft = critic.evaluate([], new_test(PRINTS))
    assert soft.score == pytest.approx(0.5)
    assert soft.metadata is not None
    assert soft.metadata["triggered"] == ["no_print"]
    assert not critic.accepts(soft)  # 0.5 < threshold 0.6
    assert critic.get_followup_prompt(soft, 2) == "Remove the print() calls from your test; assert instead.\n"

    clean = critic.evaluate([], new_test(REPRO))
    assert (clean.score, clean.message) == (1.0, "no signal triggered")
    assert critic.accepts(clean)

    lenient = SkillCritic.combine([critic], threshold=0.5)
    assert lenient.accepts(lenient.evaluate([], new_test(PRINTS)))


def test_followup_concatenates_every_triggered_signal(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("def detect(events, git_patch):\n    return True, {'followup_text': 'first'}\n")
    (tmp_path / "b.py").write_text("def detect(events, git_patch):\n    return True, {'followup_text': 'second'}\n")
    (tmp_path / "c.py").write_text("def detect(events, git_patch):\n    return True, {}\n")
    (tmp_path / "critic.yaml").write_text(textwrap.dedent("""\
        threshold: 0.9
        signals:
          - {name: a, type: soft, weight: 0.2, detector: a.py}
          - {name: c, type: soft, weight: 0.2, detector: c.py}
          - {name: b, type: soft, weight: 0.2, detector: b.py}
        """))
    critic = load_skill(tmp_path)
    result = critic.evaluate([], "")
    assert result.score == pytest.approx(0.4)
    assert critic.get_followup_prompt(result, 1) == "first\n\nsecond\n"


@pytest.mark.parametrize(
    ("yaml_text", "files", "expected"),
    [
        ("threshold: [", {}, "not valid YAML"),
        ("- just a list", {}, "expected a mapping"),
        ("threshold: 0.5\n", {}, "signals: Field required"),
        ("threshold: 2\nsignals: [{name: a, type: soft, detector: d.py}]", {"d.py": "def detect(e, p): ..."},
         "threshold: Input should be less than or equal to 1"),
        ("signals: [{name: a, type: veto, detector: d.py}]", {}, "signals[0].type: Input should be 'hard_gate' or"),
        ("signals: [{name: a, type: soft, weight: -1, detector: d.py}]", {}, "signals[0].weight: Input should be"),
        ("signals: [{name: a, type: soft, detecter: d.py}]", {}, "signals[0].detector: Field required"),
        ("signals: [{name: a, type: soft, detector: d.py}, {name: a, type: soft, detector: d.py}]",
         {"d.py": "def detect(e, p): ..."}, "duplicate signal name 'a'"),
        ("signals: [{name: a, type: soft, detector: missing.py}]", {}, "signals[0].detector: detector file"),
        ("signals: [{name: a, type: soft, detector: d.txt}]", {"d.txt": ""}, "is not a .py file"),
        ("signals: [{name: a, type: soft, detector: d.py}]", {"d.py": "def detect(:\n"}, "detector does not parse"),
        ("signals: [{name: a, type: soft, detector: d.py}]", {"d.py": "import no_such_module_xyz\n"},
         "failed to import: ModuleNotFoundError"),
        ("signals: [{name: a, type: soft, detector: d.py}]", {"d.py": "def check(e, p): ...\n"},
         "no function `detect(events, git_patch)`"),
        ("signals: [{name: a, type: soft, detector: d.py}]", {"d.py": "def detect(events): ...\n"},
         "`detect` must accept (events, git_patch)"),
    ],
)
def test_malformed_skill_names_file_and_field(tmp_path: Path, yaml_text: str, files: dict[str, str],
                                               expected: str) -> None:
    (tmp_path / "critic.yaml").write_text(yaml_text)
    for name, content in files.items():
        (tmp_path / name).write_text(content)
    with pytest.raises(SkillError) as info:
        load_skill(tmp_path)
    text = str(info.value)
    assert expected in text
    assert str(tmp_path) in text  # names the file (critic.yaml or the detector)


def test_missing_skill_directory() -> None:
    with pytest.raises(SkillError, match="no critic.yaml"):
        load_skill(USER_SKILL / "detectors")


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("raise RuntimeError('boom')", "raised RuntimeError: boom"),
        ("return True", "must return (triggered, metadata), got bool"),
        ("return 'yes', {}", "must return (bool, dict), got (str, dict)"),
    ],
)
def test_a_broken_detector_fails_loudly(tmp_path: Path, body: str, expected: str) -> None:
    (tmp_path / "d.py").write_text(f"def detect(events, git_patch):\n    {body}\n")
    (tmp_path / "critic.yaml").write_text("signals: [{name: a, type: hard_gate, detector: d.py}]\n")
    critic = load_skill(tmp_path)
    with pytest.raises(DetectorError, match=re.escape(expected)):
        critic.evaluate([], "")


# --- built-in gates ------------------------------------------------------------------------------------------
SOURCE_EDIT = make_diff("throttle/limiter.py", "a\n", "b\n")


@pytest.mark.parametrize(
    ("mode", "patch", "triggered"),
    [
        ("test-only", new_test(REPRO), False),
        ("test-only", SOURCE_EDIT + new_test(REPRO), True),
        ("test-only", make_diff("throttle/helper.py", None, "x = 1\n"), True),
        ("fix-only", SOURCE_EDIT, False),
        ("fix-only", SOURCE_EDIT + new_test(REPRO), True),
        ("joint", SOURCE_EDIT + new_test(REPRO), False),
        ("test-only", "", False),
    ],
)
def test_clean_patch_gate(mode: str, patch: str, triggered: bool) -> None:
    hit, meta = det.clean_patch([], patch, CriticContext(mode))
    assert hit is triggered
    if triggered:
        assert "followup_text" in meta


def test_clean_patch_followup_says_how_to_undo() -> None:
    patch = SOURCE_EDIT + make_diff("throttle/helper.py", None, "x = 1\n") + new_test(REPRO)
    _, meta = det.clean_patch([], patch, CriticContext("test-only"))
    assert meta["files"] == ["throttle/limiter.py", "throttle/helper.py"]
    assert "`git checkout -- throttle/limiter.py`" in meta["followup_text"]
    assert "`rm throttle/helper.py`" in meta["followup_text"]


def test_structural_validity_without_a_repository() -> None:
    assert det.structural_validity([], "", None)[1]["problem"] == "empty"
    hit, meta = det.structural_validity([], "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n-a\n", None)
    assert hit
    assert meta["problem"] == "parse"
    assert "cannot parse patch" in meta["followup_text"]
    hit, meta = det.structural_validity([], new_test(REPRO), None)
    assert not hit
    assert "skipped" in meta


def test_structural_validity_applies_and_parses(context_for) -> None:  # type: ignore[no-untyped-def]
    ctx = context_for("test-only")
    assert det.structural_validity([], new_test(REPRO), ctx) == (False, {"files": ["tests/test_repro.py"]})
    hit, meta = det.structural_validity([], make_diff("throttle/limiter.py", "no such\ncontent\n", "x\n"), ctx)
    assert hit
    assert meta["problem"] == "apply"
    assert "throttle/limiter.py" in meta["error"]
    hit, meta = det.structural_validity([], new_test("def test_x(:\n    pass\n"), ctx)
    assert hit
    assert meta["problem"] == "syntax"
    assert meta["errors"] == ["tests/test_repro.py:1: invalid syntax"]


@pytest.mark.parametrize(
    ("command", "ran"),
    [
        ("python -m pytest tests/test_repro.py -q", True),
        ("cd . && pytest tests/test_repro.py::test_limit_is_enforced", True),
        ("/usr/bin/python3 -m pytest -x tests/", True),
        ("pytest -q", True),
        ("python -m pytest -k limit_is_enforced", True),
        ("python tests/test_repro.py", True),
        ("pytest tests/test_repro.py::test_other", False),
        ("python -m pytest tests/test_limiter.py", False),
        ("pytest -k something_else", False),
        ("cat tests/test_repro.py", False),
        ("python -c 'import throttle'", False),
    ],
)
def test_ran_the_test_gate(command: str, ran: bool) -> None:
    events = [message("user", "task"), action("ls"), observation("", 0), action(command), observation("", 1)]
    hit, meta = det.ran_the_test(events, new_test(REPRO), None)
    assert hit is not ran
    if not ran:
        assert "`python -m pytest tests/test_repro.py::test_limit_is_enforced`" in meta["followup_text"]


def test_ran_the_test_gate_ignores_patches_without_tests() -> None:
    assert det.ran_the_test([], SOURCE_EDIT, None) == (False, {"skipped": "the patch changes no test file"})


def test_fail_to_pass_gate_with_real_verdicts(context_for, boundary: LocalInstance) -> None:  # type: ignore[no-untyped-def]
    ctx = context_for("test-only")
    good = det.fail_to_pass([], new_test(REPRO), ctx)
    assert good[0] is False
    assert good[1]["test_ids"] == ["tests/test_repro.py::test_limit_is_enforced"]
    assert (good[1]["buggy"]["outcome"], good[1]["fixed"]["outcome"]) == ("FAIL", "PASS")

    hit, meta = det.fail_to_pass([], new_test(NOT_REPRODUCING), ctx)
    assert hit
    assert meta["buggy"]["outcome"] == "PASS"
    assert "passes on the original (buggy) code" in meta["followup_text"]

    misaligned = next(c.patch for c in boundary.candidates if c.name == "misaligned")
    hit, meta = det.fail_to_pass([], misaligned, ctx)
    assert hit
    assert meta["fixed"]["outcome"] == "FAIL"
    assert "fails with the reference fix applied" in meta["followup_text"]

    # a file with no test function is a reproduction script (SWT-bench's mode, judged by its exit status): this
    # one exits 0 on the buggy code, so it reproduces nothing
    hit, meta = det.fail_to_pass([], new_test("x = 1\n"), ctx)
    assert hit
    assert meta["buggy"]["outcome"] == "PASS"
    assert meta["buggy"]["exec_mode"] == "reproduction_script"
    assert "passes on the original (buggy) code" in meta["followup_text"]


def test_fail_to_pass_gate_fix_only_and_joint(context_for, boundary: LocalInstance) -> None:  # type: ignore[no-untyped-def]
    fix = boundary.instance.patch
    fix_only = context_for("fix-only")
    hit, meta = det.fail_to_pass([], fix, fix_only)
    assert not hit
    assert meta["fixed"]["outcome"] == "PASS"
    base = (Path(boundary.instance.repo) / "throttle" / "limiter.py").read_text()
    assert "t >= cutoff" in base
    # only the window boundary: the limit off-by-one stays, so the golden test still fails
    half_fix = make_diff("throttle/limiter.py", base, base.replace("t >= cutoff", "t > cutoff"))
    hit, meta = det.fail_to_pass([], half_fix, fix_only)
    assert hit
    assert "still fails with your fix applied" in meta["followup_text"]

    joint = context_for("joint")
    assert det.fail_to_pass([], fix + new_test(REPRO), joint)[0] is False
    hit, meta = det.fail_to_pass([], new_test(REPRO), joint)
    assert hit
    assert "no source change" in meta["followup_text"]


def test_default_critic_composition(context_for) -> None:  # type: ignore[no-untyped-def]
    critic = default_critic(context_for("test-only"), skills=[USER_SKILL], max_iterations=5)
    assert [s.name for s in critic.signals] == ["clean_patch", "structural_validity", "ran_the_test", "no_skip",
                                                "no_print", "fail_to_pass"]
    assert critic.iterative_refinement == IterativeRefinementConfig(success_threshold=0.6, max_iterations=5)
    # without an instance there is nothing to run tests on: no F->P gate
    bare = default_critic(CriticContext("test-only"))
    assert [s.name for s in bare.signals] == ["clean_patch", "structural_validity", "ran_the_test"]
    assert sorted(BUILTIN_SKILLS) == sorted(s.name for s in critic.signals if s.name not in ("no_skip", "no_print"))
    with pytest.raises(SkillError, match="unknown built-in skill"):
        builtin_skill("nope")


def test_default_critic_end_to_end(context_for) -> None:  # type: ignore[no-untyped-def]
    critic = default_critic(context_for("test-only"))
    ran = [action("python -m pytest tests/test_repro.py")]
    accepted = critic.evaluate(ran, new_test(REPRO))
    assert critic.accepts(accepted)
    not_run = critic.evaluate([], new_test(REPRO))
    assert not_run.metadata is not None
    assert not_run.metadata["hard_gate"] == "ran_the_test"
    assert [s["name"] for s in not_run.metadata["signals"]] == ["clean_patch", "structural_validity", "ran_the_test"]
