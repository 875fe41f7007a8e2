"""Unified diffs: parsing, splitting into source and test parts, hunks and change blocks, make_diff."""

from __future__ import annotations

import pytest
from tests.conftest import make_patch, run_git

from coharden.errors import PatchError
from coharden.patches import hunks, make_diff, parse, split_patch, touched_files
from coharden.patches import make_patch as build_patch


def test_parse_error_is_patch_error() -> None:
    garbage = "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1,3 +1,3 @@\n-only one line\n"
    with pytest.raises(PatchError, match="cannot parse patch"):
        parse(garbage)


def _multi_file_patch(repo_factory) -> str:  # type: ignore[no-untyped-def]
    files = {
        "pkg/core.py": "x = 1\n",
        "pkg/tests/helpers.py": "h = 1\n",
        "testing/util.py": "u = 1\n",
        "pkg/test_core.py": "t = 1\n",
        "pkg/core_test.py": "c = 1\n",
        "conftest.py": "c = 1\n",
        "docs/testing.md": "doc\n",
        "pkg/attest.py": "a = 1\n",
    }
    repo, _ = repo_factory(files)
    return make_patch(repo, {path: content.replace("1", "2") for path, content in files.items() if path.endswith(".py")}
                      | {"docs/testing.md": "doc 2\n"})


def test_split_patch_by_default_patterns(repo_factory) -> None:  # type: ignore[no-untyped-def]
    patch = _multi_file_patch(repo_factory)
    source, tests = split_patch(patch)
    assert sorted(touched_files(source)) == ["docs/testing.md", "pkg/attest.py", "pkg/core.py"]
    assert sorted(touched_files(tests)) == [
        "conftest.py", "pkg/core_test.py", "pkg/test_core.py", "pkg/tests/helpers.py", "testing/util.py",
    ]
    assert len(parse(source)) == 3
    assert len(parse(tests)) == 5
    assert split_patch("") == ("", "")


def test_split_patch_by_custom_patterns(repo_factory) -> None:  # type: ignore[no-untyped-def]
    patch = _multi_file_patch(repo_factory)
    source, tests = split_patch(patch, ["docs/", "attest.py"])
    assert sorted(touched_files(tests)) == ["docs/testing.md", "pkg/attest.py"]
    assert "pkg/test_core.py" in touched_files(source)
    assert "conftest.py" in touched_files(source)


def test_split_parts_apply_separately(repo_factory) -> None:  # type: ignore[no-untyped-def]
    files = {"src/mod.py": "a = 1\n", "tests/test_mod.py": "def test_a():\n    pass\n"}
    repo, _ = repo_factory(files)
    patch = make_patch(repo, {"src/mod.py": "a = 2\n", "tests/test_mod.py": "def test_a():\n    assert 1\n",
                              "tests/test_new.py": "def test_b():\n    pass\n"})
    source, tests = split_patch(patch)
    run_git(repo, "apply", "-", input=source)
    run_git(repo, "apply", "-", input=tests)
    assert (repo / "src/mod.py").read_text() == "a = 2\n"
    assert (repo / "tests/test_new.py").read_text() == "def test_b():\n    pass\n"


def test_hunks_and_change_blocks(repo_factory) -> None:  # type: ignore[no-untyped-def]
    old = [f"line{i}\n" for i in range(1, 31)]
    new = list(old)
    new[1] = "CHANGED2\n"  # block 1 of hunk 1
    new[4] = "CHANGED5\n"  # block 2 of hunk 1 (context in between)
    new.insert(6, "INSERTED\n")  # block 3 of hunk 1 (pure insertion)
    new[25] = "CHANGED25\n"  # far away: a second hunk
    repo, _ = repo_factory({"m.py": "".join(old), "other.py": "a\nb\n"})
    patch = make_patch(repo, {"m.py": "".join(new), "other.py": "a\n"})
    info = hunks(patch)
    assert [(h.path, h.index) for h in info] == [("m.py", 0), ("m.py", 1), ("other.py", 0)]
    first, second, third = info
    assert len(first.blocks) == 3
    assert len(second.blocks) == 1
    assert first.blocks[0].removed == ("line2\n",)
    assert first.blocks[0].added == ("CHANGED2\n",)
    assert first.blocks[0].source_start == 2
    assert first.blocks[1].source_start == 5
    assert first.blocks[2].removed == ()
    assert first.blocks[2].added == ("INSERTED\n",)
    assert second.blocks[0].removed == ("line25\n",)
    assert second.blocks[0].added == ("CHANGED25\n",)
    assert second.blocks[0].source_start == 25
    assert third.blocks[0].removed == ("b\n",)
    assert third.blocks[0].added == ()
    assert first.header.startswith("@@ -1,")
    assert [b.index for b in first.blocks] == [0, 1, 2]


@pytest.mark.parametrize(
    ("path", "old", "new"),
    [
        ("nonl.py", "a = 1\nb = 2", "a = 1\nb = 3"),  # no trailing newline before and after
        ("nonl.py", "a = 1\nb = 2", "a = 1\nb = 2\nc = 3\n"),  # newline added at the end
        ("nl.py", "x\ny\n", "x\ny"),  # newline removed at the end
        ("new_dir/new.py", None, "print('new')\n"),  # new file
        ("new_dir/new_nonl.py", None, "no newline"),  # new file without a trailing newline
        ("gone.py", "bye\nbye\n", None),  # deleted file
        ("empty.py", None, ""),  # new empty file
    ],
)
def test_make_diff_round_trips_through_git_apply(repo_factory, path, old, new) -> None:  # type: ignore[no-untyped-def]
    files = {"keep.py": "k\n"}
    if old is not None:
        files[path] = old
    repo, _ = repo_factory(files)
    if old is not None:  # write bytes exactly (the helper dedents, which keeps these unchanged)
        assert (repo / path).read_text() == old
    diff = make_diff(path, old, new)
    assert diff.startswith(f"diff --git a/{path} b/{path}\n")
    run_git(repo, "apply", "--check", "-", input=diff)
    run_git(repo, "apply", "-", input=diff)
    if new is None:
        assert not (repo / path).exists()
    else:
        assert (repo / path).read_bytes() == new.encode()
    # and git agrees it is the same change: reverse-applying restores the original
    run_git(repo, "apply", "--reverse", "-", input=diff)
    if old is None:
        assert not (repo / path).exists()
    else:
        assert (repo / path).read_bytes() == old.encode()


def test_make_diff_identical_is_empty_and_make_patch_concatenates(repo_factory) -> None:  # type: ignore[no-untyped-def]
    assert make_diff("a.py", "same\n", "same\n") == ""
    repo, _ = repo_factory({"a.py": "1\n", "b.py": "2\n"})
    patch = build_patch([("b.py", "2\n", "22\n"), ("a.py", "1\n", "11\n"), ("c.py", "3\n", "3\n")])
    assert touched_files(patch) == ["a.py", "b.py"]
    run_git(repo, "apply", "-", input=patch)
    assert (repo / "a.py").read_text() == "11\n"
    assert (repo / "b.py").read_text() == "22\n"
