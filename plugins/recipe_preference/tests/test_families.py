"""``dpo`` runs on every family's tiny checkpoint (Qwen3.5, Gemma 4, DeepSeek-V4 with its MoE router, Qwen3-ASR's
text path) and saves an adapter plain peft loads."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from swiftcore_train import TrainConfig

ROWS = [
    {"prompt": "say apple", "chosen": "apple apple", "rejected": "pear"},
    {"prompt": "name a colour", "chosen": "blue", "rejected": "a loud noise"},
]


@pytest.mark.parametrize("family", ["qwen3_5", "gemma4", "deepseek_v4", "qwen3_asr"])
def test_dpo_runs_on_every_family(family: str, tiny_model_dir, plugins, write_jsonl, tmp_path: Path) -> None:
    from peft import PeftModel
    from swiftcore_recipe_preference.dpo import run_dpo

    from swiftcore.api.models import load_model, resolve_model_spec

    model_dir = str(tiny_model_dir(family))
    cfg = TrainConfig(
        model=model_dir,
        dataset=(str(write_jsonl(ROWS)),),
        output_dir=str(tmp_path / "run"),
        max_steps=2,
        batch_size=2,
        logging_steps=1,
        plot=False,
        recipe="dpo",
    )
    result = run_dpo(cfg, plugins)
    losses = [json.loads(line)["loss"] for line in result.log_file.read_text().splitlines() if '"loss"' in line]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses)
    assert losses[0] == pytest.approx(math.log(2), abs=1e-5)  # policy == reference at step 1
    base = load_model(resolve_model_spec(model_dir, plugins), model_dir, plugins, torch_dtype="float32")
    PeftModel.from_pretrained(base, str(result.last_checkpoint))
