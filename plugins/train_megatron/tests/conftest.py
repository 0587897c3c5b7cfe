"""Fixtures shared by the megatron engine's tests: the SFT chats, and what the preference recipes' tests (dpo, kto,
rm) share: the launcher, the pairs, the vowel task, pairwise accuracy and a moved reference model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    """24 chats asking for a sum, the same wording each time (a model learns it within 10 steps)."""
    path = tmp_path_factory.mktemp("data") / "train.jsonl"
    rows = [
        {
            "messages": [
                {"role": "user", "content": f"What is {i} plus {2 * i + 1}?"},
                {"role": "assistant", "content": f"{i} plus {2 * i + 1} is {3 * i + 1}."},
            ]
        }
        for i in range(24)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# ---------------------------------------------------------------- the preference recipes' tests (dpo, kto, rm)

#: Eight prompt / chosen / rejected pairs (the DPO and reward-model parity data).
PREFERENCE_PAIRS = [
    {"prompt": "say apple", "chosen": "apple apple", "rejected": "pear"},
    {"prompt": "name a colour", "chosen": "blue", "rejected": "a loud noise, very loud"},
    {"prompt": "count to three", "chosen": "one two three", "rejected": "three"},
    {"prompt": "greet me", "chosen": "hello there, friend", "rejected": "go away"},
    {"prompt": "say a number", "chosen": "seven", "rejected": "a cat"},
    {"prompt": "say yes", "chosen": "yes", "rejected": "no, never"},
    {"prompt": "spell cat", "chosen": "c a t", "rejected": "dog"},
    {"prompt": "what is up", "chosen": "the sky", "rejected": "nothing at all, really"},
]


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _recipe_args(recipe: str, model: Path, dataset: Path, out: Path, *extra: str) -> list[str]:
    return ["train", "--recipe", recipe, "--model", str(model), "--dataset", str(dataset), "--output-dir", str(out),
            "--logging-steps", "1", "--seed", "7", "--no-plot", *extra]  # fmt: skip


def _logged(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "logs.jsonl").read_text().splitlines()]


def _train_recipe(recipe: str, model: Path, dataset: Path, out: Path, *extra: str, ranks: int = 1) -> list[dict]:
    import subprocess
    import sys

    from swiftcore_testing import failure_report, free_port, user_env

    bin_dir = Path(sys.executable).parent
    train = _recipe_args(recipe, model, dataset, out, *extra)
    launcher = [str(bin_dir / "torchrun"), "--nproc-per-node", str(ranks), "--master-port", str(free_port())]
    command = [*(launcher if ranks > 1 else []), str(bin_dir / "swiftcore"), *train]
    env = user_env(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        pytest.fail(failure_report(done))
    return _logged(out)


class CliRuns:
    """``swiftcore`` command lines whose results tests ask for, the ones planned together run in one process each.

    A tiny run's time is its process's start (imports of torch, transformers and megatron-core: about 15 s on a busy
    2-core machine, against 1 s for ten steps), so the runs a module plans (:meth:`plan`) are made in one process per
    group when the first of them is asked for (:meth:`get`): ``swiftcore_testing.cli_runs`` runs their command lines
    one after the other through the CLI's own ``main``; runs of several ranks in one torchrun world of that size (the
    engine re-initialises megatron's model-parallel state for each run). A run planned with ``fails=True`` must fail
    (a refusal, on every rank): its failure does not stop its group, and :meth:`failure` gives its message. A test's
    parity script joins the group too (:meth:`plan_script`). A run that fails unexpectedly is reported, with its
    output, to each test that asks for it; the runs of its group that it stopped run (as a group) when next asked for.
    """

    def __init__(self, root: Path) -> None:
        self._root = root
        self._planned: dict = {}  # key -> (group, ranks, step, out): step as swiftcore_testing.cli_runs reads it
        self._done: set = set()
        self._failed: dict = {}  # key -> the output that shows its failure
        self._batches = 0

    def plan(self, key, args: list[str], out: Path, *, ranks: int = 1, group: str = "", fails: bool = False) -> None:
        """Say that ``swiftcore ARGS`` (writing ``out``) may be asked for as ``key``, on ``ranks`` processes, run
        together with the other runs of the same ``group`` and size; with ``fails``, a run that must fail (the same
        way on every rank: see ``swiftcore_testing.cli_runs``), whose message :meth:`failure` returns."""
        step: list | dict = [str(a) for a in args]
        if fails:
            output = self._root / f"failure-{len(self._planned)}.txt"
            step = {"args": step, "may_fail": True, "output": str(output)}
        self._planned.setdefault(key, (group, ranks, step, out))

    def plan_script(self, key, script: Path, argv: list, out: Path, *, ranks: int = 1, group: str = "") -> None:
        """Say that the Python script ``script`` run with ``argv`` (as ``__main__``, on each of ``ranks`` processes;
        writing ``out``) may be asked for as ``key``, run with the other runs of the same ``group`` and size."""
        step = {"script": str(script), "argv": [str(a) for a in argv]}
        self._planned.setdefault(key, (group, ranks, step, out))

    def get(self, key) -> Path:
        """The output directory of the run ``key`` (run now, with the rest of its group, if not yet made); for a run
        planned with ``fails``, asserted to have failed."""
        if key not in self._done:
            assert key in self._planned, f"{key} was never planned"
            if key not in self._failed:  # it first, then the rest of its group that no failure stopped
                group, ranks, *_ = self._planned[key]
                rest = [k for k, v in self._planned.items() if v[:2] == (group, ranks) and k != key]
                self._run([key, *[k for k in rest if k not in self._done and k not in self._failed]])
            assert key in self._done, self._failed[key]
        step = self._planned[key][2]
        if isinstance(step, dict) and step.get("may_fail"):
            assert Path(step["output"]).is_file(), f"{key}: {step['args']} succeeded; it must fail"
        return self._planned[key][3]

    def failure(self, key) -> str:
        """The failure of the run ``key``, planned with ``fails``: its exit code (or exception), then its stderr."""
        self.get(key)
        return Path(self._planned[key][2]["output"]).read_text(encoding="utf-8")

    def _run(self, keys: list) -> None:
        import subprocess
        import sys

        from swiftcore_testing import failure_report, free_port, user_env

        self._batches += 1
        ranks = self._planned[keys[0]][1]
        runs = self._root / f"runs-{self._batches}.json"
        runs.write_text(json.dumps([self._planned[k][2] for k in keys]))
        bin_dir = Path(sys.executable).parent
        launcher = [str(bin_dir / "torchrun"), "--nproc-per-node", str(ranks), "--master-port", str(free_port())]
        command = [*(launcher if ranks > 1 else [sys.executable]), "-m", "swiftcore_testing.cli_runs", str(runs)]
        env = user_env(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300 + 200 * len(keys))
        finished = {int(line.split()[1]) for line in done.stdout.splitlines() if line.startswith("DONE ")}
        for i, key in enumerate(keys, 1):
            if i in finished:
                self._done.add(key)
            elif i == len(finished) + 1:
                self._failed[key] = failure_report(done)


@pytest.fixture(scope="module")
def cli_runs(tmp_path_factory) -> CliRuns:
    """This module's :class:`CliRuns` (its files under a temporary directory of the module)."""
    return CliRuns(tmp_path_factory.mktemp("cli_runs"))


@pytest.fixture(scope="module")
def selected_params(request) -> list[tuple[str, dict]]:
    """The tests of this module this session runs: ``(test function name, its parameters)`` for each, so a module
    fixture can plan the runs they will ask for (and only those, under ``-k``)."""
    return [
        (item.originalname, dict(getattr(getattr(item, "callspec", None), "params", {})))
        for item in request.session.items
        if item.path == request.path
    ]


def _vowel_task(tokenizer, n_train: int = 64, n_held: int = 16, seed: int = 0) -> tuple[list, list]:
    import random

    vowels = [c for c in "aeiou" if len(tokenizer.tokenize(" " + c)) == 1]
    consonants = [c for c in "bcdfgklmnprst" if len(tokenizer.tokenize(" " + c)) == 1][: len(vowels) + 1]
    rng = random.Random(seed)

    def letters(pool: list[str]) -> str:
        return " ".join(rng.choice(pool) for _ in range(4))

    def row(asked: str, vowel_reply: str, consonant_reply: str) -> dict:
        chosen, rejected = (vowel_reply, consonant_reply) if asked == "vowels" else (consonant_reply, vowel_reply)
        return {
            "messages": [{"role": "user", "content": f"say {asked}"}, {"role": "assistant", "content": chosen}],
            "rejected_response": rejected,
        }

    train = [row(rng.choice(["vowels", "consonants"]), letters(vowels), letters(consonants)) for _ in range(n_train)]
    held = []
    for _ in range(n_held):
        v, c = letters(vowels), letters(consonants)
        held += [row("vowels", v, c), row("consonants", v, c)]
    return train, held


@pytest.fixture(scope="module")
def vowel_files(vowel_task, write_jsonl, tiny_model_dir, tmp_path_factory) -> tuple[Path, Path, list[dict]]:
    """The vowel task's training and held-out pairs (:func:`vowel_task` on the tiny Qwen3.5's tokenizer) as files, and
    the held-out rows: the preference recipes' learning tests (dpo, kto, rm)."""
    from swiftcore.api.models import load_tokenizer

    train_rows, held_rows = vowel_task(load_tokenizer(str(tiny_model_dir("qwen3_5"))))
    root = tmp_path_factory.mktemp("vowels")
    return write_jsonl(root / "train.jsonl", train_rows), write_jsonl(root / "held.jsonl", held_rows), held_rows


@pytest.fixture(scope="session")
def preference_pairs() -> list[dict]:
    """:data:`PREFERENCE_PAIRS`, a fresh copy of each row."""
    return [dict(r) for r in PREFERENCE_PAIRS]


@pytest.fixture(scope="session")
def write_jsonl():
    """``write_jsonl(path, rows) -> path``: the rows as JSON lines."""
    return _write_jsonl


@pytest.fixture(scope="session")
def train_recipe():
    """``train_recipe(recipe, model, dataset, out, *flags, ranks=1) -> records``: ``swiftcore train --recipe RECIPE``
    (under torchrun with ``ranks`` processes when above 1), asserted to succeed; its ``logs.jsonl`` records."""
    return _train_recipe


@pytest.fixture(scope="session")
def recipe_args():
    """``recipe_args(recipe, model, dataset, out, *flags) -> args``: what follows ``swiftcore`` in the command
    :func:`train_recipe` runs (for :class:`CliRuns`)."""
    return _recipe_args


@pytest.fixture(scope="session")
def logged():
    """``logged(output_dir) -> records``: a run's ``logs.jsonl`` records."""
    return _logged


def _resumed_weights_gap(whole: Path, resumed: Path, step: int) -> tuple[float, float]:
    """``(largest difference between the two runs' checkpoint-STEP weights, largest change of the uninterrupted run's
    weights over its last step)``: the first ~0 and the second not, for a resume that restored the optimizer too."""
    from safetensors.torch import load_file

    want = load_file(whole / f"checkpoint-{step}" / "model.safetensors")
    got = load_file(resumed / f"checkpoint-{step}" / "model.safetensors")
    before = load_file(whole / f"checkpoint-{step - 1}" / "model.safetensors")
    assert sorted(got) == sorted(want)
    return max(float((got[k] - v).abs().max()) for k, v in want.items()), max(
        float((v - before[k]).abs().max()) for k, v in want.items()
    )


@pytest.fixture(scope="session")
def resumed_weights_gap():
    """``resumed_weights_gap(whole_out, resumed_out, step) -> (gap, last step's change)``: a resumed run's final
    weights against the uninterrupted run's (both saved ``checkpoint-STEP``)."""
    return _resumed_weights_gap


@pytest.fixture(scope="session")
def vowel_task():
    """``vowel_task(tokenizer) -> (train_rows, held_rows)``: the preference recipe's vowel task (its conftest's
    ``vowel_task``): "say vowels" prefers four vowels to four consonants, "say consonants" the reverse; each held-out
    pair is asked both ways, so ignoring the prompt scores exactly 50%."""
    return _vowel_task


@pytest.fixture(scope="session")
def pairwise_accuracy():
    """``pairwise_accuracy(model, samples) -> float``: the share of pairs whose chosen reply the model scores higher
    (summed reply log-probs, each sequence alone): swiftcore_testing's, as the transformers engine's tests measure."""
    from swiftcore_testing import pairwise_accuracy as measure

    return measure


@pytest.fixture(scope="module")
def other_reference(tiny_model_dir, tmp_path_factory) -> Path:
    """The tiny Qwen3.5 with every weight moved by noise: a reference that is not the policy's initial weights."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    out = tmp_path_factory.mktemp("reference") / "moved"
    shutil.copytree(tiny_model_dir("qwen3_5"), out)
    gen = torch.Generator().manual_seed(1)
    weights = load_file(out / "model.safetensors")
    tensors = {k: v + 0.02 * torch.randn(v.shape, generator=gen) for k, v in weights.items()}
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


@pytest.fixture
def no_process_group_after():
    """The refusals come before ``init_process_group`` (checked where no earlier test of the session made one)."""
    import torch.distributed as dist

    before = dist.is_initialized()
    yield
    if not before:
        assert not dist.is_initialized(), "a process group was created before the error"


@pytest.fixture(scope="session")
def glm5_with_mtp(tiny_model_dir, tmp_path_factory) -> Path:
    """The tiny GLM-5 (MoE) with ``num_nextn_predict_layers: 1``: its bridge builds a multi-token-prediction layer
    (the refusal reads the config only, before any weight is loaded)."""
    import shutil

    out = tmp_path_factory.mktemp("mtp") / "glm5_mtp"
    shutil.copytree(tiny_model_dir("glm5"), out)
    config = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**config, "num_nextn_predict_layers": 1}, indent=2))
    return out
