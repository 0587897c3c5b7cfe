"""Virtual pipeline parallelism (``--vpp``, megatron-core's interleaved 1F1B) on gloo with real torchrun processes.

- Loss parity: PP2 x VPP2 (4 model chunks of one layer over 2 ranks) and one process give the same first 3 losses
  to 1e-5 (fp32, tiny Qwen3.5: 4 layers, linear-attention and full-attention ones); PP2 without VPP equals one
  process in ``test_engine_outcomes.py`` (and measured equal here too: docs/distributed.md).
- The checkpoint stores the chunks as the 4 stages of a plain pipeline: its transformers export has the mcore
  model's logits to 1e-5 and the one-process run's weights; resuming it gives the uninterrupted run's third loss.
- LoRA on the chunks (``--tuner lora --vpp 2``): the losses equal PP2's without VPP and so does the exported adapter.
- The checkpoint's ``swiftcore_mcore.json`` records ``vpp``: resuming at ``--pp 2`` alone or at ``--pp 4`` is
  refused before any process group, naming the flags it was saved with.
- A model chunk is the stage of a plain pipeline of ``pp * vpp`` stages (layers, embedding, head, tensor names).
- Refusals before any process group: ``--vpp`` without ``--pp``, chunks that do not divide the layers, a step of
  fewer micro-batches than ``--pp``; each names what would work.

The runs go through ``run_training`` (the API ``swiftcore train`` calls) under torchrun, the layout passed as the
recipe options the CLI builds from ``--pp/--vpp``.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from swiftcore_testing import free_port, user_env

from swiftcore.api import SwiftcoreError

# make test (CI) leaves this module to make test-all: virtual-pipeline parity; pipeline parity stays in make test
# (test_engine_outcomes.py, pp2) (docs/testing.md, "Two tiers").
pytestmark = pytest.mark.extended

BIN = Path(sys.executable).parent
STEPS = 3
DRIVER = """
import json, sys
from swiftcore_train import TrainConfig, run_training
from swiftcore._plugins import load_plugins

model, data, out, options = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
layout = {k: options.pop(k) for k in ("tp", "pp", "vpp") if k in options}
options = {"tuner": "full", "learning_rate": 5e-4, **options}
cfg = TrainConfig(model=model, dataset=(data,), output_dir=out, engine="megatron", recipe_options=layout,
                  max_steps=3, batch_size=1, gradient_accumulation_steps=2, logging_steps=1, save_steps=2, seed=7,
                  plot=False, **options)
run_training(cfg, load_plugins(env={}))
"""


def _losses(output_dir: Path) -> dict[int, float]:
    rows = [json.loads(line) for line in (output_dir / "logs.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in rows if "loss" in r}


@pytest.fixture(scope="module")
def train(tiny_model_dir, dataset, tmp_path_factory):
    """``train(out, ranks, pp=2, vpp=2, ...)``: a 3-step megatron run (2 micro-batches of 1 a step)."""
    driver = tmp_path_factory.mktemp("driver") / "drive.py"
    driver.write_text(DRIVER)
    model = tiny_model_dir("qwen3_5")

    def run(out: Path, ranks: int, **options) -> Path:
        launch = [str(BIN / "torchrun"), "--nproc-per-node", str(ranks), "--master-port", str(free_port())]
        command = [*(launch if ranks > 1 else [sys.executable]), str(driver), str(model), str(dataset), str(out)]
        done = subprocess.run(
            [*command, json.dumps(options)],
            env=user_env(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1"),
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
        return out

    return run


@pytest.fixture(scope="module")
def runs(train, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("vpp")
    return {
        "pp2-vpp2": train(root / "pp2-vpp2", 2, pp=2, vpp=2),
        "one process": train(root / "one", 1),
    }


@pytest.mark.slow
def test_interleaved_pipeline_losses_equal_one_process(runs) -> None:
    mine, reference = _losses(runs["pp2-vpp2"]), _losses(runs["one process"])
    assert sorted(reference) == list(range(1, STEPS + 1)) and reference[STEPS] < reference[1]
    assert sorted(mine) == sorted(reference)
    for step in reference:
        assert mine[step] == pytest.approx(reference[step], abs=1e-5), step


@pytest.mark.slow
def test_the_checkpoint_holds_the_chunks_as_pipeline_stages_and_resumes(runs, train) -> None:
    import torch
    from safetensors.torch import load_file
    from swiftcore_megatron import check_parity, load_mcore_state, read_hf_config, resolve_bridge

    from swiftcore._plugins import load_plugins

    checkpoint = runs["pp2-vpp2"] / f"checkpoint-{STEPS}"
    stage_files = sorted(p.name for p in (checkpoint / "mcore" / "release").iterdir())
    assert stage_files == [f"mp_rank_00_{i:03d}" for i in range(4)]
    _, bridge = resolve_bridge(read_hf_config(checkpoint), load_plugins(env={}))
    report = check_parity(checkpoint, bridge, load_mcore_state(checkpoint / "mcore", bridge))
    assert report.ok and report.max_abs <= 1e-5, str(report)
    mine = load_file(str(checkpoint / "model.safetensors"))
    plain = load_file(str(runs["one process"] / f"checkpoint-{STEPS}" / "model.safetensors"))
    assert mine.keys() == plain.keys()
    for key in mine:
        torch.testing.assert_close(mine[key], plain[key], atol=1e-6, rtol=0, msg=key)
    args = json.loads((checkpoint / "swiftcore_args.json").read_text())
    assert (args["engine"]["pp"], args["engine"]["vpp"]) == (2, 2)

    # Resume from checkpoint-2 in a fresh directory: step 3 as the uninterrupted run logged it.
    resumed = runs["pp2-vpp2"].parent / "resumed"
    resumed.mkdir()
    shutil.copytree(runs["pp2-vpp2"] / "checkpoint-2", resumed / "checkpoint-2")
    train(resumed, 2, pp=2, vpp=2, resume_from_checkpoint=str(resumed / "checkpoint-2"))
    assert _losses(resumed)[STEPS] == pytest.approx(_losses(runs["pp2-vpp2"])[STEPS], abs=1e-6)


@pytest.mark.slow
def test_lora_on_model_chunks_equals_lora_on_a_plain_pipeline(train, tmp_path) -> None:
    """``--tuner lora --vpp 2``: each model chunk adapts its own layers; the losses equal PP2's without VPP (1e-6),
    and the adapter exported from the chunk files equals PP2's."""
    import torch
    from safetensors.torch import load_file

    lora = {"tuner": "lora", "lora_rank": 4, "lora_alpha": 8, "learning_rate": 2e-3}
    chunks, plain = train(tmp_path / "vpp", 2, pp=2, vpp=2, **lora), train(tmp_path / "pp", 2, pp=2, **lora)
    mine, reference = _losses(chunks), _losses(plain)
    assert sorted(mine) == sorted(reference) == list(range(1, STEPS + 1)) and reference[STEPS] < reference[1]
    for step in reference:
        assert mine[step] == pytest.approx(reference[step], abs=1e-6), step
    mine_adapter = load_file(str(chunks / f"checkpoint-{STEPS}" / "adapter_model.safetensors"))
    plain_adapter = load_file(str(plain / f"checkpoint-{STEPS}" / "adapter_model.safetensors"))
    assert mine_adapter.keys() == plain_adapter.keys() and any(".lora_B." in k for k in mine_adapter)
    for key in mine_adapter:
        torch.testing.assert_close(mine_adapter[key], plain_adapter[key], atol=1e-6, rtol=0, msg=key)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("options", "fix"),
    [({"pp": 2}, "resume with --vpp 2"), ({"pp": 4}, "resume with --pp 2 --vpp 2")],
    ids=["without-vpp", "as-stages"],
)
def test_resuming_at_another_layout_names_the_flags_it_was_saved_with(
    options, fix, runs, tiny_model_dir, dataset, tmp_path, monkeypatch
) -> None:
    """The metadata records ``vpp``: resuming the PP2 x VPP2 checkpoint at ``--pp 2`` alone (or at ``--pp 4``, its
    stage count) is refused before any process group, naming ``--vpp 2`` (not ``--pp 4``, all an older checkpoint
    told)."""
    from swiftcore_train import TrainConfig, run_training

    from swiftcore._plugins import load_plugins

    checkpoint = runs["pp2-vpp2"] / "checkpoint-2"
    meta = json.loads((checkpoint / "mcore" / "swiftcore_mcore.json").read_text())
    assert (meta["pp"], meta["vpp"]) == (4, 2)  # 4 stage files, saved by --pp 2 --vpp 2
    monkeypatch.setenv("WORLD_SIZE", str(options["pp"]))
    cfg = TrainConfig(model=str(tiny_model_dir("qwen3_5")), dataset=(str(dataset),), output_dir=str(tmp_path / "out"),
                      tuner="full", engine="megatron", recipe_options=options, max_steps=3, batch_size=1,
                      gradient_accumulation_steps=4, resume_from_checkpoint=str(checkpoint))  # fmt: skip
    with pytest.raises(SwiftcoreError) as info:
        run_training(cfg, load_plugins(env={}))
    assert "was saved at --tp 1 --pp 2 --vpp 2 --ep 1" in str(info.value) and fix in str(info.value), str(info.value)


@pytest.mark.parametrize(
    ("meta", "run", "refused"),
    [
        ({"pp": 4, "vpp": 2}, {"pp": 2, "vpp": 2}, None),
        ({"pp": 4, "vpp": 2}, {"pp": 2, "vpp": 1}, "resume with --vpp 2,"),
        ({"pp": 2, "vpp": 1}, {"pp": 2, "vpp": 2}, "resume with --vpp 1,"),
        ({"pp": 4}, {"pp": 2, "vpp": 2}, None),  # metadata of before vpp was recorded: its 4 stage files fit
        ({"pp": 4}, {"pp": 2, "vpp": 1}, "resume with --pp 4,"),
    ],
    ids=["same", "vpp-dropped", "vpp-added", "old-same", "old-other"],
)
def test_the_resume_layout_check_reads_vpp_from_the_metadata(meta, run, refused, tmp_path) -> None:
    from swiftcore_train_megatron.checkpoint import check_resume_layout

    (tmp_path / "mcore").mkdir()
    (tmp_path / "mcore" / "swiftcore_mcore.json").write_text(json.dumps({"tp": 1, "ep": 1, **meta}))
    if refused is None:
        check_resume_layout(tmp_path, tp=1, ep=1, **run)
        return
    with pytest.raises(SwiftcoreError, match=re.escape(refused)):
        check_resume_layout(tmp_path, tp=1, ep=1, **run)


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
def test_a_model_chunk_is_the_stage_of_a_pipeline_of_pp_times_vpp_stages(tied) -> None:
    from swiftcore_megatron import Stage

    keys = ["embedding.word_embeddings.weight", "decoder.layers.5.mlp.linear_fc1.weight", "output_layer.weight",
            "decoder.final_layernorm.weight"]  # fmt: skip
    for rank in range(2):
        for chunk in range(2):
            mine, plain = Stage(rank, 2, 8, tied, chunks=2, chunk=chunk), Stage(chunk * 2 + rank, 4, 8, tied)
            assert (mine.index, mine.layers) == (plain.rank, plain.layers)
            assert (mine.first, mine.last) == (plain.first, plain.last)
            assert [mine.local_keys(k) for k in keys] == [plain.local_keys(k) for k in keys]
    # Rank 0 holds layers 0-1 and 4-5, the embedding in its first chunk; rank 1 layers 2-3 and 6-7, the head last.
    assert [list(Stage(0, 2, 8, tied, 2, c).layers) for c in (0, 1)] == [[0, 1], [4, 5]]
    assert Stage(0, 2, 8, tied, 2, 1).local_keys("decoder.layers.5.mlp.linear_fc1.weight") == [
        "decoder.layers.1.mlp.linear_fc1.weight"
    ]
    assert Stage(1, 2, 8, tied, 2, 1).last and not Stage(1, 2, 8, tied, 2, 0).last


@pytest.fixture
def _no_process_group_after():
    import torch.distributed as dist

    before = dist.is_initialized()
    yield
    if not before:
        assert not dist.is_initialized(), "a process group was created before the error"


@pytest.mark.usefixtures("_no_process_group_after")
@pytest.mark.parametrize(
    ("world", "options", "problem", "fix"),
    [
        (1, {"vpp": 2}, "--vpp 2: virtual pipeline stages interleave the chunks of a pipeline", "add --pp 2"),
        (2, {"pp": 2, "vpp": 4}, "8 model chunks do not divide the model's 4 decoder layers", "--vpp one of [1, 2]"),
        (2, {"pp": 2, "vpp": 2, "gradient_accumulation_steps": 3}, "groups of --pp", "--gradient-accumulation-steps 2"),
    ],
    ids=["no-pipeline", "layers", "micro-batches"],
)
def test_a_virtual_pipeline_that_cannot_work_is_refused_first(
    world, options, problem, fix, tiny_model_dir, dataset, tmp_path, monkeypatch
) -> None:
    from swiftcore_train import TrainConfig, run_training

    from swiftcore._plugins import load_plugins

    monkeypatch.setenv("WORLD_SIZE", str(world))
    layout = {k: options.pop(k) for k in ("pp", "vpp") if k in options}
    cfg = TrainConfig(
        model=str(tiny_model_dir("qwen3_5")),
        dataset=(str(dataset),),
        output_dir=str(tmp_path / "out"),
        tuner="full",
        engine="megatron",
        recipe_options=layout,
        max_steps=1,
        **options,
    )
    with pytest.raises(SwiftcoreError) as info:
        run_training(cfg, load_plugins(env={}))
    assert problem in str(info.value) and fix in str(info.value)
    assert not (tmp_path / "out").exists()
