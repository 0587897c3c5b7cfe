"""The local spec's torch norms, made to build under sequence parallelism (``swiftcore_megatron.norms``)."""

from __future__ import annotations

import dataclasses

import pytest
import torch


def _config(**overrides):  # type: ignore[no-untyped-def]
    from megatron.core.transformer import TransformerConfig

    base = {"num_layers": 2, "hidden_size": 8, "num_attention_heads": 2, "normalization": "RMSNorm"}
    return TransformerConfig(**{**base, **overrides})


def test_every_wrapped_torch_norm_of_a_block_spec_is_swapped_in_a_copy() -> None:
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.torch_norm import WrappedTorchNorm
    from megatron.core.transformer.transformer_block import TransformerBlockSubmodules
    from swiftcore_megatron.norms import SequenceParallelTorchNorm, with_sequence_parallel_norms

    layer = get_gpt_layer_local_spec(normalization="RMSNorm", qk_layernorm=True)
    spec = TransformerBlockSubmodules(layer_specs=[layer, layer], layer_norm=WrappedTorchNorm)
    swapped = with_sequence_parallel_norms(spec)

    def norms(node, seen=None):  # type: ignore[no-untyped-def]
        seen = seen if seen is not None else set()
        if node in (WrappedTorchNorm, SequenceParallelTorchNorm):
            return [node]
        if id(node) in seen or not (dataclasses.is_dataclass(node) or isinstance(node, list)) or isinstance(node, type):
            return []
        seen.add(id(node))
        items = node if isinstance(node, list) else [getattr(node, f.name) for f in dataclasses.fields(node)]
        return [n for item in items for n in norms(item, seen)]

    assert norms(spec) and set(norms(spec)) == {WrappedTorchNorm}, "the spec given is left as it is"
    assert set(norms(swapped)) == {SequenceParallelTorchNorm} and len(norms(swapped)) == len(norms(spec))


@pytest.mark.parametrize("kind", ["RMSNorm", "LayerNorm"])
def test_the_norm_is_torchs_own_with_its_weights_marked_sequence_parallel(kind: str) -> None:
    from swiftcore_megatron.norms import SequenceParallelTorchNorm

    norm = SequenceParallelTorchNorm(_config(normalization=kind, sequence_parallel=True, tensor_model_parallel_size=2),
                                     8, eps=1e-6)  # fmt: skip
    assert type(norm) is getattr(torch.nn, kind) and norm.eps == 1e-6
    assert all(p.sequence_parallel for p in norm.parameters())
    assert not any(p.sequence_parallel for p in SequenceParallelTorchNorm(_config(normalization=kind), 8).parameters())
