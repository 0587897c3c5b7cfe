"""The web UI's root: every path the page accepts (model dirs, datasets, output dirs) must resolve inside it.

A value typed into the page is read relative to the root (an absolute path is taken as it is), then resolved the
way the operating system will follow it (:func:`os.path.realpath`: ``..``, ``.`` and every symlink of the part that
exists). A result that is not the root or below it is refused with :class:`PathRefused`, whose message says so
without naming where a symlink points. ``~`` is not expanded.

The listings (:meth:`Root.models`, :meth:`Root.datasets`) walk the root without following symlinked folders and
leave out hidden entries and anything that resolves outside the root.

Importing this module imports no gradio, torch or transformers.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DATASET_SUFFIXES", "PathRefused", "Root"]

#: The dataset files the listing offers (``swiftcore train --dataset`` reads these).
DATASET_SUFFIXES = (".jsonl", ".json", ".parquet")
#: How deep the listings look below the root, and how many entries they return at most.
_LIST_DEPTH = 4
_LIST_MAX = 500
#: Folders the listings never enter (caches, virtual environments, VCS data).
_SKIPPED_DIRS = {"__pycache__", "node_modules", "site-packages", ".git", ".venv", "venv"}


class PathRefused(ValueError):
    """A path the web UI will not use: empty, outside the root, or not what the field needs."""


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


@dataclass(frozen=True)
class Root:
    """The folder the web UI is confined to (``swiftcore web-ui --root``).

    Attributes:
        path: the root, resolved (symlinks followed).
    """

    path: Path

    @classmethod
    def at(cls, directory: str | os.PathLike[str]) -> Root:
        """The root at ``directory`` (resolved).

        Raises:
            PathRefused: it is not an existing directory.
        """
        resolved = Path(os.path.realpath(os.fspath(directory)))
        if not resolved.is_dir():
            raise PathRefused(f"--root {os.fspath(directory)!r} is not a directory")
        return cls(resolved)

    def resolve(
        self, value: str | os.PathLike[str] | None, *, what: str, must_exist: bool = False, kind: str | None = None
    ) -> Path:
        """``value`` (relative to the root, or absolute) resolved, checked to lie inside the root.

        Args:
            value: what the user gave.
            what: the field's name, for messages ("dataset", "output folder").
            must_exist: refuse a path that does not exist.
            kind: ``"dir"`` or ``"file"``: refuse an existing path of the other kind.

        Raises:
            PathRefused: empty, ``~``-prefixed, containing a NUL, resolving outside the root (symlinks included),
                missing when ``must_exist``, or of the wrong kind.
        """
        text = os.fspath(value).strip() if value is not None else ""
        if not text:
            raise PathRefused(f"{what}: give a path inside the root {self.path}")
        if "\x00" in text:
            raise PathRefused(f"{what}: the path contains a NUL character")
        if text.startswith("~"):
            raise PathRefused(f"{what} {text!r}: '~' is not expanded; give a path relative to the root {self.path}")
        candidate = Path(text) if os.path.isabs(text) else self.path / text
        resolved = Path(os.path.realpath(candidate))
        if not _inside(resolved, self.path):
            raise PathRefused(
                f"{what} {text!r} resolves outside the root {self.path} (symlinks are followed): the web UI only "
                "reads and writes inside its --root"
            )
        if must_exist and not resolved.exists():
            raise PathRefused(f"{what} {text!r} does not exist under the root {self.path}")
        if kind == "dir" and resolved.exists() and not resolved.is_dir():
            raise PathRefused(f"{what} {text!r} is a file; a folder is needed")
        if kind == "file" and resolved.exists() and not resolved.is_file():
            raise PathRefused(f"{what} {text!r} is a folder; a file is needed")
        return resolved

    def relative(self, path: str | os.PathLike[str]) -> str:
        """``path`` as the page shows it: relative to the root (``"."`` for the root), absolute if outside."""
        path = Path(path)
        try:
            shown = path.relative_to(self.path).as_posix()
        except ValueError:
            return str(path)
        return shown or "."

    # ------------------------------------------------------------------ listings

    def _walk(self) -> list[tuple[Path, list[str], list[str]]]:
        out = []
        for current, dirs, files in os.walk(self.path, followlinks=False):
            here = Path(current)
            depth = len(here.relative_to(self.path).parts)
            dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _SKIPPED_DIRS)
            if depth >= _LIST_DEPTH:
                dirs[:] = []
            out.append((here, dirs, sorted(f for f in files if not f.startswith("."))))
            if len(out) > 20 * _LIST_MAX:
                break
        return out

    def _listed(self, path: Path) -> bool:
        return _inside(Path(os.path.realpath(path)), self.path)

    def models(self, *, adapters_only: bool = False) -> list[str]:
        """Checkpoint folders under the root (a ``config.json`` with a ``model_type``, or a peft
        ``adapter_config.json``), relative to it; ``adapters_only`` lists LoRA adapters only."""
        found = []
        for here, _, files in self._walk():
            adapter = "adapter_config.json" in files
            model = "config.json" in files and _has_model_type(here / "config.json")
            if (adapter or (model and not adapters_only)) and self._listed(here):
                found.append(self.relative(here))
            if len(found) >= _LIST_MAX:
                break
        return sorted(found, key=_natural)

    def datasets(self) -> list[str]:
        """Dataset files under the root (``.jsonl``, ``.json``, ``.parquet``), relative to it, leaving out the files
        checkpoints and runs write (``config.json``, ``logs.jsonl`` ...)."""
        found = []
        for here, _, files in self._walk():
            if "config.json" in files or "adapter_config.json" in files or "logs.jsonl" in files:
                continue  # a checkpoint or a run folder: its json files are not training data
            for name in files:
                if name.endswith(DATASET_SUFFIXES) and self._listed(here / name):
                    found.append(self.relative(here / name))
            if len(found) >= _LIST_MAX:
                break
        return sorted(found, key=_natural)


def _has_model_type(path: Path) -> bool:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and isinstance(data.get("model_type"), str)


def _natural(text: str) -> list[object]:
    """Sort key: ``checkpoint-10`` after ``checkpoint-9``."""
    import re

    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]
