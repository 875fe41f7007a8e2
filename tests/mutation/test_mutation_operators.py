"""Mechanical mutant operators on in-memory fixes: what each produces, and that the code it emits runs."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coharden.mutation import behavior_substitution, incomplete_fix, input_specific_shortcut, symptom_suppression
from coharden.mutation.context import FileChange, FixContext, functions_added, functions_changed, functions_touched
from coharden.mutation.pool import Pool, admit
from coharden.mutation.sampling import Draw
from coharden.schema.mutant import Operator

BUGGY = textwrap.dedent(
    '''\
    """Clamping helpers."""


    def clamp(x, lo, hi):
        if x > hi:
            return hi
        return x


    def describe(x):
        return str(x)


    class Box:
        def size(self, items):
            return len(items)
    '''
)

FIXED = textwrap.dedent(
    '''\
    """Clamping helpers."""


    def clamp(x, lo, hi):
        if lo > hi:
            raise ValueError("empty range")
        if x > hi:
            return hi
        if x < lo:
            return lo
        return x


    def describe(x):
        return str(x)


    class Box:
        def size(self, items):
            return len([i for i in items if i is not None])
    '''
)


def _ctx() -> FixContext:
    return FixContext([FileChange("pkg/clamp.py", BUGGY, FIXED)])


def _load(source: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {}
    exec(compile(source, "mutant.py", "exec"), namespace)
    return namespace


def test_functions_touched_are_innermost_and_exist_in_buggy_code() -> None:
    assert functions_touched(_ctx().files[0]) == ["clamp", "Box.size"]


def test_a_pure_insertion_touches_its_neighbour_but_changes_no_function() -> None:
    """A fix that only adds a method: the loose reading (what the recorder watches) names the method beside
    the insertion, the strict reading names none, and the added method is named as added. A decorator added
    to a function changes that function in both readings."""
    old = "class P:\n    def a(self):\n        return 1\n"
    added = FileChange("p.py", old, old + "\n    def b(self):\n        return 2\n")
    assert functions_touched(added) == ["P.a"]
    assert functions_changed(added) == []
    assert functions_added(added) == ["P.b"]
    decorated = FileChange("p.py", old, old.replace("    def a", "    @property\n    def a"))
    assert functions_changed(decorated) == functions_touched(decorated) == ["P.a"]
    assert functions_changed(_ctx().files[0]) == functions_touched(_ctx().files[0])


def test_incomplete_fix_leaves_out_and_keeps_single_hunks() -> None:
    mutants = list(incomplete_fix.generate(_ctx()))
    kinds = [m.meta["kind"] for m in mutants]
    # two hunks (clamp, Box.size): leave-one-out of each; single-hunk equals leave-one-out for two hunks
    assert kinds.count("leave_one_out") == 2
    # the clamp hunk has two change blocks (the lo>hi check, the x<lo branch): each reverted alone
    assert kinds.count("revert_block") == 2
    without_size = next(m for m in mutants if m.meta == {"kind": "leave_one_out", "hunk": 1})
    code = without_size.files["pkg/clamp.py"]
    assert "if x < lo:" in code
    assert "is not None" not in code
    ns = _load(code)
    assert ns["clamp"](-5, 0, 3) == 0
    assert ns["Box"]().size([1, None]) == 2  # the buggy behaviour of the left-out hunk


def test_behavior_substitution_only_touches_added_lines() -> None:
    mutants = list(behavior_substitution.generate(_ctx()))
    descriptions = {m.description for m in mutants}
    assert "lo > hi -> lo >= hi" in descriptions
    assert "x < lo -> x <= lo" in descriptions
    assert "i is not None -> i is None" in descriptions
    assert not any("x > hi" in d for d in descriptions), "x > hi is on an unchanged line"
    assert not any("str(" in d for d in descriptions), "describe() is not touched by the fix"
    for mutant in mutants:
        compile(mutant.files["pkg/clamp.py"], "m.py", "exec")


@pytest.mark.parametrize(
    ("source_line", "expected"),
    [
        ("    return x <= 3\n", "x <= 3 -> x < 3"),
        ("    return a and b\n", "a and b -> a or b"),
        ("    return not a\n", "not a -> a"),
        ("    return a + 1\n", "a + 1 -> a - 1"),
        ("    return 1\n", "1 -> 2"),
        ("    return True\n", "True -> False"),
        ("    return isinstance(a, (int, str))\n", "isinstance(a, (int, str)) -> isinstance(a, str)"),
        ("    return max(a)\n", "max(...) -> min(...)"),
        ("    return a.startswith('x')\n", ".startswith(...) -> .endswith(...)"),
        ("    return a[:b]\n", "slice upper b -> b + 1"),
        ("    return a in b\n", "a in b -> a not in b"),
    ],
)
def test_behavior_substitution_site_kinds(source_line: str, expected: str) -> None:
    old = "def f(a, b=None, x=0):\n    return None\n"
    new = "def f(a, b=None, x=0):\n" + source_line
    descriptions = [m.description for m in behavior_substitution.generate(FixContext([FileChange("m.py", old, new)]))]
    assert expected in descriptions


def test_symptom_suppression_wraps_the_buggy_function() -> None:
    mutants = list(symptom_suppression.generate(_ctx()))
    by_kind = {(m.meta["function"], m.meta["kind"]) for m in mutants}
    assert ("clamp", "swallow") in by_kind
    assert ("clamp", "convert") in by_kind  # the fix raises ValueError
    swallow = next(m for m in mutants if m.meta == {"kind": "swallow", "function": "Box.size"})
    ns = _load(swallow.files["pkg/clamp.py"])
    assert ns["Box"]().size(None) is None  # TypeError swallowed
    convert = next(m for m in mutants if m.meta["kind"] == "convert")
    ns = _load(convert.files["pkg/clamp.py"])
    with pytest.raises(ValueError, match="'<'|'>'"):
        ns["clamp"](None, 0, 3)


def _record(qualname: str, params: list[str], args: tuple, kind: str, value: Any,
            root: Path | None = None) -> dict[str, Any]:
    from coharden.mutation.recorder_values import encoded

    return {"path": "pkg/clamp.py", "qualname": qualname, "params": params, "key": repr(args),
            "args_enc": encoded(args, str(root) if root else None)[1], "kind": kind,
            "value_enc": encoded(value, str(root) if root else None)[1], "value_repr": repr(value)}


REPO_VALUES = textwrap.dedent(
    '''\
    """Classes of a repository under record (their objects encode by their repr)."""
    import dataclasses


    class Counted:
        """Counts how often it is constructed (the decoder constructs a recorded object from its repr)."""

        made = 0

        def __init__(self, n):
            type(self).made += 1
            self.n = n

        def __repr__(self):
            return f"Counted({self.n})"

        def __eq__(self, other):
            return isinstance(other, Counted) and other.n == self.n

        def __hash__(self):
            return self.n


    class Lazy:
        """Compared by identity, with side effects when printed (as a Django QuerySet fetches its rows)."""

        touched = 0

        def __repr__(self):
            Lazy.touched += 1
            return "<lazy>"


    def helper(path):
        """A function of the repository: a decoder that called it would run code a test chose."""
        open(path, "w").close()


    @dataclasses.dataclass(frozen=True)
    class Value:
        n: int
        encoded = 0  # a class attribute, not a field

        def __repr__(self):
            Value.encoded += 1
            return f"Value(n={self.n})"
    ''')


@pytest.fixture
def repo_values(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, Path]]:
    """A package ``cohvals`` of a repository at ``tmp_path`` (imported), and that root."""
    (tmp_path / "cohvals").mkdir()
    (tmp_path / "cohvals" / "__init__.py").write_text(REPO_VALUES)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("COHARDEN_RECORD_ROOT", str(tmp_path))
    import cohvals  # type: ignore[import-not-found]

    yield cohvals, tmp_path
    sys.modules.pop("cohvals", None)


def test_input_specific_shortcut_returns_the_recorded_outcome_for_one_input_only() -> None:
    records = [
        _record("clamp", ["x", "lo", "hi"], (-5, 0, 3), "return", 0),
        _record("clamp", ["x", "lo", "hi"], (1, 3, 0), "raise", ValueError("empty range")),
        _record("Box.size", ["items"], ([1, None],), "return", 1),
    ]
    mutants = list(input_specific_shortcut.generate(_ctx(), records))
    assert len(mutants) == 3
    ns = _load(mutants[0].files["pkg/clamp.py"])
    assert ns["clamp"](-5, 0, 3) == 0  # the recorded input: fixed behaviour
    assert ns["clamp"](-1, 0, 3) == -1  # any other input: buggy behaviour
    ns = _load(mutants[1].files["pkg/clamp.py"])
    with pytest.raises(ValueError, match="empty range"):
        ns["clamp"](1, 3, 0)
    assert ns["clamp"](1, 0, 3) == 1
    ns = _load(mutants[2].files["pkg/clamp.py"])
    assert ns["Box"]().size([1, None]) == 1  # self is not part of the key
    assert ns["Box"]().size([2, None]) == 2


def test_a_shortcut_decodes_the_input_it_compares_with_once(repo_values: tuple[Any, Path]) -> None:
    """The shortcut compares every call's arguments with the recorded input: in a function every test calls,
    decoding it per call made the mutant's runs time out (sympy-18763, Printer._print)."""
    values, root = repo_values
    record = _record("clamp", ["x", "lo", "hi"], (values.Counted(7), 0, 3), "return", 0, root)
    (mutant,) = input_specific_shortcut.generate(_ctx(), [record])
    ns = _load(mutant.files["pkg/clamp.py"])
    values.Counted.made = 0
    for x in range(50):  # other inputs: the buggy function runs, after a comparison with the recorded input
        ns["clamp"](x, 0, 3)
    assert ns["clamp"](values.Counted(7), 0, 3) == 0  # the recorded input: the recorded outcome
    assert values.Counted.made == 2  # the call's own argument, and the recorded one decoded once


def test_admission_drops_unparseable_equal_and_duplicate_mutants_and_samples_by_seed() -> None:
    ctx = _ctx()
    raw = list(incomplete_fix.generate(ctx)) + list(behavior_substitution.generate(ctx))
    raw += [raw[0]]  # a duplicate
    from coharden.mutation.candidates import RawMutant

    raw.append(RawMutant(Operator.BEHAVIOR_SUBSTITUTION, "broken", "x", {"pkg/clamp.py": "def (:\n"}))
    raw.append(RawMutant(Operator.BEHAVIOR_SUBSTITUTION, "same as fix", "x", {"pkg/clamp.py": FIXED + "\n# c\n"}))
    raw.append(RawMutant(Operator.INCOMPLETE_FIX, "same as buggy", "x", {"pkg/clamp.py": BUGGY}))
    pool = Pool()
    admit(ctx, raw, pool, Draw({}, seed=0))
    dropped = pool.summary()["dropped"]
    assert dropped["behavior_substitution"] == {"does_not_parse": 1, "equals_fix": 1}
    assert dropped["incomplete_fix"]["duplicate"] == 1
    assert dropped["incomplete_fix"]["equals_buggy"] == 1
    every = [m.id for m in pool.mutants]
    assert len(every) == len(set(every))

    def sample(seed: int) -> list[str]:
        p = Pool()
        admit(ctx, raw, p, Draw({Operator.BEHAVIOR_SUBSTITUTION: 2}, seed=seed))
        return [m.patch for m in p.mutants if m.operator == Operator.BEHAVIOR_SUBSTITUTION]

    assert sample(1) == sample(1)
    assert len(sample(1)) == 2
    assert any(sample(s) != sample(1) for s in range(2, 6))
    # each operator draws on its own: another operator's candidates (and budget) do not change its sample
    alone = Pool()
    admit(ctx, [r for r in raw if r.operator == Operator.BEHAVIOR_SUBSTITUTION], alone,
          Draw({Operator.BEHAVIOR_SUBSTITUTION: 2}, seed=1))
    with_others = Pool()
    admit(ctx, raw, with_others, Draw({Operator.BEHAVIOR_SUBSTITUTION: 2, Operator.INCOMPLETE_FIX: 1}, seed=1))
    assert [m.patch for m in alone.mutants] == [m.patch for m in with_others.mutants
                                                if m.operator == Operator.BEHAVIOR_SUBSTITUTION]


def test_budget_draws_from_each_recording_test_in_turn() -> None:
    """Mutants built from recorded inputs are drawn from each test's inputs in turn: four inputs of one test and
    one of another, three places, always keep the second test's one (a uniform draw misses it 2 times in 5)."""
    from coharden.mutation.candidates import RawMutant

    ctx = _ctx()
    raw = [RawMutant(Operator.INPUT_SPECIFIC_SHORTCUT, f"{src} {i}", "x",
                     {"pkg/clamp.py": FIXED + f"\nVALUE_{src}_{i} = {i}\n"}, {"from_test": src})
           for src, n in (("golden", 4), ("lax", 1)) for i in range(n)]
    for seed in range(8):
        pool = Pool()
        admit(ctx, raw, pool, Draw({Operator.INPUT_SPECIFIC_SHORTCUT: 3}, seed=seed))
        kept = [m.description for m in pool.mutants]
        assert len(kept) == 3, kept
        assert "lax 0" in kept, kept
    assert pool.summary()["dropped"]["input_specific_shortcut"] == {"over_budget": 2}


# --- preferring mutants of code the tests run ----------------------------------------------------------------

TWO_OLD = textwrap.dedent("""\
    LIMIT = 1


    def used(x):
        return x + 1


    def unused(x):
        return x - 1
    """)
TWO_NEW = textwrap.dedent("""\
    LIMIT = 2


    def used(x):
        return x + 2


    def unused(x):
        return x - 2
    """)


def test_exercised_tells_mutants_of_uncalled_functions_apart() -> None:
    from coharden.mutation.pool import exercised

    ctx = FixContext([FileChange("m.py", TWO_OLD, TWO_NEW)])
    targets = {("m.py", "used"), ("m.py", "unused")}
    called = {("m.py", "used")}

    def revert(fragment: str, back: str) -> dict[str, str]:
        return {"m.py": TWO_NEW.replace(fragment, back)}

    assert not exercised(ctx, revert("x - 2", "x - 1"), targets, called)  # only the uncalled function differs
    assert exercised(ctx, revert("x + 2", "x + 1"), targets, called)
    assert exercised(ctx, revert("LIMIT = 2", "LIMIT = 1"), targets, called)  # module level: runs at import
    assert exercised(ctx, revert("x - 2", "x - 1"), {("m.py", "used")}, called)  # not recorded: unknown
    assert exercised(ctx, {"m.py": TWO_NEW.replace("x - 2", "x - 1").replace("x + 2", "x + 3")}, targets, called)


def test_admit_samples_exercised_mutants_first() -> None:
    from coharden.mutation.pool import exercised

    ctx = FixContext([FileChange("m.py", TWO_OLD, TWO_NEW)])
    raw = list(incomplete_fix.generate(ctx))
    targets, called = {("m.py", "used"), ("m.py", "unused")}, {("m.py", "used")}

    def prefer(files: dict[str, str]) -> bool:
        return exercised(ctx, files, targets, called)

    assert any(not prefer(r.files) for r in raw)  # some candidates touch only unused()
    for seed in range(5):
        pool = Pool()
        admit(ctx, raw, pool, Draw({Operator.INCOMPLETE_FIX: 1}, seed, prefer=prefer))
        (mutant,) = pool.mutants
        chosen = next(r for r in raw if r.description == mutant.description)
        assert prefer(chosen.files)
        assert pool.summary()["unexercised_candidates"]["incomplete_fix"] >= 1
    plain = Pool()
    admit(ctx, raw, plain, Draw({Operator.INCOMPLETE_FIX: 1}, 0))
    assert "unexercised_candidates" not in plain.summary()  # the default output is unchanged


# --- method receivers in the input recorder ------------------------------------------------------------------

def test_the_decoder_calls_only_the_repositorys_classes(repo_values: tuple[Any, Path], tmp_path: Path) -> None:
    """Recorded values decode to equal values; an encoding that calls a function or names a module, a builtin
    or an attribute is refused (the decoder reads the text with ``ast``, never ``eval``)."""
    import json
    from fractions import Fraction

    from coharden.mutation.recorder_decode import decode
    from coharden.mutation.recorder_values import Unencodable, encoded

    values, root = repo_values
    for value in [(values.Counted(3), None), {"a": [1, 2.5, b"x"]}, frozenset({1, 2}), 1j, ValueError("no", 2)]:
        text = encoded(value, str(root))[1]
        back = decode(text)
        assert type(back) is type(value)
        assert back == value if not isinstance(value, BaseException) else back.args == value.args
    marker = tmp_path / "ran"
    refused = [["o", "cohvals", {"helper": "cohvals"}, f"helper({str(marker)!r})"],
               ["o", "cohvals", {"dataclasses": "cohvals"}, "dataclasses"],
               ["o", "cohvals", {"open": "cohvals"}, f"open({str(marker)!r}, 'w')"],
               ["o", "cohvals", {"Counted": "cohvals"}, "Counted(1).__init__(2)"],
               ["o", "os", {"system": "os"}, "system('true')"],
               ["e", "cohvals", "os", "system", ["t", ["true"]]]]
    for enc in refused:
        with pytest.raises((ValueError, AttributeError)):
            decode(json.dumps(enc))
    assert not marker.exists()
    with pytest.raises(Unencodable, match="type_outside_repository"):
        encoded((Fraction(1, 2),), str(root))  # a class outside the repository under record


def test_receiver_snapshot_encodes_identity_objects_by_state_and_others_once(repo_values: tuple[Any, Path]) -> None:
    from coharden.mutation import recorder_plugin

    values, _ = repo_values
    memo: dict = {}
    lazy = recorder_plugin._receiver("self", values.Lazy(), memo)
    assert lazy is not None
    assert lazy[1].startswith("<Lazy state ")  # named by its encoding's digest
    assert values.Lazy.touched == 0  # never printed (printing has side effects), encoded by its attributes
    assert lazy == recorder_plugin._receiver("self", values.Lazy(), memo)  # the same state, the same input
    first = recorder_plugin._receiver("self", values.Value(1), memo)
    assert first is not None
    assert first[:2] == ("self", "Value(n=1)")
    values.Value.encoded = 0
    assert recorder_plugin._receiver("self", values.Value(1), memo) == first
    assert values.Value.encoded == 1  # a repeated receiver: printed for the memo's key, encoded once before
    cls = recorder_plugin._receiver("cls", values.Value, memo)
    assert cls[:2] == ("cls", repr(values.Value))  # a class: by reference
    from coharden.mutation.recorder_decode import decode

    assert decode(cls[2]) is values.Value


def test_shortcut_compares_a_receiver_only_under_its_own_name() -> None:
    """The receiver's name goes into the mutant's code and the records file is in the worktree (a test may
    rewrite it): only ``self`` / ``cls`` are used."""
    import libcst as cst

    from coharden.mutation.recorded import example_record

    record = example_record("Box.size", [], (), "return", 1, receiver=(1, 2))

    def code(rec: dict) -> str:
        return cst.Module(body=input_specific_shortcut.shortcut_rewrite(rec)([])).code

    assert "_coh_same(self, " in code(record)
    forged = code({**record, "receiver": "__import__('os').system('x') or self"})
    assert "__import__('os')" not in forged
    assert "_coh_same(self, " not in forged


def test_a_shape_input_seen_ending_two_ways_in_one_run_is_never_revealing() -> None:
    """Calls apart only by an object's address share one shape input; when a run saw that input end in two ways
    (``shape_ambiguous``), pairing its fixed outcome with a buggy one could pair two different objects' calls:
    it is left out, on either side. Without the ambiguity record the same pair is revealing."""
    from coharden.mutation.revealing import revealing_shapes

    def shape(outcome: str) -> dict[str, Any]:
        return {"kind": "shape", "qualname": "Printer.doprint", "key": "c0ffee", "outcome": "return",
                "value_obs": outcome}

    ambiguous = {"kind": "shape_ambiguous", "qualname": "Printer.doprint", "key": "c0ffee"}
    fixed, buggy = [shape("(x)")], [shape("x")]
    assert revealing_shapes(fixed, buggy) == fixed
    assert revealing_shapes([*fixed, ambiguous], buggy) == []
    assert revealing_shapes(fixed, [*buggy, ambiguous]) == []
    assert revealing_shapes(fixed, [shape("(x)")]) == []  # the same observation: not revealing
    assert revealing_shapes(fixed, []) == []  # no buggy outcome to compare with


# --- behavior_substitution: guard sites ----------------------------------------------------------------------

GUARDED_BUGGY = textwrap.dedent("""\
    def window(hits, now, size):
        while hits and now > 0:
            if hits[0] < now - size:
                hits.pop(0)
            else:
                def later():
                    if size > 2:
                        return size
                break
        return len(hits)
    """)


def test_behavior_substitution_mutates_the_conditions_guarding_an_added_line() -> None:
    fixed = GUARDED_BUGGY.replace("hits.pop(0)", "hits.pop(0)  # drop\n            now -= 1")
    mutants = list(behavior_substitution.generate(FixContext([FileChange("m.py", GUARDED_BUGGY, fixed)])))
    on_guards = {m.description for m in mutants if m.meta == {"site": "guard"}}
    assert {"hits[0] < now - size -> hits[0] <= now - size", "hits and now > 0 -> hits or now > 0",
            "now > 0 -> now >= 0"} <= on_guards  # the if and the while enclosing the added line
    assert not any("size > 2" in d for d in on_guards)  # another function's condition, not on the path
    assert all(m.location in ("m.py:2", "m.py:3") for m in mutants if m.meta)
    # an added line inside the nested function is guarded by its own if only, not by the loop around the def
    nested = GUARDED_BUGGY.replace("return size", "return size + 1")
    inner = [m for m in behavior_substitution.generate(FixContext([FileChange("m.py", GUARDED_BUGGY, nested)]))
             if m.meta]
    assert {m.description for m in inner} == {"size > 2 -> size >= 2", "2 -> 3", "2 -> 1"}


# --- call_argument --------------------------------------------------------------------------------------------

def _call_mutants(old: str, new: str) -> dict[str, str]:
    from coharden.mutation import call_argument

    return {m.description: m.files["m.py"] for m in call_argument.generate(FixContext([FileChange("m.py", old, new)]))}


def test_call_argument_drops_swaps_replaces_and_skips_on_added_lines_only() -> None:
    old = "def f(v, n, pad):\n    out = shorten(v, n, end='.')\n    return str(out)\n"
    new = "def f(v, n, pad):\n    out = shorten(v, n, end='.')\n    return pad_to(str(out), n, fill=pad)\n"
    mutants = _call_mutants(old, new)
    lines = {d: code.splitlines()[2] for d, code in mutants.items()}
    assert lines["pad_to(...) without fill=pad"] == "    return pad_to(str(out), n)"
    assert lines["pad_to(...) without its last argument n"] == "    return pad_to(str(out), fill=pad)"
    assert lines["pad_to(...): arguments str(out) and n swapped"] == "    return pad_to(n, str(out), fill=pad)"
    assert lines["pad_to(...): argument fill=pad -> out"] == "    return pad_to(str(out), n, fill=out)"
    assert lines["pad_to(str(out), ...) -> str(out) (call skipped)"] == "    return str(out)"
    assert "str(out) -> out (call skipped)" in lines
    assert not any(d.startswith("shorten") for d in mutants)  # an unchanged line
    for code in mutants.values():
        compile(code, "m.py", "exec")


def test_call_argument_keeps_builtins_arity_raises_and_constructors() -> None:
    old = "def f(x, n):\n    return x\n"
    new = ("def f(x, n):\n    if isinstance(x, int) and max(x, n) > 3:\n        raise ValueError(f'{x}')\n"
           "    return Box(x)\n")
    descriptions = set(_call_mutants(old, new))
    assert not any("swapped" in d or "last argument" in d for d in descriptions)  # isinstance(x), max(n, x): raise
    assert not any(d.startswith(("ValueError(", "Box(")) and "call skipped" in d for d in descriptions)
    assert "isinstance(x, ...) -> x (call skipped)" in descriptions
    assert "max(...): argument x -> n" in descriptions


def test_call_argument_parenthesises_a_skipped_call_where_it_binds_loosely() -> None:
    old = "def f(a, b):\n    return a\n"
    new = "def f(a, b):\n    return wrap(a + b) * 2\n"
    code = _call_mutants(old, new)["wrap(a + b) -> a + b (call skipped)"]
    assert "return (a + b) * 2" in code


# --- misplaced_guard ------------------------------------------------------------------------------------------

def test_misplaced_guard_moves_an_added_guard_but_never_before_a_name_it_reads() -> None:
    from coharden.mutation import misplaced_guard

    old = "def run(s):\n    '''Run.'''\n    s.load()\n    rows = s.compute()\n    s.show(rows)\n    return rows\n"
    new = old.replace("    rows = s.compute()\n", "    rows = s.compute()\n    if not rows:\n        return []\n")
    mutants = {m.description: m.files["m.py"]
               for m in misplaced_guard.generate(FixContext([FileChange("m.py", old, new)]))}
    assert set(mutants) == {"guard `if not rows` moved after `s.show(rows)`"}  # before `rows = ...`: NameError
    ran: list[str] = []

    class S:
        def load(self) -> None:
            ran.append("load")

        def compute(self) -> list[int]:
            return []

        def show(self, rows: list[int]) -> None:
            ran.append("show")

    assert _load(next(iter(mutants.values())))["run"](S()) == []
    assert ran == ["load", "show"]  # the work the guard should have prevented ran
    early = old.replace("    s.load()\n", "    s.load()\n    if s.off:\n        return None\n")
    moved = {m.description for m in misplaced_guard.generate(FixContext([FileChange("m.py", old, early)]))}
    assert moved == {"guard `if s.off` moved after `rows = s.compute()`",
                     "guard `if s.off` moved to just before `return rows`"}  # `s` is in s.load(): not earlier


# --- higher_order ---------------------------------------------------------------------------------------------

def test_higher_order_combines_only_separate_edits_of_different_operators_deterministically() -> None:
    from coharden.mutation import higher_order

    ctx = _ctx()
    mutants = list(higher_order.generate(ctx))
    assert 0 < len(mutants) <= higher_order.MAX_PAIRS
    assert [(m.description, m.files) for m in mutants] == [(m.description, m.files)
                                                          for m in higher_order.generate(_ctx())]
    firsts = {(f.mutant.operator, f.mutant.description, f.mutant.location): f.mutant
              for fo in higher_order.first_order(ctx).values() for f in fo}
    for mutant in mutants:
        first, second = mutant.meta["first"], mutant.meta["second"]
        assert first["operator"] != second["operator"]
        assert first["description"][:40] in mutant.description
        assert second["description"][:40] in mutant.description
        one, two = (firsts[part["operator"], part["description"], part["location"]] for part in (first, second))
        a, b = higher_order.edits_of(ctx, one), higher_order.edits_of(ctx, two)
        assert higher_order.apart(a, b)
        # each edit alone gives its first-order mutant back (an incomplete_fix one starts from the buggy code)
        assert higher_order.combined(ctx, a, {})["pkg/clamp.py"] == one.files["pkg/clamp.py"]
        assert higher_order.combined(ctx, {}, b)["pkg/clamp.py"] == two.files["pkg/clamp.py"]
        assert mutant.files == higher_order.combined(ctx, a, b)
        compile(mutant.files["pkg/clamp.py"], "m.py", "exec")
    kinds = {(m.meta["first"]["operator"], m.meta["second"]["operator"]) for m in mutants}
    assert ("incomplete_fix", "behavior_substitution") in kinds
    assert len(kinds) > 3


def test_higher_order_edits_must_leave_an_unchanged_line_between_them() -> None:
    from coharden.mutation.higher_order import apart

    line = ("x\n",)
    assert apart({"m.py": ((2, 3, line),)}, {"m.py": ((4, 5, line),)})  # line 3 (index) unchanged between
    assert not apart({"m.py": ((2, 3, line),)}, {"m.py": ((3, 4, line),)})  # adjacent
    assert not apart({"m.py": ((2, 4, line),)}, {"m.py": ((3, 3, line),)})  # an insertion inside a rewrite
    assert not apart({"m.py": ((3, 3, line),)}, {"m.py": ((3, 3, line),)})  # two insertions at one place
    assert apart({"m.py": ((2, 3, line),)}, {"n.py": ((2, 3, line),)})  # other files never overlap


def test_higher_order_without_two_operators_apart_makes_nothing() -> None:
    from coharden.mutation import higher_order

    assert not list(higher_order.generate(FixContext([FileChange("m.py", "x = 1\n", "x = 2\n")])))


def test_higher_order_combines_only_the_operators_the_pool_was_asked_for() -> None:
    from coharden.mutation.higher_order import HigherOrder
    from coharden.mutation.registry import OperatorInputs

    ctx = _ctx()
    chosen = (Operator.INCOMPLETE_FIX, Operator.BEHAVIOR_SUBSTITUTION, Operator.HIGHER_ORDER)
    mutants = list(HigherOrder().generate(OperatorInputs(ctx, operators=chosen)))
    assert mutants
    assert {(m.meta["first"]["operator"], m.meta["second"]["operator"]) for m in mutants} \
        == {("incomplete_fix", "behavior_substitution")}
    # one first-order operator beside it: nothing to pair
    assert not list(HigherOrder().generate(OperatorInputs(ctx, operators=(Operator.INCOMPLETE_FIX,
                                                                           Operator.HIGHER_ORDER))))
    # no selection: the default pool's operators, as generate(ctx)
    everything = list(HigherOrder().generate(OperatorInputs(ctx)))
    assert len({(m.meta["first"]["operator"], m.meta["second"]["operator"]) for m in everything}) > 1
