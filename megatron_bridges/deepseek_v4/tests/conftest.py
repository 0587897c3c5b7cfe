"""Tiny DeepSeek-V4 checkpoints (made once per session), their bridge, and cached HF reference logits.

HF initialises many V4 tensors to constants (norms 1, sinks and compressor position biases 0,
hyper-connection bases 0 and scales 1, router biases 0, hash tables all expert 0): with those, a
swapped or dropped mapping could hide. :func:`_perturb` randomises them.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

#: Name parts of the tensors HF initialises to constants.
_CONSTANT_INIT = ("norm", "attn_sink", ".ape", "gate.bias", "hc_")
#: A variant with every attention type and an HCA window short enough for short test sequences.
VARIANT = {
    "layer_types": ["sliding_attention", "heavily_compressed_attention", "compressed_sparse_attention",
                    "heavily_compressed_attention"],
    "mlp_layer_types": ["hash_moe", "moe", "hash_moe", "moe"],
    "compress_rates": {"compressed_sparse_attention": 4, "heavily_compressed_attention": 8},
    "scoring_func": "sigmoid",
}


def _perturb(hf_dir: Path, seed: int) -> None:
    """Randomise the constant-initialised tensors; the hash tables get random experts."""
    import torch
    from safetensors.torch import load_file, save_file

    path = hf_dir / "model.safetensors"
    tensors = load_file(path)
    experts = json.loads((hf_dir / "config.json").read_text())["n_routed_experts"]
    gen = torch.Generator().manual_seed(seed)
    for key, tensor in tensors.items():
        if key.endswith("tid2eid"):
            tensors[key] = torch.randint(0, experts, tensor.shape, generator=gen)
        elif any(part in key for part in _CONSTANT_INIT):
            tensors[key] = tensor + 0.5 * torch.randn(tensor.shape, generator=gen)
    save_file(tensors, path, metadata={"format": "pt"})


@pytest.fixture(scope="session")
def ds4_tiny(tiny_model_dir: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``swiftcore make-tiny deepseek_v4`` with randomised constants (HCA, HCA, HCA, CSA; 3 hash layers)."""
    out = tmp_path_factory.mktemp("ds4") / "tiny"
    shutil.copytree(tiny_model_dir("deepseek_v4"), out)
    _perturb(out, seed=7)
    return out


@pytest.fixture(scope="session")
def ds4_with_mtp(ds4_tiny: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny checkpoint plus ``mtp.*`` tensors (transformers neither loads nor runs them), one in bfloat16."""
    import torch
    from safetensors.torch import load_file, save_file

    out = tmp_path_factory.mktemp("ds4_mtp") / "tiny"
    shutil.copytree(ds4_tiny, out)
    tensors = load_file(out / "model.safetensors")
    gen = torch.Generator().manual_seed(3)
    tensors["mtp.0.e_proj.weight"] = torch.randn(64, 64, generator=gen)
    tensors["mtp.0.enorm.weight"] = torch.randn(64, generator=gen).to(torch.bfloat16)
    save_file(tensors, out / "model.safetensors", metadata={"format": "pt"})
    return out


@pytest.fixture(scope="session")
def ds4_variant(ds4_tiny: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random-init V4 with :data:`VARIANT`'s layer types, HCA windows of 8 tokens and sigmoid routing."""
    import torch
    from transformers import DeepseekV4Config, DeepseekV4ForCausalLM

    config = json.loads((ds4_tiny / "config.json").read_text())
    for key in ("architectures", "transformers_version", "model_type", "dtype", "rope_parameters"):
        config.pop(key, None)
    torch.manual_seed(11)
    model = DeepseekV4ForCausalLM(DeepseekV4Config(**{**config, **VARIANT})).to(torch.float32)
    out = tmp_path_factory.mktemp("ds4_variant") / "tiny"
    model.save_pretrained(out)
    _perturb(out, seed=11)
    return out


@pytest.fixture(scope="session")
def bridge_for() -> Callable[[dict[str, Any]], Any]:
    """``bridge_for(config)``: the installed bridge for a config.json dict, resolved as ``swiftcore export`` does."""
    from swiftcore_megatron import resolve_bridge

    from swiftcore import load_plugins

    plugins = load_plugins(["bridge_deepseek_v4"])
    return lambda config: resolve_bridge(config, plugins)[1]


@pytest.fixture(scope="session")
def bridge(ds4_tiny: Path, bridge_for: Callable[[dict[str, Any]], Any]) -> Any:
    """The bridge for :func:`ds4_tiny`."""
    from swiftcore_megatron import read_hf_config

    return bridge_for(read_hf_config(ds4_tiny))


@pytest.fixture(scope="session")
def mcore_ep2(ds4_with_mtp: Path, bridge: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """:func:`ds4_with_mtp` converted at expert parallel 2."""
    from swiftcore_megatron import hf_to_mcore

    out = tmp_path_factory.mktemp("ds4_mcore") / "ep2"
    hf_to_mcore(ds4_with_mtp, out, bridge, ep=2)
    return out


@pytest.fixture(scope="session")
def state(mcore_ep2: Path, bridge: Any) -> dict[str, Any]:
    """The EP-2 checkpoint merged to one rank, as a single-process model loads it."""
    from swiftcore_megatron import load_mcore_state

    return load_mcore_state(mcore_ep2, bridge)


@pytest.fixture(scope="session")
def hf_reference() -> Callable[[Path, Any], Any]:
    """``hf_reference(hf_dir, tokens)``: transformers' float32 logits, computed once per checkpoint and input."""
    from swiftcore_megatron import hf_logits

    cache: dict[tuple[str, tuple[int, ...]], Any] = {}

    def get(hf_dir: Path, tokens: Any) -> Any:
        key = (str(hf_dir), tuple(tokens.flatten().tolist()))
        if key not in cache:
            cache[key] = hf_logits(hf_dir, tokens)
        return cache[key]

    return get


@pytest.fixture(scope="session")
def mcore_parity(hf_reference: Callable[[Path, Any], Any]) -> Callable[..., Any]:
    """``mcore_parity(hf_dir, bridge, state, tokens)``: the megatron model's logits vs :func:`hf_reference`.

    The same comparison as :func:`swiftcore_megatron.parity.check_parity`, with the HF logits cached
    so that negative controls do not reload transformers.
    """
    import torch
    from swiftcore_megatron import compare_logits, init_model_parallel, load_into_model, mcore_logits

    def run(hf_dir: Path, bridge: Any, state: dict[str, Any], tokens: Any) -> Any:
        init_model_parallel(1, 1)
        model = bridge.build_model(params_dtype=torch.float32)
        load_into_model(model, {k: v.float() if v.is_floating_point() else v for k, v in state.items()})
        return compare_logits(hf_reference(hf_dir, tokens), mcore_logits(model, tokens))

    return run
