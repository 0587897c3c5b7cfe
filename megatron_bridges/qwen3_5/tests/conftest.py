"""The tiny Qwen3.5 checkpoint (``swiftcore make-tiny qwen3_5``), made once per session, and its bridge."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


def _perturb(hf_dir: Path) -> None:
    """Randomise the tensors HF initialises to constants, so a swapped or dropped mapping cannot hide.

    Zero-centred norms start at 0 and the gated norms at 1 (q_norm and k_norm would be
    interchangeable); ``dt_bias`` starts at 1 in every head; the MoE router starts at 0.
    """
    import torch
    from safetensors.torch import load_file, save_file

    path = hf_dir / "model.safetensors"
    tensors = load_file(path)
    gen = torch.Generator().manual_seed(7)
    for key, tensor in tensors.items():
        if key.startswith("model.language_model.") and any(
            part in key for part in ("norm", "dt_bias", "mlp.gate.", "shared_expert_gate")
        ):
            tensors[key] = tensor + 0.3 * torch.randn(tensor.shape, generator=gen)
    save_file(tensors, path, metadata={"format": "pt"})


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``tiny(name)``: the ``make-tiny`` checkpoint of model spec ``name`` with randomised norms, made once."""
    from swiftcore_tiny import make_tiny

    from swiftcore import load_plugins

    built: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in built:
            spec = load_plugins().registry.get("model", name)
            built[name] = make_tiny(spec, tmp_path_factory.mktemp(name) / "tiny")
            _perturb(built[name])
        return built[name]

    return get


@pytest.fixture(scope="session")
def qwen3_5_tiny(tiny: Callable[[str], Path]) -> Path:
    """The tiny ``qwen3_5`` checkpoint (vision tower included)."""
    return tiny("qwen3_5")


@pytest.fixture(scope="session")
def qwen3_5_with_mtp(qwen3_5_tiny: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny checkpoint plus ``mtp.*`` tensors laid out like a released Qwen3.5 checkpoint's."""
    import torch
    from safetensors.torch import load_file, save_file

    out = tmp_path_factory.mktemp("qwen3_5_mtp") / "tiny"
    shutil.copytree(qwen3_5_tiny, out)
    tensors = load_file(out / "model.safetensors")
    hidden = tensors["model.language_model.norm.weight"].shape[0]
    gen = torch.Generator().manual_seed(3)
    tensors["mtp.fc.weight"] = torch.randn(hidden, 2 * hidden, generator=gen)
    tensors["mtp.norm.weight"] = torch.randn(hidden, generator=gen)
    tensors["mtp.pre_fc_norm_hidden.weight"] = torch.randn(hidden, generator=gen).to(torch.bfloat16)
    save_file(tensors, out / "model.safetensors", metadata={"format": "pt"})
    return out


@pytest.fixture(scope="session")
def bridge_for() -> Callable[[dict[str, Any]], Any]:
    """``bridge_for(config)``: the installed bridge for a config.json dict, resolved as ``swiftcore export`` does."""
    from swiftcore_megatron import resolve_bridge

    from swiftcore import load_plugins

    plugins = load_plugins(["bridge_qwen3_5"])
    return lambda config: resolve_bridge(config, plugins)[1]


@pytest.fixture(scope="session")
def bridge(qwen3_5_tiny: Path, bridge_for: Callable[[dict[str, Any]], Any]) -> Any:
    """The bridge for :func:`qwen3_5_tiny`."""
    from swiftcore_megatron import read_hf_config

    return bridge_for(read_hf_config(qwen3_5_tiny))


@pytest.fixture(scope="session")
def mcore_tp2(qwen3_5_tiny: Path, bridge: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """:func:`qwen3_5_tiny` converted at tensor parallel 2."""
    from swiftcore_megatron import hf_to_mcore

    out = tmp_path_factory.mktemp("qwen3_5_mcore") / "tp2"
    hf_to_mcore(qwen3_5_tiny, out, bridge, tp=2)
    return out
