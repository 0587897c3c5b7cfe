"""Fixtures of swiftcore-recipe-rl's tests: the tiny qwen3_5 checkpoint (built once per session by the repository's
``tiny_model_dir``), the installed plugins, one trainer per RL recipe on it for the fixed-batch loss checks, and
``swiftcore rollout`` servers (server mode) as subprocesses."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def plugins() -> Any:
    """The installed plugins (no SWIFTCORE_PLUGINS from the environment)."""
    import swiftcore.api

    return swiftcore.api.load_plugins(env={})


@pytest.fixture(scope="session")
def tiny_dir(tiny_model_dir: Callable[[str], Path]) -> Path:
    """A tiny random qwen3_5 checkpoint."""
    return tiny_model_dir("qwen3_5")


#: The toy task's reward option: a reply that starts with a vowel earns 1 (the ``format`` reward).
VOWEL = r"format.pattern=^\s*[aeiouAEIOU]"


def vowel_task(
    recipe: str, tiny_dir: Path, work: Path, *, steps: int, lr: float, prompts: int = 16, **options: Any
) -> tuple[Any, Any]:
    """The learning tests' toy task: ``(TrainConfig, options)`` of a run of ``recipe`` that teaches the tiny model to
    start its reply with a vowel (``prompts`` prompts, 2 a step, 8 completions of up to 4 tokens, LoRA, constant
    ``lr``, seed 0, logs every step into ``work / "out"``); ``options`` are the recipe's own on top."""
    import json

    from swiftcore_recipe_rl.options import RL_RECIPES
    from swiftcore_train import TrainConfig

    work.mkdir(parents=True, exist_ok=True)
    data = work / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"Write a word, number {i}."}) + "\n" for i in range(prompts)))
    cfg = TrainConfig(
        model=str(tiny_dir), dataset=(str(data),), output_dir=str(work / "out"), tuner="lora", learning_rate=lr,
        lr_scheduler="constant", max_steps=steps, batch_size=2, logging_steps=1, save_steps=10_000, seed=0,
        plot=False,
    )  # fmt: skip
    method = RL_RECIPES[recipe](
        reward=("format",), reward_option=(VOWEL,), num_generations=8, max_completion_length=4, **options
    )
    return cfg, method


@pytest.fixture(scope="session")
def vowel() -> Callable[..., tuple[Any, Any]]:
    """:func:`vowel_task`."""
    return vowel_task


#: The completion lengths of the loss checks' fixed batch (2 prompts x groups of 4).
FIXED_LENGTHS = (3, 6, 1, 4, 5, 2, 6, 3)


@pytest.fixture(scope="session")
def fixed_batch() -> Callable[..., dict[str, Any]]:
    """``fixed_batch(**columns)``: the loss checks' fixed batch as TRL's ``_compute_loss`` reads it: 8 completions of
    :data:`FIXED_LENGTHS` tokens after 3-token prompts (``prompt_ids``, ``prompt_mask``, ``completion_ids``,
    ``completion_mask``: 1 on each completion's tokens), plus ``columns`` (``advantages``, ``old_per_token_logps``,
    ``num_items_in_batch``, ...) as given."""

    def make(**columns: Any) -> dict[str, Any]:
        import torch

        lengths = torch.tensor(FIXED_LENGTHS)
        width = max(FIXED_LENGTHS)
        return {
            "prompt_ids": torch.ones(len(FIXED_LENGTHS), 3, dtype=torch.long),
            "prompt_mask": torch.ones(len(FIXED_LENGTHS), 3, dtype=torch.long),
            "completion_ids": torch.ones(len(FIXED_LENGTHS), width, dtype=torch.long),
            "completion_mask": (torch.arange(width)[None, :] < lengths[:, None]).long(),
            **columns,
        }

    return make


def column_reward(completions: list[str], *, r: list[float], **kwargs: Any) -> list[float]:
    """A reward that returns the row's ``r`` column: fixed rewards for the fixed-batch checks."""
    return [float(x) for x in r]


def make_trainer(recipe: str, tiny_dir: Path, plugins: Any, output_dir: Path, **method: Any) -> Any:
    """A trainer of ``recipe`` on the tiny model (LoRA), 2 prompts x groups of 4, rewarded by the ``r`` column;
    ``method`` are the recipe's own options (``rloo_beta=...``)."""
    from datasets import Dataset
    from swiftcore_recipe_rl.options import RL_RECIPES
    from swiftcore_recipe_rl.recipe import CONFIGS
    from swiftcore_recipe_rl.rewards import TRLReward
    from swiftcore_recipe_rl.rollout import PromptCodec
    from swiftcore_recipe_rl.trainer import trainer_class
    from swiftcore_train import Reward, TrainConfig, apply_tuner

    from swiftcore.api import RewardSpec
    from swiftcore.api.models import load_model, load_tokenizer, resolve_model_spec
    from swiftcore.api.template import get_template

    spec = resolve_model_spec(str(tiny_dir), plugins)
    tokenizer = load_tokenizer(str(tiny_dir))
    tokenizer.padding_side = "left"
    codec = PromptCodec(get_template(spec.default_template, plugins), tokenizer)
    cfg = TrainConfig(model=str(tiny_dir), dataset=("unused",), output_dir=str(output_dir), batch_size=2)
    options = RL_RECIPES[recipe](reward=("column",), num_generations=4, max_completion_length=6, **method)
    reward = Reward(spec=RewardSpec(name="column", function="x.y:z", columns=("r",)), function=column_reward)
    model = apply_tuner(load_model(spec, str(tiny_dir), plugins), spec, cfg)
    return trainer_class(recipe)(
        model=model,
        reward_funcs=[TRLReward(reward, codec)],
        args=CONFIGS[recipe](cfg, options, Path(cfg.output_dir), reward_names=["column"]),
        train_dataset=Dataset.from_list([{"prompt": "p", "r": 0.0}] * 8),
        processing_class=tokenizer,
    )


@pytest.fixture(scope="session")
def trainer_factory() -> Callable[..., Any]:
    """:func:`make_trainer`, for a test that needs a trainer with options of its own."""
    return make_trainer


@pytest.fixture(scope="session")
def grpo_trainer(tiny_dir: Path, plugins: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A ``SwiftGRPOTrainer`` on the tiny model (LoRA), groups of 4, rewarded by the ``r`` column."""
    return make_trainer("grpo", tiny_dir, plugins, tmp_path_factory.mktemp("grpo"))


@pytest.fixture(scope="session")
def rloo_trainer(tiny_dir: Path, plugins: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A ``SwiftRLOOTrainer`` on the tiny model (LoRA), groups of 4, rewarded by the ``r`` column, KL weight 0.05."""
    return make_trainer("rloo", tiny_dir, plugins, tmp_path_factory.mktemp("rloo"), rloo_beta=0.05)


@pytest.fixture(scope="session")
def reinforce_pp_trainer(tiny_dir: Path, plugins: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A ``SwiftReinforcePPTrainer`` on the tiny model (LoRA), groups of 4, rewarded by the ``r`` column, KL 0.05,
    clipping [0.8, 1.28]."""
    return make_trainer(
        "reinforce_pp", tiny_dir, plugins, tmp_path_factory.mktemp("rpp"),
        reinforce_pp_beta=0.05, reinforce_pp_epsilon_high=0.28,
    )  # fmt: skip


@pytest.fixture(scope="session")
def teacher_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A second tiny random qwen3_5 (seed 1): same tokenizer and vocabulary as ``tiny_dir``, other weights."""
    from swiftcore_tiny import make_tiny

    from swiftcore._plugins import load_plugins

    spec = load_plugins(env={}).registry.get("model", "qwen3_5")
    return make_tiny(spec, tmp_path_factory.mktemp("teacher") / "qwen3_5", seed=1)


@pytest.fixture(scope="session")
def gkd_trainer(tiny_dir: Path, teacher_dir: Path, plugins: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A ``SwiftGKDTrainer``: the tiny student (LoRA) distilled towards the seed-1 teacher."""
    from datasets import Dataset
    from swiftcore_recipe_rl.options import GKDOptions
    from swiftcore_recipe_rl.recipe import gkd_config
    from swiftcore_recipe_rl.trainer import trainer_class
    from swiftcore_train import TrainConfig, apply_tuner

    from swiftcore.api.models import load_model, load_tokenizer, resolve_model_spec

    spec = resolve_model_spec(str(tiny_dir), plugins)
    tokenizer = load_tokenizer(str(tiny_dir))
    tokenizer.padding_side = "left"
    out = tmp_path_factory.mktemp("gkd")
    cfg = TrainConfig(model=str(tiny_dir), dataset=("unused",), output_dir=str(out), batch_size=2)
    options = GKDOptions(teacher_model=str(teacher_dir), max_completion_length=6)
    model = apply_tuner(load_model(spec, str(tiny_dir), plugins), spec, cfg)
    teacher = load_model(resolve_model_spec(str(teacher_dir), plugins), str(teacher_dir), plugins)
    return trainer_class("gkd")(
        model=model,
        teacher_model=teacher,
        args=gkd_config(cfg, options, out),
        train_dataset=Dataset.from_list([{"prompt": "p"}] * 4),
        processing_class=tokenizer,
    )


class RolloutServer:
    """``swiftcore rollout --model DIR`` as a process of its own on a free port of this machine, restartable on that
    port."""

    def __init__(self, model_dir: Path, log: Path, extra: tuple[str, ...] = ()) -> None:
        self.model_dir, self.log, self.extra = model_dir, log, tuple(extra)
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: Any = None  # a swiftcore_testing.forked.ForkedProcess once started

    def start(self, timeout: float = 180.0) -> None:
        """Start it and wait until ``/health`` answers."""
        import httpx
        from swiftcore_testing import start_swiftcore

        # No key unless the test gives one (``extra``): a loopback server, said out loud with --no-api-key.
        keyed = "--api-key-file" in self.extra
        command = ["rollout", "--model", str(self.model_dir), "--port", str(self.port), "--log-level", "warning",
                   *(() if keyed else ("--no-api-key",)), *self.extra]  # fmt: skip
        env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
        # forked from swiftcore_testing's fork server: its own process, its imports made once per worker
        self.process = start_swiftcore(*command, env=env, log=self.log)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"swiftcore rollout exited with {self.process.returncode}:\n{self.log.read_text()[-4000:]}")
            try:
                if httpx.get(f"{self.url}/health", headers=self.headers, timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        pytest.fail(f"swiftcore rollout did not answer within {timeout:g} s:\n{self.log.read_text()[-4000:]}")

    def kill(self) -> None:
        """SIGKILL it (a crash: no shutdown of its own)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)

    def health(self) -> dict[str, Any]:
        import httpx

        return httpx.get(f"{self.url}/health", headers=self.headers, timeout=10).json()

    @property
    def key_file(self) -> str:
        """The ``--api-key-file`` it was started with ("" without one)."""
        return self.extra[self.extra.index("--api-key-file") + 1] if "--api-key-file" in self.extra else ""

    @property
    def headers(self) -> dict[str, str]:
        """The key's header when the server was started with ``--api-key-file FILE``."""
        if not self.key_file:
            return {}
        return {"Authorization": f"Bearer {Path(self.key_file).read_text().splitlines()[0].strip()}"}


@pytest.fixture(scope="module")
def rollout_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[Path], RolloutServer]]:
    """``start(model_dir, *extra) -> RolloutServer``: a ``swiftcore rollout`` subprocess on that checkpoint (``extra``:
    more of its flags), started and answering; every server a module started is killed after it."""
    started: list[RolloutServer] = []

    def start(model_dir: Path, *extra: str, timeout: float = 180.0) -> RolloutServer:
        served = RolloutServer(model_dir, tmp_path_factory.mktemp("rollout-server") / "server.log", extra)
        started.append(served)
        served.start(timeout)
        return served

    try:
        yield start
    finally:
        for served in started:
            served.kill()


def _generalized_jsd(student_logits: Any, teacher_logits: Any, mask: Any, beta: float) -> Any:
    """GKD's generalised JSD(beta) per completion token from its definition (float64), ``beta KL(p_t || m) + (1 -
    beta) KL(p_s || m)`` with ``m = (1 - beta) p_s + beta p_t`` (0: forward KL(p_t || p_s), 1: reverse KL), summed
    over ``mask`` and divided by its count: a 0-d tensor."""
    import torch

    log_ps = torch.log_softmax(student_logits.double(), -1)
    log_pt = torch.log_softmax(teacher_logits.double(), -1)
    if beta == 0.0:
        per_token = (log_pt.exp() * (log_pt - log_ps)).sum(-1)
    elif beta == 1.0:
        per_token = (log_ps.exp() * (log_ps - log_pt)).sum(-1)
    else:
        mix = [log_ps + torch.log(torch.tensor(1 - beta)), log_pt + torch.log(torch.tensor(beta))]
        log_m = torch.logsumexp(torch.stack(mix), 0)
        per_token = beta * (log_pt.exp() * (log_pt - log_m)).sum(-1)
        per_token = per_token + (1 - beta) * (log_ps.exp() * (log_ps - log_m)).sum(-1)
    m = mask.double()
    return (per_token * m).sum() / m.sum()


@pytest.fixture(scope="session")
def image_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four image prompts asking "What colour is this?" of red, blue, red, blue images, each with its colour as
    ``answer`` (the column opsd reads as privileged context): the gkd and opsd image tests' fixed round."""
    from swiftcore_testing import colour_turns, write_jsonl

    work = tmp_path_factory.mktemp("colour-prompts")
    turns = colour_turns(work / "images", range(4), "What colour is this?")
    return write_jsonl(work / "prompts.jsonl", [{"prompt": [user], "answer": colour} for user, colour in turns])


@pytest.fixture(scope="session")
def generalized_jsd() -> Callable[..., Any]:
    """``generalized_jsd(student_logits, teacher_logits, mask, beta)``: the reference the gkd tests hold TRL's loss
    to (a 0-d float64 tensor)."""
    return _generalized_jsd


def _watch_vision(module: Any, seen: list[Any], on: list[bool]) -> None:
    """Record the pixel tensor ``module`` (a vision tower) is called with, into ``seen``, while ``on[0]``."""

    def hook(_module: Any, args: tuple, kwargs: dict) -> None:
        if on[0]:
            seen.append((args or [kwargs["hidden_states"]])[0].detach().clone())

    module.register_forward_pre_hook(hook, with_kwargs=True)


@pytest.fixture(scope="session")
def watch_vision() -> Callable[[Any, list[Any], list[bool]], None]:
    """``watch_vision(visual, seen, on)``: record into ``seen`` the pixel tensors the vision tower ``visual`` is called
    with while ``on[0]`` is true."""
    return _watch_vision


@pytest.fixture
def pixels_while_generating(monkeypatch: pytest.MonkeyPatch) -> Callable[[Any, Any], list[Any]]:
    """``pixels_while_generating(trainer, visual) -> seen``: the pixel tensors the vision tower ``visual`` gets while
    the trainer's TRL generation (``_generate_single_turn``) runs, appended to ``seen`` as they come."""

    def watch(trainer: Any, visual: Any) -> list[Any]:
        seen: list[Any] = []
        generating = [False]
        _watch_vision(visual, seen, generating)
        generate = trainer._generate_single_turn

        def generate_watched(*args: Any, **kwargs: Any) -> Any:
            generating[0] = True
            try:
                return generate(*args, **kwargs)
            finally:
                generating[0] = False

        monkeypatch.setattr(trainer, "_generate_single_turn", generate_watched)
        return seen

    return watch
