"""The root: every path the page takes resolves inside ``--root`` or is refused, symlinks included."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from swiftcore_webui.paths import PathRefused, Root


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Root, Path]:
    """``root/`` (with a model, an adapter, datasets, symlinks in and out) beside ``outside/``."""
    root_dir = tmp_path / "root"
    outside = tmp_path / "outside"
    for folder in (root_dir / "models" / "tiny", root_dir / "runs" / "run" / "checkpoint-2", outside / "secret"):
        folder.mkdir(parents=True)
    (root_dir / "models" / "tiny" / "config.json").write_text(json.dumps({"model_type": "qwen3_5"}))
    (root_dir / "runs" / "run" / "checkpoint-2" / "adapter_config.json").write_text("{}")
    (root_dir / "runs" / "run" / "logs.jsonl").write_text("{}\n")
    (root_dir / "data.jsonl").write_text("{}\n")
    (root_dir / "notes.txt").write_text("")
    (outside / "secret" / "config.json").write_text(json.dumps({"model_type": "qwen3_5"}))
    (outside / "stolen.jsonl").write_text("{}\n")
    (root_dir / "in_link").symlink_to(root_dir / "models")
    (root_dir / "out_link").symlink_to(outside)
    (root_dir / "file_out_link.jsonl").symlink_to(outside / "stolen.jsonl")
    (root_dir / "dangling_out").symlink_to(outside / "not-yet")
    return Root.at(root_dir), outside


def test_relative_and_absolute_paths_inside_are_taken(tree: tuple[Root, Path]) -> None:
    root, _ = tree
    assert root.resolve("data.jsonl", what="dataset", must_exist=True, kind="file") == root.path / "data.jsonl"
    assert root.resolve(str(root.path / "models/tiny"), what="model", must_exist=True) == root.path / "models/tiny"
    assert root.resolve("models/../data.jsonl", what="dataset") == root.path / "data.jsonl"
    assert root.resolve(".", what="x") == root.path
    assert root.resolve("  runs/new  ", what="output") == root.path / "runs/new"  # not created
    assert root.resolve("in_link/tiny", what="model") == root.path / "models/tiny"  # a symlink that stays inside


@pytest.mark.parametrize(
    "value",
    ["..", "../outside", "../outside/secret", "/etc", "/", "out_link", "out_link/secret", "file_out_link.jsonl",
     "dangling_out", "dangling_out/deeper", "models/../../outside", "new/../../outside"],
)  # fmt: skip
def test_paths_resolving_outside_are_refused_without_naming_the_target(tree: tuple[Root, Path], value: str) -> None:
    root, outside = tree
    with pytest.raises(PathRefused, match="resolves outside the root") as caught:
        root.resolve(value, what="dataset")
    assert str(outside / "secret") not in str(caught.value)  # a symlink's target is not revealed
    assert f"dataset {value!r}" in str(caught.value)


@pytest.mark.parametrize(
    ("value", "kwargs", "message"),
    [
        ("", {}, "give a path inside the root"),
        ("   ", {}, "give a path inside the root"),
        (None, {}, "give a path inside the root"),
        ("~/data.jsonl", {}, "'~' is not expanded"),
        ("a\x00b", {}, "NUL"),
        ("missing.jsonl", {"must_exist": True}, "does not exist under the root"),
        ("data.jsonl", {"kind": "dir"}, "is a file; a folder is needed"),
        ("models", {"kind": "file"}, "is a folder; a file is needed"),
    ],
)
def test_bad_values_get_a_clear_message(tree: tuple[Root, Path], value: str, kwargs: dict, message: str) -> None:
    root, _ = tree
    with pytest.raises(PathRefused, match=message):
        root.resolve(value, what="field", **kwargs)


def test_the_root_itself_is_resolved(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "real")
    root = Root.at(tmp_path / "alias")
    assert root.path == (tmp_path / "real").resolve()
    assert root.resolve(str(tmp_path / "alias" / "x"), what="x") == root.path / "x"
    with pytest.raises(PathRefused, match="not a directory"):
        Root.at(tmp_path / "nope")


def test_listings_offer_only_what_lies_inside(tree: tuple[Root, Path]) -> None:
    root, _ = tree
    assert root.models() == ["models/tiny", "runs/run/checkpoint-2"]  # not out_link/secret, not in_link twice
    assert root.models(adapters_only=True) == ["runs/run/checkpoint-2"]
    assert root.datasets() == ["data.jsonl"]  # not the run's logs.jsonl, not the symlink leading outside


def test_relative_display(tree: tuple[Root, Path]) -> None:
    root, outside = tree
    assert root.relative(root.path) == "."
    assert root.relative(root.path / "runs" / "run") == "runs/run"
    assert root.relative(outside) == str(outside)


# ------------------------------------------------------------------------------------------------------ property

_SEGMENTS = st.sampled_from(["..", ".", "models", "tiny", "new", "in_link", "out_link", "dangling_out", "data.jsonl",
                             "runs", "run", "checkpoint-2", "", "x y"])  # fmt: skip


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.lists(_SEGMENTS, min_size=1, max_size=6), absolute=st.booleans())
def test_a_path_is_taken_exactly_when_the_os_would_follow_it_inside(
    tree: tuple[Root, Path], parts: list[str], absolute: bool
) -> None:
    """For any path built from these segments (``..``, symlinks in and out, missing parts): refused exactly when
    the OS's own resolution leaves the root, and when taken it is that resolution."""
    root, _ = tree
    value = "/".join(parts)
    if absolute:
        value = f"{root.path}/{value}"
    if not value.strip():
        return
    truth = Path(os.path.realpath(root.path / value.strip()))
    inside = truth == root.path or root.path in truth.parents
    try:
        got = root.resolve(value, what="path")
    except PathRefused as exc:
        assert not inside, f"{value!r} -> {truth} is inside but was refused: {exc}"
    else:
        assert inside and got == truth, f"{value!r} -> {got}, the OS resolves it to {truth}"
