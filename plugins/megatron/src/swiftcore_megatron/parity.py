"""Logit parity: the transformers model and the converted megatron-core model on the same tokens, in float32."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swiftcore_megatron.bridge import MegatronBridge

__all__ = [
    "DEFAULT_TOLERANCE",
    "ParityReport",
    "check_parity",
    "check_parity_tp",
    "compare_logits",
    "hf_logits",
    "hf_model_class",
    "sample_tokens",
]

#: Max abs logit difference accepted (float32, CPU); the issue's acceptance bound.
DEFAULT_TOLERANCE = 1e-5


@dataclass(frozen=True)
class ParityReport:
    """How far two models' logits are apart.

    Attributes:
        max_abs: largest absolute logit difference.
        mean_abs: mean absolute logit difference.
        argmax_agreement: fraction of positions whose argmax token agrees.
        positions: positions compared (batch x sequence).
        tolerance: the bound ``ok`` checks ``max_abs`` against.
    """

    max_abs: float
    mean_abs: float
    argmax_agreement: float
    positions: int
    tolerance: float = DEFAULT_TOLERANCE

    @property
    def ok(self) -> bool:
        """True when ``max_abs <= tolerance`` and every argmax agrees."""
        return self.max_abs <= self.tolerance and self.argmax_agreement == 1.0

    def __str__(self) -> str:
        verdict = "OK" if self.ok else "FAILED"
        return (
            f"logit parity {verdict}: max abs diff {self.max_abs:.3e} (tolerance {self.tolerance:.0e}), "
            f"mean abs diff {self.mean_abs:.3e}, argmax agreement {self.argmax_agreement:.2%} "
            f"over {self.positions} positions"
        )


def sample_tokens(vocab_size: int, *, batch: int = 2, seq: int = 16, seed: int = 0) -> Any:
    """Deterministic random token ids ``[batch, seq]`` below ``vocab_size``."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab_size, (batch, seq), generator=gen)


def hf_model_class(config: dict[str, Any]) -> Any:
    """The transformers class named by ``config["architectures"]`` (else ``AutoModelForCausalLM``).

    Multimodal checkpoints (an ASR model with its audio tower) load with their own class; their text
    logits are what a language-model bridge reproduces.
    """
    import transformers

    for arch in config.get("architectures") or ():
        cls = getattr(transformers, arch, None)
        if cls is not None:
            return cls
    return transformers.AutoModelForCausalLM


def hf_logits(model_dir: str | os.PathLike[str], input_ids: Any) -> Any:
    """Float32 logits of the transformers model saved in ``model_dir`` on text tokens (plain positions, no mask)."""
    import json

    import torch

    config = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
    model = hf_model_class(config).from_pretrained(model_dir, dtype=torch.float32)
    model.eval()
    with torch.no_grad():
        return model(input_ids=input_ids).logits.float()


def compare_logits(reference: Any, other: Any, tolerance: float = DEFAULT_TOLERANCE) -> ParityReport:
    """Compare two ``[batch, seq, vocab]`` logit tensors."""
    diff = (reference - other).abs()
    agree = (reference.argmax(-1) == other.argmax(-1)).float()
    return ParityReport(
        max_abs=float(diff.max()),
        mean_abs=float(diff.mean()),
        argmax_agreement=float(agree.mean()),
        positions=int(agree.numel()),
        tolerance=tolerance,
    )


def check_parity(
    hf_dir: str | os.PathLike[str],
    bridge: MegatronBridge,
    mcore_state: dict[str, Any],
    *,
    input_ids: Any = None,
    tolerance: float = DEFAULT_TOLERANCE,
) -> ParityReport:
    """Build the megatron-core model (TP 1, this process), load ``mcore_state``, compare with transformers.

    Args:
        hf_dir: the HF checkpoint (the reference).
        bridge: the bridge that describes the mcore model.
        mcore_state: a TP-1 state dict (:func:`~swiftcore_megatron.convert.load_mcore_state`).
        input_ids: tokens (default: :func:`sample_tokens` over the vocabulary).
        tolerance: max abs difference accepted.
    """
    import torch

    from swiftcore_megatron.runtime import init_model_parallel, load_into_model, mcore_logits

    if input_ids is None:
        input_ids = sample_tokens(int(bridge.get("vocab_size")))
    init_model_parallel(1, 1)
    model = bridge.build_model(params_dtype=torch.float32)
    load_into_model(model, {k: v.float() if v.is_floating_point() else v for k, v in mcore_state.items()})
    ours = mcore_logits(model, input_ids)
    del model
    reference = hf_logits(Path(hf_dir), input_ids)
    return compare_logits(reference, ours, tolerance)


def _tp_worker(
    rank: int,
    tp: int,
    port: int,
    hf_dir: str,
    mcore_dir: str,
    bridge: MegatronBridge,
    input_ids: Any,
    tolerance: float,
    result_file: str,
) -> None:
    """One tensor-parallel rank of :func:`check_parity_tp` (run by ``torch.multiprocessing.spawn``)."""
    import json

    import torch

    from swiftcore_megatron.checkpoint import rank_file, read_metadata
    from swiftcore_megatron.convert import load_mcore_state
    from swiftcore_megatron.runtime import init_model_parallel, load_into_model, mcore_logits

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    init_model_parallel(tp, 1, rank=rank, world_size=tp)
    meta = read_metadata(Path(mcore_dir))
    if meta["tp"] == tp and meta["ep"] == 1:
        # The rank's own file, exactly as Megatron training would load it.
        state = torch.load(rank_file(Path(mcore_dir), rank, 0, 1), map_location="cpu", weights_only=True)["model"]
    else:
        state = load_mcore_state(mcore_dir, bridge, tp=tp, tp_rank=rank)
    model = bridge.build_model(tp=tp, params_dtype=torch.float32)
    load_into_model(model, {k: v.float() if v.is_floating_point() else v for k, v in state.items()})
    ours = mcore_logits(model, input_ids)
    if rank == 0:
        from swiftcore.api import load_plugins

        # The command's plugin set (SWIFTCORE_PLUGINS, inherited), as in the process that spawned this one, so what a
        # model plugin sets up on load holds for the transformers reference too (Qwen3.5's: no CUDA-kernel advice on a
        # CPU, issue 53).
        load_plugins()
        report = compare_logits(hf_logits(hf_dir, input_ids), ours, tolerance)
        Path(result_file).write_text(json.dumps(report.__dict__), encoding="utf-8")
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


def check_parity_tp(
    hf_dir: str | os.PathLike[str],
    mcore_dir: str | os.PathLike[str],
    bridge: MegatronBridge,
    tp: int,
    *,
    input_ids: Any = None,
    tolerance: float = DEFAULT_TOLERANCE,
) -> ParityReport:
    """Logit parity at tensor parallel ``tp``: ``tp`` local processes (gloo on CPU) run the mcore model.

    Each rank loads its own rank file when the checkpoint was written at this ``tp`` (else a
    resharded copy); rank 0 compares the gathered logits with transformers.
    """
    import json
    import tempfile

    import torch.multiprocessing as mp

    from swiftcore_megatron.runtime import free_port

    if input_ids is None:
        input_ids = sample_tokens(int(bridge.get("vocab_size")))
    with tempfile.TemporaryDirectory() as tmp:
        result_file = str(Path(tmp) / "parity.json")
        mp.spawn(
            _tp_worker,
            args=(tp, free_port(), str(hf_dir), str(mcore_dir), bridge, input_ids, tolerance, result_file),
            nprocs=tp,
            join=True,
        )
        return ParityReport(**json.loads(Path(result_file).read_text(encoding="utf-8")))
