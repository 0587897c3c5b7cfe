"""Which base checkpoint a directory holds, cheaply: what a trainer and a rollout server compare before a run
(``--rollout-server``), so a policy is never synced into an engine of another model.

The identity is read from the files, not from loaded weights: the server's engine may run in another dtype
(``--dtype bfloat16``) or have been synced already, and the trainer's model is read before it is loaded.

Importing this module imports neither torch nor safetensors (the headers are read by hand).
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

__all__ = ["checkpoint_identity", "largest_tensor_elements"]

#: Bytes of tensor data hashed at the start and at the end of each weight file: enough to tell two random
#: initialisations (or two fine-tunes) of one architecture apart, cheap on a checkpoint of any size.
_SAMPLE = 2**20


def _safetensors_header(path: Path) -> tuple[dict[str, Any], int]:
    """The JSON header of a ``.safetensors`` file and the offset where its tensor data starts."""
    with path.open("rb") as handle:
        size = int.from_bytes(handle.read(8), "little")
        header = json.loads(handle.read(size))
    return header, 8 + size


def _sample(path: Path, start: int, digest: Any) -> None:
    """Feed the first and last :data:`_SAMPLE` bytes of ``path`` after ``start`` (and its size) to ``digest``."""
    total = path.stat().st_size
    digest.update(str(total - start).encode())
    with path.open("rb") as handle:
        handle.seek(start)
        digest.update(handle.read(_SAMPLE))
        if total - start > 2 * _SAMPLE:
            handle.seek(total - _SAMPLE)
            digest.update(handle.read(_SAMPLE))


def checkpoint_identity(model_dir: str | Path) -> dict[str, Any]:
    """The identity of the checkpoint in ``model_dir``.

    Args:
        model_dir: a Hugging Face checkpoint directory (``config.json`` and ``*.safetensors`` or ``*.bin``).

    Returns:
        ``{"fingerprint": hex, "num_parameters": int | None, "model_type": str | None}``: the fingerprint hashes
        the canonical ``config.json``, each ``.safetensors`` header (names, dtypes, shapes) and samples of each
        weight file's data; ``num_parameters`` counts the elements the safetensors headers list (None for a
        ``.bin`` checkpoint).
    """
    root = Path(model_dir)
    digest = hashlib.sha256()
    config: dict[str, Any] = {}
    config_file = root / "config.json"
    if config_file.is_file():
        config = json.loads(config_file.read_text(encoding="utf-8"))
        digest.update(json.dumps(config, sort_keys=True).encode())
    count: int | None = None
    shards = sorted(root.glob("*.safetensors"))
    for shard in shards:
        header, start = _safetensors_header(shard)
        header.pop("__metadata__", None)
        digest.update(json.dumps(header, sort_keys=True).encode())
        count = (count or 0) + sum(math.prod(entry.get("shape", ())) for entry in header.values())
        _sample(shard, start, digest)
    if not shards:
        for shard in sorted(root.glob("*.bin")):
            _sample(shard, 0, digest)
    return {"fingerprint": digest.hexdigest(), "num_parameters": count, "model_type": config.get("model_type")}


def largest_tensor_elements(model_dir: str | Path) -> int:
    """The element count of the largest tensor the checkpoint's ``.safetensors`` headers list (0 without any)."""
    largest = 0
    for shard in sorted(Path(model_dir).glob("*.safetensors")):
        header, _ = _safetensors_header(shard)
        header.pop("__metadata__", None)
        largest = max([largest, *(math.prod(entry.get("shape", ())) for entry in header.values())])
    return largest
