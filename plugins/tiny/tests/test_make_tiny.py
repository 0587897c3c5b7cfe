"""make_tiny and ``swiftcore make-tiny`` on a stand-in family (a tiny Qwen3), independent of model plugins."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from swiftcore_tiny import TinyModelError, describe_checkpoint, make_tiny

from swiftcore import ModelSpec, hookimpl

SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
TEMPLATE = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
HERE = __name__


def tiny_tokenizer(out_dir: Path) -> None:
    from swiftcore_tiny import build_tiny_tokenizer
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    build_tiny_tokenizer(
        out_dir,
        special_tokens=SPECIALS,
        eos="<|im_end|>",
        pad="<|endoftext|>",
        chat_template=TEMPLATE,
        style="split_bytelevel",
        split_regex=PRETOKENIZE_REGEX,
        tokenizer_class="Qwen2Tokenizer",
        vocab_size=320,
    )


def tiny_config(tokenizer=None):
    from transformers import Qwen3Config

    return Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


def too_small_config(tokenizer=None):
    from transformers import Qwen3Config

    return Qwen3Config(
        vocab_size=8,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
    )


def _spec(config: str = "tiny_config") -> ModelSpec:
    return ModelSpec(
        name="standin",
        model_types=("qwen3",),
        model_class="transformers:Qwen3ForCausalLM",
        tiny_config=f"{HERE}:{config}",
        tiny_tokenizer=f"{HERE}:tiny_tokenizer",
    )


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny(_spec(), tmp_path_factory.mktemp("tiny") / "standin", seed=0)


def test_checkpoint_loads_with_plain_transformers(tiny_dir: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(tiny_dir))
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_dir))
    assert model.config.vocab_size == len(tokenizer) == 320
    assert model.generation_config.eos_token_id == tokenizer.convert_tokens_to_ids("<|im_end|>")
    ids = tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], return_tensors="pt", return_dict=True)
    loss = model(input_ids=ids["input_ids"], labels=ids["input_ids"]).loss
    assert torch.isfinite(loss)


def test_describe_counts_parameters_and_files(tiny_dir: Path) -> None:
    from transformers import AutoModelForCausalLM

    info = describe_checkpoint(tiny_dir)
    model = AutoModelForCausalLM.from_pretrained(str(tiny_dir))
    assert info.parameters == sum(p.numel() for p in model.state_dict().values())
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= set(info.files)


def test_same_seed_same_weights_other_seed_other_weights(tiny_dir: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file

    first = load_file(str(tiny_dir / "model.safetensors"))
    same = load_file(str(make_tiny(_spec(), tmp_path / "same", seed=0) / "model.safetensors"))
    other = load_file(str(make_tiny(_spec(), tmp_path / "other", seed=1) / "model.safetensors"))
    key = "model.layers.0.self_attn.q_proj.weight"
    assert first[key].equal(same[key])
    assert not first[key].equal(other[key])


def test_refuses_a_non_empty_directory_unless_overwrite(tiny_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "busy"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(TinyModelError, match="exists and is not empty.*--force"):
        make_tiny(_spec(), out)
    assert (out / "keep.txt").read_text() == "mine"
    make_tiny(_spec(), out, overwrite=True)
    assert not (out / "keep.txt").exists()
    assert (out / "config.json").is_file()


def test_a_failed_build_leaves_nothing_behind(tmp_path: Path) -> None:
    with pytest.raises(TinyModelError, match="vocab_size 8 is smaller than its tiny tokenizer"):
        make_tiny(_spec("too_small_config"), tmp_path / "broken")
    assert list(tmp_path.iterdir()) == []


def test_a_tokenizer_retrained_on_texts_keeps_its_layout_and_shortens_them(tiny_dir: Path, tmp_path: Path) -> None:
    """``tokenizer_texts``: the tokenizer learns the texts (a repeated long prompt takes far fewer tokens), keeps
    the special tokens and chat template, and the model's vocabulary follows it."""
    import json

    from transformers import AutoTokenizer

    prompt = (
        "<|im_start|>system\nYou may call tools: add(a, b) adds two integers; mul(a, b) multiplies them.<|im_end|>\n"
    )
    texts = [prompt + f"<|im_start|>user\nWhat is {a} plus {b}?<|im_end|>\n" for a, b in ((3, 4), (5, 8))]
    retrained = make_tiny(_spec(), tmp_path / "retrained", seed=0, tokenizer_texts=texts, vocab_size=600)
    old, new = AutoTokenizer.from_pretrained(tiny_dir), AutoTokenizer.from_pretrained(retrained)
    assert len(new(texts[0]).input_ids) < len(old(texts[0]).input_ids) / 2
    assert new.decode(new(texts[0]).input_ids) == texts[0]
    assert [new.convert_tokens_to_ids(t) for t in SPECIALS] == [old.convert_tokens_to_ids(t) for t in SPECIALS]
    assert new.chat_template == TEMPLATE and new.eos_token == "<|im_end|>"
    assert json.loads((retrained / "config.json").read_text())["vocab_size"] == len(new) > len(old)


def test_a_spec_without_tiny_config_is_refused(tmp_path: Path) -> None:
    spec = ModelSpec(name="big", model_types=("big",), model_class="transformers:AutoModelForCausalLM")
    with pytest.raises(TinyModelError, match="declares no tiny_config"):
        make_tiny(spec, tmp_path / "x")


class _StandIn:
    SWIFTCORE_API = "1.0"

    @hookimpl
    def swiftcore_register_models(self) -> list[ModelSpec]:
        return [_spec()]


@pytest.fixture
def cli_plugins(monkeypatch: pytest.MonkeyPatch):
    """Make the CLI load only the built-ins plus the stand-in family."""
    from swiftcore import _plugins

    monkeypatch.setenv("SWIFTCORE_PLUGINS", "")  # the CLI exports its plugin set; monkeypatch restores it
    real = _plugins.load_plugins

    def load(*args, **kwargs):
        plugins = real(*args, **kwargs)
        plugins.add(_StandIn(), "standin_plugin")
        return plugins

    monkeypatch.setattr(_plugins, "load_plugins", load)


def test_cli_writes_and_reports(cli_plugins, tmp_path: Path) -> None:
    from swiftcore.cli.main import cli

    out = tmp_path / "cli"
    result = CliRunner().invoke(cli, ["make-tiny", "standin", str(out), "--seed", "3"])
    assert result.exit_code == 0, result.output
    assert "Wrote tiny 'standin' from standin_plugin" in result.output
    assert f"parameters: {describe_checkpoint(out).parameters:,}" in result.output
    assert "model.safetensors" in result.output

    again = CliRunner().invoke(cli, ["make-tiny", "standin", str(out)])
    assert again.exit_code != 0
    assert "exists and is not empty" in str(again.exception)
    forced = CliRunner().invoke(cli, ["make-tiny", "standin", str(out), "--force"])
    assert forced.exit_code == 0, forced.output


def test_cli_unknown_model_says_what_to_install(cli_plugins, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from swiftcore.cli.main import main

    assert main(["make-tiny", "nope_model", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "nope_model" in err and "swiftcore-plugin-<name>" in err and "pip install" not in err
    assert not (tmp_path / "x").exists()


def test_importing_models_package_stays_light() -> None:
    import subprocess

    code = (
        "import sys, swiftcore.models, swiftcore_testing.model_spec_checks, swiftcore_tiny.command; "
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


class _Recorder:
    SWIFTCORE_API = "1.0"

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    @hookimpl
    def swiftcore_post_model_load(self, model, spec, model_dir) -> None:
        self.calls.append((type(model).__name__, spec.name, model_dir))


def test_load_model_uses_the_spec_and_runs_post_load_hooks(tiny_dir: Path, swiftcore_plugins, register_plugin) -> None:
    import torch

    from swiftcore.models import load_model

    recorder = _Recorder()
    register_plugin(recorder, name="recorder")
    model = load_model(_spec(), tiny_dir, swiftcore_plugins, torch_dtype="bfloat16")
    assert type(model).__name__ == "Qwen3ForCausalLM"
    assert next(model.parameters()).dtype == torch.bfloat16
    assert recorder.calls == [("Qwen3ForCausalLM", "standin", str(tiny_dir))]


def test_load_model_rejects_an_unknown_dtype(tiny_dir: Path) -> None:
    from swiftcore.errors import SwiftcoreError
    from swiftcore.models import load_model

    with pytest.raises(SwiftcoreError, match="torch_dtype 'float99' is not a torch dtype"):
        load_model(_spec(), tiny_dir, None, torch_dtype="float99")


def test_load_model_checks_requirements_first(tiny_dir: Path) -> None:
    from dataclasses import replace

    from swiftcore.models import RequirementsError, load_model

    with pytest.raises(RequirementsError, match="pip install 'transformers>=999'"):
        load_model(replace(_spec(), requires=("transformers>=999",)), tiny_dir)
