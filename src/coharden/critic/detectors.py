"""The built-in detectors, each ``detect(events, git_patch, context) -> (triggered, metadata)``.

They are exposed as skills (``coharden/critic/skills/<name>/critic.yaml`` + ``detector.py``, which just
re-export a function from here) so the built-in critic is loaded exactly like a user's skill. Every verdict
here is mechanical: parsing, ``git apply``, and real test runs through :class:`InstanceExecutor`; never an LLM.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from pathlib import PurePosixPath
from typing import Any

from coharden import pysource
from coharden.config import DEFAULT_TEST_PATTERNS
from coharden.critic.context import CriticContext, Mode
from coharden.critic.events import Event, commands
from coharden.errors import ApplyError, PatchError, TestIdError
from coharden.patches import file_path, is_test_path, parse, split_patch
from coharden.schema.verdict import Verdict

Detection = tuple[bool, dict[str, Any]]

_OUTPUT_TAIL = 1500


def _require_context(context: CriticContext | None, what: str) -> CriticContext:
    if context is None:
        raise ValueError(f"the {what} detector needs a CriticContext (the phase and the instance)")
    return context


def _patterns(context: CriticContext | None) -> list[str]:
    return context.test_patterns if context is not None else list(DEFAULT_TEST_PATTERNS)


def _quote(paths: Sequence[str]) -> str:
    return " ".join(shlex.quote(p) for p in paths)


# --- clean patch -------------------------------------------------------------------------------------------
def clean_patch(events: Sequence[Event], git_patch: str, context: CriticContext | None) -> Detection:  # noqa: ARG001
    """Test-only phase: the patch touches a non-test file. Fix-only phase: it touches a test file."""
    ctx = _require_context(context, "clean-patch")
    if ctx.mode is Mode.JOINT or not git_patch.strip():
        return False, {"mode": ctx.mode.value}
    try:
        patched = list(parse(git_patch))
    except PatchError:
        return False, {"skipped": "the patch does not parse (the structural-validity gate reports it)"}
    patterns = ctx.test_patterns
    want_tests = ctx.mode is Mode.TEST_ONLY
    offending = [pf for pf in patched if is_test_path(file_path(pf), patterns) is not want_tests]
    if not offending:
        return False, {"mode": ctx.mode.value}
    added = [file_path(pf) for pf in offending if pf.is_added_file]
    changed = [file_path(pf) for pf in offending if not pf.is_added_file]
    undo = []
    if changed:
        undo.append(f"`git checkout -- {_quote(changed)}`")
    if added:
        undo.append(f"`rm {_quote(added)}`")
    if want_tests:
        text = (f"This is a test-only task: change test files only (files matching {', '.join(patterns)}). "
                f"Your changes touch non-test files: {', '.join(file_path(pf) for pf in offending)}. "
                f"Undo those changes ({' and '.join(undo)}) and put the reproduction in a test file; "
                "do not fix the bug.")
    else:
        text = (f"This is a fix-only task: do not change tests (files matching {', '.join(patterns)}). "
                f"Your changes touch test files: {', '.join(file_path(pf) for pf in offending)}. "
                f"Undo those changes ({' and '.join(undo)}) and fix the code instead.")
    return True, {"mode": ctx.mode.value, "files": [file_path(pf) for pf in offending], "followup_text": text}


# --- structural validity -----------------------------------------------------------------------------------
def structural_validity(events: Sequence[Event], git_patch: str,  # noqa: ARG001
                        context: CriticContext | None) -> Detection:
    """The patch is empty, does not parse, does not apply to the base commit, or leaves a .py file that does
    not parse."""
    if not git_patch.strip():
        return True, {"problem": "empty", "followup_text": (
            "You submitted no changes: the working tree is identical to the original code. "
            "Make the requested changes before finishing.")}
    try:
        parse(git_patch)
    except PatchError as exc:
        return True, {"problem": "parse", "error": str(exc),
                      "followup_text": f"Your changes do not form a valid diff ({exc}). Fix the files you edited."}
    if context is None or (context.executor is None and (context.repo is None or context.instance is None)):
        return False, {"skipped": "no repository in the critic context: apply and Python checks not run"}
    try:
        images = context.post_images(git_patch)
    except (ApplyError, PatchError) as exc:
        return True, {"problem": "apply", "error": str(exc), "followup_text": (
            f"Your changes do not apply to the original code with `git apply` ({exc}). "
            "Edit the files in place (do not commit, do not edit files outside the repository).")}
    errors = []
    for path, content in sorted(images.items()):
        if content is None or not path.endswith(".py"):
            continue
        try:
            pysource.parse(content, filename=path)
        except SyntaxError as exc:
            errors.append(f"{path}:{exc.lineno}: {exc.msg}")
    if errors:
        return True, {"problem": "syntax", "errors": errors, "followup_text": (
            "These Python files do not parse after your changes:\n"
            + "\n".join(f"- {e}" for e in errors) + "\nFix the syntax errors.")}
    return False, {"files": sorted(images)}


# --- ran the test ------------------------------------------------------------------------------------------
_TEST_DEF = re.compile(r"^\+\s*(?:async\s+)?def\s+(test\w*)\s*\(", re.MULTILINE)
_SEGMENTS = re.compile(r"&&|\|\||[;|\n]")


def _tokens(segment: str) -> list[str]:
    try:
        return shlex.split(segment)
    except ValueError:
        return segment.split()


def _runner_args(tokens: list[str]) -> list[str] | None:
    """The arguments after a test-runner invocation in ``tokens`` (pytest, python -m pytest/unittest,
    python <file>.py), or None when the segment runs no tests."""
    for i, token in enumerate(tokens):
        name = PurePosixPath(token).name
        if name in ("pytest", "py.test"):
            return tokens[i + 1:]
        if name.startswith("python"):
            rest = tokens[i + 1:]
            if len(rest) >= 2 and rest[0] == "-m" and rest[1] in ("pytest", "unittest"):
                return rest[2:]
            if rest and rest[0].endswith(".py"):
                return rest[:1]
    return None


def _targets_test(args: list[str], files: list[str], names: list[str]) -> bool:
    """Whether runner arguments select (at least one of) the submitted tests."""
    keyword = None
    targets = []
    skip = False
    for j, arg in enumerate(args):
        if skip:
            skip = False
            continue
        if arg == "-k" and j + 1 < len(args):
            keyword, skip = args[j + 1], True
        elif arg.startswith("-k") and len(arg) > 2:
            keyword = arg[2:]
        elif not arg.startswith("-") and ("/" in arg or ".py" in arg or "::" in arg or arg == "."):
            targets.append(arg)
    if keyword is not None:
        # -k matches substrings of test (and module) names; "not" expressions are not modelled
        words = [w for w in re.findall(r"\w+", keyword) if w not in ("and", "or", "not")]
        known = [*names, *(PurePosixPath(f).stem for f in files)]
        if not any(w in n for w in words for n in known):
            return False
    if not targets:
        return True  # the whole suite (or what -k selects) runs
    for target in targets:
        path, _, node = target.partition("::")
        path = path.removeprefix("./").rstrip("/")
        for file in files:
            if path in (".", "") or file == path or file.startswith(path + "/") or PurePosixPath(file).name == path:
                if not node or any(node.split("::")[-1].split("[")[0] == n for n in names) or not names:
                    return True
    return False


def ran_the_test(events: Sequence[Event], git_patch: str, context: CriticContext | None) -> Detection:
    """The trajectory never ran the test the patch submits (no pytest / unittest / python command selecting
    the submitted test files or test functions, or the whole suite)."""
    try:
        _, tests = split_patch(git_patch, _patterns(context))
    except PatchError:
        return False, {"skipped": "the patch does not parse (the structural-validity gate reports it)"}
    if not tests.strip():
        return False, {"skipped": "the patch changes no test file"}
    files = [file_path(pf) for pf in parse(tests) if not pf.is_removed_file]
    names = sorted(set(_TEST_DEF.findall(tests)))
    for command in commands(events):
        for segment in _SEGMENTS.split(command):
            args = _runner_args(_tokens(segment))
            if args is not None and _targets_test(args, files, names):
                return False, {"command": command, "test_files": files, "test_names": names}
    example = f"python -m pytest {files[0]}" + (f"::{names[0]}" if names else "") if files else "python -m pytest"
    return True, {"test_files": files, "test_names": names, "followup_text": (
        "You never ran the test you are submitting. Run it (for example `" + example + "`), check that it "
        "fails on the current code for the reason the issue describes, then finish.")}


# --- fail to pass ------------------------------------------------------------------------------------------
def _verdict_json(verdict: Verdict) -> dict[str, Any]:
    return verdict.model_dump(mode="json", exclude={"output_tail"})


def _tail(verdict: Verdict) -> str:
    tail = verdict.output_tail.strip()
    if not tail:
        return ""
    return "\nTest output (tail):\n" + tail[-_OUTPUT_TAIL:]


def _on_buggy(verdict: Verdict) -> str | None:
    if verdict.failed:
        return None
    if verdict.passed:
        return ("Your test passes on the original (buggy) code, so it does not reproduce the issue. "
                "Make it fail on the current code because of the bug the issue describes.")
    return (f"Your test could not be run on the original code: {verdict.short()}. "
            "A reproduction test must run and fail (an assertion failure, not an import or collection error)."
            + _tail(verdict))


def _on_fixed(verdict: Verdict, whose: str) -> str | None:
    if verdict.passed:
        return None
    if verdict.failed:
        return (f"Your test fails with {whose} applied: {verdict.reason or 'FAIL'}. A reproduction test must pass "
                "once the issue is fixed; check the behaviour the issue asks for, not an incidental detail."
                + _tail(verdict))
    return f"Your test could not be run with {whose} applied: {verdict.short()}." + _tail(verdict)


def fail_to_pass(events: Sequence[Event], git_patch: str, context: CriticContext | None) -> Detection:  # noqa: ARG001
    """The submitted test does not fail on the buggy code or does not pass with the fix (test-only: the
    reference fix; joint: the submitted fix; fix-only: the reference test must pass with the submitted fix)."""
    ctx = _require_context(context, "fail-to-pass")
    executor = ctx.executor
    if executor is None:
        raise ValueError("the fail-to-pass detector needs an instance and its repository to run tests")
    try:
        source, tests = split_patch(git_patch, ctx.test_patterns)
    except PatchError:
        return False, {"skipped": "the patch does not parse (the structural-validity gate reports it)"}
    meta: dict[str, Any] = {"mode": ctx.mode.value}
    if ctx.mode is Mode.FIX_ONLY:
        if not source.strip():
            return True, {**meta, "followup_text": "Your changes contain no source change: fix the code."}
        reference = ctx.reference_test()
        if reference is None:
            raise ValueError("fix-only fail-to-pass needs a reference test (the instance has no test_patch)")
        fixed = executor.verdict(source, reference)
        meta.update(test_ids=reference.ids, fixed=_verdict_json(fixed))
        if fixed.passed:
            return False, meta
        if fixed.failed:
            problem: str | None = (f"The issue's test still fails with your fix applied: {fixed.reason or 'FAIL'}. "
                       "Fix the behaviour the issue describes." + _tail(fixed))
        else:
            problem = f"The issue's test could not be run with your fix applied: {fixed.short()}." + _tail(fixed)
        return True, {**meta, "followup_text": problem}
    if not tests.strip():
        return True, {**meta, "followup_text": "Your changes add no test: write a test that reproduces the issue."}
    try:
        test = executor.test_patch(tests, name="submitted")
    except (TestIdError, ApplyError, PatchError) as exc:
        return True, {**meta, "error": str(exc), "followup_text": (
            f"coharden found no test function your changes add or change ({exc}). Add a pytest test function "
            "(a `def test_...` in a test file) that reproduces the issue.")}
    meta["test_ids"] = test.ids
    problems = []
    buggy = executor.verdict("", test)
    meta["buggy"] = _verdict_json(buggy)
    if problem := _on_buggy(buggy):
        problems.append(problem)
    fix = source if ctx.mode is Mode.JOINT else (ctx.reference_fix or "")
    if fix.strip():
        fixed = executor.verdict(fix, test)
        meta["fixed"] = _verdict_json(fixed)
        if problem := _on_fixed(fixed, "your fix" if ctx.mode is Mode.JOINT else "the reference fix"):
            problems.append(problem)
    elif ctx.mode is Mode.JOINT:
        problems.append("Your changes contain no source change: fix the code as well as adding the test.")
    else:
        meta["fixed"] = None  # no reference fix known: only the buggy side is checked
    if problems:
        return True, {**meta, "followup_text": "\n\n".join(problems)}
    return False, meta

