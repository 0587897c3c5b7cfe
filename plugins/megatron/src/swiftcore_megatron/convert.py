"""The conversion driver: HF safetensors <-> Megatron-core per-rank checkpoints, through a bridge's rules.

Both directions walk the bridge's :class:`~swiftcore_megatron.mapping.Rule` list, so a mapping is
written once. Tensors are read and written one at a time (``safe_open`` on the HF side,
:mod:`swiftcore_megatron.torch_zip` on the Megatron side), so peak memory stays near one HF shard
plus the largest tensor; the output is written into a temporary directory renamed at the end (see
:mod:`swiftcore._atomic`). The checkpoint layout and why it was chosen are described in
:mod:`swiftcore_megatron.checkpoint`.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swiftcore.api.models import atomic_output_dir, check_output_dir
from swiftcore_megatron.bridge import MegatronBridge
from swiftcore_megatron.checkpoint import (
    HF_SUBDIR,
    PASSTHROUGH_SUBDIR,
    HFReader,
    HFWriter,
    copy_hf_side_files,
    rank_file,
    read_metadata,
    write_metadata,
)
from swiftcore_megatron.errors import CheckpointError
from swiftcore_megatron.mapping import Rule
from swiftcore_megatron.memory import pin_mmap_threshold
from swiftcore_megatron.pipeline import Stage, stages
from swiftcore_megatron.torch_zip import LazyTorchFile, save_streaming

__all__ = [
    "ConversionResult",
    "hf_to_mcore",
    "load_mcore_state",
    "mcore_to_hf",
    "open_ranks",
    "rank_producers",
    "tp_shards",
    "write_checkpoint_extras",
]

FORMAT = "megatron-torch-legacy"


@dataclass
class ConversionResult:
    """What a conversion wrote.

    Attributes:
        out_dir: the finished output directory.
        tensors: tensors written (over all ranks).
        bytes: bytes of tensor data written.
        seconds: wall time.
        files: the weight files written, relative to ``out_dir``.
    """

    out_dir: Path
    tensors: int = 0
    bytes: int = 0
    seconds: float = 0.0
    files: list[str] = field(default_factory=list)


def _check_coverage(bridge: MegatronBridge, rules: list[Rule], available: set[str], where: str) -> None:
    """Every HF tensor is used by exactly one rule and every rule's tensors exist."""
    wanted = [k for r in rules for k in r.hf]
    seen: set[str] = set()
    twice = sorted({k for k in wanted if k in seen or seen.add(k)})  # type: ignore[func-returns-value]  # add() marks
    if twice:
        raise CheckpointError(
            f"{type(bridge).__name__}: HF tensors {', '.join(twice[:8])} are used by more than one rule; "
            "a round trip would write them twice. Fix the bridge's rules"
        )
    missing = sorted(set(wanted) - available)
    if missing:
        shown = ", ".join(missing[:8]) + (f" and {len(missing) - 8} more" if len(missing) > 8 else "")
        raise CheckpointError(
            f"{where}: the {type(bridge).__name__} mapping needs tensors the checkpoint lacks: {shown}. "
            + bridge.missing_tensors_hint(missing)
        )
    extra = sorted(available - set(wanted))
    if extra:
        shown = ", ".join(extra[:8]) + (f" and {len(extra) - 8} more" if len(extra) > 8 else "")
        raise CheckpointError(
            f"{where}: the {type(bridge).__name__} mapping has no rule for tensors {shown}; converting would "
            "drop them. Use a bridge that knows this architecture"
        )


def _rank_tensor(rule: Rule, reader: HFReader, tp: int, tp_rank: int) -> Any:
    parts = [reader.get(k) for k in rule.hf]
    full = rule.fuse.to_mcore(parts)
    piece = rule.shard.split(full, tp, what=rule.mcore)[tp_rank].contiguous()
    # The writer saves a tensor's whole storage and frees it once written. So a tensor still backed by the
    # memory-mapped checkpoint, or one slice of a larger tensor, is copied first; one the fuse or the split built
    # anew and alone (q/k/v or gate/up at TP 1, gate/up's per-rank halves) is written as it is.
    storage = piece.untyped_storage()
    mapped = {t.untyped_storage().data_ptr() for t in parts}
    alone = storage.nbytes() == piece.numel() * piece.element_size()
    return piece if alone and storage.data_ptr() not in mapped else piece.clone()


def rank_producers(
    bridge: MegatronBridge,
    reader: HFReader,
    *,
    tp: int,
    ep: int,
    tp_rank: int,
    ep_rank: int,
    stage: Stage | None = None,
) -> dict[str, Callable[[], Any]]:
    """``mcore key -> function producing that tensor`` for one rank; HF tensors are read when it is called.

    Args:
        bridge: the bridge whose rules are applied.
        reader: the open HF checkpoint.
        tp: tensor-parallel size; ``tp_rank`` the rank to produce.
        ep: expert-parallel size; ``ep_rank`` the rank to produce.
        stage: the rank's pipeline stage: only its tensors, under its names (default: the whole model).
    """
    experts = bridge.num_experts()
    local = experts // ep if experts else 1
    return {
        name: functools.partial(_rank_tensor, rule, reader, tp, tp_rank)
        for rule in bridge.rules()
        if rule.expert is None or rule.expert // local == ep_rank
        for name in (stage.local_keys(rule.mcore_key(local)) if stage else [rule.mcore_key(local)])
    }


def hf_to_mcore(
    model_dir: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    bridge: MegatronBridge,
    *,
    tp: int = 1,
    ep: int = 1,
    bridge_name: str | None = None,
) -> ConversionResult:
    """Convert an HF safetensors checkpoint into a Megatron checkpoint with ``tp x ep`` rank files.

    Args:
        model_dir: a ``save_pretrained`` directory.
        out_dir: the Megatron checkpoint to create (must not exist, or be empty).
        bridge: the bridge built from the checkpoint's config.
        tp: tensor-parallel size.
        ep: expert-parallel size.
        bridge_name: recorded in the metadata (for ``--to-hf``).

    Raises:
        ParallelismError: when ``tp``/``ep`` do not divide the model.
        CheckpointError: missing shards or tensors, tensors no rule maps, or an existing output.
    """
    start = time.perf_counter()
    pin_mmap_threshold()
    check_output_dir(out_dir)
    bridge.validate_parallelism(tp, ep)
    model_dir = Path(model_dir)
    rules = bridge.rules()
    result = ConversionResult(Path(out_dir).expanduser().resolve())
    with HFReader(model_dir) as reader:
        passthrough = [k for k in reader.keys() if bridge.is_passthrough(k)]
        _check_coverage(bridge, rules, set(reader.keys()) - set(passthrough), str(model_dir))
        dtypes = sorted({str(reader.get(rules[0].hf[0]).dtype).removeprefix("torch.")})
        with atomic_output_dir(out_dir) as tmp:
            for ep_rank in range(ep):
                for tp_rank in range(tp):
                    state = rank_producers(bridge, reader, tp=tp, ep=ep, tp_rank=tp_rank, ep_rank=ep_rank)
                    path = rank_file(tmp, tp_rank, ep_rank, ep)
                    path.parent.mkdir(parents=True, exist_ok=True)
                    result.bytes += save_streaming(path, state, {"checkpoint_version": 3.0, "iteration": 0})
                    result.tensors += len(state)
                    result.files.append(str(path.relative_to(tmp)))
            _write_extras(tmp, model_dir, reader, bridge, tp=tp, ep=ep, bridge_name=bridge_name, dtype=dtypes[0])
    result.seconds = time.perf_counter() - start
    return result


def write_checkpoint_extras(
    root: str | os.PathLike[str],
    model_dir: str | os.PathLike[str],
    bridge: MegatronBridge,
    *,
    tp: int,
    ep: int,
    pp: int = 1,
    bridge_name: str | None = None,
    dtype: str = "float32",
) -> None:
    """Write what a Megatron checkpoint holds beside its rank files (the HF config and tokenizer, the tensors
    carried through unchanged, swiftcore's metadata), so that :func:`mcore_to_hf` converts it back.

    For rank files written by someone else than :func:`hf_to_mcore`: a training run saving its sharded model
    (``pp`` pipeline stages: a file per stage, in the stages' own names).
    """
    with HFReader(Path(model_dir)) as reader:
        _write_extras(
            Path(root), Path(model_dir), reader, bridge, tp=tp, ep=ep, pp=pp, bridge_name=bridge_name, dtype=dtype
        )


def _write_extras(
    root: Path,
    model_dir: Path,
    reader: HFReader,
    bridge: MegatronBridge,
    *,
    tp: int,
    ep: int,
    bridge_name: str | None,
    dtype: str,
    pp: int = 1,
) -> None:
    passthrough = [k for k in reader.keys() if bridge.is_passthrough(k)]
    copy_hf_side_files(model_dir, root / HF_SUBDIR)
    if passthrough:  # e.g. an audio tower that stays a Hugging Face module
        (root / PASSTHROUGH_SUBDIR).mkdir()
        writer = HFWriter(root / PASSTHROUGH_SUBDIR, reader.largest_file_bytes())
        for key in passthrough:
            writer.add(key, reader.get(key))
        writer.close()
    write_metadata(
        root,
        {
            "format": FORMAT,
            "bridge": bridge_name or type(bridge).__name__,
            "model_type": bridge.hf_config.get("model_type"),
            "passthrough_tensors": len(passthrough),
            "tp": tp,
            "ep": ep,
            "pp": pp,
            "dtype": dtype,
            "tensors": len(bridge.rules()),
            "hf_shard_bytes": reader.largest_file_bytes(),
        },
    )


def open_ranks(mcore_dir: Path, meta: dict[str, Any], bridge: MegatronBridge) -> dict[tuple[int, int], Any]:
    """Every rank file of a checkpoint, opened lazily, by ``(tp_rank, ep_rank)``: only the pickled structure is
    read, tensors on demand (:func:`tp_shards`). Under pipeline parallelism the stage files of a rank are read as
    one file of the whole model's tensor names (:class:`_StagedRank`).

    Args:
        mcore_dir: the checkpoint directory (its ``release/`` or ``iter_*`` rank files).
        meta: its :func:`~swiftcore_megatron.checkpoint.read_metadata`.
        bridge: the family's bridge (its pipeline stages name the layers).
    """
    pp = meta.get("pp", 1)
    ranks = [(tp_rank, ep_rank) for ep_rank in range(meta["ep"]) for tp_rank in range(meta["tp"])]
    if pp == 1:
        return {(t, e): LazyTorchFile(rank_file(mcore_dir, t, e, meta["ep"])) for t, e in ranks}
    every = stages(bridge, pp)
    return {
        (t, e): _StagedRank(
            [LazyTorchFile(rank_file(mcore_dir, t, e, meta["ep"], pp_rank=s.rank, pp=pp)) for s in every], every
        )
        for t, e in ranks
    }


class _StagedRank:
    """The pipeline stages' files of one tensor/expert-parallel rank, read as one file of the whole model's
    tensor names (``obj["model"]``, ``load``: what :class:`LazyTorchFile` offers the readers)."""

    def __init__(self, files: list[LazyTorchFile], every: list[Stage]) -> None:
        self.path = files[0].path.parent.parent
        model: dict[str, Any] = {}
        for file, stage in zip(files, every, strict=True):
            for local, handle in _model_state(file).items():
                key = stage.global_key(local)
                if key is not None:  # the last stage's copy of a tied embedding
                    model[key] = (file, handle)
        self.obj = {"model": model}

    def load(self, handle: tuple[LazyTorchFile, Any]) -> Any:
        """Read one tensor from the stage file that holds it."""
        file, inner = handle
        return file.load(inner)


def tp_shards(files: dict[tuple[int, int], Any], key: str, tp: int, ep_rank: int = 0) -> list[Any]:
    """Tensor ``key`` (the whole model's name) of every tensor-parallel rank of ``ep_rank``, in rank order, read
    from the files :func:`open_ranks` opened.

    Raises:
        CheckpointError: a rank file lacks the tensor.
    """
    shards = []
    for tp_rank in range(tp):
        file = files[(tp_rank, ep_rank)]
        handle = _model_state(file).get(key)
        if handle is None:
            raise CheckpointError(f"{file.path}: tensor {key!r} is missing")
        shards.append(file.load(handle))
    return shards


def _merged(rule: Rule, files: dict[tuple[int, int], LazyTorchFile], meta: dict[str, Any], local: int) -> Any:
    """The full mcore tensor of ``rule``, merged over TP ranks (from its expert-parallel rank)."""
    ep_rank = rule.expert // local if rule.expert is not None else 0
    key = rule.mcore_key(local)
    return rule.shard.merge(tp_shards(files, key, meta["tp"], ep_rank), what=key)


def _model_state(file: LazyTorchFile) -> dict[str, Any]:
    if not isinstance(file.obj, dict) or not isinstance(file.obj.get("model"), dict):
        raise CheckpointError(f"{file.path}: no 'model' state dict (not a Megatron torch checkpoint)")
    return file.obj["model"]


def _check_mcore_coverage(rules: list[Rule], files: dict[tuple[int, int], LazyTorchFile], local: int) -> None:
    known = {r.mcore_key(local) for r in rules}
    for (tp_rank, ep_rank), file in files.items():
        extra = sorted(k for k in _model_state(file) if k not in known and not k.endswith("._extra_state"))
        if extra:
            raise CheckpointError(
                f"rank tp={tp_rank} ep={ep_rank} holds tensors no rule maps back to HF: {', '.join(extra[:8])}"
            )


def load_mcore_state(
    mcore_dir: str | os.PathLike[str], bridge: MegatronBridge, *, tp: int = 1, tp_rank: int = 0
) -> dict[str, Any]:
    """Read a Megatron checkpoint and reshard it to ``tp`` (expert parallel 1): one rank's state dict.

    Used to load a checkpoint written at any TP/EP into a model built at another (parity checks).
    """
    root = Path(mcore_dir)
    meta = read_metadata(root)
    files = open_ranks(root, meta, bridge)
    experts = bridge.num_experts()
    local_in = experts // meta["ep"] if experts else 1
    local_out = experts if experts else 1
    out = {}
    for rule in bridge.rules():
        full = _merged(rule, files, meta, local_in)
        out[rule.mcore_key(local_out)] = rule.shard.split(full, tp, what=rule.mcore)[tp_rank].clone()
    return out


def mcore_to_hf(
    mcore_dir: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    bridge: MegatronBridge,
    *,
    max_shard_bytes: int | None = None,
) -> ConversionResult:
    """Convert a Megatron checkpoint written by :func:`hf_to_mcore` back to a ``save_pretrained`` directory.

    The HF config, tokenizer and generation config saved beside the Megatron weights are copied, so
    transformers loads the result directly. ``max_shard_bytes`` defaults to the largest shard of the
    HF checkpoint the Megatron one was made from (5 GiB when unknown).

    Raises:
        CheckpointError: a missing rank file, a missing tensor, or tensors no rule maps.
    """
    start = time.perf_counter()
    pin_mmap_threshold()
    root = Path(mcore_dir)
    check_output_dir(out_dir)
    meta = read_metadata(root)
    files = open_ranks(root, meta, bridge)
    experts = bridge.num_experts()
    local = experts // meta["ep"] if experts else 1
    rules = bridge.rules()
    _check_mcore_coverage(rules, files, local)
    if max_shard_bytes is None:
        max_shard_bytes = int(meta.get("hf_shard_bytes") or 5 * 1024**3)
    result = ConversionResult(Path(out_dir).expanduser().resolve())
    with atomic_output_dir(out_dir) as tmp:
        writer = HFWriter(tmp, max_shard_bytes)
        for rule in rules:
            full = _merged(rule, files, meta, local)
            for key, tensor in zip(rule.hf, rule.fuse.to_hf(full), strict=True):
                writer.add(key, tensor)
                result.tensors += 1
        if meta.get("passthrough_tensors"):
            with HFReader(root / PASSTHROUGH_SUBDIR) as carried:
                for key in carried.keys():
                    writer.add(key, carried.get(key))
                    result.tensors += 1
        result.files = writer.close()
        result.bytes = writer.total_bytes
        hf_side = root / HF_SUBDIR
        if hf_side.is_dir():
            copy_hf_side_files(hf_side, tmp)
    result.seconds = time.perf_counter() - start
    return result
