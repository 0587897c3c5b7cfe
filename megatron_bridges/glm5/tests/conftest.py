"""The tiny GLM-5 checkpoint (built once per session with transformers, then perturbed), its bridge and its
TP-2 / EP-2 conversions. Nothing here touches the Hugging Face Hub."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

#: The model plugin's tiny sizes (swiftcore_plugin_glm5.tiny), repeated so this distribution tests alone.
TINY: dict[str, Any] = dict(
    vocab_size=256, hidden_size=128, intermediate_size=128, moe_intermediate_size=32, num_hidden_layers=3,
    first_k_dense_replace=1, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=64, kv_lora_rank=32,
    qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32, index_n_heads=2, index_head_dim=32, index_topk=16,
    n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1, n_group=1, topk_group=1,
    routed_scaling_factor=2.5, norm_topk_prob=True, max_position_embeddings=4096,
    rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0}, tie_word_embeddings=False,
    bos_token_id=None, eos_token_id=[0, 7, 9], pad_token_id=0,
)


@pytest.fixture(scope="session", autouse=True)
def _hub_offline() -> Iterator[None]:
    """Set ``HF_HUB_OFFLINE=1`` for the session, so a stray Hub lookup fails instead of waiting on the network."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_OFFLINE", "1")
        yield


def build_glm5(out: Path, *, mtp: bool = False, **overrides: Any) -> Path:
    """Save a random tiny ``GlmMoeDsaForCausalLM`` to ``out``, then perturb every tensor in place (norms start at
    1, LayerNorm biases and the expert-score bias at 0 in HF's init: mistakes there would not show).

    With ``mtp``, a release-style checkpoint: the model gets ``model.layers.3`` as its MTP layer
    (:func:`swiftcore_megatron.mtp_reference.with_mtp_layer`) before it is perturbed, in the release's layout: the
    layer itself (MLA, indexer, MoE) and DeepSeek-V3's glue, ``enorm``, ``hnorm``, ``eh_proj``, ``shared_head.norm``,
    with ``embed_tokens`` / ``shared_head.head`` copies of the model's embedding and head. config.json says
    ``num_nextn_predict_layers: 1``. transformers loads it as a 3-layer model (it drops the MTP layer).
    """
    import torch
    from swiftcore_megatron import perturb_checkpoint, with_mtp_layer
    from transformers import GlmMoeDsaConfig, GlmMoeDsaForCausalLM

    torch.manual_seed(0)
    GlmMoeDsaForCausalLM(GlmMoeDsaConfig(**{**TINY, **overrides})).save_pretrained(out / "raw")
    if mtp:
        with_mtp_layer(out / "raw", out / "raw_mtp", GlmMoeDsaForCausalLM, seed=0)
    return perturb_checkpoint(out / ("raw_mtp" if mtp else "raw"), out / "hf", seed=1)


def _bridge(hf: Path) -> Any:
    """The installed bridge for ``hf``, resolved as ``swiftcore export`` does."""
    from swiftcore_megatron import read_hf_config, resolve_bridge

    from swiftcore.api import load_plugins

    return resolve_bridge(read_hf_config(hf), load_plugins(["bridge_glm5"]))[1]


@pytest.fixture(scope="session")
def glm5_hf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The perturbed tiny GLM-5 checkpoint."""
    return build_glm5(tmp_path_factory.mktemp("glm5"))


@pytest.fixture(scope="session")
def bridge(glm5_hf: Path) -> Any:
    """The installed bridge for :func:`glm5_hf`."""
    return _bridge(glm5_hf)


@pytest.fixture(scope="session")
def glm5_mtp_hf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The perturbed tiny GLM-5 with its MTP layer (:func:`build_glm5` with ``mtp``)."""
    return build_glm5(tmp_path_factory.mktemp("glm5_mtp"), mtp=True)


@pytest.fixture(scope="session")
def mtp_bridge(glm5_mtp_hf: Path) -> Any:
    """The installed bridge for :func:`glm5_mtp_hf`."""
    return _bridge(glm5_mtp_hf)


def _conversion(checkpoint: str, bridge: str, tp: int, ep: int) -> Any:
    """A session fixture: the ``checkpoint`` fixture's checkpoint converted by the ``bridge`` fixture's bridge at
    TP ``tp`` and EP ``ep``."""

    def converted(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
        from swiftcore_megatron import hf_to_mcore

        out = tmp_path_factory.mktemp(checkpoint) / f"tp{tp}_ep{ep}"
        hf_to_mcore(request.getfixturevalue(checkpoint), out, request.getfixturevalue(bridge), tp=tp, ep=ep)
        return out

    converted.__doc__ = f":func:`{checkpoint}` converted at TP {tp}, EP {ep}."
    return pytest.fixture(scope="session")(converted)


mcore_tp1 = _conversion("glm5_hf", "bridge", 1, 1)
mcore_tp2 = _conversion("glm5_hf", "bridge", 2, 1)
mcore_ep2 = _conversion("glm5_hf", "bridge", 1, 2)  # two experts per rank
mtp_tp1 = _conversion("glm5_mtp_hf", "mtp_bridge", 1, 1)
mtp_tp2 = _conversion("glm5_mtp_hf", "mtp_bridge", 2, 1)
mtp_ep2 = _conversion("glm5_mtp_hf", "mtp_bridge", 1, 2)


@pytest.fixture(scope="session")
def run_ranks() -> Any:
    """:func:`_run_ranks`, for the test modules (a conftest is not importable under pytest's importlib mode)."""
    return _run_ranks


def _run_ranks(tp: int, ep: int, hf: Path, mcore: Path, tokens: Any, work: Path, *extra: str) -> Any:
    """Run ``tests/mcore_rank.py`` as ``tp * ep`` local gloo processes; returns what rank 0 saved."""
    import torch
    from swiftcore_megatron import free_port

    torch.save({"tokens": tokens}, work / "inputs.pt")
    script, port, out = str(Path(__file__).with_name("mcore_rank.py")), str(free_port()), work / "out.pt"
    env = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")}
    env["OMP_NUM_THREADS"] = "1"
    args = [str(tp), str(ep), port, str(hf), str(mcore), str(work / "inputs.pt"), str(out), *extra]
    ranks = [subprocess.Popen([sys.executable, script, str(r), *args], env=env, stderr=subprocess.PIPE, text=True)
             for r in range(tp * ep)]
    errors = [p.communicate(timeout=300)[1] for p in ranks]
    assert all(p.returncode == 0 for p in ranks), "\n".join(e[-2000:] for e in errors)
    return torch.load(out)
