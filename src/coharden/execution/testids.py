"""Which pytest node ids a test patch contributes, and resolution of bare test names to node ids.

A test patch contributes the test functions and methods it adds or changes: the AST of every touched test
file is compared before and after the patch (so whitespace and comment edits do not count).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator, Sequence

from coharden import pysource
from coharden.errors import TestIdError
from coharden.patches import is_test_path
from coharden.schema.testpatch import ExecMode

#: The longest test id coharden runs (characters): ids become arguments of the test command, and the kernel refuses
#: one argument over 128 KiB (``E2BIG``); a real node id is far shorter (PATH_MAX, 4096, bounds its path).
MAX_ID_CHARS = 4096
#: The most characters the ids of one test patch may take together: the whole command line must stay under the
#: kernel's limit (``ARG_MAX``, 2 MiB with the usual stack limit) with the environment and the sandbox's arguments.
MAX_IDS_CHARS = 256 << 10


def check_ids(ids: Sequence[str], name: str = "") -> list[str]:
    """``ids`` when each fits on a command line and all of them together do; else :class:`TestIdError` saying
    which limit they pass (a test named with 200,000 characters, or thousands of long ids)."""
    who = f"{name}: " if name else ""
    for test_id in ids:
        if len(test_id) > MAX_ID_CHARS:
            raise TestIdError(f"{who}a test id has {len(test_id):,} characters, over the limit of {MAX_ID_CHARS:,} "
                              f"({test_id[:80]}...)")
    total = sum(len(i) + 1 for i in ids)
    if total > MAX_IDS_CHARS:
        raise TestIdError(f"{who}the {len(ids):,} test ids take {total:,} characters together, over the limit of "
                          f"{MAX_IDS_CHARS:,} for one test patch")
    return list(ids)


def _test_defs(tree: ast.Module) -> Iterator[tuple[str, ast.AST]]:
    """(node-id suffix, node) for pytest-collectable test functions and methods (classes named Test*)."""

    def walk(body: list[ast.stmt], prefix: list[str]) -> Iterator[tuple[str, ast.AST]]:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test"):
                yield "::".join([*prefix, node.name]), node
            elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
                yield from walk(node.body, [*prefix, node.name])

    yield from walk(tree.body, [])


def _parse(source: str | None, path: str) -> ast.Module | None:
    if source is None:
        return None
    try:
        return pysource.parse(source, filename=path)
    except SyntaxError:
        return None


def test_defs(source: str, path: str) -> dict[str, str]:
    """{node-id suffix: normalized AST dump} of the test definitions in a file (empty if it does not parse)."""
    tree = _parse(source, path)
    if tree is None:
        return {}
    return {name: ast.dump(node, include_attributes=False) for name, node in _test_defs(tree)}


test_defs.__test__ = False  # type: ignore[attr-defined]


def contributed_ids(files: dict[str, tuple[str | None, str | None]]) -> list[str]:
    """Node ids added or changed, from {path: (content before, content after)} of the touched test files.

    A file that does not parse after the patch contributes nothing here; running it will give the
    collection error that explains why.
    """
    ids: list[str] = []
    for path in sorted(files):
        before, after = files[path]
        if after is None or not path.endswith(".py"):
            continue
        old = test_defs(before, path) if before is not None else {}
        new = test_defs(after, path)
        ids += [f"{path}::{name}" for name, dump in new.items() if old.get(name) != dump]
    return ids


def resolve_names(names: list[str], files: dict[str, str]) -> list[str]:
    """Resolve test names to node ids in ``files`` ({path: content}, the test files a patch touches).

    Node ids (containing '::') are kept. A bare name (as sympy's runner prints it) matches every test
    function or method of that name in the files; names can repeat across files, and all matches are kept.
    A name matching nowhere raises :class:`TestIdError`.
    """
    defs = {path: list(test_defs(content, path)) for path, content in sorted(files.items()) if path.endswith(".py")}
    resolved: list[str] = []
    unresolved: list[str] = []
    for name in names:
        if "::" in name:
            resolved.append(name)
            continue
        base = name.split("[", 1)[0]
        hits = [f"{path}::{suffix}" for path, suffixes in defs.items() for suffix in suffixes
                if suffix.split("::")[-1] == base]
        if not hits:
            unresolved.append(name)
        for hit in hits:
            node_id = hit + name[len(base):]
            if node_id not in resolved:
                resolved.append(node_id)
    if unresolved:
        raise TestIdError(f"test names not found in the test patch's files: {', '.join(unresolved)}")
    return resolved


def pass_to_pass_ids(names: Sequence[str], files: dict[str, str], *,
                     ids_are_descriptions: bool) -> tuple[list[str], dict[str, int]]:
    """The node ids of a PASS_TO_PASS list that live in ``files`` (the golden test patch's files after it), and
    per reason the names left out: ``other_file`` (a node id of a file the golden test does not touch),
    ``not_found`` (a bare name no test of the files has), ``too_long`` (over :data:`MAX_ID_CHARS`). Lenient where
    :func:`resolve_names` is strict: a record naming a test that does not exist loses that test, not the whole
    list. A runner's ids that are descriptions (``Runner.ids_are_descriptions``: Django's unittest ones) are kept as
    they are."""
    if ids_are_descriptions:
        return list(names), {}
    left_out: dict[str, int] = {}
    ids: list[str] = []
    for name in names:
        if len(name) > MAX_ID_CHARS:
            left_out["too_long"] = left_out.get("too_long", 0) + 1
            continue
        if "::" in name and name.split("::", 1)[0] not in files:
            left_out["other_file"] = left_out.get("other_file", 0) + 1
            continue
        try:
            found = resolve_names([name], files)
        except TestIdError:
            left_out["not_found"] = left_out.get("not_found", 0) + 1
            continue
        ids += [i for i in found if i not in ids]
    return ids, left_out


def patch_ids(files: dict[str, str | None], base_file: Callable[[str], str | None], *, name: str,
              ids: Sequence[str] | None, ids_are_descriptions: bool, test_patterns: Sequence[str]) -> list[str]:
    """The ids of a test patch whose touched ``files`` read as given after it (``base_file``: before it): the
    given ``ids`` or names, resolved (``ids_are_descriptions``: the runner's, Django's unittest descriptions, taken as
    they are), else the tests it
    adds or changes; a patch that adds none is refused, with the syntax error that hides them if there is one, and
    so is one whose ids pass :func:`check_ids`' limits."""
    if ids and ids_are_descriptions:  # unittest descriptions, not names in the files
        return check_ids(ids, name)
    if ids:
        return check_ids(resolve_names(check_ids(ids, name), {p: c for p, c in files.items() if c is not None}), name)
    pairs = {p: (base_file(p), c) for p, c in files.items() if is_test_path(p, test_patterns)}
    resolved = contributed_ids(pairs)
    if not resolved:
        raise TestIdError(f"{name or 'test'}: " + (_syntax_error(pairs) or
                                                   "the test patch adds or changes no test function"))
    return check_ids(resolved, name)


def patch_tests(files: dict[str, str | None], base_file: Callable[[str], str | None], *, name: str,
                ids: Sequence[str] | None, ids_are_descriptions: bool, test_patterns: Sequence[str],
                collects: Callable[[str], bool]) -> tuple[list[str], ExecMode]:
    """The ids of a test patch and how it runs (:class:`~coharden.schema.testpatch.TestPatch`'s ``exec_mode``).
    Given ``ids``, or tests it adds or changes in files the runner ``collects``: those (``unit_test``; the
    tests of files the runner never looks at are left out when others remain, as the harness's log never names
    them). Else, when it adds Python scripts the runner collects no test from, or that define no test function
    (:func:`reproduction_scripts`): their paths (``reproduction_script``, SWT-bench's mode). Else as
    :func:`patch_ids` (its tests, whatever the runner makes of them, or its error)."""
    if ids:
        return patch_ids(files, base_file, name=name, ids=ids, ids_are_descriptions=ids_are_descriptions,
                         test_patterns=test_patterns), "unit_test"
    pairs = {p: (base_file(p), c) for p, c in files.items() if is_test_path(p, test_patterns)}
    contributed = contributed_ids(pairs)
    collected = [i for i in contributed if collects(i.split("::", 1)[0])]
    if collected:
        return check_ids(collected, name), "unit_test"
    scripts = reproduction_scripts(pairs, collects)
    if scripts:
        return check_ids(scripts, name), "reproduction_script"
    return patch_ids(files, base_file, name=name, ids=ids, ids_are_descriptions=ids_are_descriptions,
                         test_patterns=test_patterns), "unit_test"


def reproduction_scripts(files: dict[str, tuple[str | None, str | None]], collects: Callable[[str], bool]) -> list[str]:
    """The Python files among ``files`` ({path: (before, after)}) that a patch adds and that run as scripts:
    the runner collects no test from them (``collects`` says no: sympy's ``bin/test`` looks under ``sympy/``
    only), or they define no test function. A file that does not compile is left out (its syntax error is the
    better message), and so are ``conftest.py`` and ``__init__.py``."""
    scripts: list[str] = []
    for path in sorted(files):
        before, after = files[path]
        name = path.rsplit("/", 1)[-1]
        if before is not None or after is None or not path.endswith(".py") or name in ("conftest.py", "__init__.py"):
            continue
        if _parse(after, path) is None:
            continue
        if not collects(path) or not test_defs(after, path):
            scripts.append(path)
    return scripts


def _syntax_error(files: dict[str, tuple[str | None, str | None]]) -> str | None:
    """Why a test patch contributes no test when a touched Python file does not parse after it (else None)."""
    for path, (_, after) in sorted(files.items()):
        if after is None or not path.endswith(".py"):
            continue
        try:
            compile(after, path, "exec", dont_inherit=True)
        except SyntaxError as exc:
            return f"the test patch leaves {path} with a syntax error (line {exc.lineno}: {exc.msg})"
    return None


def runnable_id(test_id: str) -> str:
    """A SWE-bench id as pytest can select it. The harness's log parsers leave ids pytest cannot select: cut at
    the first space (``t.py::test_x[a`` for ``t.py::test_x[a b]``), a parameter whose absolute path was
    shortened (``test_x[/name.py]``), a parameter holding ``::`` (pytest would split the id there), an empty
    parameter (``test_x[]``: an ``ids`` function returned ``""``, which pytest 4+ keeps and pytest 3 replaces by
    ``<argname><index>``). Such an id runs as its base test; its result is read from the parameters it names
    (``pytest_results.matching_cases``)."""
    if "::" not in test_id or "[" not in test_id:
        return test_id
    head, _, param = test_id.partition("[")
    closed = test_id.endswith("]") and param.count("[") + 1 == param.count("]")  # ``test_f[list[int]`` is cut
    if not closed or "::" in param or param.startswith("/") or param == "]":
        return head
    return test_id


def harness_ids(test_ids: list[str]) -> list[str]:
    """The ids of a FAIL_TO_PASS / PASS_TO_PASS list as the harness names them, deduplicated, without its
    parser's non-test lines (``[100%]``). Runs select each by :func:`runnable_id`."""
    return list(dict.fromkeys(i for i in test_ids if i.strip() and not i.startswith("[")))
