"""``swiftcore train --engine megatron`` on a GLM-5 checkpoint with its MTP layer (``num_nextn_predict_layers: 1``).

The bridge builds the MTP layer as megatron-core's MTP block, so megatron trains it with the model, and the
checkpoint written back is a release-style one: the trained MTP layer under ``model.layers.{N}``, with its
``embed_tokens`` / ``shared_head.head`` copies equal to the trained embedding and head (megatron shares them).
The MTP loss's exact value against a written-out reference is checked in the glm5 bridge's tests.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent


def with_mtp_layer(base: Path, out: Path) -> Path:
    """A copy of the tiny GLM-5 ``base`` with a release-style MTP layer, taken from a twin with one more layer."""
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import GlmMoeDsaConfig, GlmMoeDsaForCausalLM

    shutil.copytree(base, out)
    config = json.loads((base / "config.json").read_text())
    n, hidden = config["num_hidden_layers"], config["hidden_size"]
    twin = {k: v for k, v in config.items() if k not in ("architectures", "transformers_version")}
    twin["num_hidden_layers"] = n + 1
    for key in ("mlp_layer_types", "indexer_types", "layer_types"):
        if isinstance(twin.get(key), list):
            twin[key] = twin[key] + twin[key][-1:]
    torch.manual_seed(5)
    GlmMoeDsaForCausalLM(GlmMoeDsaConfig(**twin)).save_pretrained(out / "twin")
    m = f"model.layers.{n}."
    mtp = {k: v for k, v in load_file(out / "twin" / "model.safetensors").items() if k.startswith(m)}
    shutil.rmtree(out / "twin")
    tensors = load_file(out / "model.safetensors")
    mtp.update(
        {
            m + "enorm.weight": torch.ones(hidden),
            m + "hnorm.weight": torch.ones(hidden),
            m + "eh_proj.weight": torch.randn(hidden, 2 * hidden) * 0.02,
            m + "shared_head.norm.weight": torch.ones(hidden),
            m + "embed_tokens.weight": tensors["model.embed_tokens.weight"].clone(),
            m + "shared_head.head.weight": tensors["lm_head.weight"].clone(),
        }
    )
    save_file({**tensors, **mtp}, out / "model.safetensors", metadata={"format": "pt"})
    config["num_nextn_predict_layers"] = 1
    (out / "config.json").write_text(json.dumps(config, indent=2))
    return out


def test_megatron_trains_the_mtp_layer_and_writes_it_back(tiny_model_dir, tmp_path: Path) -> None:
    import torch
    from safetensors.torch import load_file
    from swiftcore_testing.processes import user_env

    model = with_mtp_layer(tiny_model_dir("glm5"), tmp_path / "glm5-mtp")
    data = tmp_path / "train.jsonl"
    data.write_text(
        "".join(
            json.dumps(
                {
                    "messages": [
                        {"role": "user", "content": f"What is {i} plus {2 * i + 1}?"},
                        {"role": "assistant", "content": f"{i} plus {2 * i + 1} is {3 * i + 1}."},
                    ]
                }
            )
            + "\n"
            for i in range(24)
        )
    )
    out = tmp_path / "run"
    done = subprocess.run(
        [
            str(BIN / "swiftcore"),
            "train",
            "--model",
            str(model),
            "--dataset",
            str(data),
            "--output-dir",
            str(out),
            "--engine",
            "megatron",
            "--tuner",
            "full",
            "--max-steps",
            "6",
            "--batch-size",
            "2",
            "--learning-rate",
            "5e-4",
            "--logging-steps",
            "1",
            "--save-steps",
            "6",
            "--seed",
            "7",
            "--no-plot",
        ],
        env=user_env(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    losses = [r["loss"] for r in map(json.loads, (out / "logs.jsonl").read_text().splitlines()) if "loss" in r]
    assert len(losses) == 6 and losses[-1] < losses[0], losses

    base, trained = load_file(model / "model.safetensors"), load_file(out / "checkpoint-6" / "model.safetensors")
    assert trained.keys() == base.keys()  # the MTP layer is written back, nothing is dropped
    for key in (
        "model.layers.3.eh_proj.weight",
        "model.layers.3.enorm.weight",
        "model.layers.3.mlp.gate.weight",
        "model.layers.3.self_attn.kv_b_proj.weight",
    ):
        assert not torch.equal(trained[key], base[key]), f"{key} was not trained"
    assert torch.equal(trained["model.layers.3.embed_tokens.weight"], trained["model.embed_tokens.weight"])
    assert torch.equal(trained["model.layers.3.shared_head.head.weight"], trained["lm_head.weight"])
    assert not torch.equal(trained["model.embed_tokens.weight"], base["model.embed_tokens.weight"])
