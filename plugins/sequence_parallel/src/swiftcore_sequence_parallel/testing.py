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
    "HEAD_TASKS",
    "MODEL_KINDS",
    "PER_SAMPLE_REFERENCE",
    "Case",
    "free_port",
    "head_batch",
    "head_loss",
    "reference_head_loss_and_grads",
    "reference_loss_and_grads",
    "run_sp_cases",
    "sample_batch",
    "tiny_head_model",
    "tiny_model",
]

#: Tiny random models: GQA (kv heads split), MQA (kv heads repeated), Qwen3 sliding window, Gemma3, Gemma 4
#: (sliding then full attention, per-layer inputs), OLMoE (q/k norms, experts), and Qwen3.5 / Qwen3.5-MoE (a
#: gated DeltaNet linear-attention layer, then full attention).
MODEL_KINDS = (
    "qwen3",
    "qwen3_mqa",
    "qwen3_sliding",
    "gemma3",
    "gemma4",
    "olmoe",
    "qwen3_2heads",
    "qwen3_5",
    "qwen3_5_moe",
)
#: Kinds whose packed rows the reference runs sample by sample (their layers do not honour packed boundaries
#: on one process without their family plugin's patch; one sample at a time is what "exact" means).
PER_SAMPLE_REFERENCE = frozenset({"qwen3_5", "qwen3_5_moe"})
#: Head tasks of the harness (swiftcore-heads' ``HeadModel`` on the tiny model's decoder) and their pooling.
HEAD_TASKS = {"embedding": "mean", "classification": "last"}


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
    task: str | None = None  # a head task of HEAD_TASKS (pooled outputs, head_loss); None: the causal LM

    @property
    def name(self) -> str:
        """File-safe id, e.g. ``qwen3-ring-p2p-packed``."""
        impl = f"-{self.ring_impl}" if self.mode != "ulysses" else ""
        sp = f"-sp{self.sp_size}" if self.sp_size else ""
        ckpt = "-ckpt" if self.checkpointing else ""
        task = f"-{self.task}" if self.task else ""
        return f"{self.model}{task}-{self.mode}{impl}-{self.batch}{sp}{ckpt}"


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
    elif kind == "gemma4":
        kw = {
            **common,
            "sliding_window": 4,
            "layer_types": ["sliding_attention", "full_attention"],
            "global_head_dim": 16,
            "vocab_size_per_layer_input": common["vocab_size"],
            "hidden_size_per_layer_input": 16,
        }
        config, cls = transformers.Gemma4TextConfig(**kw), transformers.Gemma4ForCausalLM
    elif kind == "olmoe":
        kw = {**common, "num_experts": 4, "num_experts_per_tok": 2}
        config, cls = transformers.OlmoeConfig(**kw), transformers.OlmoeForCausalLM
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


def tiny_head_model(kind: str, task: str, seed: int = 0) -> Any:
    """``HeadModel`` (swiftcore-heads) of ``task`` on the decoder of :func:`tiny_model`; 3 labels, in eval mode."""
    import torch
    from swiftcore_heads import HeadModel

    decoder = tiny_model(kind, seed).model
    torch.manual_seed(seed + 1)  # the score layer: the same on every rank and in the reference
    return HeadModel(decoder, task, pooling=HEAD_TASKS[task], num_labels=3).float().eval()


def head_batch(kind: str, *, seq: int = 16, seed: int = 0) -> dict[str, Any]:
    """:func:`sample_batch` as a head batch: no token labels; packed rows carry ``seq_lens`` (the pooling's)."""
    import torch

    batch = sample_batch(kind, seq=seq, seed=seed)
    del batch["labels"]
    if kind == "packed":
        starts = (batch["position_ids"][0] == 0).nonzero().flatten().tolist() + [seq]
        batch["seq_lens"] = torch.tensor([b - a for a, b in itertools.pairwise(starts)])
    return batch


def head_loss(outputs: Any, task: str) -> Any:
    """A fixed loss of the pooled outputs ``[n, D]``: cross-entropy on labels ``i % 3`` (classification), or
    an InfoNCE-like loss over the samples' cosine similarities, each sample's target its neighbour (embedding)."""
    import torch
    import torch.nn.functional as F

    n = outputs.shape[0]
    if task == "classification":
        return F.cross_entropy(outputs.float(), torch.arange(n) % 3)
    unit = F.normalize(outputs.float(), dim=-1)
    return F.cross_entropy(unit @ unit.T / 0.5, torch.arange(n).roll(1))


def reference_head_loss_and_grads(
    model: Any, batch: dict[str, Any], task: str, per_sample: bool = False
) -> tuple[float, dict[str, Any]]:
    """Single-process :func:`head_loss` and parameter gradients of a head model on :func:`head_batch`.

    ``per_sample``: for a packed batch, pool each sample from its own forward (see
    :func:`reference_loss_and_grads`).
    """
    import torch

    model.zero_grad(set_to_none=True)
    if per_sample and batch.get("seq_lens") is not None:
        ids = batch["input_ids"][0].split(batch["seq_lens"].tolist())
        outputs = torch.cat([model(input_ids=row.unsqueeze(0)) for row in ids])
    else:
        outputs = model(**batch)
    loss = head_loss(outputs, task)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return float(loss.detach()), grads


def _sp_loss(model: Any, case: Case, state: Any) -> Any:
    """This rank's loss of ``case`` (the causal LM on its shard, or the head model on the whole batch)."""
    from swiftcore_sequence_parallel.attention import enable_sequence_parallel
    from swiftcore_sequence_parallel.heads import shard_decoder
    from swiftcore_sequence_parallel.loss import sequence_parallel_loss
    from swiftcore_sequence_parallel.sharding import shard_batch

    if case.task:
        shard_decoder(model.decoder)  # the decoder shards the batch and gathers its hidden states
        return head_loss(model(**head_batch(case.batch)), case.task)
    enable_sequence_parallel(model)
    shard = shard_batch(sample_batch(case.batch), state.rank, state.size)
    labels = shard.pop("shift_labels")
    return sequence_parallel_loss(model(**shard, use_cache=False).logits, labels)


def _worker(rank: int, size: int, port: int, cases: list[Case], out_dir: str) -> None:
    """One SP rank: run every case, save ``{loss, grads}`` per case to ``out_dir/<case>.<rank>.pt``."""
    import torch
    import torch.distributed as dist

    from swiftcore_sequence_parallel.groups import destroy_sequence_parallel, init_sequence_parallel

    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=size)
    models: dict[str, Any] = {}
    try:
        for case in cases:
            key = f"{case.model}-{case.task}"
            if key not in models:
                models[key] = tiny_head_model(case.model, case.task) if case.task else tiny_model(case.model)
            model = models[key]
            state = init_sequence_parallel(
                case.sp_size or size, case.mode, ring_impl=case.ring_impl, ulysses_size=case.ulysses_size
            )
            model.zero_grad(set_to_none=True)
            if case.checkpointing:
                model.gradient_checkpointing_enable()
                model.train()  # the tiny configs have no dropout: same numbers as eval
            # Every SP group trains on the same batch here, so the data-parallel mean is the reference.
            loss = _sp_loss(model, case, state)
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
    averaged over the data-parallel groups (``size // sp_size`` of them, all fed the same batch here). Head
    cases are averaged over every rank, as DDP does: their gather's backward already sums the SP ranks.
    """
    import torch
    import torch.multiprocessing as mp

    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_worker, args=(size, free_port(), list(cases), tmp), nprocs=size, join=True)
        for case in cases:
            parts = [torch.load(Path(tmp) / f"{case.name}.{r}.pt", weights_only=True) for r in range(size)]
            divisor = size if case.task else size // (case.sp_size or size)
            grads = {n: sum(p["grads"][n] for p in parts) / divisor for n in parts[0]["grads"]}
            results[case.name] = {"losses": [p["loss"] for p in parts], "grads": grads}
    return results
