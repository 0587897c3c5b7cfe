"""Bad input to ``--engine megatron`` fails before any process group exists, naming the option and what to do."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from swiftcore_train import TrainConfig, run_training

from swiftcore._plugins import load_plugins
from swiftcore.api import SwiftcoreError


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("data") / "train.jsonl"
    rows = [{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}] * 4
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _train(model: Path, dataset: Path, out: Path, plugins=None, world: int = 1, **options) -> None:
    layout = {k: options.pop(k) for k in ("tp", "pp", "ep") if k in options}
    cfg = TrainConfig(
        model=str(model),
        dataset=(str(dataset),),
        output_dir=str(out),
        tuner=options.pop("tuner", "full"),
        engine="megatron",
        recipe_options=layout,
        max_steps=1,
        **options,
    )
    run_training(cfg, plugins or load_plugins(env={}))


@pytest.fixture(autouse=True)
def _no_process_group_after():
    """The refusals come before ``init_process_group`` (checked where no earlier test of the session made one)."""
    import torch.distributed as dist

    before = dist.is_initialized()
    yield
    if not before:
        assert not dist.is_initialized(), "a process group was created before the error"


@pytest.mark.parametrize(
    ("family", "world", "layout", "expected"),
    [
        ("qwen3_5", 1, {"tp": 2}, "world size 1 (processes launched) is not a multiple of --tp 2"),
        ("qwen3_5", 3, {"tp": 2}, "world size 3"),
        ("qwen3_5", 2, {"tp": 2, "pp": 1, "ep": 2}, "--ep 2: bridge 'qwen3_5' does not support expert parallelism"),
        ("qwen3_5_moe", 2, {"ep": 4}, "--ep 4 does not divide the 2 data-parallel rank(s)"),
        ("qwen3_5", 3, {"pp": 3}, "--pp 3 does not divide the model's 4 decoder layers"),
        ("qwen3_5", 3, {"pp": 2}, "world size 3 (processes launched) is not a multiple of --tp 1 x --pp 2"),
        ("gemma4", 2, {"pp": 2}, "--pp 2: bridge 'gemma4' does not build pipeline stages; use --pp 1 (and --tp"),
        ("qwen3_5", 3, {"tp": 3}, "--tp 3 does not divide config.json"),
        ("olmoe", 3, {"ep": 3}, "--ep 3 does not divide the"),
    ],
)
def test_a_layout_that_does_not_fit_fails_before_any_process_group(
    family, world, layout, expected, tiny_model_dir, dataset, tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv("WORLD_SIZE", str(world))
    with pytest.raises(SwiftcoreError, match=None) as info:
        _train(tiny_model_dir(family), dataset, tmp_path / "out", **layout)
    assert expected in str(info.value)
    assert not (tmp_path / "out").exists(), "nothing may be written before the layout is accepted"


def test_a_family_without_a_bridge_is_refused_naming_the_way_out(tiny_model_dir, dataset, tmp_path) -> None:
    # The plugin set of `--plugin no:NAME`: every installed plugin but the Qwen3.5 bridge.
    plugins = load_plugins(["no:bridge_qwen3_5"], env={})
    with pytest.raises(SwiftcoreError) as info:
        _train(tiny_model_dir("qwen3_5"), dataset, tmp_path / "out", plugins=plugins)
    message = str(info.value)
    assert "cannot be trained on megatron-core" in message and "drop --engine" in message
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"tuner": "lora", "lora_exclude_modules": ("mlp",)}, "--lora-exclude-modules: not supported by the megatron"),
        ({"packing": True}, "--packing / --padding-free: not supported by the megatron engine yet"),
        ({"dtype": "bfloat16"}, "--dtype bfloat16"),
    ],
)
def test_options_the_engine_does_not_do_are_refused_by_name(
    options, expected, tiny_model_dir, dataset, tmp_path
) -> None:
    with pytest.raises(SwiftcoreError) as info:
        _train(tiny_model_dir("qwen3_5"), dataset, tmp_path / "out", **options)
    assert expected in str(info.value)


def test_a_recipe_the_engine_does_not_train_says_which_it_does(tiny_model_dir, dataset, tmp_path) -> None:
    cfg = TrainConfig(
        model=str(tiny_model_dir("qwen3_5")), dataset=(str(dataset),), recipe="orpo", engine="megatron", max_steps=1
    )
    with pytest.raises(SwiftcoreError) as info:
        run_training(cfg, load_plugins(env={}))
    expected = (
        "--engine megatron: recipe 'orpo' is not supported by this engine (it trains dpo, gkd, grpo, kto, rm, sft)"
    )
    assert str(info.value).startswith(expected)


def test_an_engine_no_plugin_provides_names_the_package(tiny_model_dir, dataset) -> None:
    cfg = TrainConfig(model=str(tiny_model_dir("qwen3_5")), dataset=(str(dataset),), engine="deepspeed", max_steps=1)
    with pytest.raises(SwiftcoreError) as info:
        run_training(cfg, load_plugins(env={}))
    assert "--engine deepspeed: no installed plugin provides this engine" in str(info.value)


def test_parallel_sizes_below_one_are_refused_when_the_options_are_read(tiny_model_dir, dataset, tmp_path) -> None:
    with pytest.raises(SwiftcoreError) as info:
        _train(tiny_model_dir("qwen3_5"), dataset, tmp_path / "out", tp=0)
    assert "--tp 0" in str(info.value) and "at least 1" in str(info.value)


def test_pipeline_stages_are_refused_for_multi_token_prediction_layers(tiny_model_dir) -> None:
    """GLM-5's bridge builds its MTP layer as megatron's MTP block, which the engine does not split into stages:
    even a bridge that builds stages gets a clear refusal for such a checkpoint."""
    from dataclasses import replace

    from swiftcore_train_megatron.layout import ParallelLayout

    from swiftcore.api import load_plugins, resolve

    # The bridge class as every caller finds it: through its spec (the bridge plugin's face is its registration).
    Glm5Bridge = resolve(load_plugins(env={}).registry.get("bridge", "glm5").factory)

    config = json.loads((tiny_model_dir("glm5") / "config.json").read_text())
    bridge = Glm5Bridge({**config, "num_nextn_predict_layers": 1})
    spec = replace(load_plugins(env={}).registry.get("bridge", "glm5"), parallelism=("tp", "pp", "ep"))
    with pytest.raises(SwiftcoreError) as info:
        ParallelLayout(pp=2).check(bridge, spec, world=2)
    assert "multi-token-prediction layers" in str(info.value) and "--pp 1" in str(info.value)


def test_every_recipe_records_the_whole_layout_it_ran_with() -> None:
    """``args.json``'s ``engine`` entry is the layout as run: a recipe cannot record ``pp: 1`` for a pipeline run."""
    from swiftcore_train_megatron.layout import ParallelLayout

    record = ParallelLayout(tp=2, pp=2, vpp=2, ep=1, cp=1).record(4, "qwen3_5")
    assert record == {
        "name": "megatron", "tp": 2, "pp": 2, "vpp": 2, "ep": 1, "cp": 1, "world_size": 4, "bridge": "qwen3_5",
    }  # fmt: skip
