"""The bridge contract: what a Hugging Face <-> Megatron-core bridge provides.

A bridge is a class named by a :class:`~swiftcore.specs.BridgeSpec` (``factory="pkg.mod:Class"``)
and constructed from a checkpoint's ``config.json`` (a plain dict: conversion never needs
transformers). It answers three questions:

1. :meth:`MegatronBridge.transformer_config` and :meth:`MegatronBridge.layer_spec`: which
   megatron-core model the checkpoint becomes (built by :meth:`MegatronBridge.build_model`).
2. :meth:`MegatronBridge.rules`: which mcore tensor is made of which HF tensors, and how each is
   sharded (see :mod:`swiftcore_megatron.mapping`). The converter uses the same rules both ways.
3. :meth:`MegatronBridge.validate_parallelism`: whether a TP/EP layout fits the model.

megatron-core and torch are imported inside the methods that need them, so a bridge class can be
inspected (rules, validation) without importing megatron.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from swiftcore_megatron.errors import BridgeError, ParallelismError
from swiftcore_megatron.mapping import Rule

__all__ = ["MegatronBridge"]

_MISSING = object()


class MegatronBridge:
    """Base class of bridges. Subclasses implement :meth:`rules`, :meth:`transformer_config`, :meth:`layer_spec`.

    Attributes:
        model_types: the HF ``model_type`` values the bridge converts (mirrors its BridgeSpec).
        passthrough_prefixes: HF tensor-name prefixes carried through unchanged (towers of a
            multimodal model that stay Hugging Face modules); stored beside the Megatron weights.
        tp_partial_gradients: replicated tensors whose gradients training sums over tensor-parallel ranks.
        sequence_parallel_norms: whether the local spec's torch norms may build under sequence parallelism.
        hf_config: the checkpoint's parsed ``config.json``.
        config: the part of it describing the Megatron model (:meth:`select_config`).
    """

    model_types: ClassVar[tuple[str, ...]] = ()
    passthrough_prefixes: ClassVar[tuple[str, ...]] = ()
    #: Parts of the names of tensors replicated over tensor-parallel ranks whose gradient each rank computes only
    #: in part (a norm applied per head, after the heads are split), so training sums them over the ranks. The
    #: q/k layernorms of ``qk_layernorm`` are summed by megatron's rule and need not be listed.
    tp_partial_gradients: ClassVar[tuple[str, ...]] = ()
    #: Whether the model trains under sequence parallelism (megatron's rule for MoE under tensor parallelism) with
    #: the local spec's torch norms, which refuse it although they need nothing for it
    #: (:mod:`swiftcore_megatron.norms`). A bridge sets it once its other layers are checked under it: every layer
    #: that is not per token must split the sequence correctly too.
    sequence_parallel_norms: ClassVar[bool] = False

    def __init__(self, hf_config: Mapping[str, Any]) -> None:
        self.hf_config = dict(hf_config)
        self.config = self.select_config(self.hf_config)

    def select_config(self, hf_config: dict[str, Any]) -> dict[str, Any]:
        """The config the Megatron model is built from; multimodal bridges return the text config."""
        return hf_config

    def is_passthrough(self, hf_key: str) -> bool:
        """Whether ``hf_key`` is carried through unchanged rather than converted."""
        return hf_key.startswith(self.passthrough_prefixes) if self.passthrough_prefixes else False

    def missing_tensors_hint(self, missing: list[str]) -> str:
        """The advice a conversion error gives when the checkpoint lacks ``missing``, tensors the rules need.

        A bridge that knows why a checkpoint of its family may lack some (a head transformers drops on load)
        overrides it to say what to do.
        """
        return "Is config.json (layer count, tie_word_embeddings, experts) consistent with the weights?"

    # ------------------------------------------------------------------ what a subclass provides

    def rules(self) -> list[Rule]:
        """Every mcore tensor of the model as a :class:`~swiftcore_megatron.mapping.Rule`, in a stable order."""
        raise NotImplementedError

    def transformer_config(self, *, tp: int = 1, ep: int = 1, params_dtype: Any = None) -> Any:
        """The megatron-core ``TransformerConfig`` matching the HF config exactly (for logit parity)."""
        raise NotImplementedError

    def layer_spec(self, config: Any) -> Any:
        """The megatron-core layer (or decoder block) spec of the model, built from local modules."""
        raise NotImplementedError

    def model_kwargs(self) -> dict[str, Any]:
        """Extra keyword arguments of the mcore model class (vocab size, rotary settings, tying)."""
        return {}

    def num_experts(self) -> int:
        """Routed experts per MoE layer (0 for a dense model)."""
        return 0

    def mtp_block_spec(self, config: Any, layer_spec: Any) -> Any:
        """megatron's multi-token-prediction block spec when the checkpoint has MTP layers the bridge builds, else
        None (the default). With one, :meth:`build_model` builds a :class:`~swiftcore_megatron.mtp.MtpGPTModel`."""
        return None

    def validate_parallelism(self, tp: int, ep: int) -> None:
        """Refuse a TP/EP layout that does not divide the model.

        Raises:
            ParallelismError: naming the dimension and the sizes that would work.
        """
        if tp < 1 or ep < 1:
            raise ParallelismError(f"--tp and --ep must be >= 1, got tp={tp}, ep={ep}")
        experts = self.num_experts()
        if ep > 1 and not experts:
            raise ParallelismError(f"--ep {ep}: this {self.config.get('model_type')} model has no experts; use --ep 1")
        if experts and experts % ep:
            raise ParallelismError(f"--ep {ep} does not divide the {experts} experts; use one of {_divisors(experts)}")

    # ------------------------------------------------------------------ shared machinery

    def get(self, *names: str, default: Any = _MISSING) -> Any:
        """The first of ``names`` present in config.json (HF renames fields across versions).

        Raises:
            BridgeError: when none is present and no default was given.
        """
        for name in names:
            if name in self.config and self.config[name] is not None:
                return self.config[name]
        if default is _MISSING:
            raise BridgeError(
                f"config.json (model_type {self.config.get('model_type')!r}) has no field "
                f"{' / '.join(names)}; the bridge needs it to build the Megatron-core model"
            )
        return default

    def build_model(self, *, tp: int = 1, ep: int = 1, params_dtype: Any = None) -> Any:
        """Build the megatron-core GPTModel on CPU (model parallel state must already be initialised).

        Under pipeline parallelism (initialised with a pipeline size above 1) it is this rank's stage: its share
        of the layers (a per-layer block spec cut to them, :class:`~swiftcore_megatron.pipeline.Stage`), the
        embedding on the first stage, the final norm and head on the last.

        Args:
            tp: tensor-parallel size the process group was initialised with.
            ep: expert-parallel size.
            params_dtype: parameter dtype (default float32).
        """
        import contextlib
        import dataclasses

        from megatron.core.models.gpt import GPTModel

        from swiftcore_megatron.cpu_patches import pipeline_on_cpu
        from swiftcore_megatron.pipeline import current_stage

        config = self.transformer_config(tp=tp, ep=ep, params_dtype=params_dtype)
        kwargs = self.model_kwargs()
        stage = current_stage(config.num_layers, bool(kwargs.get("share_embeddings_and_output_weights")))
        if stage.size > 1:
            # batch_p2p_comm: batched isend/irecv corrupt interleaved exchanges on gloo; the plain ones serve.
            config = dataclasses.replace(config, pipeline_model_parallel_size=stage.size,
                                         pipeline_dtype=config.params_dtype, batch_p2p_comm=False)  # fmt: skip
        spec = stage.block_spec(self.layer_spec(config))
        if config.sequence_parallel and self.sequence_parallel_norms:
            from swiftcore_megatron.norms import with_sequence_parallel_norms

            spec = with_sequence_parallel_norms(spec)
        mtp = self.mtp_block_spec(config, spec)
        placement = {"pre_process": stage.first, "post_process": stage.last}
        # A last stage's tied head is copied from the first stage with .cuda(): bridged on a CPU.
        with pipeline_on_cpu() if stage.size > 1 else contextlib.nullcontext():
            if mtp is not None:
                if stage.size > 1:
                    raise ParallelismError("a model with multi-token-prediction layers is not split into "
                                           "pipeline stages yet; use a pipeline size of 1")  # fmt: skip
                from swiftcore_megatron.mtp import MtpGPTModel

                return MtpGPTModel(config=config, transformer_layer_spec=spec, mtp_block_spec=mtp, **placement,
                                   **kwargs)  # fmt: skip
            return GPTModel(config=config, transformer_layer_spec=spec, **placement, **kwargs)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]
