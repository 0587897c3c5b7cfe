"""The checkpoint manifest module: the record it builds, reading it back (older records too), and the mismatches."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from types import SimpleNamespace

import pytest

from swiftcore.models.errors import ModelResolutionError
from swiftcore.models.manifest import (
    MANIFEST_VERSION,
    Component,
    build_manifest,
    manifest_mismatches,
    manifest_template,
    read_manifest,
    warn_mismatches,
)
from swiftcore.specs import Provider


def _spec(name: str, plugin: str, version: str | None = "1.0", dist: str | None = "dist-x") -> SimpleNamespace:
    return SimpleNamespace(name=name, provider=Provider(plugin, dist if version else None, version))


class _Registry:
    def __init__(self, **kinds: list[SimpleNamespace]) -> None:
        self.kinds = kinds

    def providers(self, kind: str, name: str) -> list[SimpleNamespace]:
        return [s for s in self.kinds.get(kind, []) if s.name == name]


def _plugins(registry: _Registry) -> SimpleNamespace:
    infos = [SimpleNamespace(name="qwen", distribution="swiftcore-qwen", version="1.0")]
    return SimpleNamespace(registry=registry, loaded=lambda: infos)


MODEL = _spec("qwen3_5", "qwen", "1.0", "swiftcore-qwen")
TEMPLATE = _spec("qwen3", "template_qwen", "2.0", "swiftcore-template-qwen")
RECIPE = _spec("sft", "swiftcore", "0.3.0", None)
CFG = SimpleNamespace(task="causal_lm", tuner="lora", recipe="sft")


def _write(directory: Path, record: dict, name: str = "swiftcore_args.json") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_text(json.dumps(record))
    return directory


def test_build_manifest_records_every_field() -> None:
    plugins = _plugins(_Registry(recipe=[RECIPE], template=[TEMPLATE]))
    record = build_manifest(CFG, MODEL, plugins, template=TEMPLATE)
    assert record["manifest_version"] == MANIFEST_VERSION
    assert record["family"] == {
        "name": "qwen3_5",
        "provider": "qwen (swiftcore-qwen 1.0)",
        "plugin": "qwen",
        "version": "1.0",
    }
    assert record["template"] == {
        "name": "qwen3",
        "provider": "template_qwen (swiftcore-template-qwen 2.0)",
        "plugin": "template_qwen",
        "version": "2.0",
    }
    assert record["head"] is None
    assert (record["task"], record["tuner"]) == ("causal_lm", "lora")
    assert record["recipe"] == {"name": "sft", "provider": "swiftcore", "plugin": "swiftcore", "version": "0.3.0"}
    assert record["plugins"] == [{"name": "qwen", "distribution": "swiftcore-qwen", "version": "1.0"}]
    json.dumps(record)  # JSON-ready


def test_build_manifest_completes_a_recorded_head_from_the_registry() -> None:
    """The heads recipe passes ``head={"name", "provider"}``: the manifest adds the plugin and its version."""
    head = _spec("embedding", "heads", "0.5", "swiftcore-heads")
    plugins = _plugins(_Registry(head=[head]))
    cfg = SimpleNamespace(task="embedding", tuner="full", recipe="embedding")
    record = build_manifest(cfg, MODEL, plugins, head={"name": "embedding", "provider": str(head.provider)})
    assert record["head"] == {
        "name": "embedding",
        "provider": "heads (swiftcore-heads 0.5)",
        "plugin": "heads",
        "version": "0.5",
    }
    assert record["template"] is None
    assert record["recipe"] == {"name": "embedding", "provider": None, "plugin": None, "version": None}


def test_read_manifest_round_trips(tmp_path: Path) -> None:
    plugins = _plugins(_Registry(recipe=[RECIPE]))
    record = {"model_type": "qwen3_5@qwen", **build_manifest(CFG, MODEL, plugins, template=TEMPLATE)}
    record["generation_defaults"] = {"chat_template_kwargs": {"enable_thinking": False}}
    manifest = read_manifest(_write(tmp_path / "ckpt", record))
    assert manifest is not None
    assert manifest.manifest_version == MANIFEST_VERSION
    assert manifest.family == Component("qwen3_5", "qwen (swiftcore-qwen 1.0)", "qwen", "1.0")
    assert manifest.template == Component("qwen3", str(TEMPLATE.provider), "template_qwen", "2.0")
    assert manifest.head is None
    assert (manifest.task, manifest.tuner, manifest.recipe.name, manifest.recipe.version) == (
        "causal_lm",
        "lora",
        "sft",
        "0.3.0",
    )
    assert manifest.plugins == {"qwen": "1.0"}
    assert manifest.model_type == "qwen3_5@qwen"
    assert manifest.generation_defaults == {"chat_template_kwargs": {"enable_thinking": False}}


def test_read_manifest_of_an_older_checkpoint_derives_what_it_can(tmp_path: Path) -> None:
    """A record written before the manifest: family from model_spec, template version from its provider text,
    task/tuner/recipe from swiftcore_args."""
    old = {
        "swiftcore_args": {"task": "causal_lm", "tuner": "full", "recipe": "sft"},
        "model_type": "qwen3_5@qwen",
        "model_spec": {"name": "qwen3_5", "provider": "qwen (swiftcore-qwen 1.0)"},
        "template": {"name": "qwen3", "provider": "template_qwen (swiftcore-template-qwen 2.0)"},
        "plugins": [{"name": "qwen", "distribution": "swiftcore-qwen", "version": "1.0"}],
    }
    manifest = read_manifest(_write(tmp_path, old))
    assert manifest.manifest_version == 0
    assert manifest.family == Component("qwen3_5", "qwen (swiftcore-qwen 1.0)", "qwen", "1.0")
    assert manifest.template.plugin == "template_qwen" and manifest.template.version == "2.0"
    assert (manifest.task, manifest.tuner, manifest.recipe) == ("causal_lm", "full", Component("sft"))
    assert manifest.head is None


def test_read_manifest_minimal_and_missing(tmp_path: Path) -> None:
    assert read_manifest(tmp_path) is None
    assert read_manifest(None) is None
    manifest = read_manifest(_write(tmp_path / "bare", {"model_type": "x"}))
    assert manifest.family is None and manifest.template is None and manifest.tuner is None
    assert manifest_template(manifest) is None


def test_read_manifest_of_an_output_dir_reads_args_json(tmp_path: Path) -> None:
    manifest = read_manifest(_write(tmp_path, {"template": {"name": "jinja", "provider": "swiftcore"}}, "args.json"))
    assert manifest.path.name == "args.json"
    assert manifest.template == Component("jinja", "swiftcore", "swiftcore", None)


def test_read_manifest_rejects_a_corrupt_file(tmp_path: Path) -> None:
    (tmp_path / "swiftcore_args.json").write_text("{not json")
    with pytest.raises(ModelResolutionError, match="not valid JSON"):
        read_manifest(tmp_path)


def test_manifest_template_picks_the_recorded_provider_among_several(tmp_path: Path) -> None:
    other = _spec("qwen3", "other_plugin", "9.9")
    record = {"template": Component.of_spec(TEMPLATE).to_dict()}
    manifest = read_manifest(_write(tmp_path, record))
    assert manifest_template(manifest, _Registry(template=[TEMPLATE])) == "qwen3"
    assert manifest_template(manifest, _Registry(template=[TEMPLATE, other])) == "qwen3@template_qwen"


def _manifest(tmp_path: Path, **versions: str) -> object:
    template = {**Component.of_spec(TEMPLATE).to_dict(), "version": versions.get("template", "2.0")}
    family = {**Component.of_spec(MODEL).to_dict(), "version": versions.get("family", "1.0")}
    return read_manifest(_write(tmp_path, {"family": family, "template": template}))


def test_no_mismatch_when_everything_matches(tmp_path: Path) -> None:
    registry = _Registry(model=[MODEL], template=[TEMPLATE])
    assert manifest_mismatches(_manifest(tmp_path), registry) == []
    assert manifest_mismatches(_manifest(tmp_path), registry, template="qwen3") == []


def test_mismatches_name_what_differs(tmp_path: Path) -> None:
    registry = _Registry(model=[MODEL], template=[TEMPLATE])
    [template] = manifest_mismatches(_manifest(tmp_path, template="1.5"), registry)
    assert "template 'qwen3'" in template and "template_qwen 1.5" in template and "installed is 2.0" in template
    [family] = manifest_mismatches(_manifest(tmp_path, family="0.9"), registry)
    assert "model 'qwen3_5'" in family and "0.9" in family and "installed is 1.0" in family
    [asked] = manifest_mismatches(_manifest(tmp_path), registry, template="qwen3_5")
    assert "--template qwen3_5 differs from template 'qwen3'" in asked
    [gone] = manifest_mismatches(_manifest(tmp_path), _Registry(model=[MODEL]))
    assert "no installed plugin provides it" in gone
    [renamed] = manifest_mismatches(_manifest(tmp_path), registry, spec=_spec("gemma4", "gemma"))
    assert "trained as model 'qwen3_5'" in renamed


def test_warn_mismatches_logs_warnings(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    registry = _Registry(model=[MODEL], template=[TEMPLATE])
    with caplog.at_level(logging.WARNING, logger="swiftcore.models"):
        messages = warn_mismatches(_manifest(tmp_path, template="1.5"), registry)
    assert len(messages) == 1
    assert any(r.levelno == logging.WARNING and "checkpoint manifest" in r.getMessage() for r in caplog.records)
    assert warn_mismatches(None, registry) == []
