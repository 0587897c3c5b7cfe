"""``swiftcore train --packing`` / ``--padding-free`` equal the unpacked run through the CLI (issue 26).

``test_packing_exact.py`` checks packed forward/backward passes in-process. This runs the user's path: three
``swiftcore train --tuner full --max-steps 1`` runs per family on the same data, seed and float32, that differ
only in how the batch is laid out:

* ``plain``: ``--batch-size 4``, the 4 samples right-padded to the longest;
* ``packing``: ``--packing --batch-size 1``, ``--max-length 512`` fits all 4 samples in one bin, so the one
  packed row of step 1 holds exactly the samples of the plain run's one batch (``--batch-size 4`` with packing
  would ask for 4 bins, and there is only one);
* ``padding_free``: ``--padding-free --batch-size 4``, the same 4 samples concatenated into one row.

4 samples and one step are the whole dataset (epoch 1.0), so the data order cannot put other samples into a
step. Each run must log the same number of non-padding tokens, the same first loss and gradient norm (relative
1e-5) and save the same weights after its one optimiser step (atol 1e-6, every tensor).

Why learning rate 5e-6 (constant) and no gradient clipping (``--max-grad-norm 1e9``): Adam's first step moves
each weight by ``lr * g / (|g| + eps)``, i.e. by ``lr`` with the sign of its gradient, except where ``|g|`` is
near ``eps = 1e-8``; there the float32 summation-order noise of ``g`` (packed and padded rows sum in different
orders) is amplified by up to ``lr / eps``. Clipping Gemma 4's gradient norm of ~145 down to 1 puts many more
weights in that region: with clipping at lr 1e-5 a few weights differed by 2.9e-6; without it by 8.1e-7 at lr
1e-5 (Qwen3.5 1.4e-7), about 4e-7 at 5e-6. A gradient of the wrong sign still moves a weight by 2 x 5e-6, ten
times the tolerance. The loss and the (unclipped) gradient norm are compared too, relative 1e-5.

DeepSeek-V4 trains on samples of one length (40 tokens), so the plain run has no padding. Its indexer
picks the top-k compressed blocks with a discrete ``topk``, and a sample run at another length (padded)
can pick differently on near-ties: measured on the tiny model, a 37-token sample right-padded to 41 tokens
changes one position's logits by 0.48 (see ``test_packing_exact.py``, which runs samples alone for this
reason). Qwen3.5 and Gemma 4 train on samples of different lengths (one over the 64-token chunk of Qwen3.5's
gated delta rule), so their plain run is padded.

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

LOSS_RTOL = 1e-5
WEIGHT_ATOL = 1e-6
LEARNING_RATE = "5e-6"

MODES = {
    "plain": ("--batch-size", "4"),
    "packing": ("--packing", "--batch-size", "1"),
    "padding_free": ("--padding-free", "--batch-size", "4"),
}


def _record(user: str, reply: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": user}, {"role": "assistant", "content": reply}]}


WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november".split()
# Different lengths (about 20 to 90 tokens): the plain run pads, and Qwen3.5's longest crosses its 64-token chunk.
VARIED = [_record("Repeat after me: " + " ".join(WORDS[:k]), " ".join(WORDS[:k])) for k in (2, 5, 9, 14)]
# One length (40 tokens with the tiny tokenizer, checked in the test): no padding (see the module docstring).
EQUAL = [_record("Repeat after me: " + " ".join([d] * 12), " ".join([d] * 12)) for d in "0123"]

DATA = {"qwen3_5": VARIED, "gemma4": VARIED, "deepseek_v4": EQUAL}


swiftcore_cli = run_cli  # in-process: torch and transformers load once for the module


def sample_lengths(model_dir: Path, records: list[dict[str, Any]]) -> list[int]:
    """Token lengths of ``records`` as ``swiftcore train`` encodes them."""
    from swiftcore_train import TrainConfig, encode_records

    import swiftcore
    from swiftcore.models import load_tokenizer, resolve_model_spec
    from swiftcore.template import get_template

    plugins = swiftcore.load_plugins(env={})
    spec = resolve_model_spec(str(model_dir), plugins)
    cfg = TrainConfig(model=str(model_dir), dataset=("unused",), max_length=512)
    samples = encode_records(records, get_template(spec.default_template, plugins), load_tokenizer(str(model_dir)), cfg)
    return [len(s["input_ids"]) for s in samples]


@pytest.fixture(scope="module")
def runs(tiny_model_dir, tmp_path_factory):
    """``get(family, mode) -> (first log record with a loss, saved tensors)``, each run once per module."""
    from safetensors.torch import load_file

    done: dict[tuple[str, str], tuple[dict[str, Any], dict[str, Any]]] = {}

    def get(family: str, mode: str) -> tuple[dict[str, Any], dict[str, Any]]:
        if (family, mode) not in done:
            root = tmp_path_factory.mktemp(f"{family}_{mode}")
            data = root / "data.jsonl"
            data.write_text("".join(json.dumps(r) + "\n" for r in DATA[family]))
            swiftcore_cli(
                "train", "--model", str(tiny_model_dir(family)), "--dataset", str(data),
                "--output-dir", str(root / "run"), "--tuner", "full", "--dtype", "float32", "--seed", "0",
                "--max-steps", "1", "--max-length", "512", "--learning-rate", LEARNING_RATE,
                "--lr-scheduler", "constant", "--max-grad-norm", "1e9",
                "--logging-steps", "1", "--save-steps", "1", "--no-plot",
                *MODES[mode],
            )  # fmt: skip
            logs = [json.loads(line) for line in (root / "run" / "logs.jsonl").read_text().splitlines()]
            first = next(r for r in logs if "loss" in r)
            done[family, mode] = first, load_file(str(root / "run" / "checkpoint-1" / "model.safetensors"))
        return done[family, mode]

    return get


def test_the_data_is_what_the_comparison_needs(tiny_model_dir) -> None:
    varied = sample_lengths(tiny_model_dir("qwen3_5"), VARIED)
    assert len(set(varied)) == len(varied) and max(varied) > 64, varied
    assert len(set(sample_lengths(tiny_model_dir("gemma4"), VARIED))) > 1
    equal = sample_lengths(tiny_model_dir("deepseek_v4"), EQUAL)
    assert len(set(equal)) == 1 and equal[0] > 36, equal  # past 9 blocks of 4: the indexer selects


@pytest.mark.parametrize(
    ("family", "mode"),
    [
        ("qwen3_5", "packing"),
        ("qwen3_5", "padding_free"),
        ("gemma4", "packing"),
        ("gemma4", "padding_free"),
        ("deepseek_v4", "packing"),
        ("deepseek_v4", "padding_free"),
    ],
)
def test_first_step_equals_the_unpacked_run(family: str, mode: str, runs, tiny_model_dir) -> None:
    from safetensors.torch import load_file

    (plain_log, plain), (log, weights) = runs(family, "plain"), runs(family, mode)
    # The one step saw the whole dataset in both runs: the same samples, the same real tokens.
    assert plain_log["step"] == log["step"] == 1 and plain_log["epoch"] == log["epoch"] == 1.0
    assert log["num_input_tokens_seen"] == plain_log["num_input_tokens_seen"]
    print(f"{family} {mode}: loss {log['loss']!r} vs {plain_log['loss']!r}, grad norm {log['grad_norm']!r} vs "
          f"{plain_log['grad_norm']!r}")  # fmt: skip
    assert log["loss"] == pytest.approx(plain_log["loss"], rel=LOSS_RTOL, abs=0)
    assert log["grad_norm"] == pytest.approx(plain_log["grad_norm"], rel=LOSS_RTOL, abs=0)

    assert weights.keys() == plain.keys()
    worst = max(float((weights[k] - plain[k]).nan_to_num(0.0).abs().max()) for k in plain)
    print(f"{family} {mode}: max |weight difference| {worst:.3g}")
    for name, tensor in plain.items():  # Gemma 4's audio clip bounds are +-inf: assert_close compares them
        torch.testing.assert_close(weights[name], tensor, rtol=0, atol=WEIGHT_ATOL, msg=lambda m, n=name: f"{n}: {m}")
    # The step did something: the plain run's weights moved off the checkpoint's.
    base = load_file(str(tiny_model_dir(family) / "model.safetensors"))
    assert any(not torch.equal(plain[k], base[k]) for k in base if k in plain)
