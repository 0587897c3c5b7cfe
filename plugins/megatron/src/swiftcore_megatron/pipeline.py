"""Pipeline stages: which part of a model a pipeline-parallel rank holds, and under which names.

A pipeline stage of megatron-core's GPTModel holds a contiguous run of decoder layers, numbered from 0 in its state
dict (``decoder.layers.0`` is the stage's first layer; the module's ``layer_number`` stays the global one), the
embedding on the first stage, and the final norm and output head on the last. A tied head is the embedding again on
the last stage, under ``output_layer.weight`` (megatron keeps the two copies equal by summing their gradients over
the embedding group). The bridges' rules and the converted checkpoints name the whole model's tensors; this module
maps those names to a stage's and back, so that one set of rules serves every layout.

Stages split the layers evenly (megatron's default without ``num_layers_in_first/last_pipeline_stage``).

Under virtual pipeline parallelism (megatron's interleaved 1F1B, ``virtual_pipeline_model_parallel_size``) a rank
holds ``chunks`` model chunks: chunk ``v`` of rank ``r`` is virtual stage ``v * size + r`` of ``size * chunks``
(megatron's ``get_transformer_layer_offset``), so pipeline rank 0 holds the embedding in its first chunk and the
last rank the head in its last. A chunk's tensors are exactly those of stage ``v * size + r`` of a plain pipeline
of ``size * chunks`` stages: checkpoints store the chunks as such stages.
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
    head is the embedding); under virtual pipeline parallelism, model chunk ``chunk`` of the ``chunks`` the rank
    holds.

    Attributes:
        first: the stage holds the embedding (megatron's ``pre_process``).
        last: the stage holds the final norm and the output head (``post_process``).
        layers: the global indices of the decoder layers it holds.
    """

    rank: int
    size: int
    num_layers: int
    tied: bool = False
    chunks: int = 1
    chunk: int = 0

    @property
    def index(self) -> int:
        """The virtual stage this is (``chunk * size + rank``; ``rank`` without virtual pipeline parallelism)."""
        return self.chunk * self.size + self.rank

    @property
    def first(self) -> bool:
        """Whether this stage embeds the tokens."""
        return self.index == 0

    @property
    def last(self) -> bool:
        """Whether this stage computes the logits and the loss."""
        return self.index == self.size * self.chunks - 1

    @property
    def layers(self) -> range:
        """The global decoder-layer indices of this stage."""
        per_stage = self.num_layers // (self.size * self.chunks)
        return range(self.index * per_stage, (self.index + 1) * per_stage)

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
        if self.size * self.chunks == 1 or layer_specs is None or len(layer_specs) == len(self.layers):
            return spec  # megatron's get_gpt_decoder_block_spec cuts its spec to the stage already
        if len(layer_specs) != self.num_layers:
            raise ValueError(f"a block spec of {len(layer_specs)} layers for a model of {self.num_layers}")
        cut = dataclasses.replace(block, layer_specs=list(layer_specs[self.layers.start : self.layers.stop]))
        return cut if block is spec else dataclasses.replace(spec, submodules=cut)


def current_stage(num_layers: int, tied: bool) -> Stage:
    """This process's stage, from megatron's initialised model-parallel state: under virtual pipeline parallelism,
    the model chunk megatron's virtual pipeline rank names (set before each chunk is built, as megatron's
    ``get_model`` does)."""
    from megatron.core import parallel_state

    chunks = parallel_state.get_virtual_pipeline_model_parallel_world_size() or 1
    return Stage(
        rank=parallel_state.get_pipeline_model_parallel_rank(),
        size=parallel_state.get_pipeline_model_parallel_world_size(),
        num_layers=num_layers,
        tied=tied,
        chunks=chunks,
        chunk=(parallel_state.get_virtual_pipeline_model_parallel_rank() or 0) if chunks > 1 else 0,
    )


def stages(bridge: Any, size: int, chunks: int = 1) -> list[Stage]:
    """The pipeline stages of ``bridge``'s model in virtual-stage order (``size`` ranks of ``chunks`` model chunks
    each; ``stages(bridge, size, chunks)[i].index == i``), its layer count read from the bridge's rules (the
    tensors it maps are the model's) and its tying from the model's arguments."""
    layers = {int(m.group(1)) for rule in bridge.rules() if (m := _LAYER.match(rule.mcore))}
    tied = bool(bridge.model_kwargs().get("share_embeddings_and_output_weights"))
    count = max(layers) + 1 if layers else 0
    return [Stage(i % size, size, count, tied, chunks, i // size) for i in range(size * chunks)]
