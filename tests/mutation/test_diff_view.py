"""A mutant's diff as people read it (`mpe`'s wrong fixes): coharden's value helpers folded to one line, the
mutant's own lines kept; a real input-based mutant of a bundled example's fix."""

from __future__ import annotations

from coharden.mutation.diff_view import folded
from coharden.mutation.recorder_values import decoder_source
from coharden.patches import make_patch

FIXED = "def f(x):\n    return x + 1\n\n\ndef g(y):\n    return y\n"


def _mutant() -> str:
    shortcut = FIXED.replace("    return x + 1\n", "    if _coh_same(x, 3):\n        return 9\n    return x + 1\n")
    return shortcut + "\n\n" + decoder_source() + "\n\nTAIL = 1\n"


def test_the_helpers_fold_to_one_line_and_the_mutant_s_lines_stay() -> None:
    patch = make_patch([("m.py", FIXED, _mutant())])
    shown = folded(patch)
    assert "+    if _coh_same(x, 3):" in shown
    assert "+        return 9" in shown
    assert "+TAIL = 1" in shown  # code after the helpers is the mutant's own
    assert "def _coh_decode(" not in shown
    assert "import ast" not in shown
    [line] = [line for line in shown.splitlines() if "folded" in line]
    assert "_coh_decode, _coh_same, _coh_attrs" in line
    assert len(shown.splitlines()) < 25 < len(patch.splitlines())


def test_a_diff_without_helpers_is_unchanged() -> None:
    patch = make_patch([("m.py", FIXED, FIXED.replace("x + 1", "x + 2"))])
    assert folded(patch) == patch
    assert folded("") == ""
