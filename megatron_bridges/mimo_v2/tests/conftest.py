"""The tiny MiMo-V2-Flash checkpoint (``swiftcore make-tiny mimo_v2_flash``), made once per session, and its bridge."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session", autouse=True)
def _hub_offline() -> Iterator[None]:
    """Set ``HF_HUB_OFFLINE=1`` for the session, so a stray Hub lookup fails instead of waiting on the network."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_OFFLINE", "1")
        yield


def _perturb(hf_dir: Path) -> None:
    """Randomise the tensors HF initialises to constants (norms at 1, router bias at 0), and make the sinks
    large, so a swapped, dropped or ignored mapping cannot hide."""
    import torch
    from safetensors.torch import load_file, save_file

    path = hf_dir / "model.safetensors"
    tensors = load_file(path)
    gen = torch.Generator().manual_seed(7)
    for key, tensor in tensors.items():
        if any(part in key for part in ("norm", "mlp.gate.", "attention_sink_bias")):
            tensors[key] = tensor + 0.3 * torch.randn(tensor.shape, generator=gen)
        if "attention_sink_bias" in key:
            tensors[key] = tensors[key] + 1.0
    save_file(tensors, path, metadata={"format": "pt"})


@pytest.fixture(scope="session")
def mimo_tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny ``mimo_v2_flash`` checkpoint with randomised norms, router bias and sinks."""
    from swiftcore_tiny import make_tiny

    from swiftcore import load_plugins

    spec = load_plugins(["mimo_v2", "template_mimo"]).registry.get("model", "mimo_v2_flash")
    out = make_tiny(spec, tmp_path_factory.mktemp("mimo_v2") / "tiny", seed=0)
    _perturb(out)
    return out


@pytest.fixture(scope="session")
def bridge(mimo_tiny: Path) -> Any:
    """The bridge for :func:`mimo_tiny`, resolved as ``swiftcore export`` does."""
    from swiftcore_megatron import read_hf_config, resolve_bridge

    from swiftcore import load_plugins

    return resolve_bridge(read_hf_config(mimo_tiny), load_plugins(["bridge_mimo_v2"]))[1]


@pytest.fixture(scope="session")
def mcore_tp2(mimo_tiny: Path, bridge: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """:func:`mimo_tiny` converted at tensor parallel 2."""
    from swiftcore_megatron import hf_to_mcore

    out = tmp_path_factory.mktemp("mimo_mcore") / "tp2"
    hf_to_mcore(mimo_tiny, out, bridge, tp=2)
    return out


@pytest.fixture(scope="session")
def mcore_ep2(mimo_tiny: Path, bridge: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """:func:`mimo_tiny` converted at expert parallel 2."""
    from swiftcore_megatron import hf_to_mcore

    out = tmp_path_factory.mktemp("mimo_mcore") / "ep2"
    hf_to_mcore(mimo_tiny, out, bridge, ep=2)
    return out


@pytest.fixture(scope="session")
def mimo_mtp(mimo_tiny: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """:func:`mimo_tiny` with a release-style MTP layer ``model.mtp.layers.0.*`` and ``num_nextn_predict_layers: 1``.

    The layer is a sliding-window attention layer with sinks and a dense MLP, taken from a twin model with one more
    layer of that kind (the release names its pre-MLP norm ``pre_mlp_layernorm``), plus the glue (``enorm``,
    ``hnorm``, ``eh_proj``, ``final_layernorm``); norms and sinks are randomised like the model's.
    """
    import torch
    from swiftcore_megatron import with_mtp_layer
    from transformers import MiMoV2FlashForCausalLM

    gen = torch.Generator().manual_seed(12)

    def randomise(tensors: dict[str, torch.Tensor]) -> None:
        for key, tensor in tensors.items():
            if "norm" in key or "attention_sink_bias" in key:
                tensors[key] = tensor + 0.3 * torch.randn(tensor.shape, generator=gen) + ("sink" in key)

    return with_mtp_layer(
        mimo_tiny,
        tmp_path_factory.mktemp("mimo_mtp") / "hf",
        MiMoV2FlashForCausalLM,
        seed=11,
        layer_kinds={"layer_types": "sliding_attention", "mlp_layer_types": "dense"},
        prefix="model.mtp.layers.0.",
        renames={"post_attention_layernorm": "pre_mlp_layernorm"},
        final_norm="final_layernorm",
        copies={},
        eh_proj_std=0.05,
        generator=gen,
        edit=randomise,
    )


@pytest.fixture(scope="session")
def mtp_bridge(mimo_mtp: Path) -> Any:
    """The bridge for :func:`mimo_mtp`."""
    from swiftcore_megatron import read_hf_config, resolve_bridge

    from swiftcore import load_plugins

    return resolve_bridge(read_hf_config(mimo_mtp), load_plugins(["bridge_mimo_v2"]))[1]
