"""`swiftcore export --merge-lora` of an adapter from `swiftcore train`, per family: the merged model is peft's
base + adapter (issue 26).

For each family a LoRA adapter is trained through the CLI (5 steps at learning rate 1e-2: LoRA's B matrices
start at zero, and only a trained adapter makes a merge checkable), merged through the CLI, once as
``--model ADAPTER`` (base read from ``adapter_config.json``) and once as ``--model BASE --adapter ADAPTER``.
The merged checkpoint is loaded with plain transformers (the class named in its ``config.json``), not through
swiftcore, and its logits on a fixed input must

* equal ``peft.PeftModel.from_pretrained(base, adapter)``'s, the un-merged adapter run by peft
  (float32, atol 1e-5; 1e-4 for Gemma 4 and 5e-5 for MiMo-V2, see ``FAMILY_ATOL``), and
* differ from the base model's (max |diff| > 1e-3), so an adapter that did not move, or a merge that wrote
  the base back unchanged, cannot pass.

The CLI runs in-process (click's ``CliRunner``): the same argument parsing and code path as the
``swiftcore`` executable, without a 30-second torch import per command on a shared 2-core machine.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from swiftcore_testing import run_cli

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.slow  # several `swiftcore train` / `export` runs: about a minute on 2 cores

FAMILIES = ["qwen3_5", "gemma4", "deepseek_v4", "qwen3_asr", "mimo_v2_flash", "olmoe", "glm5"]

STEPS = 5
LEARNING_RATE = "1e-2"
MERGE_ATOL = 1e-5
# Gemma 4's tiny model amplifies float32 rounding: its own float32 forward differs from float64 by 7.6e-5, and a
# merge computed exactly (float64) and stored as float32 differs from peft's float64 forward by 3e-5. 1e-5 is
# below what a correct merge can reach there; 1e-4 still catches any wrong merge (the adapter moves logits by ~8).
# MiMo-V2's merged logits differ by 1.25e-5 where the adapter moves them by ~9.8 (1.3e-6 relative): rounding too.
FAMILY_ATOL = {"gemma4": 1e-4, "mimo_v2_flash": 5e-5}
MIN_ADAPTER_EFFECT = 1e-3

ROWS = [
    {"messages": [{"role": "user", "content": f"Say {word}."}, {"role": "assistant", "content": f"{word} {word}."}]}
    for word in ("alpha", "bravo", "charlie", "delta")
]


swiftcore_cli = run_cli  # in-process: torch and transformers load once for the module


def load_plain(model_dir: Path) -> Any:
    """The checkpoint loaded with plain transformers (the architecture its config.json names), float32, eval."""
    import transformers

    config = json.loads((model_dir / "config.json").read_text())
    cls = getattr(transformers, config["architectures"][0])
    return cls.from_pretrained(str(model_dir), dtype=torch.float32).eval()


def logits(model: Any, input_ids: Any) -> Any:
    with torch.no_grad():
        return model(input_ids=input_ids, use_cache=False).logits.float()


@pytest.fixture(scope="module")
def trained_adapter(tiny_model_dir, tmp_path_factory):
    """``get(family) -> (base, adapter checkpoint)``: a LoRA adapter trained by ``swiftcore train``, once per family."""
    made: dict[str, tuple[Path, Path]] = {}

    def get(family: str) -> tuple[Path, Path]:
        if family not in made:
            base = tiny_model_dir(family)
            root = tmp_path_factory.mktemp(f"lora_{family}")
            data = root / "data.jsonl"
            data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
            swiftcore_cli(
                "train", "--model", str(base), "--dataset", str(data), "--output-dir", str(root / "run"),
                "--tuner", "lora", "--max-steps", str(STEPS), "--batch-size", str(len(ROWS)),
                "--learning-rate", LEARNING_RATE, "--lr-scheduler", "constant", "--max-length", "128",
                "--save-steps", str(STEPS), "--no-plot", "--seed", "0",
            )  # fmt: skip
            adapter = root / "run" / f"checkpoint-{STEPS}"
            assert (adapter / "adapter_config.json").is_file() and (adapter / "adapter_model.safetensors").is_file()
            made[family] = base, adapter
        return made[family]

    return get


@pytest.fixture(scope="module")
def plugins() -> Any:
    from swiftcore.api.plugins import load_plugins

    return load_plugins(env={})


def fixed_input(base: Path) -> Any:
    """One fixed prompt, tokenized by the checkpoint's own tokenizer (ids the model knows)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(base))
    ids = tokenizer("Say alpha. Say bravo, then charlie and delta.", add_special_tokens=False)["input_ids"]
    assert len(ids) >= 8
    return torch.tensor([ids])


@pytest.mark.parametrize("family", FAMILIES)
def test_merged_adapter_equals_peft_base_plus_adapter(family: str, trained_adapter, tmp_path: Path) -> None:
    from peft import PeftModel

    base, adapter = trained_adapter(family)
    swiftcore_cli("export", "--model", str(adapter), "--merge-lora", str(tmp_path / "merged"))
    swiftcore_cli("export", "--model", str(base), "--adapter", str(adapter), "--merge-lora", str(tmp_path / "merged2"))
    merged_dir = tmp_path / "merged"
    assert not (merged_dir / "adapter_config.json").exists()

    input_ids = fixed_input(base)
    base_logits = logits(load_plain(base), input_ids)
    reference = logits(PeftModel.from_pretrained(load_plain(base), str(adapter)).eval(), input_ids)
    merged = logits(load_plain(merged_dir), input_ids)
    merged2 = logits(load_plain(tmp_path / "merged2"), input_ids)

    effect = float((reference - base_logits).abs().max())
    assert effect > MIN_ADAPTER_EFFECT, f"{family}: the trained adapter barely changes the logits ({effect:.2e})"
    error = float((merged - reference).abs().max())
    print(f"{family}: adapter effect {effect:.3e}, merged vs peft max |diff| {error:.3e}")
    atol = FAMILY_ATOL.get(family, MERGE_ATOL)
    torch.testing.assert_close(merged, reference, rtol=0, atol=atol, msg=lambda m: f"{family} merged: {m}")
    torch.testing.assert_close(merged2, merged, rtol=0, atol=0, msg=lambda m: f"{family} --adapter form: {m}")
    assert float((merged - base_logits).abs().max()) > MIN_ADAPTER_EFFECT


#: The families whose ``all-linear`` adapter carries parameter-level LoRA (fused 3D expert weights, peft
#: ``target_parameters``), not only linear modules.
PARAMETER_LEVEL = {"deepseek_v4", "glm5", "mimo_v2_flash", "olmoe"}


@pytest.mark.parametrize("family", FAMILIES)
def test_the_transformers_engine_serves_the_adapter_unmerged_as_merged(
    family: str, trained_adapter, plugins, tmp_path: Path
) -> None:
    """``swiftcore infer/deploy --model BASE --adapter DIR`` (the adapter unmerged, through peft) generates the
    greedy tokens of the merged checkpoint, parameter-level adapters (fused experts) included."""
    from swiftcore_infer import TransformersEngine

    base, adapter = trained_adapter(family)
    config = json.loads((adapter / "adapter_config.json").read_text())
    assert bool(config.get("target_parameters")) == (family in PARAMETER_LEVEL), config.get("target_parameters")
    swiftcore_cli("export", "--model", str(adapter), "--merge-lora", str(tmp_path / "merged"))
    records = [{"messages": [{"role": "user", "content": f"Say {word}."}]} for word in ("alpha", "delta", "echo")]

    unmerged = TransformersEngine(base, plugins, adapter=adapter)
    served = [g.token_ids for g in unmerged.generate(records, max_new_tokens=10)]
    bare = [g.token_ids for g in unmerged.generate(records, max_new_tokens=10, adapter="base")]
    merged_engine = TransformersEngine(tmp_path / "merged", plugins)
    merged = [g.token_ids for g in merged_engine.generate(records, max_new_tokens=10)]
    assert served == merged
    assert served != bare  # the adapter is what the engine served
    # One batch mixing the adapter and the base model (peft cannot mix parameter-level adapters in a batch; the
    # engine splits it): each request gets what it gets alone.
    from swiftcore_infer import Request, SamplingParams

    greedy = SamplingParams(max_new_tokens=10, temperature=0.0)
    mixed = [Request(record=r, sampling=greedy, adapter=a) for r in records for a in ("default", "base")]
    got = [g.token_ids for g in unmerged.generate_requests(mixed)]
    assert got == [t for pair in zip(served, bare, strict=True) for t in pair]
