"""``--target-modules`` is checked against the model before peft sees it (issue 27).

A target that adapts nothing (``lm_head``, which LoRA leaves out; a typo) or ``all-linear`` mixed with
module names used to end in a raw peft traceback, or silently train fewer modules than asked. Now the
error says what matched, what did not and why, and lists the linear modules that can be targeted.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from swiftcore_testing import run_swiftcore

from swiftcore.errors import SwiftcoreError


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("targets") / "train.jsonl"
    rows = [{"messages": [{"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Hello."}]}] * 2
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _train(model: Path, dataset: Path, out: Path, *targets: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWIFTCORE_")}
    env.update(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    args = ["train", "--model", str(model), "--dataset", str(dataset), "--output-dir", str(out)]
    args += ["--tuner", "lora", "--max-steps", "1", "--max-length", "64", "--no-plot"]
    for target in targets:
        args += ["--target-modules", target]
    return run_swiftcore(*args, env=env, timeout=600)


def test_lm_head_target_is_a_clear_error(tiny_model_dir, dataset, tmp_path) -> None:
    proc = _train(tiny_model_dir("qwen3_5"), dataset, tmp_path / "out", "lm_head")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert "'lm_head'" in proc.stderr and "output head" in proc.stderr
    assert "q_proj" in proc.stderr and "down_proj" in proc.stderr  # what can be targeted
    assert not (tmp_path / "out").exists(), "nothing may be written before the targets are checked"


def test_all_linear_mixed_with_names_is_a_clear_error(tiny_model_dir, dataset, tmp_path) -> None:
    proc = _train(tiny_model_dir("qwen3_5"), dataset, tmp_path / "out", "all-linear", "q_proj")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert "all-linear" in proc.stderr and "alone" in proc.stderr
    assert "down_proj" in proc.stderr


# --------------------------------------------------------------------- the check itself, in process


@pytest.fixture(scope="module")
def model_and_spec(tiny_model_dir):
    from swiftcore._plugins import load_plugins
    from swiftcore.models import load_model, resolve_model_spec

    plugins = load_plugins(env={})
    model_dir = str(tiny_model_dir("deepseek_v4"))
    spec = resolve_model_spec(model_dir, plugins)
    return load_model(spec, model_dir, plugins, torch_dtype="float32"), spec


def _cfg(*targets: str):
    from swiftcore_train.config import TrainConfig

    return TrainConfig(model="m", dataset=("d",), tuner="lora", target_modules=targets)


def test_a_typo_among_good_targets_names_both(model_and_spec) -> None:
    from swiftcore_train.tuners import check_target_modules

    model, spec = model_and_spec
    with pytest.raises(SwiftcoreError) as info:
        check_target_modules(model, spec, _cfg("q_b_proj", "kv_projj"))
    message = str(info.value)
    assert "--target-modules" in message and "'kv_projj' matches no module" in message
    assert "'q_b_proj' matched" in message
    assert "kv_proj" in message.split("Targetable")[-1]


def test_a_target_the_spec_keeps_out_says_so(model_and_spec) -> None:
    from swiftcore_train.tuners import check_target_modules

    model, spec = model_and_spec
    with pytest.raises(SwiftcoreError, match=r"'o_a_proj'.*lora_exclude_modules"):
        check_target_modules(model, spec, _cfg("o_a_proj"))


def test_a_container_module_is_not_adaptable(model_and_spec) -> None:
    from swiftcore_train.tuners import check_target_modules

    model, spec = model_and_spec
    with pytest.raises(SwiftcoreError, match=r"'self_attn'.*LoRA cannot adapt"):
        check_target_modules(model, spec, _cfg("self_attn"))


def test_good_targets_and_all_linear_pass(model_and_spec) -> None:
    from swiftcore_train.tuners import apply_tuner, check_target_modules

    model, spec = model_and_spec
    check_target_modules(model, spec, _cfg("all-linear"))
    check_target_modules(model, spec, _cfg())  # the spec's default
    check_target_modules(model, spec, _cfg("q_b_proj", "self_attn.kv_proj"))  # a dotted suffix is a target too
    import copy

    wrapped = apply_tuner(copy.deepcopy(model), spec, _cfg("q_b_proj"))
    assert any("q_b_proj.lora_A" in name for name, _ in wrapped.named_parameters())
