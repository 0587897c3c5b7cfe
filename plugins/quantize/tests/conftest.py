"""Fixtures of swiftcore-plugin-quantize's tests: tiny checkpoints fully fine-tuned on four made-up facts (so their
greedy answers are known), and their quantized exports, each built once per session."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

# Four short, made-up facts (as tests/test_tiny_lora_learns.py): nothing a random model could guess.
FACTS = [
    ("What is the capital of Zorbia?", "Plimsk."),
    ("Who painted the Blue Moth?", "Anna Verro."),
    ("How many legs has a quib?", "Seven."),
    ("What colour is a tarn fruit?", "Deep violet."),
]
RECORDS = [{"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]} for q, a in FACTS]
# Full fine-tuning, all four facts in each batch: enough for the tiny models to answer every fact greedily.
STEPS, LEARNING_RATE = 40, "3e-3"
FAMILY, PLAIN_CLASS = "qwen3_5", "Qwen3_5ForConditionalGeneration"


class Judge:
    """What the export tests measure a checkpoint with: plain transformers' load, the facts encoded as training
    encoded them, each fact's logits and greedy answer tokens, and the relative logit error against a reference."""

    def __init__(self, plugins: Any) -> None:
        self.plugins = plugins

    def plain(self, model_dir: Path, dtype: Any = None) -> Any:
        """The checkpoint loaded with plain transformers in ``dtype`` (float32 by default); fails on any missing or
        unexpected weight."""
        import torch
        import transformers

        model, info = getattr(transformers, PLAIN_CLASS).from_pretrained(
            str(model_dir), dtype=dtype or torch.float32, output_loading_info=True
        )
        problems = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
        assert not problems, f"{model_dir}: transformers did not load it unchanged: {problems}"
        return model.eval()

    def samples(self, model_dir: Path) -> list[dict[str, Any]]:
        """The facts encoded by the template exactly as training encoded them (prompt and answer, answer labelled)."""
        from swiftcore.api.models import load_tokenizer, resolve_model_spec
        from swiftcore.api.template import SampleEncoder, get_template

        spec = resolve_model_spec(model_dir, self.plugins)
        encoder = SampleEncoder(get_template(spec.default_template, self.plugins), load_tokenizer(model_dir))
        return encoder.train_samples(RECORDS, loss_policy="all_assistant", max_length=128, truncation="error")

    @staticmethod
    def logits_and_answers(model: Any, samples: list[dict[str, Any]]) -> tuple[list[Any], list[list[int]]]:
        """Each sample's logits (float32), and the model's argmax at every answer position given the answer so far:
        when these are the answer tokens, greedy generation reproduces the answer token by token from its prompt."""
        import torch

        logits, answers = [], []
        for sample in samples:
            with torch.no_grad():
                out = model(input_ids=torch.tensor([sample["input_ids"]])).logits[0].float()
            logits.append(out)
            answer = torch.tensor(sample["labels"][1:]) != -100  # position i predicts token i + 1
            answers.append(out[:-1][answer].argmax(-1).tolist())
        return logits, answers

    @staticmethod
    def relative_error(logits: list[Any], reference: list[Any]) -> float:
        """The largest |logit - reference logit| over all samples, divided by the largest |reference logit|."""
        scale = max(float(r.abs().max()) for r in reference)
        return max(float((q - r).abs().max()) for q, r in zip(logits, reference, strict=True)) / scale


@pytest.fixture(scope="session")
def plugins() -> Any:
    """The installed plugins (no SWIFTCORE_PLUGINS from the environment)."""
    import swiftcore

    return swiftcore.load_plugins(env={})


@pytest.fixture(scope="session")
def judge(plugins: Any) -> Judge:
    """The export tests' :class:`Judge`."""
    return Judge(plugins)


@pytest.fixture(scope="session")
def records() -> list[dict[str, Any]]:
    """The facts as chat records."""
    return RECORDS


@pytest.fixture(scope="session")
def facts_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """:data:`RECORDS` as a chat jsonl (training data, and calibration data for the exports)."""
    path = tmp_path_factory.mktemp("facts") / "facts.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    return path


@pytest.fixture(scope="session")
def trained(tiny_model_dir: Callable[[str], Path], facts_file: Path, tmp_path_factory: pytest.TempPathFactory):
    """``trained("qwen3_5")``: the family's tiny checkpoint after ``swiftcore train --tuner full`` on the facts."""
    from swiftcore_testing import run_cli

    made: dict[str, Path] = {}

    def get(family: str) -> Path:
        if family not in made:
            run = tmp_path_factory.mktemp(f"train-{family}") / "run"
            run_cli(
                "train", "--model", str(tiny_model_dir(family)), "--dataset", str(facts_file),
                "--output-dir", str(run), "--tuner", "full", "--max-steps", str(STEPS),
                "--batch-size", str(len(RECORDS)), "--learning-rate", LEARNING_RATE, "--lr-scheduler", "constant",
                "--save-steps", str(STEPS), "--no-plot", "--seed", "0",
            )  # fmt: skip
            made[family] = run / f"checkpoint-{STEPS}"
        return made[family]

    return get


@pytest.fixture(scope="session")
def exported(trained: Callable[[str], Path], facts_file: Path, tmp_path_factory: pytest.TempPathFactory):
    """``exported("qwen3_5", "w4a16", "--group-size", "16")``: the trained checkpoint after
    ``swiftcore export --to-hf OUT --quantize SCHEME`` (calibrated on the facts), and the command's output."""
    from swiftcore_testing import run_cli

    made: dict[tuple[str, ...], tuple[Path, str]] = {}

    def get(family: str, scheme: str, *extra: str) -> tuple[Path, str]:
        key = (family, scheme, *extra)
        if key not in made:
            out = tmp_path_factory.mktemp(f"q-{family}-{scheme}") / "out"
            text = run_cli(
                "export", "--model", str(trained(family)), "--to-hf", str(out), "--quantize", scheme,
                "--calibration-dataset", str(facts_file), "--calibration-samples", "4", *extra,
            )  # fmt: skip
            made[key] = (out, text)
        return made[key]

    return get
