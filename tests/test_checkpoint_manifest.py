"""The checkpoint manifest (public-API issue, point 6): every checkpoint and adapter records family, template,
head, tuner, recipe and plugin versions; infer and export read it back, and warn on mismatch.

The LoRA run trains a tiny qwen3_5 with ``--template qwen3`` (its tokenizer has every ChatML token qwen3 needs),
whose generation prompt differs from qwen3_5's (the base's default) in thinking mode: qwen3 opens the
assistant turn bare, qwen3_5 with ``<think>``. The prompt ids ``swiftcore infer`` encodes show which template
served the adapter.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

import pytest
from swiftcore_testing import run_cli, run_swiftcore

TRAINED_TEMPLATE = "qwen3"  # not the tiny qwen3_5 base's default template
BASE_TEMPLATE = "qwen3_5"
#: The prompt the adapter is asked; thinking on, so the two templates' generation prompts differ.
PROMPT = {
    "messages": [{"role": "user", "content": "Say alpha."}],
    "chat_template_kwargs": {"enable_thinking": True},
}


def _data(root: Path) -> Path:
    rows = [
        {"messages": [{"role": "user", "content": f"Say {w}."}, {"role": "assistant", "content": w}]}
        for w in ("alpha", "bravo", "charlie", "delta")
    ]
    path = root / "data.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _train(base: Path, root: Path, *extra: str) -> Path:
    out = root / "run"
    run_cli(
        "train",
        "--model",
        str(base),
        "--dataset",
        str(_data(root)),
        "--output-dir",
        str(out),
        "--max-steps",
        "1",
        "--batch-size",
        "2",
        "--max-length",
        "64",
        "--no-plot",
        *extra,
    )
    return out


@pytest.fixture(scope="module")
def lora_run(tiny_model_dir, tmp_path_factory) -> Path:
    """The output dir of a LoRA run on tiny qwen3_5 trained with ``--template qwen3``."""
    return _train(
        tiny_model_dir("qwen3_5"),
        tmp_path_factory.mktemp("manifest-lora"),
        "--tuner",
        "lora",
        "--template",
        TRAINED_TEMPLATE,
    )


@pytest.fixture(scope="module")
def full_run(tiny_model_dir, tmp_path_factory) -> Path:
    """The output dir of a full fine-tune of tiny qwen3_5 with its default template."""
    return _train(tiny_model_dir("qwen3_5"), tmp_path_factory.mktemp("manifest-full"), "--tuner", "full")


def _installed(plugins, kind: str, name: str):
    return plugins.registry.get(kind, name).provider


def _assert_records_every_field(record: dict, *, tuner: str, template: str) -> None:
    import swiftcore

    plugins = swiftcore.load_plugins()
    model = _installed(plugins, "model", "qwen3_5")
    assert record["manifest_version"] == 1
    assert record["family"] == {
        "name": "qwen3_5",
        "provider": str(model),
        "plugin": model.plugin,
        "version": model.version,
    }
    provider = _installed(plugins, "template", template)
    assert record["template"] == {
        "name": template,
        "provider": str(provider),
        "plugin": provider.plugin,
        "version": provider.version,
    }
    assert provider.version, "the template's plugin version must be recorded"
    assert record["head"] is None
    assert record["task"] == "causal_lm"
    assert record["tuner"] == tuner
    recipe = _installed(plugins, "recipe", "sft")
    assert record["recipe"] == {
        "name": "sft",
        "provider": str(recipe),
        "plugin": recipe.plugin,
        "version": recipe.version,
    }
    recorded_plugins = {p["name"]: p["version"] for p in record["plugins"]}
    assert recorded_plugins[model.plugin] == model.version
    assert recorded_plugins[provider.plugin] == provider.version
    # The older keys stay for compatibility.
    assert record["model_spec"]["name"] == "qwen3_5" and record["model_type"].startswith("qwen3_5@")
    assert record["swiftcore_args"]["tuner"] == tuner


@pytest.mark.parametrize("run", ["full_run", "lora_run"])
def test_checkpoints_record_every_manifest_field(run: str, request: pytest.FixtureRequest) -> None:
    out: Path = request.getfixturevalue(run)
    tuner, template = ("full", BASE_TEMPLATE) if run == "full_run" else ("lora", TRAINED_TEMPLATE)
    checkpoint = out / "checkpoint-1"
    if tuner == "lora":
        assert (checkpoint / "adapter_config.json").is_file()
    for path in (checkpoint / "swiftcore_args.json", out / "args.json"):
        _assert_records_every_field(json.loads(path.read_text()), tuner=tuner, template=template)
    from swiftcore.models.manifest import read_manifest

    for directory in (checkpoint, out):
        manifest = read_manifest(directory)
        assert manifest is not None and manifest.manifest_version == 1
        assert (manifest.family.name, manifest.template.name, manifest.tuner, manifest.recipe.name) == (
            "qwen3_5",
            template,
            tuner,
            "sft",
        )


def _encodings(base: Path) -> dict[str, list[int]]:
    """The prompt ids each of the two templates encodes :data:`PROMPT` to (on the base's tokenizer)."""
    import swiftcore
    from swiftcore.models import load_tokenizer
    from swiftcore.template import get_template

    plugins = swiftcore.load_plugins()
    tokenizer = load_tokenizer(str(base))
    out = {
        name: list(get_template(name, plugins).encode(tokenizer, PROMPT, add_generation_prompt=True).input_ids)
        for name in (TRAINED_TEMPLATE, BASE_TEMPLATE)
    }
    assert out[TRAINED_TEMPLATE] != out[BASE_TEMPLATE], "the two templates must encode the prompt differently"
    return out


def _infer_prompt_ids(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *args: str) -> list[list[int]]:
    """Run ``swiftcore infer ARGS`` in-process on :data:`PROMPT`; the prompt ids the engine encoded."""
    from swiftcore_infer import Engine

    seen: list[list[int]] = []
    original = Engine.encode

    def spy(self, request):
        ids = original(self, request)
        seen.append(list(ids))
        return ids

    monkeypatch.setattr(Engine, "encode", spy)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps(PROMPT) + "\n")
    answers = tmp_path / "answers.jsonl"
    run_cli("infer", *args, "--input", str(prompts), "--output", str(answers), "--max-new-tokens", "2")
    row = json.loads(answers.read_text().splitlines()[0])
    assert "error" not in row, row
    assert seen, "the engine encoded no prompt"
    return seen


def test_lora_adapter_is_served_with_its_manifest_template(
    lora_run, tiny_model_dir, monkeypatch, tmp_path, caplog
) -> None:
    """Served alone, the adapter trained with --template qwen3 on a qwen3_5 base is prompted with qwen3."""
    encodings = _encodings(tiny_model_dir("qwen3_5"))
    with caplog.at_level(logging.WARNING):
        seen = _infer_prompt_ids(monkeypatch, tmp_path, "--model", str(lora_run / "checkpoint-1"))
    assert seen == [encodings[TRAINED_TEMPLATE]]
    assert not [r for r in caplog.records if "checkpoint manifest" in r.getMessage()]


def test_adapter_with_its_base_is_served_with_the_adapters_template(
    lora_run, tiny_model_dir, monkeypatch, tmp_path
) -> None:
    """``--model BASE --adapter DIR``: the adapter's manifest wins over the base's default template."""
    base = tiny_model_dir("qwen3_5")
    seen = _infer_prompt_ids(monkeypatch, tmp_path, "--model", str(base), "--adapter", str(lora_run / "checkpoint-1"))
    assert seen == [_encodings(base)[TRAINED_TEMPLATE]]


def test_explicit_template_wins_with_a_warning(lora_run, tiny_model_dir, monkeypatch, tmp_path, caplog) -> None:
    encodings = _encodings(tiny_model_dir("qwen3_5"))
    with caplog.at_level(logging.WARNING):
        seen = _infer_prompt_ids(
            monkeypatch, tmp_path, "--model", str(lora_run / "checkpoint-1"), "--template", BASE_TEMPLATE
        )
    assert seen == [encodings[BASE_TEMPLATE]]
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(f"--template {BASE_TEMPLATE} differs from template {TRAINED_TEMPLATE!r}" in m for m in warned), warned


def test_merged_adapter_keeps_its_manifest_template(lora_run, tiny_model_dir, monkeypatch, tmp_path) -> None:
    """``export --merge-lora`` carries the adapter's manifest: the merged model is served with qwen3 too."""
    merged = tmp_path / "merged"
    run_cli("export", "--model", str(lora_run / "checkpoint-1"), "--merge-lora", str(merged))
    assert json.loads((merged / "swiftcore_args.json").read_text())["template"]["name"] == TRAINED_TEMPLATE
    seen = _infer_prompt_ids(monkeypatch, tmp_path, "--model", str(merged))
    assert seen == [_encodings(tiny_model_dir("qwen3_5"))[TRAINED_TEMPLATE]]


def test_template_version_mismatch_warns_on_stderr(lora_run, tmp_path) -> None:
    """An adapter whose manifest names another version of its template's plugin is served, with a warning."""
    adapter = tmp_path / "adapter"
    shutil.copytree(lora_run / "checkpoint-1", adapter)
    import swiftcore

    installed = _installed(swiftcore.load_plugins(), "template", TRAINED_TEMPLATE).version
    record = json.loads((adapter / "swiftcore_args.json").read_text())
    record["template"]["version"] = "0.0.1.old"
    (adapter / "swiftcore_args.json").write_text(json.dumps(record))
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps(PROMPT) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWIFTCORE_")}
    env.update(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    proc = run_swiftcore(
        "infer", "--model", str(adapter), "--input", str(prompts), "--output", str(tmp_path / "a.jsonl"),
        "--max-new-tokens", "2", env=env, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "checkpoint manifest" in proc.stderr, proc.stderr[-4000:]
    line = next(x for x in proc.stderr.splitlines() if "checkpoint manifest" in x)
    assert f"template {TRAINED_TEMPLATE!r}" in line and "0.0.1.old" in line and f"installed is {installed}" in line
