"""Operators from outside: a distribution that declares a class in the ``coharden.operators`` entry-point group
adds an operator that the registry lists, ``--operators`` and ``MPEConfig`` accept, and the pool runs; a plugin
that cannot be loaded is an error naming it, never a traceback.

The distribution is simulated as installed: a package and its ``*.dist-info`` (METADATA, entry_points.txt) in a
directory put first on ``sys.path``, which is all ``importlib.metadata`` reads."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from coharden.cli import app
from coharden.cli.mpe_options import parse_operators
from coharden.errors import CoHardenError
from coharden.mutation import registry
from coharden.mutation.context import FileChange, FixContext
from coharden.mutation.pool import Pool, admit, mechanical_operators
from coharden.mutation.sampling import Draw
from coharden.schema import mutant
from coharden.schema.mpe_config import MPEConfig
from coharden.schema.mutant import MECHANICAL_DEFAULT, Mutant, Operator

PLUGIN = '''
from coharden.mutation.candidates import RawMutant
from coharden.mutation.registry import Example


class FlipComparison:
    """Imitates a fix whose new comparison points the wrong way."""

    name = "flip_comparison"
    needs = frozenset()

    def generate(self, inputs):
        for change in inputs.ctx.files:
            if ">=" in change.new:
                yield RawMutant(self.name, "flip the first >=", f"{change.path}:1",
                                {change.path: change.new.replace(">=", "<=", 1)})

    @classmethod
    def examples(cls):
        return [Example("def f(x):\\n    return x > 0\\n", "def f(x):\\n    return x >= 0\\n", "return x <= 0")]


NOT_AN_OPERATOR = 42
'''


def _install(site: Path, name: str, entry_points: dict[str, str], files: dict[str, str]) -> None:
    """A distribution ``name`` 1.0 in ``site``: its files and a dist-info declaring ``entry_points``."""
    for path, text in files.items():
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_text(text)
    info = site / f"{name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    lines = "".join(f"{key} = {value}\n" for key, value in entry_points.items())
    (info / "entry_points.txt").write_text(f"[coharden.operators]\n{lines}")


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A directory first on sys.path, and a registry that forgets what the test added."""
    directory = tmp_path / "site"
    directory.mkdir()
    monkeypatch.syspath_prepend(str(directory))
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry.registry()))
    monkeypatch.setattr(registry, "_PLUGINS_LOADED", False)
    yield directory
    sys.modules.pop("coharden_flip", None)


def test_an_installed_operator_is_registered_selected_and_run(site: Path) -> None:
    _install(site, "coharden-flip", {"flip_comparison": "coharden_flip:FlipComparison"},
             {"coharden_flip/__init__.py": PLUGIN})
    assert "flip_comparison" in mutant.outside_names()  # read from the metadata, nothing imported
    ops = registry.registry()
    flip = Operator("flip_comparison")
    assert list(ops) == [*MECHANICAL_DEFAULT, flip]  # after the built-in ones
    assert ops[flip].name == flip
    assert mechanical_operators()[-1] == flip
    assert parse_operators("incomplete_fix,flip_comparison") == [Operator.INCOMPLETE_FIX, flip]
    assert parse_operators(None) == list(MECHANICAL_DEFAULT)  # an outside operator runs only when named
    assert MPEConfig(operators=["flip_comparison"]).operators == [flip]

    example = ops[flip].examples()[0]
    ctx = FixContext([FileChange("m.py", example.buggy, example.fixed)])
    raw = list(registry.get("flip_comparison").generate(registry.OperatorInputs(ctx)))
    pool = Pool()
    admit(ctx, raw, pool, Draw({flip: None}, seed=0))
    [admitted] = pool.mutants
    assert admitted.operator == flip
    assert "return x <= 0" in admitted.patch
    assert Mutant.model_validate_json(admitted.model_dump_json()).operator == flip


@pytest.mark.parametrize(("target", "reason"), [
    ("coharden_gone:Missing", "ModuleNotFoundError: No module named 'coharden_gone'"),
    ("coharden_flip:NOT_AN_OPERATOR", "not a class but int"),
    ("coharden_flip:Example", "not an operator class (it lacks name, needs, generate, examples)"),
    ("coharden_flip:FlipComparison", "the class is named 'flip_comparison', the entry point 'broken'"),
])
def test_a_broken_plugin_is_an_error_naming_it(site: Path, target: str, reason: str) -> None:
    _install(site, "coharden-broken", {"broken": target}, {"coharden_flip/__init__.py": PLUGIN})
    with pytest.raises(registry.OperatorPluginError) as caught:
        registry.registry()
    message = str(caught.value)
    assert message.startswith("mutation operator plugin 'broken' (distribution coharden-broken 1.0), entry "
                              f"point broken = {target} of group coharden.operators: ")
    assert message.endswith(reason)
    assert isinstance(caught.value, CoHardenError)

    result = CliRunner().invoke(app, ["mpe", str(site), "--operators", "incomplete_fix"])
    assert result.exit_code == 2
    assert "mutation operator plugin 'broken'" in result.output
    assert "Traceback" not in result.output


def test_an_operator_name_must_be_a_plain_word(site: Path) -> None:
    _install(site, "coharden-odd", {"Odd-Name": "coharden_flip:FlipComparison"},
             {"coharden_flip/__init__.py": PLUGIN})
    with pytest.raises(registry.OperatorPluginError, match="'Odd-Name'.*lower-case letters"):
        registry.registry()
    with pytest.raises(ValueError, match="not a valid Operator"):
        Operator("Odd-Name")  # not an operator's name, installed or not


def test_operator_abbreviations_and_default_are_derived_from_the_names() -> None:
    shorts = list(mutant.short_names(MECHANICAL_DEFAULT).values())
    assert shorts == ["IF", "BS", "SS", "ISS", "TR", "WS", "NS", "CP", "CA", "MG", "HO"]
    assert len(set(shorts)) == len(shorts)  # the report's columns never collide
    assert Operator.VANILLA not in MECHANICAL_DEFAULT
    assert registry.BUILTIN_MODULES == tuple(f"coharden.mutation.{op}" for op in MECHANICAL_DEFAULT)


def test_an_operator_is_a_checked_name_and_a_selection_a_known_one(site: Path) -> None:
    """An operator is its name, nothing made at run time: a mutant of an operator not installed (any more)
    reads back, stored as the plain string; selecting one that no package declares is an error naming the
    known ones."""
    stored = Mutant(id="m", operator="gone_operator", description="", location="", patch="")
    assert stored.model_dump_json().startswith('{"id":"m","operator":"gone_operator",')
    assert Mutant.model_validate_json(stored.model_dump_json()).operator == "gone_operator"
    assert type(stored.operator) is Operator
    assert {Operator.INCOMPLETE_FIX: 1}["incomplete_fix"] == 1  # hashed as its name
    with pytest.raises(ValueError, match="unknown mutation operator 'gone_operator'"):
        MPEConfig(operators=["gone_operator"])
    _install(site, "coharden-flip", {"flip_comparison": "coharden_flip:FlipComparison"},
             {"coharden_flip/__init__.py": PLUGIN})
    assert MPEConfig(operators=["flip_comparison"]).operators == ["flip_comparison"]
    assert "coharden_flip" not in sys.modules  # known from the distribution's metadata, nothing imported
