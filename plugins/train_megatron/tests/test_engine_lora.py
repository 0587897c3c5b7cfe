"""``swiftcore train --engine megatron --tuner lora``: LoRA on megatron-core's parallel layers, exported as a peft
adapter that plain peft loads onto the plain transformers model with the trained mcore model's logits.

- TP1 and TP2 give the same 10 losses (1e-5 relative): the LoRA tensors are split like their layers and the
  region functions keep the replicated ones' gradients equal (the engine's first-step check would stop otherwise).
- The losses fall: the adapter learns.
- ``checkpoint-10`` is a peft adapter: ``PeftModel.from_pretrained`` on the base model gives the logits of the
  mcore model built from the base checkpoint with the trained LoRA of the rank files (1e-5), at TP2 and at PP2.
- Only the LoRA tensors changed: the base weights in the rank files are the base checkpoint's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from swiftcore_testing import free_port, user_env

# make test (CI) leaves this module to make test-all: megatron LoRA at TP1 against TP2; megatron LoRA against peft's
# stays in make test (test_engine_lora_parity.py) (docs/testing.md, "Two tiers").
pytestmark = [pytest.mark.extended, pytest.mark.slow]

BIN = Path(sys.executable).parent
STEPS = 10


@pytest.fixture(scope="module")
def lora_run(tiny_model_dir, dataset, tmp_path_factory):
    """``lora_run(tp=2)``: a LoRA run of the tiny Qwen3.5 at a layout, made once per module."""
    made: dict[tuple, Path] = {}

    def run(tp: int = 1, pp: int = 1) -> Path:
        if (tp, pp) not in made:
            out = tmp_path_factory.mktemp("lora") / f"tp{tp}-pp{pp}"
            train = [
                str(BIN / "swiftcore"), "train",
                "--model", str(tiny_model_dir("qwen3_5")),
                "--dataset", str(dataset),
                "--output-dir", str(out),
                "--engine", "megatron", "--tp", str(tp), "--pp", str(pp),
                "--tuner", "lora", "--lora-rank", "4", "--lora-alpha", "8",
                "--max-steps", str(STEPS), "--batch-size", "2", "--learning-rate", "2e-3",
                "--logging-steps", "1", "--save-steps", str(STEPS), "--seed", "7", "--no-plot",
            ]  # fmt: skip
            ranks = tp * pp
            launcher = [str(BIN / "torchrun"), "--nproc-per-node", str(ranks), "--master-port", str(free_port())]
            command = [*launcher, *train] if ranks > 1 else train
            done = subprocess.run(
                command, env=user_env(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1"), capture_output=True, text=True,
                timeout=600,
            )  # fmt: skip
            assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
            made[(tp, pp)] = out
        return made[(tp, pp)]

    return run


def _losses(output_dir: Path) -> dict[int, float]:
    rows = [json.loads(line) for line in (output_dir / "logs.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in rows if "loss" in r}


def test_lora_losses_fall_and_equal_at_tp1_and_tp2(lora_run) -> None:
    one, two = _losses(lora_run(tp=1)), _losses(lora_run(tp=2))
    assert sorted(one) == sorted(two) == list(range(1, STEPS + 1))
    worst = max(abs(one[s] - two[s]) / abs(one[s]) for s in one)
    assert worst < 1e-5, {s: (one[s], two[s]) for s in one}
    assert one[STEPS] < one[1] - 1.0, one


@pytest.mark.parametrize("layout", [{"tp": 2}, {"pp": 2}], ids=["tp2", "pp2"])
def test_the_checkpoint_is_a_peft_adapter_with_the_trained_logits(layout, lora_run, tiny_model_dir) -> None:
    import torch
    from peft import PeftModel
    from safetensors.torch import load_file
    from swiftcore_megatron import init_model_parallel, mcore_logits, read_hf_config, resolve_bridge
    from swiftcore_train_megatron.engine import load_sharded_model
    from swiftcore_train_megatron.lora import LoraSettings, add_lora, merged_lora
    from transformers import AutoModelForImageTextToText

    from swiftcore._plugins import load_plugins

    base_dir = tiny_model_dir("qwen3_5")
    checkpoint = lora_run(**layout) / f"checkpoint-{STEPS}"
    assert (checkpoint / "adapter_config.json").is_file() and not (checkpoint / "config.json").exists()
    adapter_config = json.loads((checkpoint / "adapter_config.json").read_text())
    assert Path(adapter_config["base_model_name_or_path"]) == base_dir.resolve()
    assert adapter_config["r"] == 4 and adapter_config["lora_alpha"] == 8

    # The trained mcore model: the base checkpoint through the bridge, with the rank files' LoRA.
    _, bridge = resolve_bridge(read_hf_config(base_dir), load_plugins(env={}))
    init_model_parallel(1, 1)
    model = load_sharded_model(bridge, base_dir, tp=1, ep=1)
    adapted = add_lora(model, bridge, LoraSettings(rank=4, alpha=8), seed=0)
    trained = merged_lora(checkpoint / "mcore", bridge)
    assert sorted(trained) == sorted(adapted) and any(not column for _, _, column in trained.values())
    modules = dict(model.named_modules())
    for name, (lora_a, lora_b, _) in trained.items():
        assert float(lora_b.abs().max()) > 0, f"{name}: lora_B never moved from zero"
        modules[name].lora_A.data.copy_(lora_a)
        modules[name].lora_B.data.copy_(lora_b)
    ids = torch.randint(0, 200, (2, 24), generator=torch.Generator().manual_seed(3))
    expected = mcore_logits(model, ids)

    # Plain transformers and plain peft, nothing of swiftcore.
    hf = AutoModelForImageTextToText.from_pretrained(base_dir, dtype=torch.float32)
    peft_model = PeftModel.from_pretrained(hf, checkpoint).eval()
    file = load_file(str(checkpoint / "adapter_model.safetensors"))
    loaded = {k: v for k, v in peft_model.state_dict().items() if "lora_" in k}
    assert len(loaded) == len(file), "every tensor of the adapter file is one of the model's LoRA tensors"
    with torch.no_grad():
        got = peft_model(input_ids=ids).logits.float()
    assert (got - expected).abs().max() <= 1e-5, float((got - expected).abs().max())
    with torch.no_grad(), peft_model.disable_adapter():
        base_logits = peft_model(input_ids=ids).logits.float()
    assert (base_logits - expected).abs().max() > 1e-3, "the adapter must change the logits, or equal ones prove little"


def test_only_the_lora_tensors_train(lora_run, tiny_model_dir) -> None:
    """The base weights in the rank files are the base checkpoint's: LoRA froze them."""
    import torch
    from swiftcore_megatron import HFReader, rank_file, rank_producers, read_hf_config, resolve_bridge

    from swiftcore._plugins import load_plugins

    checkpoint = lora_run(tp=1) / f"checkpoint-{STEPS}"
    _, bridge = resolve_bridge(read_hf_config(tiny_model_dir("qwen3_5")), load_plugins(env={}))
    state = torch.load(rank_file(checkpoint / "mcore", 0, 0, 1), weights_only=False)["model"]
    assert any(k.endswith(".lora_A") for k in state)
    with HFReader(tiny_model_dir("qwen3_5")) as reader:
        base = {k: make() for k, make in rank_producers(bridge, reader, tp=1, ep=1, tp_rank=0, ep_rank=0).items()}
    for key, tensor in base.items():
        assert torch.equal(state[key], tensor.float()), key
