"""Which node ids a test patch contributes; resolving bare test names."""

from __future__ import annotations

import textwrap

import pytest
from tests.conftest import CALC_FILES, calc_test_file, make_patch

from coharden.errors import TestIdError
from coharden.execution.executor import InstanceExecutor
from coharden.execution.testids import contributed_ids, resolve_names
from coharden.schema.instance import Instance

BEFORE = textwrap.dedent(
    """\
    import pytest


    def helper():
        return 1


    def test_unchanged():
        assert helper() == 1


    def test_edited():
        assert 1 + 1 == 2


    class TestThing:
        def test_method(self):
            assert True

        def test_other(self):
            assert True


    class Helper:
        def test_not_collected(self):
            pass
    """
)


def test_added_function_and_changed_method() -> None:
    after = (
        BEFORE.replace("    def test_method(self):\n        assert True",
                       "    def test_method(self):\n        assert 2 > 1")
        .replace("class Helper:\n    def test_not_collected(self):\n        pass",
                 "class Helper:\n    def test_not_collected(self):\n        return 5")
        + "\n\ndef test_new():\n    assert helper()\n\n\nasync def test_async_new():\n    pass\n"
    )
    assert "return 5" in after
    assert "assert 2 > 1" in after
    ids = contributed_ids({"tests/test_x.py": (BEFORE, after)})
    assert ids == ["tests/test_x.py::TestThing::test_method", "tests/test_x.py::test_new",
                   "tests/test_x.py::test_async_new"]


def test_whitespace_and_comment_only_changes_contribute_nothing() -> None:
    after = (
        BEFORE.replace("    assert 1 + 1 == 2", "    # a comment\n    assert 1+1   ==   2  # trailing")
        .replace("def test_unchanged():", "\n\ndef test_unchanged():  # moved down")
    )
    assert after != BEFORE
    assert contributed_ids({"tests/test_x.py": (BEFORE, after)}) == []


def test_new_file_deleted_file_and_non_python() -> None:
    new_file = "def test_a():\n    pass\n\nclass TestB:\n    def test_c(self):\n        pass\n"
    ids = contributed_ids({
        "tests/test_new.py": (None, new_file),
        "tests/test_gone.py": (BEFORE, None),
        "tests/data.txt": (None, "def test_no(): pass\n"),
        "tests/test_broken.py": (None, "def test_x(:\n"),
    })
    assert ids == ["tests/test_new.py::test_a", "tests/test_new.py::TestB::test_c"]


def test_resolve_names_keeps_repeats_across_files() -> None:
    files = {
        "pkg/tests/test_a.py": "def test_shared():\n    pass\n\ndef test_only_a():\n    pass\n",
        "pkg/tests/test_b.py": "class TestK:\n    def test_shared(self):\n        pass\n",
        "pkg/tests/README": "test_shared",
    }
    resolved = resolve_names(["test_shared", "test_only_a[1-2]", "x.py::test_kept"], files)
    assert resolved == [
        "pkg/tests/test_a.py::test_shared",
        "pkg/tests/test_b.py::TestK::test_shared",
        "pkg/tests/test_a.py::test_only_a[1-2]",
        "x.py::test_kept",
    ]


def test_resolve_unknown_name_is_test_id_error() -> None:
    files = {"t/test_a.py": "def test_a():\n    pass\n"}
    with pytest.raises(TestIdError, match="test_missing"):
        resolve_names(["test_a", "test_missing"], files)


def test_test_patch_ids_through_the_executor(calc_repo, settings) -> None:  # type: ignore[no-untyped-def]
    repo, base = calc_repo
    instance = Instance(instance_id="calc", repo=str(repo), base_commit=base)
    added = make_patch(repo, calc_test_file("def test_add():\n    assert add(1, 1) == 2"))
    reformatted = make_patch(repo, {"tests/test_calc.py": textwrap.dedent(CALC_FILES["tests/test_calc.py"])
                                    .replace("def test_mul():", "# comment\ndef test_mul():  # same")})
    with InstanceExecutor(instance, repo, settings) as executor:
        test = executor.test_patch(added, name="cand")
        assert test.ids == ["tests/test_calc.py::test_add"]
        assert test.files["tests/test_calc.py"].endswith("assert add(1, 1) == 2\n")
        named = executor.test_patch(added, ids=["test_add", "test_mul"])
        assert named.ids == ["tests/test_calc.py::test_add", "tests/test_calc.py::test_mul"]
        with pytest.raises(TestIdError, match="adds or changes no test function"):
            executor.test_patch(reformatted, name="fmt")
        with pytest.raises(TestIdError, match="empty"):
            executor.test_patch("  \n")
        with pytest.raises(TestIdError, match="test_nope"):
            executor.test_patch(added, ids=["test_nope"])
