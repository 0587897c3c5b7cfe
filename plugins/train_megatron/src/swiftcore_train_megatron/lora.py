"""LoRA on megatron-core's tensor-parallel linear layers, and its export as a peft adapter of the Hugging Face model.

Each adapted layer keeps its weight (frozen) and gains two tensors, ``lora_A`` (``r x in``) and ``lora_B``
(``out x r``), sharded like the layer: a column-parallel layer (q/k/v, gate/up, ...) splits ``lora_B`` by output
rows as its weight is split and keeps ``lora_A`` whole on every rank; a row-parallel one (the attention output,
down projection) splits ``lora_A`` by input columns and keeps ``lora_B`` whole. A forward hook adds
``lora_B(lora_A(x)) * alpha / r`` to the layer's output, with megatron's own region functions on the rank-``r``
activations (``copy_to`` before the column-parallel ``lora_B``, ``reduce_from`` after the row-parallel
``lora_A``), so every replicated LoRA tensor gets the same gradient on every tensor-parallel rank and the
engine's gradient rules need nothing new. Under sequence parallelism (MoE layers at ``--tp`` > 1) a layer's input,
or its output, is this rank's part of the sequence: the column-parallel update gathers the sequence
(``gather_from_sequence_parallel_region``), the row-parallel one sums and scatters it
(``reduce_scatter_to_sequence_parallel_region``), and the replicated LoRA tensor is marked ``sequence_parallel`` so
the engine sums its gradient over the ranks, as megatron sums a sequence-parallel norm's. The layer's weight keeps
its name, so the bridge's rules still name it.

A fused mcore layer (``linear_qkv`` = q, k, v; ``linear_fc1`` = gate, up) is several HF layers whose weights are
row blocks of the fused one. peft gives each HF layer its own adapter, so the fused layer gets one per part, as
peft's: ``lora_A`` stacks the parts' ``A`` (``parts * r x in``) and ``lora_B`` (``out x parts * r``) holds part
``i``'s ``B`` in its columns ``i * r ...`` and in that part's rows (placed by the rule's ``fuse``, split by its
``shard``), zero elsewhere; a fixed mask keeps the rest at zero (their gradient is zero, so Adam and weight decay
leave them there). The update is then exactly the sum of peft's per-part updates, and each HF layer's adapter is
exported as its own ``A`` and ``B``. A layer whose rule does more than pick rows is left out of LoRA, checked
numerically when the adapter is added.

``lora_A`` starts as peft's does (Kaiming-uniform) from ``--seed`` and the HF layer's name; ``--lora-init-adapter
DIR`` starts from a peft adapter instead (e.g. the one the transformers engine initialises, for a loss comparison,
or one trained earlier): its tensors go through the same rules onto the mcore layers.

The adapter leaves a live model the way it leaves a checkpoint: :func:`live_lora` merges the tensor-parallel halves
(as :func:`merged_lora` merges a checkpoint's rank files) and :func:`peft_tensors` names each HF layer's ``A`` and
``B`` as peft does; the online recipes' LoRA-only weight sync sends exactly those (``grpo.megatron``).

Why not peft's own Megatron support (``LoraConfig(megatron_config=..., megatron_core="megatron.core")``): in peft
0.21.2 its dispatch raises ``KeyError: 'fan_in_fan_out'`` before it builds a layer, and its ``LoraParallelLinear``
feeds a parallel ``lora_B`` the ``(output, bias)`` tuple megatron's parallel layers return. The adapter written
here is plain peft's format, loaded by ``PeftModel.from_pretrained``.
"""

from __future__ import annotations

import json
import logging
import math
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "LORA_FILE",
    "LoraSettings",
    "add_lora",
    "export_adapter",
    "live_lora",
    "load_peft_adapter",
    "merged_lora",
    "no_layer_matched",
    "peft_tensors",
    "write_lora_record",
    "write_peft_adapter",
]

LORA_FILE = "swiftcore_lora.json"


@dataclass(frozen=True)
class LoraSettings:
    """The adapter's rank, alpha and dropout (``--lora-rank``, ``--lora-alpha``, ``--lora-dropout``) and which
    layers it adapts (``--target-modules``: HF module names or their last parts; empty or ``all-linear``: every
    linear layer of the decoder outside the MoE experts and routers)."""

    rank: int = 8
    alpha: int = 32
    dropout: float = 0.0
    targets: tuple[str, ...] = ()

    @property
    def scaling(self) -> float:
        """The factor of the low-rank update (peft's ``lora_alpha / r``)."""
        return self.alpha / self.rank

    def wants(self, hf_modules: list[str]) -> bool:
        """Whether a layer made of these HF modules is adapted."""
        if not self.targets or self.targets == ("all-linear",):
            return True
        return any(m == t or m.endswith("." + t) for m in hf_modules for t in self.targets)


def _rules_by_key(bridge: Any) -> dict[str, Any]:
    return {rule.mcore: rule for rule in bridge.rules() if rule.expert is None}


def _picks_rows(rule: Any, rows: int, rank: int) -> bool:
    """Whether the rule's HF weights are row blocks of the mcore weight (``rows`` rows), so that an update
    ``B @ A`` is ``B``'s blocks times ``A`` in HF terms; tried on random tensors of a small width."""
    import torch

    generator = torch.Generator().manual_seed(0)
    b = torch.randn(rows, rank, generator=generator, dtype=torch.float64)
    a = torch.randn(rank, 3, generator=generator, dtype=torch.float64)
    try:
        whole, parts = rule.fuse.to_hf(b @ a), rule.fuse.to_hf(b)
    except Exception:  # a fuse that cannot take this shape is no row pick either
        return False
    return len(whole) == len(parts) == len(rule.hf) and all(
        w.shape[0] == p.shape[0] and torch.allclose(w, p @ a) for w, p in zip(whole, parts, strict=True)
    )


def _part_mask(rule: Any, out_full: int, rank: int) -> Any:
    """The full mcore ``lora_B`` mask of a layer of ``len(rule.hf)`` HF parts: part ``i``'s rows (as the rule's
    ``fuse`` places them) in columns ``i * rank ... (i + 1) * rank``."""
    import torch

    parts = len(rule.hf)
    blocks = rule.fuse.to_hf(torch.zeros(out_full, parts * rank))
    for i, block in enumerate(blocks):
        block[:, i * rank : (i + 1) * rank] = 1.0
    return rule.fuse.to_mcore(blocks)


def add_lora(model: Any, bridge: Any, settings: LoraSettings, *, seed: int, stage: Any = None) -> dict[str, bool]:
    """Freeze ``model`` and add LoRA to its decoder's tensor-parallel linear layers (see the module docstring);
    return the adapted layers (this rank's, by the whole model's names), each with whether it is column-parallel.

    Each HF part's ``A`` starts as peft's (Kaiming-uniform, the same on every rank: drawn whole from ``seed`` and
    the HF layer's name, then split) and ``lora_B`` at zero, so the model starts as the base model.

    Raises:
        SwiftcoreError: no layer could be adapted (``--target-modules`` matched none; with a pipeline ``stage``
            the caller checks the whole model, :func:`no_layer_matched`).
    """
    import torch
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel import ColumnParallelLinear, RowParallelLinear
    from megatron.core.tensor_parallel.layers import set_tensor_model_parallel_attributes

    for param in model.parameters():
        param.requires_grad_(False)
    rules = _rules_by_key(bridge)
    tp, tp_rank = parallel_state.get_tensor_model_parallel_world_size(), parallel_state.get_tensor_model_parallel_rank()
    adapted: dict[str, bool] = {}
    frozen: list[str] = []  # wanted, but their HF weights are no row blocks of the mcore weight
    for local, module in model.named_modules():
        column = isinstance(module, ColumnParallelLinear) and not module.gather_output
        row = isinstance(module, RowParallelLinear) and module.input_is_parallel
        name = stage.global_key(local) if stage is not None else local
        rule = rules.get(f"{name}.weight") if name else None
        if not (column or row) or rule is None or not name.startswith("decoder.layers."):
            continue  # the embedding, the head, experts (their rules are per expert) and routers stay frozen
        if not settings.wants([key.removesuffix(".weight") for key in rule.hf]):
            continue
        out_full, in_full = module.output_size, module.input_size
        if not _picks_rows(rule, out_full, settings.rank):
            frozen.append(name)
            continue
        parts = len(rule.hf)
        a_parts = []
        for hf_key in rule.hf:
            generator = torch.Generator().manual_seed(seed * 2**32 + zlib.crc32(hf_key.encode()))
            a_part = torch.empty(settings.rank, in_full)
            torch.nn.init.kaiming_uniform_(a_part, a=math.sqrt(5), generator=generator)
            a_parts.append(a_part)
        a_full = torch.cat(a_parts)
        mask = _part_mask(rule, out_full, settings.rank) if parts > 1 else None
        device = module.weight.device
        if column:
            lora_a = a_full
            lora_b = torch.zeros(module.weight.shape[0], parts * settings.rank)
            mask = rule.shard.split(mask, tp, what=name)[tp_rank].contiguous() if mask is not None else None
        else:
            lora_a = rule.shard.split(a_full, tp, what=name)[tp_rank].contiguous()
            lora_b = torch.zeros(out_full, parts * settings.rank)
        module.lora_A = torch.nn.Parameter(lora_a.to(device))
        module.lora_B = torch.nn.Parameter(lora_b.to(device))
        # Not in the state dict: it follows from the rule, and rank files stay loadable by older readers.
        module.register_buffer("lora_mask", mask.to(device) if mask is not None else None, persistent=False)
        sharded = module.lora_B if column else module.lora_A
        set_tensor_model_parallel_attributes(sharded, is_parallel=True, dim=0 if column else 1, stride=1)
        module.lora_scaling, module.lora_dropout, module.lora_column = settings.scaling, settings.dropout, column
        module.lora_sequence_parallel = bool(getattr(module, "sequence_parallel", False))
        if module.lora_sequence_parallel:
            # Each rank's LoRA sees its part of the sequence: the replicated tensor's gradient is summed over the
            # tensor-parallel ranks, as megatron sums a sequence-parallel norm's (engine.reduce_gradients).
            replicated = module.lora_A if column else module.lora_B
            replicated.sequence_parallel = True
        module.register_forward_hook(_add_low_rank_update)
        adapted[name] = column
    if frozen:
        logging.getLogger("swiftcore.train.megatron").warning(
            "--tuner lora: %d wanted layer(s) stay frozen: their HF weights are not row blocks of the fused megatron "
            "weight, so a LoRA update of it has no peft adapter of the HF model (%s%s)",
            len(frozen), ", ".join(frozen[:4]), " ..." if len(frozen) > 4 else "",
        )  # fmt: skip
    if not adapted and stage is None:  # a pipeline stage may hold none of them: the caller checks the whole model
        raise no_layer_matched(settings)
    return adapted


def no_layer_matched(settings: LoraSettings) -> Exception:
    """The error of a ``--target-modules`` that adapts no layer of the model."""
    from swiftcore.api import SwiftcoreError

    return SwiftcoreError(
        f"--tuner lora: no linear layer of the decoder matched --target-modules {' '.join(settings.targets)}; "
        "name HF modules (e.g. q_proj v_proj) or leave --target-modules out for every linear layer"
    )


def load_peft_adapter(model: Any, bridge: Any, settings: LoraSettings, adapter_dir: Path, *, stage: Any = None) -> None:
    """Set the LoRA tensors :func:`add_lora` added to ``model`` (this rank's shards) from the peft adapter in
    ``adapter_dir`` (``--lora-init-adapter``): every HF layer's ``A`` and ``B`` through the bridge's rules.

    Raises:
        SwiftcoreError: the adapter's rank or alpha differ from ``--lora-rank``/``--lora-alpha``, or its layers are
            not those this run adapts (both named).
    """
    import torch
    from megatron.core import parallel_state
    from safetensors.torch import load_file

    from swiftcore.api import SwiftcoreError

    config_file, weights_file = adapter_dir / "adapter_config.json", adapter_dir / "adapter_model.safetensors"
    if not (config_file.is_file() and weights_file.is_file()):
        raise SwiftcoreError(
            f"--lora-init-adapter {str(adapter_dir)!r}: no peft adapter there (adapter_config.json and "
            "adapter_model.safetensors); pass a directory written by peft's save_pretrained"
        )
    config = json.loads(config_file.read_text(encoding="utf-8"))
    if (config.get("r"), config.get("lora_alpha")) != (settings.rank, settings.alpha):
        raise SwiftcoreError(
            f"--lora-init-adapter {str(adapter_dir)!r} has r={config.get('r')} lora_alpha={config.get('lora_alpha')}; "
            f"this run has --lora-rank {settings.rank} --lora-alpha {settings.alpha}: pass the adapter's values"
        )
    # peft's names, base_model.model.{HF layer}.lora_A.weight, as {HF layer}.lora_A
    tensors = {
        k.removeprefix("base_model.model.").removesuffix(".weight"): v.float()
        for k, v in load_file(weights_file).items()
        if ".lora_A." in k or ".lora_B." in k  # a SEQ_CLS adapter also holds its score layer (modules_to_save)
    }
    rules = _rules_by_key(bridge)
    tp, tp_rank = parallel_state.get_tensor_model_parallel_world_size(), parallel_state.get_tensor_model_parallel_rank()
    used: set[str] = set()
    missing: list[str] = []
    for local, module in model.named_modules():
        if not hasattr(module, "lora_A"):
            continue
        name = stage.global_key(local) if stage is not None else local
        rule = rules[f"{name}.weight"]
        modules = [key.removesuffix(".weight") for key in rule.hf]
        if any(f"{m}.lora_A" not in tensors for m in modules):
            missing.extend(m for m in modules if f"{m}.lora_A" not in tensors)
            continue
        a_full = torch.cat([tensors[f"{m}.lora_A"] for m in modules])
        rank = settings.rank
        blocks = [
            torch.nn.functional.pad(tensors[f"{m}.lora_B"], (i * rank, (len(modules) - 1 - i) * rank))
            for i, m in enumerate(modules)
        ]
        b_full = rule.fuse.to_mcore(blocks)
        used.update(f"{m}.lora_{part}" for m in modules for part in "AB")
        if module.lora_column:
            a, b = a_full, rule.shard.split(b_full, tp, what=name)[tp_rank]
        else:
            a, b = rule.shard.split(a_full, tp, what=name)[tp_rank], b_full
        with torch.no_grad():
            module.lora_A.copy_(a)
            module.lora_B.copy_(b)
    if missing:
        raise SwiftcoreError(
            f"--lora-init-adapter {str(adapter_dir)!r} has no adapter for {len(missing)} layer(s) this run adapts "
            f"({', '.join(missing[:4])}{' ...' if len(missing) > 4 else ''}); pass --target-modules as it was made with"
        )
    # A pipeline stage holds only its own layers: the adapter's other layers are another stage's.
    # Layers the megatron model does not build (a vision tower: no rule names them) have nothing to adapt here.
    known = {key.removesuffix(".weight") for rule in bridge.rules() for key in rule.hf}
    outside = sorted({k.rsplit(".lora_", 1)[0] for k in tensors} - known)
    if outside:
        logging.getLogger("swiftcore.train.megatron").warning(
            "--lora-init-adapter: %d adapted layer(s) are no part of the megatron model and are left out (%s%s)",
            len(outside), ", ".join(outside[:3]), " ..." if len(outside) > 3 else "",
        )  # fmt: skip
    extra = sorted(k for k in set(tensors) - used if k.rsplit(".lora_", 1)[0] in known)
    if parallel_state.get_pipeline_model_parallel_world_size() > 1:
        extra = []
    if extra:
        raise SwiftcoreError(
            f"--lora-init-adapter {str(adapter_dir)!r} adapts {len(extra) // 2} layer(s) this run does not "
            f"({', '.join(extra[:4])}{' ...' if len(extra) > 4 else ''}); pass --target-modules as it was made with"
        )


def _add_low_rank_update(module: Any, args: tuple, output: Any) -> Any:
    """The forward hook: the layer's ``(output, bias)`` with ``lora_B(lora_A(x)) * scaling`` added."""
    import torch.nn.functional as F
    from megatron.core.tensor_parallel.mappings import (
        copy_to_tensor_model_parallel_region,
        gather_from_sequence_parallel_region,
        reduce_from_tensor_model_parallel_region,
        reduce_scatter_to_sequence_parallel_region,
    )

    x = F.dropout(args[0], p=module.lora_dropout, training=module.training) if module.lora_dropout else args[0]
    low = F.linear(x, module.lora_A)
    lora_b = module.lora_B if module.lora_mask is None else module.lora_B * module.lora_mask
    # Column-parallel: lora_B's rows are split, so the gradient reaching the whole low-rank activation is summed
    # over the ranks (copy_to); row-parallel: lora_A saw this rank's input columns, so its output is summed.
    # Under sequence parallelism (MoE at --tp > 1) the layer's input, or its output, is this rank's part of the
    # sequence: the column-parallel update gathers the sequence (as the layer gathers its input), the row-parallel
    # one sums and scatters it (as the layer's output is).
    if module.lora_column and module.lora_sequence_parallel:
        low = gather_from_sequence_parallel_region(low)
    elif module.lora_column:
        low = copy_to_tensor_model_parallel_region(low)
    elif module.lora_sequence_parallel:
        low = reduce_scatter_to_sequence_parallel_region(low)
    else:
        low = reduce_from_tensor_model_parallel_region(low)
    update = F.linear(low, lora_b) * module.lora_scaling
    result, bias = output
    return result + update, bias


def merged_lora(mcore_dir: Path, bridge: Any) -> dict[str, tuple[Any, Any, bool]]:
    """The trained LoRA of a megatron checkpoint (its rank files, or pipeline-stage files, and its
    ``swiftcore_lora.json``), merged over tensor-parallel ranks: ``{layer: (lora_A, lora_B, column_parallel)}``,
    by the whole model's layer names."""
    from swiftcore_megatron import open_ranks, read_metadata, tp_shards

    meta = read_metadata(mcore_dir)
    modules = json.loads((mcore_dir / LORA_FILE).read_text(encoding="utf-8"))["modules"]
    # The rank files opened lazily, as the HF export reads them: only the LoRA tensors are loaded, never the
    # frozen weights or the optimizer state beside them.
    files = open_ranks(mcore_dir, meta, bridge)
    rules = _rules_by_key(bridge)
    merged = {}
    for name, column in modules.items():
        rule = rules[f"{name}.weight"]
        a, b = (tp_shards(files, f"{name}.{part}", meta["tp"]) for part in ("lora_A", "lora_B"))
        # The split half is merged as the layer's weight is (the rule's shard); the other is the same on every rank.
        lora_a = a[0] if column else rule.shard.merge(a, what=name)
        lora_b = rule.shard.merge(b, what=name) if column else b[0]
        merged[name] = (lora_a, lora_b, column)
    return merged


def peft_tensors(
    merged: dict[str, tuple[Any, Any, bool]], bridge: Any, rank: int, *, per_part: bool = True
) -> dict[str, Any]:
    """Merged mcore LoRA (``{layer: (lora_A, lora_B, column_parallel)}``, as :func:`merged_lora` or
    :func:`live_lora` give it) as peft names it: ``base_model.model.{HF layer}.lora_A.weight`` / ``.lora_B.weight``,
    the names ``get_peft_model_state_dict`` gives and a peft adapter file holds. A fused layer's adapter becomes one per
    HF layer: part ``i``'s own ``A`` (rows ``i * rank ...`` of ``lora_A``) and its rows of ``lora_B`` in columns
    ``i * rank ...`` (``per_part``; earlier checkpoints shared one ``lora_A`` over a fused layer's parts)."""
    rules = _rules_by_key(bridge)
    tensors = {}
    for name, (lora_a, lora_b, _) in merged.items():
        rule = rules[f"{name}.weight"]
        for i, (hf_key, part) in enumerate(zip(rule.hf, rule.fuse.to_hf(lora_b), strict=True)):
            module = hf_key.removesuffix(".weight")
            if per_part:
                a, b = lora_a[i * rank : (i + 1) * rank], part[:, i * rank : (i + 1) * rank]
            else:
                a, b = lora_a, part
            tensors[f"base_model.model.{module}.lora_A.weight"] = a.contiguous().clone()
            tensors[f"base_model.model.{module}.lora_B.weight"] = b.contiguous().clone()
    return tensors


def write_peft_adapter(
    tensors: dict[str, Any], out_dir: Path, *, rank: int, alpha: int, dropout: float, base_model: str
) -> list[str]:
    """Write ``tensors`` (peft's names, :func:`peft_tensors`) as a peft adapter of the HF model ``base_model`` in
    ``out_dir`` (``adapter_model.safetensors``, ``adapter_config.json``: ``r``, ``lora_alpha`` and the adapted
    modules); return the HF modules adapted."""
    from peft import LoraConfig
    from safetensors.torch import save_file

    targets = sorted({k.removeprefix("base_model.model.").rsplit(".lora_", 1)[0] for k in tensors})
    out_dir.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out_dir / "adapter_model.safetensors"), metadata={"format": "pt"})
    LoraConfig(
        r=rank,
        lora_alpha=alpha,
        lora_dropout=dropout,
        target_modules=targets,
        task_type="CAUSAL_LM",
        base_model_name_or_path=str(base_model),
    ).save_pretrained(str(out_dir))
    return targets


def export_adapter(mcore_dir: Path, out_dir: Path, bridge: Any, base_model: str) -> list[str]:
    """Write ``out_dir/adapter_model.safetensors`` and ``adapter_config.json``: the trained LoRA of a megatron
    checkpoint (:func:`merged_lora`) as a peft adapter of the HF model ``base_model``; return the HF modules
    adapted. A fused layer's adapter becomes one per HF layer: its own ``lora_A`` and its rows of ``lora_B``
    (:func:`peft_tensors`)."""
    record = json.loads((mcore_dir / LORA_FILE).read_text(encoding="utf-8"))
    per_part = record.get("per_part", False)  # earlier checkpoints: one lora_A shared by a fused layer's parts
    tensors = peft_tensors(merged_lora(mcore_dir, bridge), bridge, record["rank"], per_part=per_part)
    return write_peft_adapter(tensors, out_dir, rank=record["rank"], alpha=record["alpha"],
                              dropout=record["dropout"], base_model=base_model)  # fmt: skip


def live_lora(model: Any, bridge: Any) -> dict[str, tuple[Any, Any, bool]]:
    """The LoRA :func:`add_lora` added to ``model``, now, merged over the tensor-parallel ranks (collective: every
    rank of the group calls it, every rank gets the whole set): ``{layer: (lora_A, lora_B, column_parallel)}``, as
    :func:`merged_lora` reads a checkpoint's. What the LoRA-only weight sync sends (through :func:`peft_tensors`);
    detached, on the model's device."""
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state

    group = parallel_state.get_tensor_model_parallel_group()
    tp = dist.get_world_size(group)
    rules = _rules_by_key(bridge)
    merged = {}
    with torch.no_grad():
        for name, module in model.named_modules():  # the same order on every rank: the gathers pair up
            if not hasattr(module, "lora_A"):
                continue
            column = module.lora_column
            lora_a, lora_b = module.lora_A.detach(), module.lora_B.detach()
            if tp > 1:  # the split half (the rule's shard, as merged_lora merges it); the other is the same everywhere
                local = lora_b if column else lora_a
                shards = [torch.empty_like(local) for _ in range(tp)]
                dist.all_gather(shards, local.contiguous(), group=group)
                whole = rules[f"{name}.weight"].shard.merge(shards, what=name)
                lora_a, lora_b = (lora_a, whole) if column else (whole, lora_b)
            merged[name] = (lora_a, lora_b, column)
    return merged


def write_lora_record(mcore_dir: Path, settings: LoraSettings, modules: dict[str, bool]) -> None:
    """Record beside a checkpoint's rank files what :func:`merged_lora` needs: the settings and the adapted
    layers (the whole model's, gathered from every pipeline stage by the caller)."""
    record = {
        "rank": settings.rank,
        "alpha": settings.alpha,
        "dropout": settings.dropout,
        "modules": modules,
        "per_part": True,  # a fused layer holds one adapter per HF layer (the module docstring)
    }
    (mcore_dir / LORA_FILE).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
