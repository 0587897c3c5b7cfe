"""A model spec's ``modalities`` are what runs (issue 53): the Web-UI lists them and training logs them, so a modality
no swiftcore path takes (Qwen3.5 listed ``video``) must not be declared."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

import swiftcore


@pytest.fixture(scope="module")
def plugins() -> Any:
    return swiftcore.load_plugins(env={})


def test_every_spec_declares_only_modalities_that_run(plugins: Any, tmp_path: Path) -> None:
    from swiftcore_media import media_modalities

    (tmp_path / "processor_config.json").write_text("{}")  # a checkpoint with its processor files
    taken = {s.name: {"text", *media_modalities(s, tmp_path)} for s in plugins.registry.all("model")}
    wrong = {s.name: s.modalities for s in plugins.registry.all("model") if set(s.modalities) != taken[s.name]}
    assert not wrong, f"modalities that training and serving do not take: {wrong}"


def test_training_log_names_the_specs_media(plugins: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from swiftcore_media import prepare_media
    from swiftcore_tiny import make_tiny
    from transformers import AutoTokenizer

    spec = plugins.registry.get("model", "qwen3_5")
    model_dir = make_tiny(spec, tmp_path / "tiny")
    with caplog.at_level(logging.INFO, logger="swiftcore.media"):
        assert prepare_media(spec, model_dir, AutoTokenizer.from_pretrained(str(model_dir))) is not None
    said = "\n".join(r.getMessage() for r in caplog.records if r.name == "swiftcore.media")
    assert "model 'qwen3_5' takes image and video" in said and "audio" not in said, said
