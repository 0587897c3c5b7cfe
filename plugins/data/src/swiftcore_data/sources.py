"""Dataset arguments: ``path[#ratio]`` or ``hf:NAME[:SPLIT][#ratio]`` parsed into a :class:`DatasetSource`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from swiftcore_data.errors import DataError

__all__ = ["FILE_SUFFIXES", "DatasetSource", "parse_dataset_arg"]

# Read directly (exact line numbers) vs. through `datasets` (row numbers).
JSON_SUFFIXES = (".jsonl", ".json")
TABLE_SUFFIXES = {".parquet": "parquet", ".csv": "csv", ".arrow": "arrow"}
FILE_SUFFIXES = (*JSON_SUFFIXES, *TABLE_SUFFIXES)


@dataclass(frozen=True)
class DatasetSource:
    """One dataset to train on and how much of it.

    Attributes:
        kind: ``"file"`` for a local jsonl/json/parquet/csv/arrow file or a local dataset directory,
            ``"hf"`` for anything ``datasets.load_dataset`` (or ``load_from_disk``) understands.
        path: the file path, or the dataset name / local dataset directory for ``"hf"``.
        split: the split to read from an ``"hf"`` source (slices such as ``"train[:100]"`` work).
        ratio: sampling fraction: ``0.5`` keeps a seeded half, ``2.5`` repeats everything twice plus a
            seeded half. Defaults to 1 (each row once).
        subset: the dataset configuration name for ``"hf"`` sources, if it has several.
    """

    kind: Literal["file", "hf"]
    path: str
    split: str = "train"
    ratio: float = 1.0
    subset: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("file", "hf"):
            raise DataError(str(self.path), "kind", f"unknown source kind {self.kind!r}; expected 'file' or 'hf'")
        if not (isinstance(self.ratio, int | float) and math.isfinite(self.ratio) and self.ratio > 0):
            raise DataError(str(self.path), "ratio", f"sampling ratio must be a positive number, got {self.ratio!r}")

    @property
    def label(self) -> str:
        """How rows of this source are named in ``_source`` and errors (``train.jsonl``, ``hf:name[train]``)."""
        if self.kind == "file":
            return self.path
        return f"hf:{self.path}[{self.split}]"

    def __str__(self) -> str:
        text = self.path if self.kind == "file" else f"hf:{self.path}:{self.split}"
        return text if self.ratio == 1 else f"{text}#{self.ratio:g}"


def parse_dataset_arg(arg: str) -> DatasetSource:
    """Parse a ``--dataset`` value.

    Args:
        arg: ``"data/train.jsonl"``, ``"data/train.jsonl#0.5"``, ``"hf:org/name"``,
            ``"hf:org/name:validation#2"`` or ``"hf:./saved_dataset_dir"``. The part after the last
            ``#`` is the sampling ratio (see :attr:`DatasetSource.ratio`).

    Returns:
        The parsed source. Files are not opened here; a missing file is reported by ``load_records``.

    Raises:
        DataError: empty argument, a ratio that is not a positive number, or an unsupported file type.
    """
    if not isinstance(arg, str) or not arg.strip():
        raise DataError(repr(arg), None, "empty dataset argument; expected 'path[#ratio]' or 'hf:NAME[:SPLIT][#ratio]'")
    text, ratio = arg.strip(), 1.0
    if "#" in text:
        text, _, ratio_text = text.rpartition("#")
        try:
            ratio = float(ratio_text)
        except ValueError:
            raise DataError(
                arg, "ratio", f"{ratio_text!r} after '#' is not a number; write e.g. 'train.jsonl#0.5'"
            ) from None
    if text.startswith("hf:"):
        name, _, split = text[3:].partition(":")
        if not name:
            raise DataError(arg, None, "no dataset name after 'hf:'; write e.g. 'hf:org/name:train'")
        return DatasetSource("hf", name, split=split or "train", ratio=ratio)
    suffix = Path(text).suffix.lower()
    if suffix not in FILE_SUFFIXES and not Path(text).is_dir():
        raise DataError(
            arg,
            None,
            f"unsupported file type {suffix or '(none)'!r}; use one of {', '.join(FILE_SUFFIXES)}, "
            "a local dataset directory, or 'hf:NAME' for a Hugging Face dataset",
        )
    return DatasetSource("file", text, ratio=ratio)
