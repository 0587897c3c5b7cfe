"""The README's example of every recipe learns (issue 53, point 3): each ``swiftcore train --recipe ...`` command
of the README's "Example" section, run as written through the CLI on the bundled vowel task
(``examples/vowels.jsonl``), must lift held-out pairwise accuracy (``examples/vowels_heldout.jsonl``) above the
untrained model's.

The held-out pairs are asked both ways (chosen and rejected swapped), so a model that ignores the prompt scores
exactly 50%: accuracy above that is the rule learnt, not a bias for some letters. For the policy recipes a pair is
won when the reply's summed log-prob is higher for the chosen reply; for ``rm`` when the reward model scores it
higher. The README example's old settings (``--beta 0.1 --loss-type sigmoid --max-steps 50`` at the default
learning rate 1e-4 and batch 1) kept DPO at its untrained 50%.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from swiftcore_testing import pairwise_accuracy

PLUGIN = Path(__file__).resolve().parents[1]
README = PLUGIN / "README.md"
EXAMPLES = PLUGIN / "examples"
RECIPES = ("dpo", "kto", "cpo", "simpo", "orpo", "rm")


def example_commands(text: str) -> dict[str, list[str]]:
    """``recipe -> argv`` of every inline ``swiftcore train --recipe`` command in the README's "Example" section."""
    section = text.split("\n## Example\n", 1)[1].split("\n## ", 1)[0]
    commands: dict[str, list[str]] = {}
    for code in re.findall(r"`(swiftcore train --recipe [^`]+)`", section):
        argv = shlex.split(code)
        if "--help" not in argv:  # the section also points at a recipe's --help; that is no example run
            commands[argv[argv.index("--recipe") + 1]] = argv
    return commands


def _option(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_every_recipe_has_an_example() -> None:
    commands = example_commands(README.read_text(encoding="utf-8"))
    assert sorted(commands) == sorted(RECIPES), f"README's Example section has commands for {sorted(commands)}"
    for recipe, argv in commands.items():
        assert _option(argv, "--dataset") == "plugins/recipe_preference/examples/vowels.jsonl", recipe
        assert _option(argv, "--model") == "./tiny", recipe


def _pairs(model_dir: Path, plugins: Any, recipe: str) -> list[dict]:
    """The held-out pairs, encoded by the tiny model's template as the recipe encodes them."""
    import json

    from swiftcore_recipe_preference.data import parse_pair
    from swiftcore_recipe_preference.encoding import encode_dpo_pairs, encode_rm_pairs
    from swiftcore_train import TrainConfig

    from swiftcore.api.models import load_tokenizer, resolve_model_spec
    from swiftcore.api.template import get_template

    rows = [json.loads(line) for line in (EXAMPLES / "vowels_heldout.jsonl").read_text().splitlines()]
    pairs = [parse_pair(row, f"vowels_heldout.jsonl:{i + 1}") for i, row in enumerate(rows)]
    template = get_template(resolve_model_spec(str(model_dir), plugins).default_template, plugins)
    cfg = TrainConfig(model=str(model_dir), dataset=("x",), recipe=recipe)
    encode = encode_rm_pairs if recipe == "rm" else encode_dpo_pairs
    return encode(pairs, template, load_tokenizer(str(model_dir)), cfg)


def _rm_accuracy(model: Any, pairs: list[dict]) -> float:
    import torch

    def score(ids: list[int]) -> float:
        with torch.no_grad():
            return float(model(input_ids=torch.tensor([ids])).logits[0, 0])

    return sum(score(p["chosen_ids"]) > score(p["rejected_ids"]) for p in pairs) / len(pairs)


@pytest.mark.slow
@pytest.mark.parametrize("recipe", RECIPES)
def test_readme_example_learns(
    recipe: str, tiny_model_dir, plugins, run_cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForSequenceClassification

    from swiftcore.api.models import load_model, resolve_model_spec

    argv = example_commands(README.read_text(encoding="utf-8"))[recipe]
    model_dir = tiny_model_dir("qwen3_5")
    # The README's paths, relative to the repository root: ./tiny (the session's make-tiny qwen3_5) and the data.
    (tmp_path / "tiny").symlink_to(model_dir)
    (tmp_path / "plugins" / "recipe_preference").mkdir(parents=True)
    (tmp_path / "plugins" / "recipe_preference" / "examples").symlink_to(EXAMPLES)
    pairs = _pairs(model_dir, plugins, recipe)
    if recipe == "rm":
        torch.manual_seed(int(argv[argv.index("--seed") + 1]) if "--seed" in argv else 42)  # the recipe's head init
        untrained = AutoModelForSequenceClassification.from_pretrained(str(model_dir), num_labels=1).eval()
        before = _rm_accuracy(untrained, pairs)
    else:
        spec = resolve_model_spec(str(model_dir), plugins)
        before = pairwise_accuracy(load_model(spec, str(model_dir), plugins, torch_dtype="float32").eval(), pairs)

    monkeypatch.chdir(tmp_path)
    run_cli(*argv[1:])

    out = tmp_path / _option(argv, "--output-dir")
    checkpoint = max(out.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[-1]))
    if recipe == "rm":
        after = _rm_accuracy(AutoModelForSequenceClassification.from_pretrained(str(checkpoint)).eval(), pairs)
    else:
        base = load_model(spec, str(model_dir), plugins, torch_dtype="float32")
        after = pairwise_accuracy(PeftModel.from_pretrained(base, str(checkpoint)).eval(), pairs)
    print(f"{recipe}: README example, held-out pairwise accuracy {before:.1%} -> {after:.1%} ({len(pairs)} pairs)")
    assert after > before, f"{recipe}: the README example did not learn: {before:.1%} -> {after:.1%}"
    assert after >= 0.8, f"{recipe}: the README example reached only {after:.1%} held-out pairwise accuracy"
