"""``swiftcore train --recipe dpo|rm`` end to end through the CLI, and the options' scoping."""

from __future__ import annotations

import json
from pathlib import Path

ROWS = [
    {"prompt": "say apple", "chosen": "apple apple", "rejected": "pear"},
    {"chosen": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello!"}],
     "rejected": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "go away"}]},
    {"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}],
     "rejected_response": "5"},
]  # fmt: skip


def test_dpo_from_the_cli_saves_a_plain_peft_adapter(tiny_model_dir, plugins, write_jsonl, run_cli, tmp_path: Path):
    import torch
    from peft import PeftModel

    from swiftcore.api.models import load_model, resolve_model_spec

    model_dir = str(tiny_model_dir("qwen3_5"))
    out = tmp_path / "dpo"
    output = run_cli(
        "train", "--recipe", "dpo", "--model", model_dir, "--dataset", str(write_jsonl(ROWS)),
        "--tuner", "lora", "--output-dir", str(out), "--max-steps", "2", "--batch-size", "3",
        "--beta", "0.2", "--loss-type", "ipo", "--logging-steps", "1",
    )  # fmt: skip
    assert "trained 2 steps on 3 samples" in output, output
    checkpoint = out / "checkpoint-2"
    assert (checkpoint / "adapter_config.json").is_file() and (checkpoint / "adapter_model.safetensors").is_file()
    assert not (checkpoint / "ref").exists()  # no copy of the adapter as a reference
    record = json.loads((checkpoint / "swiftcore_args.json").read_text())
    assert record["preference"]["beta"] == 0.2 and record["preference"]["loss_type"] == ["ipo"]
    assert record["swiftcore_args"]["recipe"] == "dpo"
    # As SFT's checkpoints: the thinking mode inference defaults to, and the multimodal family's processor files.
    assert record["generation_defaults"] == {"chat_template_kwargs": {"enable_thinking": False}}
    assert (checkpoint / "processor_config.json").is_file()
    logs = [json.loads(line) for line in (out / "logs.jsonl").read_text().splitlines()]
    assert any("rewards/margins" in r for r in logs)
    assert (out / "loss.png").is_file() and (out / "reward_margin.png").is_file()

    base = load_model(resolve_model_spec(model_dir, plugins), model_dir, plugins, torch_dtype="float32")
    model = PeftModel.from_pretrained(base, str(checkpoint)).eval()
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([[1, 2, 3]])).logits
    assert torch.isfinite(logits).all()


def test_rm_from_the_cli(tiny_model_dir, write_jsonl, run_cli, tmp_path: Path) -> None:
    from transformers import AutoModelForSequenceClassification

    out = tmp_path / "rm"
    run_cli(
        "train", "--recipe", "rm", "--model", str(tiny_model_dir("qwen3_5")), "--dataset", str(write_jsonl(ROWS)),
        "--output-dir", str(out), "--max-steps", "1", "--batch-size", "3", "--no-plot",
        "--center-rewards-coefficient", "0.01",
    )  # fmt: skip
    assert AutoModelForSequenceClassification.from_pretrained(str(out / "checkpoint-1")).config.num_labels == 1


def _refused(*args: str) -> str:
    """Run ``swiftcore ARGS`` in-process, expecting it to fail; return its output (click's usage errors included)."""
    from click.testing import CliRunner

    from swiftcore.api.cli import cli

    result = CliRunner().invoke(cli, list(args), env={"SWIFTCORE_PLUGINS": None, "SWIFTCORE_PLUGINS_STRICT": None})
    assert result.exit_code != 0, result.output
    return result.output + (str(result.exception) if result.exception else "")


def test_options_belong_to_their_recipe(write_jsonl, run_cli, tmp_path: Path) -> None:
    data = str(write_jsonl(ROWS))
    shown = run_cli("train", "--recipe", "dpo", "--help")  # the help shows the chosen recipe's options
    assert "[recipe dpo" in shown and "--loss-type" in shown and "[recipe rm]" not in shown
    assert "[recipe rm]" in run_cli("train", "--recipe", "rm", "--help")
    listed = run_cli("recipes")
    for recipe in ("dpo", "kto", "cpo", "simpo", "orpo", "rm"):
        assert f"\n{recipe} " in listed, (recipe, listed)
    refused = _refused("train", "--model", "m", "--dataset", data, "--beta", "0.5")
    assert "--beta belongs to recipe 'dpo' or 'kto'" in refused, refused
    refused = _refused("train", "--recipe", "orpo", "--model", "m", "--dataset", data, "--loss-type", "x")
    assert "--loss-type belongs to recipe" in refused, refused
    out = tmp_path / "o"
    refused = _refused(
        "train", "--recipe", "dpo", "--model", "m", "--dataset", data, "--loss-type", "nope", "--output-dir", str(out)
    )
    assert "--loss-type" in refused and "'nope'" in refused and not out.exists(), refused


def test_loss_chunk_size_reaches_dpo_and_is_refused_where_no_recipe_reads_it(
    tiny_model_dir, write_jsonl, run_cli, tmp_path: Path
) -> None:
    """``--loss-chunk-size`` (swiftcore-train's option) is also dpo's, mpo's and kto's: the value the run records is
    the one given; a recipe that does not read it refuses it by name."""
    data, out = str(write_jsonl(ROWS)), tmp_path / "dpo"
    output = run_cli(
        "train", "--recipe", "dpo", "--model", str(tiny_model_dir("qwen3_5")), "--dataset", data, "--tuner", "lora",
        "--output-dir", str(out), "--max-steps", "1", "--batch-size", "3", "--loss-chunk-size", "5",
    )  # fmt: skip
    assert "trained 1 steps" in output or "trained 1 step" in output, output
    record = json.loads((out / "checkpoint-1" / "swiftcore_args.json").read_text())
    assert record["preference"]["loss_chunk_size"] == 5
    refused = _refused("train", "--recipe", "orpo", "--model", "m", "--dataset", data, "--loss-chunk-size", "5")
    assert "--loss-chunk-size belongs to recipe" in refused, refused
