"""Parity harness: the same tiny model and batch on one process (plain sdpa) and on SP ranks (gloo).

Used by this distribution's tests, and reusable by whoever wires sequence parallelism into training.
Workers live here (not in a test file) because ``torch.multiprocessing.spawn`` re-imports the worker's
module in every child, which a pytest-collected file cannot be.
"""

from __future__ import annotations

import itertools
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "MODEL_KINDS",
    "PER_SAMPLE_REFERENCE",
    "Case",
    "free_port",
    "reference_loss_and_grads",
    "run_sp_cases",
    "sample_batch",
    "tiny_model",
]

#: Tiny random models: GQA (kv heads split), MQA (kv heads repeated), Qwen3 sliding window, Gemma3, and
#: Qwen3.5 / Qwen3.5-MoE (a gated DeltaNet linear-attention layer, then full attention).
MODEL_KINDS = ("qwen3", "qwen3_mqa", "qwen3_sliding", "gemma3", "qwen3_2heads", "qwen3_5", "qwen3_5_moe")
#: Kinds whose packed rows the reference runs sample by sample (their layers do not honour packed boundaries
#: on one process without their family plugin's patch; one sample at a time is what "exact" means).
PER_SAMPLE_REFERENCE = frozenset({"qwen3_5", "qwen3_5_moe"})


@dataclass(frozen=True)
class Case:
    """One SP run: model kind, mode, ring implementation, batch kind (``padded`` or ``packed``)."""

    model: str
    mode: str
    batch: str
    ring_impl: str = "p2p"
    ulysses_size: int | None = None
    sp_size: int | None = None  # default: the whole world; smaller leaves data-parallel groups
    checkpointing: bool = False  # train mode with gradient checkpointing (attention re-run in backward)

    @property
    def name(self) -> str:
        """File-safe id, e.g. ``qwen3-ring-p2p-packed``."""
        impl = f"-{self.ring_impl}" if self.mode != "ulysses" else ""
        sp = f"-sp{self.sp_size}" if self.sp_size else ""
        ckpt = "-ckpt" if self.checkpointing else ""
        return f"{self.model}-{self.mode}{impl}-{self.batch}{sp}{ckpt}"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (for a local gloo rendezvous)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tiny_model(kind: str, seed: int = 0) -> Any:
    """A float32 random-init causal LM of ``kind`` (:data:`MODEL_KINDS`), attention ``sdpa``, in eval mode."""
    import torch
    import transformers

    common = {
        "vocab_size": 128,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "max_position_embeddings": 128,
    }
    if kind == "qwen3":
        config, cls = transformers.Qwen3Config(**common), transformers.Qwen3ForCausalLM
    elif kind == "qwen3_mqa":
        config, cls = transformers.Qwen3Config(**{**common, "num_key_value_heads": 1}), transformers.Qwen3ForCausalLM
    elif kind == "qwen3_2heads":
        kw = {**common, "num_attention_heads": 2, "num_key_value_heads": 1}
        config, cls = transformers.Qwen3Config(**kw), transformers.Qwen3ForCausalLM
    elif kind == "qwen3_sliding":
        # Layer 1 slides over 3 tokens: windows cross the shard border at S=16 over 2 ranks.
        kw = {**common, "use_sliding_window": True, "sliding_window": 3, "max_window_layers": 1}
        config, cls = transformers.Qwen3Config(**kw), transformers.Qwen3ForCausalLM
    elif kind == "gemma3":
        kw = {
            **common,
            "sliding_window": 4,
            "layer_types": ["sliding_attention", "full_attention"],
            "query_pre_attn_scalar": 16,
        }
        config, cls = transformers.Gemma3TextConfig(**kw), transformers.Gemma3ForCausalLM
    elif kind in ("qwen3_5", "qwen3_5_moe"):
        kw = {
            **common,
            "num_hidden_layers": 2,
            "layer_types": ["linear_attention", "full_attention"],
            "linear_num_key_heads": 2,
            "linear_num_value_heads": 4,
            "linear_key_head_dim": 16,
            "linear_value_head_dim": 16,
        }
        if kind == "qwen3_5":
            config, cls = transformers.Qwen3_5TextConfig(**kw), transformers.Qwen3_5ForCausalLM
        else:
            moe = {"moe_intermediate_size": 32, "shared_expert_intermediate_size": 32, "num_experts": 4}
            config = transformers.Qwen3_5MoeTextConfig(**kw, **moe, num_experts_per_tok=2)
            cls = transformers.Qwen3_5MoeForCausalLM
    else:
        raise ValueError(f"unknown tiny model kind {kind!r}; choose one of {', '.join(MODEL_KINDS)}")
    torch.manual_seed(seed)
    model = cls(config).float().eval()
    model.set_attn_implementation("sdpa")
    return model


def sample_batch(kind: str, vocab_size: int = 128, *, seq: int = 16, seed: int = 0) -> dict[str, Any]:
    """A deterministic batch: ``padded`` (2 rows, right padding, a masked prompt) or ``packed``.

    ``packed`` is one row of three samples (5, 7 and 4 tokens) with position ids restarting at 0 and the
    first label of every sample -100 (as transformers' ``DataCollatorWithFlattening`` writes them).
    """
    import torch

    gen = torch.Generator().manual_seed(seed)
    if kind == "padded":
        ids = torch.randint(1, vocab_size, (2, seq), generator=gen)
        mask = torch.ones(2, seq, dtype=torch.long)
        mask[1, 11:] = 0  # the second row is 11 tokens long
        ids = ids.masked_fill(mask == 0, 0)
        labels = ids.masked_fill(mask == 0, -100)
        labels[0, :3] = -100  # a prompt without loss: shards hold different label counts
        return {"input_ids": ids, "attention_mask": mask, "labels": labels}
    if kind == "packed":
        lengths = (5, 7, seq - 12)
        ids = torch.randint(1, vocab_size, (1, seq), generator=gen)
        pos = torch.cat([torch.arange(n) for n in lengths]).unsqueeze(0)
        labels = ids.clone().masked_fill(pos == 0, -100)
        return {"input_ids": ids, "position_ids": pos, "labels": labels}
    raise ValueError(f"unknown batch kind {kind!r}; choose padded or packed")


def reference_loss_and_grads(
    model: Any, batch: dict[str, Any], per_sample: bool = False
) -> tuple[float, dict[str, Any]]:
    """Single-process loss and parameter gradients, with transformers' own loss (its internal shift).

    ``per_sample``: for a packed batch, run each sample alone (its own forward) and weight the samples'
    losses by their label tokens: the definition of exact packed training, for models whose layers do not
    see packed boundaries on their own.
    """
    import torch.nn.functional as F

    model.zero_grad(set_to_none=True)
    if per_sample and batch.get("position_ids") is not None and batch.get("attention_mask") is None:
        starts = [t for t, p in enumerate(batch["position_ids"][0].tolist()) if p == 0] + [batch["input_ids"].shape[1]]
        total, count = 0.0, 0
        for start, end in itertools.pairwise(starts):
            labels = batch["labels"][:, start:end]
            logits = model(input_ids=batch["input_ids"][:, start:end], use_cache=False).logits
            total = total + F.cross_entropy(
                logits[:, :-1].reshape(-1, logits.shape[-1]).float(), labels[:, 1:].reshape(-1), reduction="sum"
            )
            count += int((labels[:, 1:] != -100).sum())
        loss = total / count
    else:
        # No cache: with one, transformers skips its packed-sample detection and lets samples see each other.
        loss = model(**batch, use_cache=False).loss
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return float(loss.detach()), grads


def _worker(rank: int, size: int, port: int, cases: list[Case], out_dir: str) -> None:
    """One SP rank: run every case, save ``{loss, grads}`` per case to ``out_dir/<case>.<rank>.pt``."""
    import torch
    import torch.distributed as dist

    from swiftcore_sequence_parallel.attention import enable_sequence_parallel
    from swiftcore_sequence_parallel.groups import destroy_sequence_parallel, init_sequence_parallel
    from swiftcore_sequence_parallel.loss import sequence_parallel_loss
    from swiftcore_sequence_parallel.sharding import shard_batch

    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=size)
    models: dict[str, Any] = {}
    try:
        for case in cases:
            if case.model not in models:
                models[case.model] = tiny_model(case.model)
            model = models[case.model]
            state = init_sequence_parallel(
                case.sp_size or size, case.mode, ring_impl=case.ring_impl, ulysses_size=case.ulysses_size
            )
            enable_sequence_parallel(model)
            # Every SP group trains on the same batch here, so the data-parallel mean is the reference.
            shard = shard_batch(sample_batch(case.batch), state.rank, state.size)
            labels = shard.pop("shift_labels")
            model.zero_grad(set_to_none=True)
            if case.checkpointing:
                model.gradient_checkpointing_enable()
                model.train()  # the tiny configs have no dropout: same numbers as eval
            loss = sequence_parallel_loss(model(**shard, use_cache=False).logits, labels)
            loss.backward()
            if case.checkpointing:
                model.gradient_checkpointing_disable()
                model.eval()
            grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
            torch.save({"loss": float(loss.detach()), "grads": grads}, Path(out_dir) / f"{case.name}.{rank}.pt")
            destroy_sequence_parallel()
        dist.barrier()
    finally:
        dist.destroy_process_group()


def run_sp_cases(cases: list[Case], size: int) -> dict[str, dict[str, Any]]:
    """Run ``cases`` on ``size`` local gloo ranks; per case: ``losses`` (one per rank) and ``grads``.

    ``grads`` is what the trainer's gradient all-reduce gives: summed over the ranks of an SP group and
    averaged over the data-parallel groups (``size // sp_size`` of them, all fed the same batch here).
    """
    import torch
    import torch.multiprocessing as mp

    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_worker, args=(size, free_port(), list(cases), tmp), nprocs=size, join=True)
        for case in cases:
            parts = [torch.load(Path(tmp) / f"{case.name}.{r}.pt", weights_only=True) for r in range(size)]
            dp = size // (case.sp_size or size)
            grads = {n: sum(p["grads"][n] for p in parts) / dp for n in parts[0]["grads"]}
            results[case.name] = {"losses": [p["loss"] for p in parts], "grads": grads}
    return results
