"""``swiftcore train --train-part thinker|talker|all`` on the tiny Qwen3-Omni: one command for either part.

``talker`` is ``swiftcore omni-talker-train`` run by ``swiftcore train`` (swiftcore-train's ``swiftcore_train_run``
hook): the same talker, bit for bit, from the same arguments; the thinker and Code2Wav are the input's. ``thinker``
is the sft recipe with LoRA, which leaves the checkpoint's talker alone. Options the talker trainer cannot honour
are refused before anything is written.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
import subprocess
from pathlib import Path

import pytest

# make test (CI) leaves this module to make test-all: swiftcore train --train-part; talker training's learning stays
# in make test (test_talker.py) (docs/testing.md, "Two tiers").
pytestmark = pytest.mark.extended

WORDS = ["red", "blue", "green", "sun", "moon", "star", "cat", "dog"]
STEPS = 16


def _cli(*args: str) -> subprocess.CompletedProcess:
    from swiftcore_testing import run_swiftcore, user_env

    proc = run_swiftcore(*args, timeout=900, env=user_env())
    assert proc.returncode == 0, f"swiftcore {args[0]} failed:\n{proc.stderr[-3000:]}"
    return proc


def _refused(*args: str) -> str:
    """Run ``swiftcore ARGS`` in-process; it must fail: return its output (the message)."""
    from click.testing import CliRunner

    from swiftcore.api.cli import cli

    result = CliRunner().invoke(cli, list(args), env={"SWIFTCORE_PLUGINS": None, "SWIFTCORE_PLUGINS_STRICT": None})
    assert result.exit_code != 0, result.output
    # The CLI's own entry point prints a SwiftcoreError; click's runner hands it back as the exception.
    text = f"{result.output} {result.exception if not isinstance(result.exception, SystemExit) else ''}"
    return " ".join(text.split())  # click wraps long messages


@pytest.fixture(scope="module")
def voice(omni, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict], list[dict]]:
    """A synthetic voice (the text decides the codes): a training JSONL of 32 rows and 8 held-out rows."""
    from swiftcore_plugin_qwen3_omni.talker import synthetic_voice_rows

    model, tokenizer = omni
    sentences = [" ".join(pair) for pair in itertools.permutations(WORDS, 2)]
    random.Random(0).shuffle(sentences)
    groups = model.config.talker_config.num_code_groups
    codebook = model.config.code2wav_config.codebook_size
    train = synthetic_voice_rows(tokenizer, sentences[:32], groups, codebook)
    held_out = synthetic_voice_rows(tokenizer, sentences[32:40], groups, codebook)
    path = tmp_path_factory.mktemp("voice") / "voice.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in train), encoding="utf-8")
    return path, train, held_out


def _digests(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir()) if p.is_file()}


def _equal_parts(a, b, part: str) -> bool:
    """Whether ``part`` (thinker, talker, code2wav) of two whole models holds the same tensors, bit for bit."""
    import torch

    left, right = getattr(a, part).state_dict(), getattr(b, part).state_dict()
    return left.keys() == right.keys() and all(torch.equal(left[k], right[k]) for k in left)


@pytest.mark.slow
def test_train_part_talker_is_omni_talker_train_and_learns(omni, tiny_dir: Path, voice, tmp_path: Path) -> None:
    """``swiftcore train --train-part talker`` trains the same talker as ``swiftcore omni-talker-train`` with the same
    steps, learning rate and seed (bit-identical), leaves the thinker and Code2Wav as they were, logs the same
    losses, and held-out sentences of the voice score better than before."""
    import transformers
    from swiftcore_plugin_qwen3_omni.talker import codec_accuracy

    model, tokenizer = omni
    data, _, held_out = voice
    inputs = _digests(tiny_dir)
    common = ["--model", str(tiny_dir), "--dataset", str(data), "--max-steps", str(STEPS), "--learning-rate", "1e-2",
              "--seed", "3"]  # fmt: skip
    out = tmp_path / "run"
    proc = _cli("train", *common, "--train-part", "talker", "--tuner", "full", "--logging-steps", "1", "--no-plot",
                "--output-dir", str(out))  # fmt: skip
    checkpoint = out / f"checkpoint-{STEPS}"
    assert f"checkpoint: {checkpoint}" in proc.stdout
    _cli("omni-talker-train", *common, "--output-dir", str(tmp_path / "reference"))

    trained = transformers.Qwen3OmniMoeForConditionalGeneration.from_pretrained(str(checkpoint)).eval()
    reference = transformers.Qwen3OmniMoeForConditionalGeneration.from_pretrained(str(tmp_path / "reference")).eval()
    assert _equal_parts(trained, reference, "talker")
    for part in ("thinker", "code2wav"):
        assert _equal_parts(trained, model, part), part
    assert not _equal_parts(trained, model, "talker")
    assert _digests(tiny_dir) == inputs  # the input checkpoint is never written to

    logged = [json.loads(line) for line in (out / "logs.jsonl").read_text().splitlines()]
    expected = json.loads((tmp_path / "reference" / "talker_losses.json").read_text())
    assert [r["step"] for r in logged] == list(range(1, STEPS + 1))
    assert [r["loss"] for r in logged] == expected

    before = codec_accuracy(model, tokenizer, held_out)
    after = codec_accuracy(trained, tokenizer, held_out)
    print(f"held-out codec scores before {before}\nafter {after}")
    assert after.first_loss < before.first_loss - 1.0
    assert after.residual_loss < before.residual_loss - 0.3


@pytest.mark.slow
def test_train_part_thinker_trains_a_lora_adapter_and_leaves_the_talker(tiny_dir: Path, tmp_path: Path) -> None:
    """``--train-part thinker``: the sft recipe with LoRA; the adapter adapts thinker modules only and its base is the
    unchanged input checkpoint, so the served model's talker and Code2Wav are the input's, bit for bit."""
    from safetensors.torch import load_file

    rows = [{"messages": [{"role": "user", "content": f"{a} {b}"}, {"role": "assistant", "content": b}]}
            for a, b in itertools.permutations(WORDS[:4], 2)]  # fmt: skip
    data = tmp_path / "chat.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    inputs = _digests(tiny_dir)
    out = tmp_path / "run"
    _cli("train", "--model", str(tiny_dir), "--dataset", str(data), "--train-part", "thinker", "--max-steps", "2",
         "--learning-rate", "1e-2", "--no-plot", "--output-dir", str(out))  # fmt: skip
    checkpoint = out / "checkpoint-2"
    adapter = load_file(str(checkpoint / "adapter_model.safetensors"))
    assert adapter and not [k for k in adapter if "talker" in k or "code2wav" in k]
    assert any("lora_B" in k and bool(v.abs().sum() > 0) for k, v in adapter.items())  # it trained
    config = json.loads((checkpoint / "adapter_config.json").read_text())
    assert Path(config["base_model_name_or_path"]).resolve() == tiny_dir.resolve()
    assert _digests(tiny_dir) == inputs


@pytest.mark.slow
def test_train_part_all_trains_the_talker_then_a_thinker_adapter_on_it(omni, tiny_dir: Path, voice, tmp_path) -> None:
    """``--train-part all`` on rows with both targets (messages and codes): OUTPUT_DIR/checkpoint-N is the talker
    ``omni-talker-train`` trains from the same rows and arguments, with the input's thinker; OUTPUT_DIR/thinker holds
    a LoRA adapter of the thinker whose base is that checkpoint."""
    import transformers
    from safetensors.torch import load_file

    model, _ = omni
    rows = [{"messages": [{"role": "user", "content": r["text"]}, {"role": "assistant", "content": r["text"]}],
             "codes": r["codes"]} for r in voice[1][:8]]  # fmt: skip
    data = tmp_path / "both.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    common = ["--model", str(tiny_dir), "--dataset", str(data), "--max-steps", "4", "--learning-rate", "1e-2",
              "--seed", "5"]  # fmt: skip
    out = tmp_path / "run"
    proc = _cli("train", *common, "--train-part", "all", "--no-plot", "--output-dir", str(out))
    assert f"checkpoint: {out / 'thinker' / 'checkpoint-4'}" in proc.stdout
    _cli("omni-talker-train", *common, "--output-dir", str(tmp_path / "reference"))

    talker = transformers.Qwen3OmniMoeForConditionalGeneration.from_pretrained(str(out / "checkpoint-4")).eval()
    reference = transformers.Qwen3OmniMoeForConditionalGeneration.from_pretrained(str(tmp_path / "reference")).eval()
    assert _equal_parts(talker, reference, "talker") and not _equal_parts(talker, model, "talker")
    assert _equal_parts(talker, model, "thinker") and _equal_parts(talker, model, "code2wav")
    adapter_dir = out / "thinker" / "checkpoint-4"
    adapter = load_file(str(adapter_dir / "adapter_model.safetensors"))
    assert adapter and not [k for k in adapter if "talker" in k or "code2wav" in k]
    assert any("lora_B" in k and bool(v.abs().sum() > 0) for k, v in adapter.items())
    config = json.loads((adapter_dir / "adapter_config.json").read_text())
    assert Path(config["base_model_name_or_path"]).resolve() == (out / "checkpoint-4").resolve()


def test_train_part_refusals(tiny_dir: Path, voice, tmp_path: Path) -> None:
    """Each refusal names the option and what to do, before the output directory is created."""
    import swiftcore

    data = str(voice[0])
    out = tmp_path / "never"
    base = ["train", "--model", str(tiny_dir), "--dataset", data, "--output-dir", str(out)]

    # Another family's checkpoint: its config.json is all a refusal before loading reads (any installed family will
    # do; Qwen3.5's is the one the development environment has next to this plugin).
    if swiftcore.load_plugins().registry.find("model", "qwen3_5") is None:
        pytest.skip("needs another model family installed (swiftcore-plugin-qwen3_5)")
    other = tmp_path / "qwen3_5"
    other.mkdir()
    (other / "config.json").write_text('{"model_type": "qwen3_5", "architectures": ["Qwen3_5ForCausalLM"]}')
    message = _refused("train", "--model", str(other), "--dataset", data, "--output-dir", str(out),
                       "--train-part", "talker", "--tuner", "full")  # fmt: skip
    assert "--train-part talker:" in message and "'qwen3_5' checkpoint" in message and "drop it" in message

    thinker_only = tmp_path / "thinker_only"  # what a fully fine-tuned thinker saves: no talker to train
    thinker_only.mkdir()
    (thinker_only / "config.json").write_text(
        '{"model_type": "qwen3_omni_moe_thinker", "architectures": ["Qwen3OmniMoeThinkerForConditionalGeneration"]}'
    )
    message = _refused("train", "--model", str(thinker_only), "--dataset", data, "--output-dir", str(out),
                       "--train-part", "all")  # fmt: skip
    assert "--train-part all:" in message and "has no talker" in message and "--train-part thinker" in message

    message = _refused(*base, "--train-part", "talker")  # the default tuner, lora
    assert "--train-part talker --tuner lora" in message and "pass --tuner full" in message
    message = _refused(*base, "--train-part", "talker", "--tuner", "full", "--packing")
    assert "--packing is not supported for the talker" in message
    message = _refused(*base, "--train-part", "talker", "--tuner", "full", "--batch-size", "4")
    assert "--batch-size 4 is not supported for the talker" in message
    message = _refused(*base, "--train-part", "talker", "--tuner", "full", "--resume-from-checkpoint", "latest")
    assert "--resume-from-checkpoint latest is not supported for the talker" in message
    message = _refused(*base, "--train-part", "thinker", "--tuner", "full")
    assert "--train-part thinker --tuner full" in message and "use --tuner lora" in message
    message = _refused(*base, "--train-part", "talker", "--recipe", "dpo")
    assert "--train-part belongs to recipe 'sft'" in message

    audio = tmp_path / "audio.jsonl"
    audio.write_text('{"text": "red sun", "audio": "red.wav"}\n', encoding="utf-8")
    message = _refused("train", "--model", str(tiny_dir), "--dataset", str(audio), "--output-dir", str(out),
                       "--train-part", "talker", "--tuner", "full")  # fmt: skip
    assert "audio.jsonl:1:" in message and "codec encoder" in message
    assert not out.exists()
