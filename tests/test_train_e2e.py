"""`swiftcore train` end to end per family: make-tiny -> train (LoRA) -> load back with plain libraries.

Full fine-tuning per family is trained (and loaded back with plain transformers) by the round trips,
``test_train_serve_roundtrip.py`` and ``test_train_serve_roundtrip_asr.py``.

The runs that train go through the CLI in-process (``run_cli``, click's runner on the real ``swiftcore`` group), and
so does the refusal that needs the tokenizer (the CLI's ``main``, as the console script calls it): torch and
transformers load once for the module instead of once per command (about 8 s of CPU each on 2 cores). The refusals
that come before any model library loads run ``swiftcore`` in a process of its own, as a user's (``run_swiftcore``).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import pytest
from swiftcore_testing import run_cli, run_swiftcore

FAMILIES = ["qwen3_5", "gemma4", "deepseek_v4", "qwen3_asr", "mimo_v2_flash", "olmoe", "glm5"]


def _rows(n: int = 24) -> list[dict]:
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]
    return [
        {
            "messages": [
                {"role": "user", "content": f"Say {words[i % 8]} {i}."},
                {"role": "assistant", "content": f"{words[i % 8]} {i}" + " again" * (i % 3)},
            ]
        }
        for i in range(n)
    ]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("data") / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _rows()))
    return path


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWIFTCORE_")}
    env["HF_HUB_OFFLINE"] = "1"
    return env


def train_cli(*args: str) -> None:
    """``swiftcore train ARGS`` in-process; the test fails (with the output and traceback) unless it succeeds."""
    run_cli("train", *args)


def train_process(*args: str) -> subprocess.CompletedProcess:
    """``swiftcore train ARGS`` in a process of its own, as a user runs it (forked: see ``run_swiftcore``)."""
    return run_swiftcore("train", *args, env=_env(), timeout=600)


def train_refused(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """``swiftcore train ARGS`` through the CLI's ``main`` in-process; it must refuse with exit code 2: its stderr.

    An exception that ``main`` lets through (a traceback a user would see) fails the test here."""
    from swiftcore.cli.main import main

    for name in ("SWIFTCORE_PLUGINS", "SWIFTCORE_PLUGINS_STRICT"):  # a user's environment (conftest restores them)
        os.environ.pop(name, None)
    capsys.readouterr()
    code = main(["train", *args])
    err = capsys.readouterr().err
    assert code == 2, err
    return err


def _logged_losses(output_dir: Path) -> list[tuple[int, float]]:
    rows = [json.loads(line) for line in (output_dir / "logs.jsonl").read_text().splitlines()]
    return [(r["step"], r["loss"]) for r in rows if "loss" in r]


def _logits(model, input_ids):
    import torch

    with torch.no_grad():
        return model(input_ids=input_ids).logits


@pytest.mark.parametrize("family", FAMILIES)
def test_lora_adapter_loads_with_plain_peft_and_matches(family, tiny_model_dir, dataset, tmp_path, plain_class) -> None:
    import torch
    from peft import PeftModel
    from swiftcore_infer import TransformersEngine

    from swiftcore import load_plugins

    model_dir = tiny_model_dir(family)
    out = tmp_path / "run"
    train_cli(
        "--model",
        str(model_dir),
        "--dataset",
        str(dataset),
        "--output-dir",
        str(out),
        "--tuner",
        "lora",
        "--max-steps",
        "4",
        "--batch-size",
        "4",
        "--learning-rate",
        "5e-3",
        "--logging-steps",
        "1",
        "--max-length",
        "128",
    )
    losses = [loss for _, loss in _logged_losses(out)]
    assert len(losses) == 4 and all(torch.isfinite(torch.tensor(losses)))
    checkpoint = out / "checkpoint-4"
    assert (checkpoint / "adapter_config.json").exists() and (checkpoint / "adapter_model.safetensors").exists()
    assert json.loads((out / "args.json").read_text())["model_spec"]["name"] == family

    # Plain transformers + plain peft, no swiftcore involved.
    cls = plain_class(family)
    base = cls.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    ids = torch.tensor([[5, 17, 42, 99, 7, 3, 64, 21]])
    base_logits = _logits(base, ids)
    plain = PeftModel.from_pretrained(base, str(checkpoint)).eval()
    plain_logits = _logits(plain, ids)
    # swiftcore's own load of the same checkpoint (the base model is found from the adapter).
    engine = TransformersEngine(checkpoint, load_plugins(env={}))
    ours = _logits(engine.model, ids)
    assert torch.allclose(plain_logits, ours, atol=1e-6, rtol=0)
    assert (plain_logits - base_logits).abs().max() > 1e-4, "the adapter changed nothing"


def test_packing_and_padding_free_train_to_finite_loss(tiny_model_dir, dataset, tmp_path) -> None:
    model_dir = tiny_model_dir("qwen3_5")
    for flag in ("--packing", "--padding-free"):
        out = tmp_path / flag.strip("-")
        train_cli(
            "--model",
            str(model_dir),
            "--dataset",
            str(dataset),
            "--output-dir",
            str(out),
            flag,
            "--max-steps",
            "2",
            "--batch-size",
            "2",
            "--max-length",
            "128",
            "--logging-steps",
            "1",
        )
        losses = [loss for _, loss in _logged_losses(out)]
        assert len(losses) == 2 and all(math.isfinite(x) and x > 0 for x in losses), losses


# ----------------------------------------------------------------------------------- bad input


def test_bad_dataset_row_names_file_and_line(tiny_model_dir, tmp_path) -> None:
    data = tmp_path / "bad.jsonl"
    rows = _rows(3)
    rows[1]["messages"][0]["role"] = "bot"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    proc = train_process(
        "--model",
        str(tiny_model_dir("qwen3_5")),
        "--dataset",
        str(data),
        "--output-dir",
        str(tmp_path / "o"),
    )
    assert proc.returncode == 2
    assert "bad.jsonl:2" in proc.stderr and "unknown role 'bot'" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "o").exists(), "nothing may be written before the input is checked"


def test_model_dir_without_config_is_named(tmp_path, dataset) -> None:
    empty = tmp_path / "empty-model"
    empty.mkdir()
    proc = train_process("--model", str(empty), "--dataset", str(dataset))
    assert proc.returncode == 2
    assert str(empty) in proc.stderr and "config.json" in proc.stderr


def test_unclaimed_model_type_suggests_the_plugin(tmp_path, dataset) -> None:
    model = tmp_path / "falcon"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "falcon9", "architectures": ["Falcon9ForCausalLM"]}))
    proc = train_process("--model", str(model), "--dataset", str(dataset))
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "falcon9" in proc.stderr and "swiftcore-plugin-<family>" in proc.stderr
    assert "pip install" not in proc.stderr  # never an install command for a name that may be mistyped


def test_template_that_does_not_fit_the_tokenizer_is_refused(tiny_model_dir, dataset, tmp_path, capsys) -> None:
    stderr = train_refused(
        capsys,
        "--model",
        str(tiny_model_dir("qwen3_5")),
        "--dataset",
        str(dataset),
        "--template",
        "gemma4",
        "--output-dir",
        str(tmp_path / "o"),
    )
    assert "template 'gemma4'" in stderr and "does not have" in stderr


def _media_files(folder: Path) -> tuple[Path, Path]:
    import math
    import struct
    import wave

    from PIL import Image

    image = folder / "square.png"
    Image.new("RGB", (64, 48), (200, 30, 30)).save(image)
    audio = folder / "tone.wav"
    with wave.open(str(audio), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(b"".join(struct.pack("<h", int(8000 * math.sin(i * 0.1))) for i in range(16000)))
    return image, audio


@pytest.mark.parametrize(
    ("family", "kind"), [("qwen3_5", "image"), ("gemma4", "image"), ("gemma4", "audio"), ("qwen3_asr", "audio")]
)
def test_multimodal_samples_train_through_the_cli(family, kind, tiny_model_dir, tmp_path) -> None:
    image, audio = _media_files(tmp_path)
    media = {"image": str(image), "audio": str(audio)}[kind]
    rows = [
        {
            "messages": [
                {"role": "user", "content": [{"type": kind, kind: media}, {"type": "text", "text": f"Describe {i}."}]},
                {"role": "assistant", "content": f"A {kind} number {i}."},
            ]
        }
        for i in range(4)
    ]
    data = tmp_path / "mm.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "run"
    train_cli(
        "--model",
        str(tiny_model_dir(family)),
        "--dataset",
        str(data),
        "--output-dir",
        str(out),
        "--max-steps",
        "2",
        "--batch-size",
        "2",
        "--logging-steps",
        "1",
        "--max-length",
        "1024",
        "--no-freeze-vision" if kind == "image" else "--freeze-vision",
    )
    import math

    losses = [loss for _, loss in _logged_losses(out)]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses)
