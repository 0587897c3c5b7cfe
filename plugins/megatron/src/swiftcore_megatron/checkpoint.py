"""Reading Hugging Face safetensors checkpoints and reading/writing Megatron checkpoints, tensor by tensor.

Megatron format written: the megatron "torch" (legacy) checkpoint, one plain state dict per rank::

    OUT/latest_checkpointed_iteration.txt        "release"
    OUT/release/mp_rank_{tp:02d}/model_optim_rng.pt          (expert parallel: mp_rank_{tp:02d}_{ep:03d})
    OUT/swiftcore_mcore.json                     bridge, model_type, tp, ep, dtype (for --to-hf)

A training run under pipeline parallelism writes a file per stage, ``mp_rank_{tp:02d}_{pp:03d}[_{ep:03d}]``, with
the stage's own tensor names (megatron's: layers numbered from 0 in each stage; ``pp`` in the metadata); the
readers below map them back to the whole model's (:mod:`swiftcore_megatron.pipeline`).
    OUT/hf/                                      config.json, tokenizer, generation config (for --to-hf)
    OUT/hf_passthrough/                          HF tensors carried unchanged (e.g. an audio tower), if any

Why this format and not ``dist_checkpointing`` (torch_dist): Megatron-LM training loads it directly
(``--load OUT --ckpt-format torch --finetune``, or ``model.load_state_dict(torch.load(...)["model"])``
from megatron-core), and so does ``dist_checkpointing``'s converter; writing it needs no process group,
so it works on a CPU-only machine without launching ``tp * ep`` processes. Rank files are written
and read one tensor at a time (:mod:`swiftcore_megatron.torch_zip`), HF shards are read through
``safe_open`` one file at a time and written as they fill, so peak memory stays near one HF shard
plus the largest tensor, whatever the model size.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

from swiftcore_megatron.errors import CheckpointError

__all__ = [
    "HF_SUBDIR",
    "METADATA_FILE",
    "PASSTHROUGH_SUBDIR",
    "HFReader",
    "HFWriter",
    "copy_hf_side_files",
    "rank_file",
    "read_metadata",
    "write_metadata",
]

METADATA_FILE = "swiftcore_mcore.json"
HF_SUBDIR = "hf"
PASSTHROUGH_SUBDIR = "hf_passthrough"
TRACKER_FILE = "latest_checkpointed_iteration.txt"
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".safetensors.index.json", ".bin.index.json")


def rank_file(root: Path, tp_rank: int, ep_rank: int, ep: int, *, pp_rank: int = 0, pp: int = 1) -> Path:
    """The rank's ``model_optim_rng.pt`` path, named as Megatron-LM's ``get_checkpoint_name`` names it
    (``mp_rank_TT[_PPP][_EEE]``: the pipeline stage's index only under pipeline parallelism)."""
    name = f"mp_rank_{tp_rank:02d}" + (f"_{pp_rank:03d}" if pp > 1 else "") + (f"_{ep_rank:03d}" if ep > 1 else "")
    return root / "release" / name / "model_optim_rng.pt"


def write_metadata(root: Path, metadata: dict[str, Any]) -> None:
    """Write the tracker file Megatron reads and swiftcore's own metadata."""
    (root / TRACKER_FILE).write_text("release", encoding="utf-8")
    (root / METADATA_FILE).write_text(json.dumps(metadata, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def read_metadata(root: Path) -> dict[str, Any]:
    """Read swiftcore's metadata of a Megatron checkpoint written by ``swiftcore export --to-mcore``.

    Raises:
        CheckpointError: when the directory is not such a checkpoint, or a rank file is missing.
    """
    path = root / METADATA_FILE
    if not path.is_file():
        raise CheckpointError(
            f"{path} not found: --to-hf reads Megatron checkpoints written by 'swiftcore export --to-mcore'"
        )
    meta = json.loads(path.read_text(encoding="utf-8"))
    pp = meta.setdefault("pp", 1)
    for tp_rank in range(meta["tp"]):
        for ep_rank in range(meta["ep"]):
            for pp_rank in range(pp):
                f = rank_file(root, tp_rank, ep_rank, meta["ep"], pp_rank=pp_rank, pp=pp)
                if not f.is_file():
                    raise CheckpointError(
                        f"{f} is missing: the checkpoint was written for tp={meta['tp']}, pp={pp}, ep={meta['ep']}; "
                        "copy every rank"
                    )
    return meta


def copy_hf_side_files(src: Path, dst: Path) -> list[str]:
    """Copy everything of an HF directory except weight files (config, tokenizer, templates) to ``dst``."""
    dst.mkdir(parents=True, exist_ok=True)
    copied = []
    for item in sorted(src.iterdir()):
        if item.is_file() and not item.name.endswith(_WEIGHT_SUFFIXES) and not item.name.startswith("."):
            shutil.copy2(item, dst / item.name)
            copied.append(item.name)
    return copied


class HFReader:
    """Lazily read tensors of a safetensors checkpoint (single file or sharded with an index).

    Files are opened with ``safe_open`` (memory-mapped): reading a tensor loads only that tensor.
    Use as a context manager so the files are closed.

    Raises:
        CheckpointError: on construction, when a shard named by the index, or any weights, are missing.
    """

    def __init__(self, model_dir: str | os.PathLike[str]) -> None:
        self.model_dir = Path(model_dir)
        index = self.model_dir / "model.safetensors.index.json"
        single = self.model_dir / "model.safetensors"
        if index.is_file():
            try:
                weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            except (json.JSONDecodeError, KeyError) as exc:
                raise CheckpointError(f"{index}: not a safetensors index (needs a 'weight_map' object)") from exc
            for file in sorted(set(weight_map.values())):
                if not (self.model_dir / file).is_file():
                    raise CheckpointError(
                        f"{self.model_dir / file} is missing: {index.name} maps tensors to it. Copy the complete "
                        "checkpoint (every shard) and retry"
                    )
            self.weight_map: dict[str, str] = dict(weight_map)
        elif single.is_file():
            from safetensors import safe_open

            with safe_open(single, framework="pt") as f:
                self.weight_map = dict.fromkeys(f.keys(), single.name)
        else:
            raise CheckpointError(
                f"{self.model_dir} holds no model.safetensors or model.safetensors.index.json; "
                "save the model with save_pretrained(safe_serialization=True)"
            )
        self._stack = contextlib.ExitStack()
        self._open: dict[str, Any] = {}

    def __enter__(self) -> HFReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the open files."""
        self._stack.close()
        self._stack = contextlib.ExitStack()
        self._open.clear()

    def keys(self) -> list[str]:
        """Every tensor name in the checkpoint."""
        return list(self.weight_map)

    def get(self, key: str) -> Any:
        """Load one tensor.

        Raises:
            CheckpointError: when the checkpoint has no such tensor.
        """
        from safetensors import safe_open

        file = self.weight_map.get(key)
        if file is None:
            raise CheckpointError(f"{self.model_dir}: tensor {key!r} is missing from the checkpoint")
        if file not in self._open:
            # One file open at a time: pages of a memory-mapped shard stay resident while it is
            # open, so keeping every shard open would grow RSS to the model size.
            self.close()
            self._open[file] = self._stack.enter_context(safe_open(self.model_dir / file, framework="pt"))
        return self._open[file].get_tensor(key)

    def largest_file_bytes(self) -> int:
        """Size of the largest weight file (the default shard size when converting back)."""
        return max((self.model_dir / f).stat().st_size for f in set(self.weight_map.values()))


class HFWriter:
    """Write tensors into safetensors shards of at most ``max_shard_bytes``, flushing as they fill.

    Shards are named ``model-0000i-of-0000N.safetensors`` with an index once the count is known
    (``model.safetensors`` when one shard suffices), as ``save_pretrained`` names them.
    """

    def __init__(self, out_dir: Path, max_shard_bytes: int = 5 * 1024**3) -> None:
        self.out_dir = out_dir
        self.max_shard_bytes = max_shard_bytes
        self._buffer: dict[str, Any] = {}
        self._buffer_bytes = 0
        self._files: list[tuple[str, list[str]]] = []
        self.total_bytes = 0

    def add(self, key: str, tensor: Any) -> None:
        """Queue one tensor (copied, so it owns its memory) and flush the shard when it is full."""
        size = tensor.numel() * tensor.element_size()
        if self._buffer and self._buffer_bytes + size > self.max_shard_bytes:
            self._flush()
        self._buffer[key] = tensor.contiguous().clone()
        self._buffer_bytes += size
        self.total_bytes += size

    def _flush(self) -> None:
        from safetensors.torch import save_file

        name = f"shard-{len(self._files):05d}.tmp"
        save_file(self._buffer, str(self.out_dir / name), metadata={"format": "pt"})
        self._files.append((name, list(self._buffer)))
        self._buffer = {}
        self._buffer_bytes = 0

    def close(self) -> list[str]:
        """Flush the last shard, give shards their final names and write the index; return the file names."""
        if self._buffer or not self._files:
            self._flush()
        n = len(self._files)
        if n == 1:
            os.replace(self.out_dir / self._files[0][0], self.out_dir / "model.safetensors")
            return ["model.safetensors"]
        weight_map: dict[str, str] = {}
        names = []
        for i, (tmp, keys) in enumerate(self._files, start=1):
            final = f"model-{i:05d}-of-{n:05d}.safetensors"
            os.replace(self.out_dir / tmp, self.out_dir / final)
            weight_map.update(dict.fromkeys(keys, final))
            names.append(final)
        index = {"metadata": {"total_size": self.total_bytes}, "weight_map": weight_map}
        (self.out_dir / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")
        return names
