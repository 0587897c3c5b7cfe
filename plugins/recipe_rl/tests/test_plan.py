"""A run is planned once (:func:`~swiftcore_recipe_rl.plan.plan_run`) and the plan executed: the plan is plain data,
so it can be handed to another process (the Ray trainer actor) that rebuilds the tokenizer and template from it and
finds every prompt encoded as the plan step encoded it. ``test_ray.py`` executes a plan in a real Ray actor."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any


def test_a_plan_is_plain_data_another_process_can_execute(
    tiny_dir: Path, plugins: Any, tmp_path: Path, vowel: Any
) -> None:
    from swiftcore_recipe_rl.execute import load_codec
    from swiftcore_recipe_rl.plan import LocalParts, plan_run

    cfg, options = vowel(
        "grpo", tiny_dir, tmp_path, steps=1, lr=1e-3, prompts=3, environment="calculator",
        environment_option=("max_calls=2",),
    )  # fmt: skip
    plan = plan_run("grpo", cfg, plugins, options)
    assert not (tmp_path / "out").exists()  # planning writes nothing
    assert plan.cfg.recipe == "grpo" and [r.name for r in plan.rewards] == ["format"] and plan.resume is None
    assert len(plan.prompts.dataset) == len(plan.prompts.environment_rows) == 3
    assert plan.local.codec is not None and load_codec(plan, plugins) is plan.local.codec  # reused in its process

    copy = pickle.loads(pickle.dumps(plan))
    assert copy.local == LocalParts()  # the tokenizer and any server client stay behind
    assert (copy.prompts, copy.spec, copy.template, copy.cfg) == (plan.prompts, plan.spec, plan.template, plan.cfg)
    assert copy.rewards[0].function is plan.rewards[0].function and copy.rewards[0].options == plan.rewards[0].options
    assert copy.environment.factory().max_calls == 2  # the environment's options travel bound to its factory

    codec = load_codec(copy, plugins)
    assert codec is not plan.local.codec
    for text, record in copy.prompts.records.items():  # the rebuilt codec encodes each prompt as the plan step did
        assert "calculator" in text and codec.encode(record) == (text, copy.prompts.ids[text])


def test_the_plan_and_its_executors_import_no_torch() -> None:
    modules = ("recipe", "plan", "prompts", "execute", "ray_actors")
    code = f"import sys; import {', '.join(f'swiftcore_recipe_rl.{m}' for m in modules)}; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
