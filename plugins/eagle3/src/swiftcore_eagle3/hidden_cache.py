"""The target's hidden states cached on disk for ``swiftcore train --recipe eagle3 --hidden-states-cache DIR``.

The target runs once per training sample; what the draft reads from it (the ``aux`` hidden states and the output
head's input, :class:`~swiftcore_eagle3.draft.TargetFeatures`) is written to ``DIR/FINGERPRINT/`` as one
safetensors file per sample, and every step of every epoch, and every later run with the same fingerprint, reads
them back instead of running the target. The fingerprint covers the target checkpoint (its ``*.json`` and weight
files' contents), the encoded samples' token ids, the hidden-state layers and the dtype: another checkpoint, dataset,
template or ``--max-length`` gives another directory.

``FINGERPRINT/swiftcore_hidden_states.json`` (the manifest) lists the files swiftcore wrote there with their sha256;
it is written first (``complete: false``) and again when every file is written. A cache whose manifest is
unreadable or incomplete, or whose files are missing or do not match their sha256, is rebuilt: the files the
manifest lists are deleted (nothing else in the directory), then written again. A fingerprint directory holding
files but no manifest is refused (swiftcore did not write them).
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

from swiftcore.api import SwiftcoreError

__all__ = ["MANIFEST", "HiddenStateCache", "fingerprint"]

log = logging.getLogger(__name__)

MANIFEST = "swiftcore_hidden_states.json"
FORMAT = "swiftcore-eagle3-hidden-states/1"
_WEIGHTS = (".safetensors", ".bin", ".pt", ".json")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fingerprint(model_dir: str | Path, samples: list[dict[str, Any]], aux_layer_ids: list[int], dtype: str) -> str:
    """The cache key of ``samples`` (encoded chats) run through the checkpoint in ``model_dir``: a sha256 over the
    checkpoint's config and weight files, the samples' token ids, ``aux_layer_ids`` and ``dtype`` (24 hex digits).

    Raises:
        SwiftcoreError: ``model_dir`` is not a local directory (a hub name: download it first).
    """
    root = Path(model_dir)
    if not root.is_dir():
        raise SwiftcoreError(
            f"--hidden-states-cache needs --model to be a local checkpoint directory ({str(model_dir)!r} is not): "
            "its files are part of the cache's fingerprint; download it first"
        )
    digest = hashlib.sha256(json.dumps({"format": FORMAT, "aux": list(aux_layer_ids), "dtype": dtype}).encode())
    for path in sorted(p for p in root.iterdir() if p.is_file() and p.name.endswith(_WEIGHTS)):
        digest.update(path.name.encode())
        digest.update(_sha256(path).encode())
    for sample in samples:
        digest.update(json.dumps(list(sample["input_ids"])).encode())
        digest.update(b"\n")
    return digest.hexdigest()[:24]


class HiddenStateCache:
    """The cached target features of one fingerprint under ``directory``.

    Args:
        directory: ``--hidden-states-cache DIR``.
        key: the :func:`fingerprint` of the checkpoint and samples.

    Attributes:
        root: ``directory / key``, where the files are.
        computed: how many samples' features :meth:`prepare` computed with the target (0 when all were cached).
    """

    def __init__(self, directory: str | Path, key: str) -> None:
        self.root = Path(directory) / key
        self.key = key
        self.computed = 0

    @property
    def manifest(self) -> Path:
        """The manifest's path."""
        return self.root / MANIFEST

    def _file(self, index: int) -> Path:
        return self.root / f"sample-{index:06d}.safetensors"

    def _write_manifest(self, count: int, hashes: dict[str, str] | None) -> None:
        files = [self._file(i).name for i in range(count)]
        data = {"format": FORMAT, "fingerprint": self.key, "samples": count, "files": files}
        data |= {"complete": hashes is not None, "sha256": hashes or {}}
        tmp = self.manifest.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
        tmp.replace(self.manifest)

    def _problem(self, count: int) -> tuple[str | None, list[str]]:
        """What is wrong with the cache on disk (None when it is whole), and the files its manifest lists."""
        try:
            data = json.loads(self.manifest.read_text(encoding="utf-8"))
            files = [str(f) for f in data["files"]]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            return f"unreadable manifest ({exc})", []
        if data.get("format") != FORMAT or data.get("fingerprint") != self.key or data.get("samples") != count:
            return "a manifest of another format, fingerprint or sample count", files
        if not data.get("complete"):
            return "an unfinished build", files
        for name in files:
            path = self.root / name
            if not path.is_file():
                return f"{name} is missing", files
            if _sha256(path) != data["sha256"].get(name):
                return f"{name} does not match its sha256", files
        return None, files

    def _clear(self, files: list[str]) -> None:
        """Delete the files swiftcore wrote (``files``, from the manifest, and the manifest); nothing else."""
        for name in files:
            path = self.root / Path(name).name  # names only: nothing outside the cache directory
            if path.name.startswith("sample-") and path.suffix == ".safetensors":
                path.unlink(missing_ok=True)
        self.manifest.unlink(missing_ok=True)
        self.manifest.with_suffix(".tmp").unlink(missing_ok=True)

    def prepare(self, target: Any, samples: list[dict[str, Any]], aux_layer_ids: list[int]) -> None:
        """Make the cache whole for ``samples``: nothing to do when it is; else (re)compute every sample's features
        with ``target`` and write them.

        Raises:
            SwiftcoreError: the fingerprint directory holds files but no manifest (not written by swiftcore).
        """
        import torch
        from safetensors.torch import save_file

        from swiftcore_eagle3.draft import target_features

        if self.manifest.exists():
            problem, files = self._problem(len(samples))
            if problem is None:
                log.info("eagle3: target hidden states read from %s (%d samples)", self.root, len(samples))
                return
            log.warning("eagle3: hidden-states cache %s is unusable (%s); building it again", self.root, problem)
            self._clear(files)
        elif self.root.is_dir() and any(self.root.iterdir()):
            raise SwiftcoreError(
                f"--hidden-states-cache: {self.root} holds files but no {MANIFEST}, so swiftcore did not write them; "
                "remove them or give another --hidden-states-cache directory"
            )
        self.root.mkdir(parents=True, exist_ok=True)
        self._write_manifest(len(samples), None)
        hashes: dict[str, str] = {}
        device = next(target.parameters()).device
        for i, sample in enumerate(samples):
            ids = torch.tensor([list(sample["input_ids"])], dtype=torch.long, device=device)
            features = target_features(target, ids, aux_layer_ids)
            path = self._file(i)
            save_file({"aux": features.aux[0].contiguous().cpu(), "last": features.last[0].contiguous().cpu()}, path)
            hashes[path.name] = _sha256(path)
            self.computed += 1
        self._write_manifest(len(samples), hashes)
        log.info("eagle3: target hidden states of %d samples written to %s", len(samples), self.root)

    def read(self, index: int, length: int) -> tuple[Any, Any]:
        """Sample ``index``'s ``(aux, last)`` (``[1, T, ...]``), checked to cover its ``length`` tokens.

        Raises:
            SwiftcoreError: the file is unreadable or of another length (changed since :meth:`prepare`).
        """
        from safetensors.torch import load_file

        path = self._file(index)
        try:
            state = load_file(str(path))
            aux, last = state["aux"], state["last"]
        except Exception as exc:  # safetensors raises its own errors for a damaged file
            raise SwiftcoreError(
                f"--hidden-states-cache: {path} is unreadable ({exc}); run again to rebuild the cache"
            ) from exc
        if aux.shape[0] != length or last.shape[0] != length:
            raise SwiftcoreError(
                f"--hidden-states-cache: {path} covers {aux.shape[0]} tokens, the sample {length}; run again to "
                "rebuild the cache"
            )
        return aux[None], last[None]
