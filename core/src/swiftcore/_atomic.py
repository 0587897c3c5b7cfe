"""Write an output directory atomically: into a sibling temporary directory, renamed at the end.

Used by every writer of a checkpoint-like directory (conversion, LoRA merge).

A crash, an error or Ctrl-C leaves no partial output directory behind, so a directory that exists
is always a complete checkpoint.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from swiftcore.errors import OutputExistsError

__all__ = ["atomic_output_dir", "check_output_dir"]


def check_output_dir(out_dir: str | os.PathLike[str]) -> Path:
    """Return ``out_dir`` as a Path, refusing one that already exists with content.

    Raises:
        OutputExistsError: when ``out_dir`` exists and is not an empty directory.
    """
    out = Path(out_dir).expanduser().resolve()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise OutputExistsError(f"output {out} already exists and is not empty; remove it or choose another path")
    return out


@contextlib.contextmanager
def atomic_output_dir(out_dir: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary directory next to ``out_dir``; rename it to ``out_dir`` when the block succeeds.

    The temporary directory sits in the same parent so the final rename is atomic (same file system).
    On any exception it is removed and the exception propagates.

    Args:
        out_dir: the final directory; it must not exist, or be an empty directory.

    Yields:
        The temporary directory to write into.
    """
    out = check_output_dir(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    try:
        yield tmp
        if out.exists():  # an empty directory the user created: replace it
            out.rmdir()
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
