"""The tiny OLMoE checkpoint (built once per session with transformers, then perturbed), its bridge and its
TP-2 / EP-2 conversions. Nothing here touches the Hugging Face Hub."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

#: The model plugin's tiny sizes (swiftcore_plugin_olmoe.tiny), repeated so this distribution tests alone.
TINY: dict[str, Any] = dict(
    vocab_size=256, hidden_size=128, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, num_experts=4, num_experts_per_tok=2, norm_topk_prob=False, tie_word_embeddings=False,
    pad_token_id=1, eos_token_id=4, bos_token_id=None,
)


@pytest.fixture(scope="session", autouse=True)
def _hub_offline() -> Iterator[None]:
    """Set ``HF_HUB_OFFLINE=1`` for the session, so a stray Hub lookup fails instead of waiting on the network."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_OFFLINE", "1")
        yield


def build_olmoe(out: Path, **overrides: Any) -> Path:
    """Save a random tiny ``OlmoeForCausalLM`` to ``out``, then perturb every tensor and the rope base in place
    (norm weights start at 1 in HF's init: q_norm and k_norm would be interchangeable)."""
    import torch
    from swiftcore_megatron import perturb_checkpoint
    from transformers import OlmoeConfig, OlmoeForCausalLM

    torch.manual_seed(0)
    OlmoeForCausalLM(OlmoeConfig(**{**TINY, **overrides})).save_pretrained(out / "raw")
    return perturb_checkpoint(out / "raw", out / "hf", seed=1)


@pytest.fixture(scope="session")
def olmoe_hf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The perturbed tiny OLMoE checkpoint."""
    return build_olmoe(tmp_path_factory.mktemp("olmoe"))


@pytest.fixture(scope="session")
def bridge(olmoe_hf: Path) -> Any:
    """The installed bridge for :func:`olmoe_hf`, resolved as ``swiftcore export`` does."""
    from swiftcore_megatron import read_hf_config, resolve_bridge

    from swiftcore.api import load_plugins

    return resolve_bridge(read_hf_config(olmoe_hf), load_plugins(["bridge_olmoe"]))[1]


def _converted(hf: Path, bridge: Any, out: Path, tp: int, ep: int) -> Path:
    from swiftcore_megatron import hf_to_mcore

    hf_to_mcore(hf, out, bridge, tp=tp, ep=ep)
    return out


@pytest.fixture(scope="session")
def mcore_tp1(olmoe_hf: Path, bridge: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """:func:`olmoe_hf` converted at TP 1."""
    return _converted(olmoe_hf, bridge, tmp_path_factory.mktemp("mcore") / "tp1", 1, 1)


@pytest.fixture(scope="session")
def mcore_tp2(olmoe_hf: Path, bridge: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """:func:`olmoe_hf` converted at TP 2."""
    return _converted(olmoe_hf, bridge, tmp_path_factory.mktemp("mcore") / "tp2", 2, 1)


@pytest.fixture(scope="session")
def mcore_ep2(olmoe_hf: Path, bridge: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """:func:`olmoe_hf` converted at EP 2 (two experts per rank)."""
    return _converted(olmoe_hf, bridge, tmp_path_factory.mktemp("mcore") / "ep2", 1, 2)
