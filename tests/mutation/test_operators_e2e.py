"""End to end: MPE with the four new operators on a small real repository (real git, real pytest, the input
recorder with its call stacks), where the fix is made in one module and the symptom shows in a caller."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.conftest import make_patch, make_repo

from coharden.config import Settings
from coharden.execution.executor import InstanceExecutor
from coharden.execution.store import Store
from coharden.mpe.evaluate import MPERequest, evaluate
from coharden.mutation.pool import Pool, PoolRequest, build_pool
from coharden.schema.instance import Instance
from coharden.schema.mpe_config import MPEConfig
from coharden.schema.mutant import Operator

BUGGY = {
    "m/__init__.py": "",
    "m/core.py": "def inv(x):\n    return 1 / x\n",
    "m/use.py": "from m.core import inv\n\n\ndef total(xs):\n    return sum(inv(x) for x in xs)\n",
    "tests/__init__.py": "",
    "tests/test_m.py": "def test_old():\n    pass\n",
}
FIXED_CORE = "def inv(x):\n    if x == 0:\n        return 0.0\n    return 1 / x\n"
GOLDEN = ("from m.core import inv\nfrom m.use import total\n\n\ndef test_old():\n    pass\n\n\n"
          "def test_zero():\n    assert total([0, 2]) == 0.5\n    assert inv(0) == 0.0\n    assert inv(0.0) == 0.0\n")
LAX = "from m.use import total\n\n\ndef test_repro_total():\n    assert total([0, 2]) == 0.5\n"
NEW = [Operator.TOKEN_REVERT, Operator.WIDENED_SCOPE, Operator.NARROWED_SCOPE, Operator.CALLER_PATCH]


def test_new_operators_end_to_end(tmp_path: Path) -> None:
    repo, commit = make_repo(tmp_path / "m", BUGGY)
    inst = Instance(instance_id="m__inv", repo=str(repo), base_commit=commit,
                    patch=make_patch(repo, {"m/core.py": FIXED_CORE}),
                    test_patch=make_patch(repo, {"tests/test_m.py": GOLDEN}))
    settings = Settings(timeout=60, store=tmp_path / "s.sqlite", cache_dir=tmp_path / "cache", workers=1)
    with InstanceExecutor(inst, repo, settings, Store(settings.store)) as ex:
        golden = ex.golden_test()
        lax = ex.test_patch(make_patch(repo, {"tests/test_repro.py": LAX}), name="lax")
        config = MPEConfig(operators=NEW, per_operator=None)
        itself = evaluate(ex, MPERequest(inst.patch, golden, golden, config))
        graded = evaluate(ex, MPERequest(inst.patch, lax, golden, config))
    assert itself.matrix.counts()["beta"] == itself.matrix.counts()["gamma"] == 0
    generated = graded.pool["generated"]
    assert generated.get("caller_patch", 0) >= 2, graded.pool  # shortcut and catch in total()
    assert generated.get("narrowed_scope", 0) >= 1, graded.pool
    assert generated.get("widened_scope", 0) >= 1, graded.pool
    # the test functions one frame up from total() or inv() are in the repository but tests; above them,
    # pytest's own frames are outside the repository: neither is patched, both are counted
    skipped = graded.pool["skipped"]["caller_patch"]
    assert set(skipped) == {"frame_in_test", "frame_outside_repository"}, graded.pool
    beta = {m.mutant.operator for m in graded.mutants if m.cell is not None and m.cell.value == "beta"}
    assert {"caller_patch", "narrowed_scope"} <= beta  # the lax test pins total([0, 2]) only
    # each operator's own laxity beside the pooled one, and their mean (every operator weighted equally)
    per_op = graded.to_json()["per_operator"]
    rates = [row["laxity"] for row in per_op.values() if row["laxity"] is not None]
    assert per_op["caller_patch"]["laxity"] > 0
    assert graded.to_json()["balanced_laxity"] == pytest.approx(sum(rates) / len(rates))
    assert graded.laxity == pytest.approx(graded.matrix.counts()["beta"] / graded.matrix.admissible)
    caller = next(m for m in graded.mutants if m.mutant.operator == Operator.CALLER_PATCH)
    assert "m/use.py" in caller.mutant.patch
    assert "m/core.py" not in caller.mutant.patch  # the fix itself is reverted


BOX = ("from dataclasses import dataclass\n\n\n@dataclass(frozen=True)\nclass Box:\n    kind: str\n    n: int\n\n"
       "    def size(self):\n        return self.n\n")
BOX_TEST = ("from m.box import Box\n\n\ndef test_old():\n    pass\n\n\n"
            "def test_size():\n    assert Box('a', -1).size() == 1\n    assert Box('b', 2).size() == 2\n"
            "    assert Box('c', -3).size() == 3\n")
BOX_LAX = "from m.box import Box\n\n\ndef test_repro():\n    assert Box('a', -1).size() == 1\n"


def test_method_inputs_include_the_receiver(tmp_path: Path) -> None:
    """A method that takes nothing but ``self``: each receiver is an input of its own (one shortcut per
    bug-revealing instance, not one for every call), and a receiver the test never reached on the buggy code
    (it stopped at the first assert) is probed there: Box('b', 2) is not bug-revealing, so no shortcut."""
    repo, commit = make_repo(tmp_path / "m", {**BUGGY, "m/box.py": BOX})
    inst = Instance(instance_id="m__box", repo=str(repo), base_commit=commit,
                    patch=make_patch(repo, {"m/box.py": BOX.replace("return self.n", "return abs(self.n)")}),
                    test_patch=make_patch(repo, {"tests/test_m.py": BOX_TEST}))
    settings = Settings(timeout=60, store=tmp_path / "s.sqlite", cache_dir=tmp_path / "cache", workers=1)
    with InstanceExecutor(inst, repo, settings, Store(settings.store)) as ex:
        golden = ex.golden_test()
        lax = ex.test_patch(make_patch(repo, {"tests/test_repro.py": BOX_LAX}), name="lax")
        config = MPEConfig(operators=[Operator.INPUT_SPECIFIC_SHORTCUT], per_operator=None)
        graded = evaluate(ex, MPERequest(inst.patch, lax, golden, config))
    shortcuts = sorted(m.mutant.description for m in graded.mutants)
    assert len(shortcuts) == 2, shortcuts
    assert "on Box(kind='a', n=-1)" in shortcuts[0], shortcuts
    assert "on Box(kind='c', n=-3)" in shortcuts[1], shortcuts
    cells = {m.mutant.description: m.cell.value for m in graded.mutants if m.cell is not None}
    assert cells[shortcuts[0]] == "beta"  # the lax test pins Box('a', -1) only
    assert cells[shortcuts[1]] == "delta"


VAL = ("class Val:\n    def __init__(self, n):\n        self.n = n\n        self.cache = {}\n\n"
       "    def big(self):\n        self.cache['big'] = self.n > 10\n        return self.cache['big']\n\n"
       "    def __eq__(self, other):\n        return isinstance(other, Val) and other.n == self.n\n\n"
       "    def __hash__(self):\n        return hash(self.n)\n\n"
       "    def __repr__(self):\n        return f'Val({self.n})'\n")
VAL_BUGGY = VAL + "\n\ndef make(n):\n    return Val(0 if n == 2 else n)\n"
# the fix also asks each value a question whose answer the value caches (as sympy caches assumptions): equal
# values now pickle to other bytes than on the buggy code
VAL_FIXED = VAL + "\n\ndef make(n):\n    value = Val(n)\n    value.big()\n    return value\n"
VAL_TEST = ("from m.val import Val, make\n\n\ndef test_old():\n    pass\n\n\n"
            "def test_make():\n    assert make(1) == Val(1)\n    assert make(3) == Val(3)\n"
            "    assert make(2) == Val(2)\n")


def test_an_outcome_equal_on_both_codes_is_not_bug_revealing(tmp_path: Path) -> None:
    """make(1) and make(3) return equal values on the buggy and the fixed code, whose pickles differ (a cache
    the value pickles with): only make(2) is bug-revealing, so one shortcut, not three."""
    repo, commit = make_repo(tmp_path / "m", {**BUGGY, "m/val.py": VAL_BUGGY})
    inst = Instance(instance_id="m__val", repo=str(repo), base_commit=commit,
                    patch=make_patch(repo, {"m/val.py": VAL_FIXED}),
                    test_patch=make_patch(repo, {"tests/test_m.py": VAL_TEST}))
    settings = Settings(timeout=60, cache_dir=tmp_path / "cache", workers=1)
    with InstanceExecutor(inst, repo, settings, None) as ex:
        golden = ex.golden_test()
        result = evaluate(ex, MPERequest(inst.patch, golden, golden,
                                         MPEConfig(operators=[Operator.INPUT_SPECIFIC_SHORTCUT], per_operator=None)))
    shortcuts = [m.mutant for m in result.mutants]
    assert [m.meta["input"] for m in shortcuts] == ["(2,)"], [m.description for m in shortcuts]


# --- the input-based operators on methods, receivers and repository objects, under the repository's own runner
# (issue 39): sympy's SWE-bench environment runs bin/test on Python 3.9 and has no pytest, so the recorder (a
# pytest plugin) never ran there, and on Python < 3.11 a method's code has no qualified name, so no method call
# was ever matched; every instance came out with no input-based mutant and nothing said why

GEO = {
    "geo/__init__.py": "from geo.shapes import Rot, Vec\n",
    "geo/shapes.py": '''\
class Vec:
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __repr__(self):
        return f"Vec({self.x!r}, {self.y!r})"

    def __eq__(self, other):
        return isinstance(other, Vec) and (self.x, self.y) == (other.x, other.y)

    def __hash__(self):
        return hash((self.x, self.y))


class Rot:
    """A rotation by quarter turns."""

    def __init__(self, turns):
        self.turns = turns

    def __repr__(self):
        return f"Rot({self.turns!r})"

    def __eq__(self, other):
        return isinstance(other, Rot) and self.turns == other.turns

    def __hash__(self):
        return hash(self.turns)

    @property
    def image_of_x(self):
        return self.apply(Vec(1, 0))

    def apply(self, v):
        return self.rotate(v)

    def rotate(self, v):
        if self.turns % 4 == 1:
            return Vec(v.y, -v.x)
        return v
''',
    "bin/test": '''\
"""The repository's own test runner (sympy's bin/test output): every test_* function of the files named."""
import importlib.util
import os
import sys
import traceback



def run(path):
    spec = importlib.util.spec_from_file_location(path[:-3].replace("/", "."), path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    failed = False
    for name in sorted(n for n in dir(module) if n.startswith("test_")):
        try:
            getattr(module, name)()
            print(name, "ok")
        except Exception:
            traceback.print_exc()
            print(name, "F")
            failed = True
    return failed


sys.path.insert(0, os.getcwd())
results = [run(path) for path in sys.argv[1:] if not path.startswith("-")]
sys.exit(1 if any(results) else 0)
''',
    "tests/__init__.py": "",
    "tests/test_geo.py": "def test_old():\n    pass\n",
}
GEO_FIXED = GEO["geo/shapes.py"].replace("return Vec(v.y, -v.x)", "return Vec(-v.y, v.x)")
GEO_TEST = ("from geo import Rot, Vec\n\n\ndef test_old():\n    pass\n\n\n"
            "def test_quarter_turn():\n    assert Rot(1).image_of_x == Vec(0, 1)\n"
            "    assert Rot(5).apply(Vec(0, 2)) == Vec(-2, 0)\n    assert Rot(1).rotate(Vec(0, 1)) == Vec(-1, 0)\n")
INPUT_OPS = [Operator.INPUT_SPECIFIC_SHORTCUT, Operator.NARROWED_SCOPE, Operator.CALLER_PATCH]


def _interpreters() -> list[str]:
    """This Python, and an older one (< 3.11: code objects without ``co_qualname``) when the machine has one."""
    import shutil
    import sys

    versions = Path.home() / ".pyenv" / "versions"
    older = sorted(str(p) for p in versions.glob("3.*/bin/python")
                   if p.parts[-3].split(".")[1].isdigit() and 8 <= int(p.parts[-3].split(".")[1]) <= 10)
    older += [p for p in (shutil.which("python3.10"), shutil.which("python3.9"), shutil.which("python3.8")) if p]
    return [sys.executable, *older[:1]]


@pytest.mark.parametrize("base", _interpreters(), ids=lambda p: Path(p).parts[-3] if "pyenv" in p else "this")
def test_input_operators_record_methods_under_a_runner_without_pytest(tmp_path: Path, base: str) -> None:
    """The fix changes a method (``Rot.rotate``) the test reaches through another method and a property, with
    repository objects as receiver, argument and result; the tests run with the repository's own runner in an
    interpreter that has no pytest. Each input-based operator yields mutants, and nothing is reported missing."""
    import subprocess

    venv = tmp_path / "venv"
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True)
    python = str(venv / "bin" / "python")
    assert subprocess.run([python, "-c", "import pytest"], capture_output=True).returncode != 0
    repo, commit = make_repo(tmp_path / "geo", GEO)
    inst = Instance(instance_id="geo__rot", repo=str(repo), base_commit=commit,
                    patch=make_patch(repo, {"geo/shapes.py": GEO_FIXED}),
                    test_patch=make_patch(repo, {"tests/test_geo.py": GEO_TEST}),
                    FAIL_TO_PASS=["tests/test_geo.py::test_quarter_turn"])
    settings = Settings(timeout=60, cache_dir=tmp_path / "cache", workers=1, runner="sympy", python=python,
                        fork_server=False)
    with InstanceExecutor(inst, repo, settings, None) as ex:

        pool = build_pool(ex, PoolRequest(inst.patch, [ex.golden_test()], operators=INPUT_OPS))
    summary = pool.summary()
    assert summary["generated"].get("input_specific_shortcut", 0) >= 1, summary
    assert summary["generated"].get("narrowed_scope", 0) >= 1, summary
    assert summary["generated"].get("caller_patch", 0) >= 1, summary  # Rot.apply / image_of_x, one frame up
    assert not pool.warnings, pool.warnings
    # above the test's own frame is the runner (bin/test's run(), a file of the repository): never patched
    assert summary["skipped"]["caller_patch"].get("frame_above_test", 0) >= 1, summary
    assert not any(m.location.startswith("bin/") for m in pool.mutants)
    shortcut = next(m for m in pool.mutants if m.operator == Operator.INPUT_SPECIFIC_SHORTCUT)
    assert "Rot(1)" in shortcut.description or "Rot(5)" in shortcut.description
    assert "_coh_decode" in shortcut.patch
    assert "pickle" not in shortcut.patch


def test_a_test_that_calls_the_fix_with_unencodable_values_is_warned_about(tmp_path: Path) -> None:
    """When the tests call the changed method but none of its calls can be recorded (the receiver and the
    argument are objects of the test's own classes), the pool says so, with the reason, and warns that it
    lacks the input-based kinds."""
    repo, commit = make_repo(tmp_path / "geo", GEO)
    own = ("from geo import Rot, Vec\n\n\nclass MyVec(Vec):\n    pass\n\n\n"
           "def test_old():\n    pass\n\n\n"
           "def test_quarter_turn():\n    assert Rot.rotate(Rot(1), MyVec(1, 0)) == Vec(0, 1)\n")
    inst = Instance(instance_id="geo__rot", repo=str(repo), base_commit=commit,
                    patch=make_patch(repo, {"geo/shapes.py": GEO_FIXED}),
                    test_patch=make_patch(repo, {"tests/test_geo.py": own}),
                    FAIL_TO_PASS=["tests/test_geo.py::test_quarter_turn"])
    settings = Settings(timeout=60, cache_dir=tmp_path / "cache", workers=1)
    with InstanceExecutor(inst, repo, settings, None) as ex:

        pool = build_pool(ex, PoolRequest(inst.patch, [ex.golden_test()], operators=INPUT_OPS))
    summary = pool.summary()
    assert summary["no_revealing_input"]["reason"] == "values_not_encodable", summary
    assert "Rot.rotate (1 call)" in summary["no_revealing_input"]["detail"]
    assert summary["values_dropped"]["type_outside_repository"] >= 1
    assert any("MyVec" in name for name in summary["values_dropped_types"])
    assert any("lacks the input-based kinds" in w for w in pool.warnings), pool.warnings


def test_a_recording_cut_short_is_reported_not_taken_for_no_input(tmp_path: Path) -> None:
    """A test process that dies in the middle of its recording (``os._exit``) leaves a recording without its
    end: the pool reports the recorder failure instead of "no input", and that recording is not kept in the
    store (the buggy code's is: there the test fails before it exits)."""
    from coharden.execution.store import Store

    repo, commit = make_repo(tmp_path / "geo", GEO)
    dies = ("import os\n\nfrom geo import Rot, Vec\n\n\ndef test_old():\n    pass\n\n\n"
            "def test_quarter_turn():\n    assert Rot(1).image_of_x == Vec(0, 1)\n    os._exit(0)\n")
    inst = Instance(instance_id="geo__rot", repo=str(repo), base_commit=commit,
                    patch=make_patch(repo, {"geo/shapes.py": GEO_FIXED}),
                    test_patch=make_patch(repo, {"tests/test_geo.py": dies}),
                    FAIL_TO_PASS=["tests/test_geo.py::test_quarter_turn"])
    settings = Settings(timeout=60, cache_dir=tmp_path / "cache", workers=1, store=tmp_path / "s.sqlite")
    store = Store(settings.store)
    with InstanceExecutor(inst, repo, settings, store) as ex:

        pool = build_pool(ex, PoolRequest(inst.patch, [ex.golden_test()], operators=INPUT_OPS))
    assert any("recorder failed" in w and "stopped before its end" in w for w in pool.warnings), pool.warnings
    with __import__("sqlite3").connect(settings.store) as conn:
        assert conn.execute("SELECT count(*) FROM records WHERE kind = 'recording'").fetchone()[0] == 1


ARR = {
    "arr/__init__.py": "from arr.core import Arr\n",
    "arr/core.py": '''\
class Arr:
    """Items and a shape; equal when the items are (the size is derived, as a sympy array's loop size)."""

    def __init__(self, items, shape):
        self.items, self.shape = tuple(items), tuple(shape)
        self._size = len(self.items)

    @classmethod
    def new(cls, items, shape):
        arr = cls(items, shape)
        arr._size = 1 if shape else 0
        for n in shape:
            arr._size *= n
        return arr

    def __len__(self):
        return self._size

    def __eq__(self, other):
        return isinstance(other, Arr) and self.items == other.items

    def __hash__(self):
        return hash(self.items)

    def __repr__(self):
        return f"Arr({list(self.items)!r}, {list(self.shape)!r})"


def make(items, shape):
    return Arr.new(items, shape)
''',
    "tests/__init__.py": "",
    "tests/test_arr.py": "def test_old():\n    pass\n",
}
ARR_FIXED = ARR["arr/core.py"].replace("arr._size = 1 if shape else 0", "arr._size = 1")
ARR_TEST = ("from arr.core import make\n\n\ndef test_old():\n    pass\n\n\n"
            "def test_rank_zero_has_one_element():\n    assert len(make([5], [])) == 1\n")


def _golden_input_pool(root: Path, files: dict[str, str], fix: tuple[str, str], test: tuple[str, str],
                       fail_to_pass: str) -> Pool:
    """The input-based operators' pool for a one-instance repository at ``root`` (``fix``, ``test``: path and
    new content), with the golden test as the recorded one."""
    repo, commit = make_repo(root, files)
    inst = Instance(instance_id=f"{root.name}__1", repo=str(repo), base_commit=commit,
                    patch=make_patch(repo, dict([fix])), test_patch=make_patch(repo, dict([test])),
                    FAIL_TO_PASS=[fail_to_pass])
    settings = Settings(timeout=60, cache_dir=root.parent / f"cache-{root.name}", workers=1)
    with InstanceExecutor(inst, repo, settings, None) as ex:
        return build_pool(ex, PoolRequest(inst.patch, [ex.golden_test()], operators=INPUT_OPS))


def test_outcomes_equal_by_eq_but_of_another_length_are_bug_revealing(tmp_path: Path) -> None:
    """sympy-15017: the fix makes ``len()`` of a rank-0 array 1; the array compares equal either way, so the
    recorder judged every outcome unchanged and no operator built from inputs made anything. An outcome's
    length (and repr) is compared too."""
    summary = _golden_input_pool(tmp_path / "arr", ARR, ("arr/core.py", ARR_FIXED), ("tests/test_arr.py", ARR_TEST),
                                 "tests/test_arr.py::test_rank_zero_has_one_element").summary()
    assert summary["generated"].get("input_specific_shortcut", 0) >= 1, summary
    assert summary["generated"].get("narrowed_scope", 0) >= 1, summary
    assert "no_revealing_input" not in summary, summary


NAMES = {
    "names/__init__.py": "",
    "names/table.py": ("KNOWN = {\n    'Abs': 'abs',\n}\n\n\ndef name_of(func):\n"
                       "    return KNOWN.get(func, 'unknown')\n"),
    "tests/__init__.py": "",
    "tests/test_names.py": "def test_old():\n    pass\n",
}
NAMES_FIXED = NAMES["names/table.py"].replace("    'Abs': 'abs',\n", "    'Abs': 'abs',\n    'Min': 'min',\n")
NAMES_TEST = ("from names.table import name_of\n\n\ndef test_old():\n    pass\n\n\n"
              "def test_min():\n    assert name_of('Min') == 'min'\n")


def test_a_fix_of_module_level_data_is_said_to_touch_no_function(tmp_path: Path) -> None:
    """sympy-22914: the fix adds entries to a module-level table and changes no function, so nothing is
    recorded; the pool said ``not_called`` ("no test called a function the fix touches"), which blames the
    test although the test calls the function that reads the table. The reason is that the fix touches no
    function of the buggy code, and no warning about a missing kind is given (none can be built)."""
    pool = _golden_input_pool(tmp_path / "names", NAMES, ("names/table.py", NAMES_FIXED),
                              ("tests/test_names.py", NAMES_TEST), "tests/test_names.py::test_min")
    summary = pool.summary()
    assert summary["no_revealing_input"]["reason"] == "no_function_touched", summary
    assert not any("lacks the input-based kinds" in w for w in pool.warnings), pool.warnings


PT = {
    "pt/__init__.py": "",
    "pt/point.py": ("class Point:\n    def __init__(self, x):\n        self.x = x\n\n"
                    "    def __mul__(self, k):\n        return Point(self.x * k)\n"),
    "tests/__init__.py": "",
    "tests/test_pt.py": "def test_old():\n    pass\n",
}
PT_FIXED = PT["pt/point.py"] + "\n    def __rmul__(self, k):\n        return self * k\n"
PT_TEST = ("from pt.point import Point\n\n\ndef test_old():\n    pass\n\n\n"
           "def test_rmul():\n    assert (Point(2) * 3).x == 6\n    assert (3 * Point(2)).x == 6\n")


def test_a_fix_that_only_adds_a_method_is_said_to_add_one(tmp_path: Path) -> None:
    """sympy-17655: the fix only adds ``Point.__rmul__``; the recorder watches ``Point.__mul__``, the method
    beside the insertion, whose outcomes are equal on both codes, and the pool said ``outcomes_equal`` as if
    the changed function had been recorded. The reason names the added function and the recorded neighbour."""
    pool = _golden_input_pool(tmp_path / "pt", PT, ("pt/point.py", PT_FIXED), ("tests/test_pt.py", PT_TEST),
                              "tests/test_pt.py::test_rmul")
    reason = pool.summary()["no_revealing_input"]
    assert reason["reason"] == "adds_function", reason
    assert "Point.__rmul__" in reason["detail"], reason
    assert "Point.__mul__" in reason["detail"], reason
    assert any("lacks the input-based kinds" in w for w in pool.warnings), pool.warnings


AREA = {
    "box/__init__.py": "",
    "box/core.py": ("import threading\n\n\nclass Box:\n    def __init__(self, w):\n"
                    "        self.w, self.lock = w, threading.Lock()\n\n\n"
                    "def double(n):\n    return n + 2\n\n\ndef area(box):\n    return double(box.w)\n"),
    "tests/__init__.py": "",
    "tests/test_box.py": "def test_old():\n    pass\n",
}
AREA_FIXED = AREA["box/core.py"].replace("return n + 2", "return n * 2")
AREA_TEST = ("from box.core import Box, area\n\n\ndef test_old():\n    pass\n\n\n"
            "def test_area():\n    assert area(Box(3)) == 6\n")


def test_caller_patch_says_its_callers_values_have_no_encoding(tmp_path: Path) -> None:
    """astropy-14182: the changed function's inputs were recorded, but every call of its caller (an object
    with no structural representation, holding a lock: no state encoding either) was dropped, and caller_patch
    said only ``no_revealing_input``, as if no caller's outcome had changed. It says ``callers_not_encodable``; the
    shortcut is still made."""
    pool = _golden_input_pool(tmp_path / "box", AREA, ("box/core.py", AREA_FIXED), ("tests/test_box.py", AREA_TEST),
                              "tests/test_box.py::test_area")
    assert pool.skipped[("caller_patch", "callers_not_encodable")] == 1, pool.summary()
    assert pool.summary()["generated"].get("input_specific_shortcut", 0) >= 1, pool.summary()


def test_caller_diagnosis_tells_equal_outcomes_from_unencodable_and_absent_callers() -> None:
    from coharden.mutation.revealing import caller_diagnosis

    caller = {"kind": "caller", "qualname": "area", "key": "(3,)", "outcome": "return", "value_enc": "6",
              "path": "box/core.py"}
    dropped = {"kind": "caller_summary", "qualname": "area", "calls": 1, "dropped": {"address_in_repr": 1},
               "path": "box/core.py"}
    in_test = {**caller, "path": "tests/test_box.py"}
    assert caller_diagnosis([caller], [caller]) == "callers_outcomes_equal"
    assert caller_diagnosis([dropped], [dropped]) == "callers_not_encodable"
    assert caller_diagnosis([in_test, dropped], [dropped], lambda p: p.startswith("tests/")) == "callers_not_encodable"
    assert caller_diagnosis([in_test], [in_test], lambda p: p.startswith("tests/")) == "no_caller_recorded"
    assert caller_diagnosis([], []) == "no_caller_recorded"


GRID = {
    "grid/__init__.py": "",
    "grid/core.py": ("import threading\n\n\nclass Grid:\n    def __init__(self, cells, attrs=None):\n"
                     "        self.cells, self.attrs = list(cells), dict(attrs or {})\n"
                     "        self.lock = threading.Lock()\n\n"
                     "    def __repr__(self):\n        return f'<Grid {self.cells} attrs={self.attrs}>'\n\n\n"
                     "def doubled(grid):\n    return Grid([2 * c for c in grid.cells])\n"),
    "tests/__init__.py": "",
    "tests/test_grid.py": "def test_old():\n    pass\n",
}
GRID_FIXED = GRID["grid/core.py"].replace("return Grid([2 * c for c in grid.cells])",
                                          "return Grid([2 * c for c in grid.cells], grid.attrs)")
GRID_TEST = ("from grid.core import Grid, doubled\n\n\ndef test_old():\n    pass\n\n\n"
             "def test_attrs_kept():\n    assert doubled(Grid([1, 2], {'units': 'm'})).attrs == {'units': 'm'}\n")


def test_narrowed_scope_needs_only_the_shape_of_values_with_no_encoding(tmp_path: Path) -> None:
    """xarray-4687, 6938, astropy-13977: the changed function takes and returns objects whose repr is data,
    not a constructor call, and whose state cannot be encoded either (here a lock), so every call was dropped
    and no input-based operator made anything. narrowed_scope puts only the arguments' shape into a mutant: a
    call kept by shape, its input named by a checksum of the arguments' repr and its outcome by an observation, is
    enough; the shortcut,
    which must put the values themselves into code, still makes nothing."""
    pool = _golden_input_pool(tmp_path / "grid", GRID, ("grid/core.py", GRID_FIXED),
                              ("tests/test_grid.py", GRID_TEST), "tests/test_grid.py::test_attrs_kept")
    summary = pool.summary()
    assert summary["generated"].get("narrowed_scope", 0) >= 1, summary
    assert summary["generated"].get("input_specific_shortcut", 0) == 0, summary
    assert summary["no_revealing_input"]["reason"] == "values_not_encodable", summary


PRN = {
    "prn/__init__.py": "",
    "prn/core.py": ("import threading\n\n\nclass Printer:\n    def __init__(self, wrap=False):\n"
                    "        self.wrap, self.lock = wrap, threading.Lock()\n\n"
                    "    def doprint(self, x):\n        return f'<{x}>' if self.wrap else str(x)\n\n\n"
                    "def tuple_text(doprint, items):\n    return '(' + ', '.join(doprint(i) for i in items) + ')'\n"),
    "tests/__init__.py": "",
    "tests/test_prn.py": "def test_old():\n    pass\n",
}
PRN_FIXED = PRN["prn/core.py"].replace(
    "def tuple_text(doprint, items):\n",
    "def tuple_text(doprint, items):\n    if len(items) == 1:\n        return '(' + doprint(items[0]) + ',)'\n")
PRN_TEST = ("from prn.core import Printer, tuple_text\n\n\ndef test_old():\n    pass\n\n\n"
            "def test_one_item():\n    assert tuple_text(Printer().doprint, (1,)) == '(1,)'\n")
PRN_TWO_PRINTERS = PRN_TEST.replace("    assert tuple_text(Printer().doprint, (1,)) == '(1,)'\n",
                                    "    assert tuple_text(Printer(wrap=True).doprint, (1,)) == '(<1>,)'\n"
                                    "    assert tuple_text(Printer().doprint, (1,)) == '(1,)'\n")


def test_a_shape_input_whose_repr_holds_an_address_is_kept_without_it(tmp_path: Path) -> None:
    """sympy-23262: the changed function takes a printer's bound ``doprint``, whose repr holds the printer's
    address, so the call was dropped even by shape (no identity across the two codes' runs) and narrowed_scope
    made nothing. The address is left out of the input's checksum and of the outcome's observation."""
    summary = _golden_input_pool(tmp_path / "prn", PRN, ("prn/core.py", PRN_FIXED),
                                 ("tests/test_prn.py", PRN_TEST), "tests/test_prn.py::test_one_item").summary()
    assert summary["generated"].get("narrowed_scope", 0) >= 1, summary
    assert summary["generated"].get("input_specific_shortcut", 0) == 0, summary


def test_calls_apart_only_by_an_address_that_end_otherwise_are_no_input(tmp_path: Path) -> None:
    """Without the address, two printers' ``doprint`` print alike, so their calls share one input; they end
    differently in the same run, so that input is ambiguous (``shape_ambiguous``) and never compared: no
    mutant rests on pairing one printer's buggy outcome with the other's fixed one."""
    pool = _golden_input_pool(tmp_path / "prn", PRN, ("prn/core.py", PRN_FIXED),
                              ("tests/test_prn.py", PRN_TWO_PRINTERS), "tests/test_prn.py::test_one_item")
    summary = pool.summary()
    assert summary["generated"].get("narrowed_scope", 0) == 0, summary


STATE = {**GRID, "grid/core.py": GRID["grid/core.py"].replace("        self.lock = threading.Lock()\n", "")}
STATE_FIXED = GRID_FIXED.replace("        self.lock = threading.Lock()\n", "")
STATE_GOLDEN = GRID_TEST + "    assert doubled(Grid([3], {'k': 1})).attrs == {'k': 1}\n"
STATE_LAX = GRID_TEST


def test_objects_with_no_structural_repr_are_recorded_by_their_state(tmp_path: Path) -> None:
    """xarray's DataArray, a Weighted object, a sphinx documenter: objects whose repr is not a constructor call
    (or holds an address) and that compare by identity or elementwise. They are recorded by their state (class
    and attributes, rebuilt without running the constructor), so the shortcut is made, its mutant compares a
    call's object with the recorded one by their attributes and returns the recorded outcome for that input
    only: a test that pins just that input admits it, the golden test (a second input) rejects it."""
    repo, commit = make_repo(tmp_path / "grid", STATE)
    inst = Instance(instance_id="grid__state", repo=str(repo), base_commit=commit,
                    patch=make_patch(repo, {"grid/core.py": STATE_FIXED}),
                    test_patch=make_patch(repo, {"tests/test_grid.py": STATE_GOLDEN}),
                    FAIL_TO_PASS=["tests/test_grid.py::test_attrs_kept"])
    settings = Settings(timeout=60, store=tmp_path / "s.sqlite", cache_dir=tmp_path / "cache", workers=1)
    config = MPEConfig(operators=[Operator.INPUT_SPECIFIC_SHORTCUT], per_operator=None)
    with InstanceExecutor(inst, repo, settings, Store(settings.store)) as ex:
        golden = ex.golden_test()
        lax = ex.test_patch(make_patch(repo, {"tests/test_grid.py": STATE_LAX}), name="lax")
        graded = evaluate(ex, MPERequest(inst.patch, lax, golden, config))
    assert graded.pool["generated"].get("input_specific_shortcut", 0) >= 1, graded.pool
    shortcuts = [m for m in graded.mutants if m.mutant.operator == Operator.INPUT_SPECIFIC_SHORTCUT]
    assert any('["O", ["o", "grid"' in m.mutant.patch and "_coh_attrs" in m.mutant.patch for m in shortcuts)
    assert any(m.cell is not None and m.cell.value == "beta" for m in shortcuts), [m.cell for m in shortcuts]
    # one shortcut per recorded input: the lax test pins the first (admits it), not the second (rejects it)
    assert graded.laxity == 0.5, graded.to_json()["matrix"]


def test_a_recording_shared_by_two_tests_is_said_to_have_failed_once(tmp_path: Path) -> None:
    """The golden test against itself shares one recording; when it is cut short (sympy-17655 timed out),
    its failure was warned about once per test, so every failure was said twice."""
    repo, commit = make_repo(tmp_path / "geo", GEO)
    dies = ("import os\n\nfrom geo import Rot, Vec\n\n\ndef test_old():\n    pass\n\n\n"
            "def test_quarter_turn():\n    assert Rot(1).image_of_x == Vec(0, 1)\n    os._exit(0)\n")
    inst = Instance(instance_id="geo__rot", repo=str(repo), base_commit=commit,
                    patch=make_patch(repo, {"geo/shapes.py": GEO_FIXED}),
                    test_patch=make_patch(repo, {"tests/test_geo.py": dies}),
                    FAIL_TO_PASS=["tests/test_geo.py::test_quarter_turn"])
    settings = Settings(timeout=60, cache_dir=tmp_path / "cache", workers=1)
    with InstanceExecutor(inst, repo, settings, None) as ex:
        golden = ex.golden_test()
        pool = build_pool(ex, PoolRequest(inst.patch, [golden, golden], operators=INPUT_OPS))
    failed = [w for w in pool.warnings if w.startswith("recorder failed")]
    assert len(failed) == len(set(failed)) == 1, pool.warnings


MANY = {
    "many/__init__.py": "",
    "many/core.py": "def half(n):\n    return n // 2\n",
    "tests/__init__.py": "",
    "tests/test_many.py": "def test_old():\n    pass\n",
}
MANY_FIXED = "def half(n):\n    if n < 0:\n        return -(-n // 2)\n    return n // 2\n"
MANY_TEST = ("from many.core import half\n\n\ndef test_old():\n    pass\n\n\n"
             "def test_half():\n    for n in range(300):\n        assert half(n) == n // 2\n"
             "    assert half(-3) == -1\n")


def test_a_revealing_call_after_the_cap_is_recorded(tmp_path: Path) -> None:
    """sympy-12481: the golden test appends its revealing assertion to a test that calls the changed function
    270 times; the recorder kept the first 200 inputs per function, so the revealing call was dropped and the
    pool said ``outcomes_equal``. The recorder keeps the last inputs too."""
    summary = _golden_input_pool(tmp_path / "many", MANY, ("many/core.py", MANY_FIXED),
                                 ("tests/test_many.py", MANY_TEST), "tests/test_many.py::test_half").summary()
    assert "no_revealing_input" not in summary, summary
    assert summary["generated"].get("input_specific_shortcut", 0) >= 1, summary


def test_inputs_left_out_by_the_cap_are_not_called_outcomes_equal() -> None:
    """When the cap left inputs out and none kept is revealing, the reason is the cap, not equal outcomes."""
    from coharden.mutation.revealing import input_diagnosis

    inputs = [{"kind": "return", "qualname": "half", "key": f"({n},)", "value_enc": str(n // 2)}
              for n in range(4)]
    summary = {"kind": "summary", "qualname": "half", "calls": 300, "raised": []}
    fixed = [*inputs, {**summary, "capped": 100}]
    buggy = [*inputs, summary]
    reason, detail = input_diagnosis(fixed, buggy)  # type: ignore[misc]
    assert reason == "inputs_capped", detail
    assert "100 of half" in detail, detail
    assert input_diagnosis([*inputs, summary], buggy)[0] == "outcomes_equal"  # type: ignore[index]


def test_an_instrumented_run_gets_a_longer_time_limit(tmp_path: Path) -> None:
    """sympy-17655, 17318: the recording (the test under a tracer, several times slower) had the bare run's
    time limit and timed out on tests that pass in time; an instrumented run's limit is scaled."""
    from coharden.execution.executor import INSTRUMENTED_SLOWDOWN, instrumented_settings

    slow = "import time\n\n\ndef test_old():\n    pass\n\n\ndef test_slow():\n    time.sleep(4)\n"
    repo, commit = make_repo(tmp_path / "m", BUGGY)
    inst = Instance(instance_id="m__slow", repo=str(repo), base_commit=commit,
                    patch=make_patch(repo, {"m/core.py": FIXED_CORE}),
                    test_patch=make_patch(repo, {"tests/test_m.py": slow}),
                    FAIL_TO_PASS=["tests/test_m.py::test_slow"])
    settings = Settings(timeout=2, cache_dir=tmp_path / "cache", workers=1)
    assert instrumented_settings(settings).sandbox.timeout == 2 * INSTRUMENTED_SLOWDOWN
    assert instrumented_settings(Settings(timeout=10_000)).sandbox.timeout == 10_000  # never lower
    with InstanceExecutor(inst, repo, settings, None) as ex:
        run = ex.run_raw(inst.patch, ex.golden_test())
    assert not run.timed_out, run
    assert run.duration >= 4, run


CACHED = {
    "cyc/__init__.py": "",
    "cyc/core.py": '''\
class Perm:
    def __init__(self, items):
        self.items = list(items)
        self._cycles = None

    @property
    def cycles(self):
        if self._cycles is None:
            self._cycles = [list(self.items)]
        return self._cycles

    def __repr__(self):
        return f"Perm({self.items!r})"

    def __eq__(self, other):
        return isinstance(other, Perm) and self.items == other.items

    def __hash__(self):
        return hash(tuple(self.items))


def make(items):
    if len(set(items)) != len(items):
        raise ValueError("repeated")
    return Perm(items)
''',
    "tests/__init__.py": "",
    "tests/test_cyc.py": "def test_old():\n    pass\n",
}
CACHED_REPR = CACHED["cyc/core.py"].replace(
    '        return f"Perm({self.items!r})"',
    '        self.cycles  # fills the cache\n        return f"Perm({self.items!r})"')
CACHED_FIXED = CACHED_REPR.replace('''    if len(set(items)) != len(items):
        raise ValueError("repeated")
''', "")
CACHED_TEST = ("from cyc.core import make\n\n\ndef test_old():\n    pass\n\n\n"
               "def test_make():\n    p = make([1, 0])\n    assert p._cycles is None\n"
               "    assert make([0, 0]).items == [0, 0]\n")


def test_the_recorder_leaves_the_values_it_looks_at_as_they_were(tmp_path: Path) -> None:
    """sympy-12481: ``repr`` of a Permutation fills its ``_cyclic_form`` cache, and ``test_args`` asserts the
    cache is empty: under the recorder the test failed there, on both codes, before its bug-revealing call. The
    recorder puts back the attributes its looking changed."""
    summary = _golden_input_pool(tmp_path / "cyc", {**CACHED, "cyc/core.py": CACHED_REPR},
                                 ("cyc/core.py", CACHED_FIXED), ("tests/test_cyc.py", CACHED_TEST),
                                 "tests/test_cyc.py::test_make").summary()
    assert "no_revealing_input" not in summary, summary
    assert summary["generated"].get("input_specific_shortcut", 0) >= 1, summary


REQ = {
    "req/__init__.py": "",
    "req/models.py": '''\
class Request:
    def __init__(self, method):
        self.method = method
        self.headers = {}

    def prepare_length(self, body):
        self.headers["Content-Length"] = "0"
        if body is not None:
            self.headers["Content-Length"] = str(len(body))
''',
    "tests/__init__.py": "",
    "tests/test_req.py": "def test_old():\n    pass\n",
}
REQ_FIXED = REQ["req/models.py"].replace('''        self.headers["Content-Length"] = "0"
        if body is not None:
            self.headers["Content-Length"] = str(len(body))
''', '''        if body is not None:
            self.headers["Content-Length"] = str(len(body))
        elif self.method not in ("GET", "HEAD"):
            self.headers["Content-Length"] = "0"
''')
REQ_TEST = ("from req.models import Request\n\n\ndef test_old():\n    pass\n\n\n"
            "def test_get_sends_no_length():\n"
            "    for method, length in (('GET', None), ('HEAD', None), ('POST', '0')):\n"
            "        r = Request(method)\n        r.prepare_length(None)\n"
            "        assert r.headers.get('Content-Length') == length\n")


def test_a_fix_that_changes_only_what_a_call_leaves_in_its_receiver_is_bug_revealing(tmp_path: Path) -> None:
    """requests-1142: ``prepare_content_length`` returns None on both codes; the fix changes the headers it
    leaves on the request. Judged by the returned value, no input was revealing (``outcomes_equal``) and no
    input-based mutant was made. The receiver's and mutable arguments' state after the call is compared too:
    narrowed_scope narrows the fix to the revealing receivers' shape, and the shortcut, which can only return a
    recorded value, says why it made nothing (``effects_only``)."""
    summary = _golden_input_pool(tmp_path / "req", REQ, ("req/models.py", REQ_FIXED), ("tests/test_req.py", REQ_TEST),
                                 "tests/test_req.py::test_get_sends_no_length").summary()
    assert summary["generated"].get("narrowed_scope", 0) >= 1, summary
    assert "no_revealing_input" not in summary, summary
    assert summary["skipped"].get("input_specific_shortcut", {}).get("effects_only") == 1, summary
