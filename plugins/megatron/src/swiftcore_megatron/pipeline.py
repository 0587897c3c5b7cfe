"""Pipeline stages: which part of a model a pipeline-parallel rank holds, and under which names.

A pipeline stage of megatron-core's GPTModel holds a contiguous run of decoder layers, numbered from 0 in its state
dict (``decoder.layers.0`` is the stage's first layer; the module's ``layer_number`` stays the global one), the
embedding on the first stage, and the final norm and output head on the last. A tied head is the embedding again on
the last stage, under ``output_layer.weight`` (megatron keeps the two copies equal by summing their gradients over
the embedding group). The bridges' rules and the converted checkpoints name the whole model's tensors; this module
maps those names to a stage's and back, so that one set of rules serves every layout.

Stages split the layers evenly (megatron's default without ``num_layers_in_first/last_pipeline_stage``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

__all__ = ["Stage", "current_stage", "stages"]

_LAYER = re.compile(r"^decoder\.layers\.(\d+)\.(.*)$")
_EMBEDDING = "embedding.word_embeddings.weight"
_HEAD = "output_layer.weight"


@dataclass(frozen=True)
class Stage:
    """Pipeline stage ``rank`` of ``size`` over a model of ``num_layers`` decoder layers (``tied``: the output
    head is the embedding).

    Attributes:
        first: the stage holds the embedding (megatron's ``pre_process``).
        last: the stage holds the final norm and the output head (``post_process``).
        layers: the global indices of the decoder layers it holds.
    """

    rank: int
    size: int
    num_layers: int
    tied: bool = False

    @property
    def first(self) -> bool:
        """Whether this stage embeds the tokens."""
        return self.rank == 0

    @property
    def last(self) -> bool:
        """Whether this stage computes the logits and the loss."""
        return self.rank == self.size - 1

    @property
    def layers(self) -> range:
        """The global decoder-layer indices of this stage."""
        per_stage = self.num_layers // self.size
        return range(self.rank * per_stage, (self.rank + 1) * per_stage)

    def local_keys(self, key: str) -> list[str]:
        """The names the whole model's tensor ``key`` has in this stage's state dict (none: not on this stage).

        A tied embedding is one parameter on a stage that is both first and last; on a last stage that is not the
        first it is also the head, ``output_layer.weight``.
        """
        layer = _LAYER.match(key)
        if layer:
            index = int(layer.group(1))
            return [f"decoder.layers.{index - self.layers.start}.{layer.group(2)}"] if index in self.layers else []
        if key.startswith("embedding."):
            names = [key] if self.first else []
            if key == _EMBEDDING and self.tied and self.last and not self.first:
                names.append(_HEAD)
            return names
        if key.startswith(("output_layer.", "decoder.final_layernorm.", "mtp.")):
            return [key] if self.last else []
        return [key]  # anything else (a family's extra tensors) is on every stage

    def global_key(self, local: str) -> str | None:
        """The whole model's name of this stage's tensor ``local``; None for the tied head's copy of the
        embedding on a last stage (the first stage's embedding is the one kept)."""
        layer = _LAYER.match(local)
        if layer:
            return f"decoder.layers.{int(layer.group(1)) + self.layers.start}.{layer.group(2)}"
        if local == _HEAD and self.tied and not self.first:
            return None
        return local

    def block_spec(self, spec: Any) -> Any:
        """A decoder block spec with a spec per layer (``TransformerBlockSubmodules``) cut to this stage's layers;
        a single layer spec, or a block spec already cut to the stage, is returned as it is (megatron repeats a
        layer spec over the stage's layers itself)."""
        import dataclasses

        block: Any = getattr(spec, "submodules", None) if getattr(spec, "layer_specs", None) is None else spec
        layer_specs = getattr(block, "layer_specs", None)
        if self.size == 1 or layer_specs is None or len(layer_specs) == len(self.layers):
            return spec  # megatron's get_gpt_decoder_block_spec cuts its spec to the stage already
        if len(layer_specs) != self.num_layers:
            raise ValueError(f"a block spec of {len(layer_specs)} layers for a model of {self.num_layers}")
        cut = dataclasses.replace(block, layer_specs=list(layer_specs[self.layers.start : self.layers.stop]))
        return cut if block is spec else dataclasses.replace(spec, submodules=cut)


def current_stage(num_layers: int, tied: bool) -> Stage:
    """This process's stage, from megatron's initialised model-parallel state."""
    from megatron.core import parallel_state

    return Stage(
        rank=parallel_state.get_pipeline_model_parallel_rank(),
        size=parallel_state.get_pipeline_model_parallel_world_size(),
        num_layers=num_layers,
        tied=tied,
    )


def stages(bridge: Any, size: int) -> list[Stage]:
    """The ``size`` pipeline stages of ``bridge``'s model, its layer count read from the bridge's rules (the
    tensors it maps are the model's) and its tying from the model's arguments."""
    layers = {int(m.group(1)) for rule in bridge.rules() if (m := _LAYER.match(rule.mcore))}
    tied = bool(bridge.model_kwargs().get("share_embeddings_and_output_weights"))
    return [Stage(rank, size, max(layers) + 1 if layers else 0, tied) for rank in range(size)]
