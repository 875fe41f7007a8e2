"""The operator registry: every registered operator produces its documented example, and the new operators
(token_revert, widened_scope, narrowed_scope, caller_patch) behave as their kind of real wrong fix."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from coharden.mutation import registry
from coharden.mutation.candidates import RawMutant
from coharden.mutation.context import FileChange, FixContext, parses
from coharden.mutation.pool import Pool, admit
from coharden.mutation.recorded import example_caller, example_record, shape_of
from coharden.mutation.sampling import Draw
from coharden.schema.mutant import MECHANICAL_DEFAULT, Operator

CASES = [(op, k) for op, cls in registry.registry().items() for k in range(len(cls.examples()))]


def _inputs(buggy: str, fixed: str, records: tuple[dict[str, Any], ...] = (), extra: dict[str, str] | None = None,
            buggy_records: list[dict[str, Any]] | None = None) -> registry.OperatorInputs:
    files = {"m.py": buggy, **(extra or {})}
    return registry.OperatorInputs(FixContext([FileChange("m.py", buggy, fixed)]), list(records),
                                   buggy_records or [], base_file=files.get,
                                   is_test_path=lambda p: p.startswith("tests/"))


def _load(source: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {}
    exec(compile(source, "mutant.py", "exec"), namespace)  # noqa: S102 - test code built here
    return namespace


def test_registry_lists_every_operator_with_a_docstring_and_an_example() -> None:
    ops = registry.registry()
    assert list(ops) == list(MECHANICAL_DEFAULT)  # the built-in ones, in the order of their names
    assert registry.builtin_names() == registry.operator_names()  # --help lists them without importing
    assert {"token_revert", "widened_scope", "narrowed_scope", "caller_patch"} <= set(registry.operator_names())
    for op, cls in ops.items():
        assert cls.name is op
        assert "Imitates" in (cls.__doc__ or ""), f"{op} must say which real wrong fix it imitates"
        assert cls.examples()
    with pytest.raises(ValueError, match="unknown mutation operator 'nope' \\(known: incomplete_fix"):
        registry.get("nope")


def test_the_readme_describes_every_built_in_operator() -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("### Mechanical mutant operators"):]
    assert [name for name in registry.builtin_names() if f"* `{name}`" not in section] == []


@pytest.mark.parametrize(("operator", "index"), CASES, ids=[f"{op}-{k}" for op, k in CASES])
def test_operator_example(operator: Operator, index: int) -> None:
    example = registry.registry()[operator].examples()[index]
    inputs = _inputs(example.buggy, example.fixed, example.records, dict(example.extra_files))
    mutants = list(registry.get(operator).generate(inputs))
    assert mutants, f"{operator} produced nothing (skipped: {dict(inputs.skipped)})"
    assert all(m.operator is operator for m in mutants)
    texts = [m.files.get("m.py", example.buggy) for m in mutants]
    assert any(example.expect in t for t in texts), "\n---\n".join(texts)
    pool = Pool()
    admit(inputs.ctx, mutants, pool, Draw({operator: None}, seed=0))
    assert pool.mutants, pool.summary()


# --- token_revert --------------------------------------------------------------------------------------------

def test_token_revert_reverts_one_of_two_generalisations_inside_a_regex() -> None:
    buggy = "import re\nP = re.compile(r'^([a-zA-Z]+)([0-9]+)$')\n"
    fixed = "import re\nP = re.compile(r'^([^\\W\\d_]+)(\\d+)$')\n"
    mutants = list(registry.get("token_revert").generate(_inputs(buggy, fixed)))
    patterns = {_load(m.files["m.py"])["P"].pattern for m in mutants}
    assert patterns == {r"^([a-zA-Z]+)(\d+)$", r"^([^\W\d_]+)([0-9]+)$"}  # the real wrong fix of sympy-20916
    assert _load(fixed)["P"].match("ω0")
    assert not _load(mutants[1].files["m.py"])["P"].match("w𝟙")


def test_token_revert_leaves_single_token_changes_to_incomplete_fix() -> None:
    assert not list(registry.get("token_revert").generate(_inputs("x = a + 1\n", "x = a + 2\n")))


# --- widened_scope -------------------------------------------------------------------------------------------

WIDE_BUGGY = "def show(x):\n    return str(x)\n"
WIDE_FIXED = textwrap.dedent("""\
    def show(x):
        if isinstance(x, int) and x < 0:
            return f'({x})'
        return str(x)
    """)


def test_widened_scope_makes_the_fix_hit_cases_that_keep_the_old_behaviour() -> None:
    mutants = list(registry.get("widened_scope").generate(_inputs(WIDE_BUGGY, WIDE_FIXED)))
    by_text = {m.description: _load(m.files["m.py"])["show"] for m in mutants}
    always = by_text["if isinstance(x, int) and x < 0 -> if True"]
    assert always(-1) == "(-1)"
    assert always(3) == "(3)"
    no_type = by_text["condition isinstance(x, int) and x < 0 without isinstance(x, int)"]
    assert no_type(-1.5) == "(-1.5)"  # floats too
    dropped = by_text["guard `if isinstance(x, int) and x < 0` dropped"]
    assert dropped(-1) == "-1"


def test_widened_scope_widens_the_enclosing_condition_the_fix_relies_on() -> None:
    buggy = "def f(x):\n    if x > 0:\n        return x\n    return 0\n"
    fixed = "def f(x):\n    if x > 0:\n        return x * 2\n    return 0\n"
    (mutant,) = list(registry.get("widened_scope").generate(_inputs(buggy, fixed)))
    assert _load(mutant.files["m.py"])["f"](-3) == -6


# --- narrowed_scope ------------------------------------------------------------------------------------------

NARROW_BUGGY = textwrap.dedent("""\
    class Printer:
        def show(self, value, sep=', '):
            '''Render value.'''
            return str(value)
    """)
NARROW_FIXED = textwrap.dedent("""\
    class Printer:
        def show(self, value, sep=', '):
            '''Render value.'''
            if isinstance(value, (list, tuple)):
                return '[' + sep.join(map(str, value)) + ']'
            return str(value)
    """)


class _Self:
    """Stands in for the recorded ``self`` (only its type name enters the shape)."""


def test_shapes_tell_types_signs_and_lengths() -> None:
    assert shape_of((3, "ab"), "type") == ("tuple", ("int", "str"))
    assert shape_of((3, "ab")) == ("tuple", (("int", 1), ("str", 2)))
    assert shape_of((-3, [1, 2])) == ("tuple", (("int", -1), ("list", (("int", 1), ("int", 1)))))
    assert shape_of((None, True)) == ("tuple", ("NoneType", "bool"))


def test_narrowed_scope_keeps_the_fix_only_for_inputs_shaped_like_the_recorded_one() -> None:
    record = example_record("Printer.show", ["value", "sep"], ((1, 2), ", "), "return", "[1, 2]",
                            self_shape=(_Self(),))
    # the recorder saw `self` as a Printer: rewrite the recorded shapes with that class name
    record = {**record, "type_shape": record["type_shape"].replace("_Self", "Printer"),
              "shape": record["shape"].replace("_Self", "Printer")}
    inputs = _inputs(NARROW_BUGGY, NARROW_FIXED, (record,))
    mutants = {m.meta["level"]: m for m in registry.get("narrowed_scope").generate(inputs)
               if m.meta["kind"] == "function"}
    assert set(mutants) == {"type", "shape"}
    by_type = _load(mutants["type"].files["m.py"])["Printer"]()
    assert by_type.show((1, 2)) == "[1, 2]"
    assert by_type.show((5, 6, 7)) == "[5, 6, 7]"  # same types: fixed
    by_shape = _load(mutants["shape"].files["m.py"])["Printer"]()
    assert by_shape.show((3, 4)) == "[3, 4]"  # same length and signs
    assert by_shape.show((3, 4, 5)) == "(3, 4, 5)"  # another length: the buggy behaviour
    assert by_shape.show((-3, 4)) == "(-3, 4)"  # another sign: buggy
    assert by_type.show(["a"]) == "['a']"  # a list is another type: buggy
    assert by_shape.show.__doc__ == "Render value."


def test_narrowed_scope_without_a_revealing_input_produces_nothing_and_says_so() -> None:
    inputs = _inputs(NARROW_BUGGY, NARROW_FIXED)
    assert not list(registry.get("narrowed_scope").generate(inputs))
    assert inputs.skipped == {("narrowed_scope", "no_revealing_input"): 1}
    same = example_record("Printer.show", ["value", "sep"], (1, ", "), "return", "1")
    on_buggy = [{**same, "kind": "return"}]  # the same outcome on the buggy code: not bug-revealing
    inputs = _inputs(NARROW_BUGGY, NARROW_FIXED, (same,), buggy_records=on_buggy)
    assert not list(registry.get("narrowed_scope").generate(inputs))
    assert inputs.skipped[("narrowed_scope", "no_revealing_input")] == 1


# --- caller_patch --------------------------------------------------------------------------------------------

CALLER_BUGGY = "def inv(x):\n    return 1 / x\n"
CALLER_FIXED = "def inv(x):\n    return 1 / x if x else 0\n"
CALLER_FILE = "from m import inv\n\n\ndef total(xs):\n    return sum(inv(x) for x in xs)\n"


def test_caller_patch_repairs_the_symptom_at_a_caller_in_another_file() -> None:
    fixed_rec = example_caller("total", ["xs"], ((0, 2),), "return", 0.5, callee="inv", path="pkg/use.py")
    buggy_rec = {**example_caller("total", ["xs"], ((0, 2),), "raise", ZeroDivisionError("division by zero"),
                                  callee="inv", path="pkg/use.py")}
    inputs = _inputs(CALLER_BUGGY, CALLER_FIXED, (fixed_rec,), {"pkg/use.py": CALLER_FILE}, [buggy_rec])
    mutants = {m.meta["kind"]: m for m in registry.get("caller_patch").generate(inputs)}
    assert set(mutants) == {"shortcut", "catch"}
    for mutant in mutants.values():
        assert set(mutant.files) == {"pkg/use.py"}  # m.py keeps its buggy content: the fix is reverted
        assert mutant.originals == {"pkg/use.py": CALLER_FILE}
    shortcut = mutants["shortcut"].files["pkg/use.py"].replace("from m import inv", "inv = lambda x: 1 / x")
    total = _load(shortcut)["total"]
    assert total((0, 2)) == 0.5  # the recorded bug-revealing call returns the fixed result
    with pytest.raises(ZeroDivisionError):
        total((0, 4))  # any other input: still the bug
    catch = _load(mutants["catch"].files["pkg/use.py"].replace("from m import inv", "inv = lambda x: 1 / x"))
    assert catch["total"]((0, 9)) == 0.5  # the exception caught there, the recorded fixed result returned
    pool = Pool()
    admit(inputs.ctx, list(mutants.values()), pool, Draw({Operator.CALLER_PATCH: None}, seed=0))
    assert len(pool.mutants) == 2
    assert "pkg/use.py" in pool.mutants[0].patch
    assert "m.py" not in pool.mutants[0].patch.replace("use.py", "")


def test_caller_patch_skips_frames_outside_the_repository_in_tests_or_unparseable() -> None:
    outside = {**example_caller("run", [], (), "return", 1, callee="inv"), "path": None}
    in_test = example_caller("test_inv", [], (), "return", None, callee="inv", path="tests/test_m.py")
    broken = example_caller("total", ["xs"], ((0,),), "return", 0, callee="inv", path="pkg/broken.py")
    missing = example_caller("gone", ["xs"], ((0,),), "return", 0, callee="inv", path="pkg/use.py")
    inputs = _inputs(CALLER_BUGGY, CALLER_FIXED, (outside, in_test, broken, missing),
                     {"pkg/broken.py": "def total(xs:\n", "pkg/use.py": CALLER_FILE})
    assert not list(registry.get("caller_patch").generate(inputs))
    assert dict(inputs.skipped) == {("caller_patch", "frame_outside_repository"): 1,
                                    ("caller_patch", "frame_in_test"): 1,
                                    ("caller_patch", "unparseable_frame"): 1,
                                    ("caller_patch", "caller_not_found"): 1}
    inputs = _inputs(CALLER_BUGGY, CALLER_FIXED)
    assert not list(registry.get("caller_patch").generate(inputs))
    assert dict(inputs.skipped) == {("caller_patch", "no_caller_recorded"): 1}


def test_admission_of_a_mutant_outside_the_fix_that_changes_nothing_is_equals_buggy() -> None:
    inputs = _inputs(CALLER_BUGGY, CALLER_FIXED)
    raw = RawMutant(Operator.CALLER_PATCH, "no-op", "pkg/use.py", {"pkg/use.py": CALLER_FILE + "\n"},
                    originals={"pkg/use.py": CALLER_FILE})
    pool = Pool()
    admit(inputs.ctx, [raw], pool, Draw({}, seed=0))
    assert pool.summary()["dropped"] == {"caller_patch": {"equals_buggy": 1}}
    assert parses(CALLER_FILE)


# --- narrowed_scope: a condition the fix adds or widens ----------------------------------------------------

COND_BUGGY = textwrap.dedent("""\
    class Num:
        def parity(self, n):
            '''Name n's parity.'''
            n = n * 1
            if isinstance(n, int) and n % 2 == 0:
                return 'even'
            return '?'
    """)
COND_FIXED = textwrap.dedent("""\
    class Num:
        def parity(self, n):
            '''Name n's parity.'''
            n = n * 1
            if isinstance(n, (int, float)) and n % 2 == 0:
                return 'even'
            if n % 2 == 1:
                return 'odd'
            return '?'
    """)


def _condition_mutants(buggy: str, fixed: str, record: dict[str, Any]) -> dict[tuple[str, str], Any]:
    inputs = _inputs(buggy, fixed, (record,))
    mutants = [m for m in registry.get("narrowed_scope").generate(inputs) if m.meta["kind"] == "condition"]
    return {(m.meta["level"], m.meta["buggy_condition"] and "widened" or "added"): m for m in mutants}


def test_narrowed_scope_narrows_a_widened_and_an_added_condition_to_the_recorded_case() -> None:
    # the example: parity(4.0) said '?' and says 'even' after the fix
    record = example_record("Num.parity", ["n"], (4.0,), "return", "even", self_shape=(_Self(),))
    record = {k: v.replace("_Self", "Num") if k.endswith("shape") else v for k, v in record.items()}
    mutants = _condition_mutants(COND_BUGGY, COND_FIXED, record)
    assert set(mutants) == {("type", "widened"), ("type", "added"), ("shape", "widened"), ("shape", "added")}
    assert mutants[("type", "widened")].meta["buggy_condition"] == "isinstance(n, int) and n % 2 == 0"
    widened = _load(mutants[("type", "widened")].files["m.py"])["Num"]()
    assert widened.parity(4.0) == "even"  # the recorded case: fixed
    assert widened.parity(8.0) == "even"  # same type: fixed
    assert widened.parity(4) == "even"  # the buggy condition already held for ints
    added = _load(mutants[("shape", "added")].files["m.py"])["Num"]()
    assert added.parity(3.0) == "odd"  # a positive float, as recorded: the added condition applies
    assert added.parity(-3.0) == "?"  # another sign: the added condition is narrowed away
    assert added.parity(3) == "?"  # another type too
    assert added.parity.__doc__ == "Name n's parity."
    fixed = _load(COND_FIXED)["Num"]()
    assert (fixed.parity(-3.0), fixed.parity(3)) == ("odd", "odd")  # the real fix covers both
    text = mutants[("type", "added")].files["m.py"]
    # the shape is taken at the function's entry, before `n = n * 1` can change it
    assert text.index("_coh_case = _coh_narrow((self, n, ), 'type'") < text.index("n = n * 1")
    pool = Pool()
    admit(_inputs(COND_BUGGY, COND_FIXED).ctx, list(mutants.values()), pool,
          Draw({Operator.NARROWED_SCOPE: None}, seed=0))
    assert len(pool.mutants) == 4


def test_narrowed_scope_narrows_an_added_conditional_expression() -> None:
    buggy = "def f(x):\n    return x\n"
    fixed = "def f(x):\n    return -x if x < 0 else x\n"
    mutants = _condition_mutants(buggy, fixed, example_record("f", ["x"], (-2,), "return", 2))
    f = _load(mutants[("type", "added")].files["m.py"])["f"]
    assert (f(-2), f(-2.5)) == (2, -2.5)  # an int as recorded is fixed; a float keeps the bug


def test_narrowed_scope_ignores_a_condition_whose_line_changed_elsewhere() -> None:
    buggy = "def f(x):\n    if x > 0: return g(x)\n    return 0\n"
    fixed = "def f(x):\n    if x > 0: return h(x)\n    return 0\n"
    assert not _condition_mutants(buggy, fixed, example_record("f", ["x"], (2,), "return", 2))


def test_narrow_condition_refuses_a_missing_site_or_unparseable_source() -> None:
    from coharden.mutation.context import FileChange
    from coharden.mutation.narrowed_condition import ConditionSite, condition_sites, narrow_condition

    site = ConditionSite("f", 2, "x < 0", None)
    assert narrow_condition("def f(x):\n    return x\n", site, "type", "()") is None  # no condition on line 2
    assert narrow_condition("def f(x):\n    if x < 0\n", site, "type", "()") is None
    assert condition_sites(FileChange("m.py", "def f(x):\n    return x\n", "def f(x):\n    if x <\n"), "f") == []


def test_narrowings_filled_from_one_template_equal_direct_rewrites() -> None:
    """Each function / condition site is rewritten once with placeholder literals and filled per shape: the
    code must equal a direct rewrite, for any shape text (quotes, backslashes), and a source that contains a
    placeholder is rewritten directly."""
    import functools

    from coharden.mutation.narrowed_condition import condition_sites, narrow_condition, shape_filled
    from coharden.mutation.narrowed_scope import narrow

    change = FileChange("m.py", COND_BUGGY, COND_FIXED)
    shapes = [("type", "('tuple', ('Num', 'float'))"), ("shape", "('tuple', (('float', 1),))"),
              ("shape", "it's \"quoted\" \\ and __coh_level_slot__")]
    site = condition_sites(change, "Num.parity")[0]
    cache: dict = {}
    for level, expected in shapes:
        direct = narrow(COND_FIXED, COND_BUGGY, "Num.parity", level, expected)
        assert direct is not None
        assert shape_filled(cache, "f", (COND_FIXED, COND_BUGGY),
                            functools.partial(narrow, COND_FIXED, COND_BUGGY, "Num.parity"), level, expected) == direct
        assert shape_filled(cache, site, (COND_FIXED,), functools.partial(narrow_condition, COND_FIXED, site),
                            level, expected) == narrow_condition(COND_FIXED, site, level, expected)
    assert set(cache) == {"f", site}  # one rewrite each
    odd = COND_FIXED + "\nNOTE = '__coh_expected_slot__'\n"
    calls: list[str] = []

    def make(level: str, expected: str) -> str | None:
        calls.append(expected)
        return narrow(odd, COND_BUGGY, "Num.parity", level, expected)

    assert shape_filled({}, "odd", (odd,), make, "type", "x") == narrow(odd, COND_BUGGY, "Num.parity", "type", "x")
    assert calls == ["x"]


def test_report_column_abbreviations_are_distinct() -> None:
    """Operators are named by their initials in report columns (issue 53): every built-in operator's abbreviation
    is distinct, and an outside operator whose initials clash gets one of its own, as do names alike to the end."""
    from coharden.schema.mutant import MECHANICAL_DEFAULT, short_names
    from coharden.study.summary import OPERATOR_SHORT

    builtin = short_names(MECHANICAL_DEFAULT)
    assert len(set(builtin.values())) == len(builtin)
    assert builtin["incomplete_fix"] == "IF"
    assert builtin == OPERATOR_SHORT
    mixed = short_names(["narrowed_scope", "narrow_search", "incomplete_fix", "a_b", "a__b"])
    assert len(set(mixed.values())) == 5
    assert mixed["incomplete_fix"] == "IF"
    assert {mixed["narrowed_scope"], mixed["narrow_search"]} == {"NSc", "NSe"}
