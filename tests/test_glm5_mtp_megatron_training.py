"""``swiftcore train --engine megatron`` on a GLM-5 checkpoint with its MTP layer (``num_nextn_predict_layers: 1``).

The bridge builds the MTP layer as megatron-core's MTP block, so megatron trains it with the model, and the
checkpoint written back is a release-style one: the trained MTP layer under ``model.layers.{N}``, with its
``embed_tokens`` / ``shared_head.head`` copies equal to the trained embedding and head (megatron shares them).
The MTP loss's exact value against a written-out reference is checked in the glm5 bridge's tests.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent


def test_megatron_trains_the_mtp_layer_and_writes_it_back(tiny_model_dir, tmp_path: Path) -> None:
    import torch
    from safetensors.torch import load_file
    from swiftcore_megatron import with_mtp_layer
    from swiftcore_testing import user_env
    from transformers import GlmMoeDsaForCausalLM

    # A release-style MTP layer, taken from a twin with one more layer.
    model = with_mtp_layer(tiny_model_dir("glm5"), tmp_path / "glm5-mtp", GlmMoeDsaForCausalLM, seed=5)
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
