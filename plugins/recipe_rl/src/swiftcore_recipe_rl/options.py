"""The online RL recipes' own options, added to ``swiftcore train`` by this plugin (``swiftcore_addoption``).

The core's :class:`~swiftcore_train.config.TrainConfig` carries model, data, tuner, optimiser and checkpoints;
the classes here carry what only the RL recipes read. They are built from the flags before anything is loaded,
so a bad value fails in ``__post_init__`` within a second.

- :class:`SamplingOptions`: how completions are sampled (length, temperature, top-p, top-k), valid with every recipe
  here (``grpo``, ``rloo``, ``reinforce_pp``, ``gkd``, ``opd``).
- :class:`RolloutOptions`: what the reward-driven recipes add (rewards, group size, optimisation passes), valid with
  ``grpo``, ``rloo``, ``reinforce_pp`` and ``opd``.
- :class:`GRPOOptions`, :class:`RLOOOptions`, :class:`ReinforcePPOptions`, :class:`GKDOptions`,
  :class:`OPDOptions`: those plus the method's own flags, each group valid with the recipes that have them
  (``opd`` has every GRPO flag, and ``--teacher-model`` as ``gkd`` has it).

Flags that another recipe could mean differently carry a prefix (``--grpo-loss-type``, ``--rloo-beta``,
``--reinforce-pp-beta``, ``--rollout-temperature``): the preference recipes own ``--loss-type`` and ``--beta``, the
heads ``--temperature``, and a flag is one option across every installed plugin.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields
from typing import Any

__all__ = [
    "ENVIRONMENT_RECIPES",
    "GRPO_LOSS_TYPES",
    "IMPORTANCE_SAMPLING_MODES",
    "IMPORTANCE_SAMPLING_RECIPES",
    "RL_RECIPES",
    "SCALE_REWARDS",
    "GRPOOptions",
    "RLOOOptions",
    "ReinforcePPOptions",
    "GKDOptions",
    "OPDOptions",
    "OPSDOptions",
    "OPSD_TEACHERS",
    "RolloutOptions",
    "SamplingOptions",
    "add_grpo_options",
    "add_rl_options",
    "split_option",
]

#: The GRPO loss variants this recipe offers (docs/rl.md has each one's formula). All but ``fipo`` are TRL 1.16's
#: ``GRPOConfig.loss_type`` values, ``gspo`` being TRL's ``grpo`` with ``importance_sampling_level="sequence"``;
#: ``fipo`` is TRL's ``dapo`` with swiftcore's future-KL weighting of the advantages
#: (:mod:`swiftcore_recipe_rl.losses`).
GRPO_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "gspo", "cispo", "sapo", "fipo")
#: The recipes that run multi-turn episodes (``--environment``): those on TRL's GRPOTrainer, which masks tool results.
ENVIRONMENT_RECIPES = ("grpo", "reinforce_pp")
#: The importance-sampling corrections of engine rollouts (TRL 1.16's ``vllm_importance_sampling_mode`` values), and
#: ``auto`` (``token_truncate`` with ``--async-rollouts``, else ``none``) and ``none``.
IMPORTANCE_SAMPLING_MODES = ("auto", "none", "token_truncate", "token_mask", "sequence_truncate", "sequence_mask")
#: The recipes that can correct engine rollouts by importance sampling: those on TRL's GRPOTrainer, which has the
#: correction (its RLOOTrainer has none).
IMPORTANCE_SAMPLING_RECIPES = ("grpo", "reinforce_pp", "opd", "opsd")
#: How rewards are scaled into advantages (TRL's ``scale_rewards``).
SCALE_REWARDS = ("group", "batch", "none")


def _strings(value: Any) -> tuple[str, ...]:
    """A flag given several times (a tuple or list), or once in a config file (a string) -> a tuple."""
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(str(v) for v in value)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


#: The key of a ``--reward-option`` (``REWARD.KEY``, the reward possibly ``name@plugin``) and of an
#: ``--environment-option`` (a keyword of the environment's factory).
_REWARD_OPTION_KEY = re.compile(r"[a-z0-9][a-z0-9_.\-@]*\.[a-z0-9_]+")
_ENVIRONMENT_OPTION_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SERVER_URL = re.compile(r"https?://[^\s/?#]+(/[^\s?#]*)?")
_REWARD_OPTION_FORM = "REWARD.KEY=VALUE, e.g. format.pattern='^<answer>'"


def split_option(item: str, *, flag: str, key: re.Pattern[str], expected: str) -> tuple[str, str]:
    """``"KEY=VALUE"`` -> ``(KEY, VALUE)``: the one parser of the ``--reward-option`` and ``--environment-option``
    values (the key stripped, the value kept as given: it may itself hold ``=``).

    Args:
        item: one value of the flag.
        flag: the flag, for the message (``--environment-option``).
        key: the pattern the whole key must match.
        expected: the form and an example, for the message (``KEY=VALUE, e.g. max_calls=2``).

    Raises:
        ValueError: no ``=``, or a key that does not match ``key``.
    """
    name, sep, value = str(item).partition("=")
    name = name.strip()
    if not sep or not key.fullmatch(name):
        raise ValueError(f"{flag} {item!r}: expected {expected}")
    return name, value


def _check_finite(options: Any, ranges: dict[str, tuple[float, float]], problems: list[str]) -> None:
    """Append a problem for each field of ``ranges`` that is not a finite number strictly inside its range."""
    for name, (low, high) in ranges.items():
        value = getattr(options, name)
        if not (isinstance(value, int | float) and math.isfinite(value) and low < value < high):
            problems.append(f"{_flag(name)}: {value!r} is out of range")


def _check_epsilon_high(name: str, value: float | None, problems: list[str]) -> None:
    if value is not None and not (math.isfinite(value) and value > 0):
        problems.append(f"{_flag(name)}: {value!r} must be a finite positive number")


@dataclass
class SamplingOptions:
    """How the policy samples its completions: options every on-policy recipe shares (``gkd`` included).

    Attributes:
        max_completion_length: the most tokens a completion may have.
        rollout_temperature: sampling temperature of the rollouts.
        rollout_top_p: nucleus sampling of the rollouts (1: off).
        rollout_top_k: top-k sampling of the rollouts (0: off).
        rollout_engine: who generates the rollouts: ``trainer`` (TRL's own ``generate`` on the policy), or
            ``transformers`` or ``vllm`` (a swiftcore engine of that backend colocated in the trainer's process,
            synced to the policy before each generation round; see :mod:`swiftcore_recipe_rl.sync`).
        sync_bucket_mb: with a rollout engine and ``--tuner full``, the largest bucket of the weight sync (MiB).
        rollout_server: the URL of a ``swiftcore rollout`` server that generates the rollouts instead of an engine in
            the trainer's process (server mode; see :mod:`swiftcore_recipe_rl.remote`). Empty: no server.
        rollout_server_timeout: seconds a call to the rollout server may take (a rollout round, a sync) before the
            run stops as if the server had died.
        rollout_server_key_file: the file holding the rollout server's key (its ``--api-key-file``), sent with every
            call; empty: ``$SWIFTCORE_ROLLOUT_KEY``, else no key (a server started with ``--no-api-key``).
        rollout_draft: a draft model's directory (an Eagle3 draft, ``swiftcore train --recipe eagle3``) the
            colocated ``transformers`` rollout engine decodes with speculatively (``swiftcore infer --draft``'s
            decoder): greedy rollouts are the target's token for token, sampled ones distributed as the target's;
            the draft's weights stay as trained while the policy's are synced. Empty: no draft.
    """

    max_completion_length: int = 256
    rollout_temperature: float = 1.0
    rollout_top_p: float = 1.0
    rollout_top_k: int = 0
    rollout_engine: str = "trainer"
    sync_bucket_mb: float = 64.0
    rollout_server: str = ""
    rollout_server_timeout: float = 600.0
    rollout_server_key_file: str = ""
    rollout_draft: str = ""

    #: The recipe these options belong to (not a flag).
    recipe = "rl"

    def __post_init__(self) -> None:
        problems: list[str] = []
        self._check(problems)
        if problems:
            raise ValueError("; ".join(problems))

    def _check(self, problems: list[str]) -> None:
        from swiftcore_recipe_rl.sync import ROLLOUT_ENGINES

        if self.rollout_engine not in ROLLOUT_ENGINES:
            problems.append(f"--rollout-engine: {self.rollout_engine!r} is not one of {', '.join(ROLLOUT_ENGINES)}")
        _check_finite(self, {"sync_bucket_mb": (0.0, math.inf), "rollout_server_timeout": (0.0, math.inf)}, problems)
        self._check_rollout_server(problems)
        self._check_rollout_draft(problems)
        if int(self.max_completion_length) < 1:
            problems.append("--max-completion-length: must be at least 1")
        _check_finite(self, {"rollout_temperature": (0.0, math.inf), "rollout_top_p": (0.0, 1.0 + 1e-12)}, problems)
        if self.rollout_top_k < 0:
            problems.append(f"--rollout-top-k: {self.rollout_top_k} must be >= 0 (0: off)")
        self._check_method(problems)

    def _check_method(self, problems: list[str]) -> None:
        """The method's own checks (subclasses)."""

    def _check_rollout_draft(self, problems: list[str]) -> None:
        """``--rollout-draft``: only the colocated transformers engine decodes with a draft (the directory itself is
        checked by the plan step, :func:`~swiftcore_recipe_rl.plan.check_rollout_draft`)."""
        draft = self.rollout_draft
        if not draft:
            return
        if self.rollout_server:
            problems.append(
                f"--rollout-draft {draft} with --rollout-server: the server's engine is started by `swiftcore "
                "rollout`, which takes no draft yet; drop --rollout-draft, or use --rollout-engine transformers "
                "instead of the server"
            )
        elif getattr(self, "ray", False):
            problems.append(
                f"--rollout-draft {draft} with --ray: the Ray rollout worker takes no draft yet; drop --rollout-draft, "
                "or run without --ray (--rollout-engine transformers)"
            )
        elif self.rollout_engine == "vllm":
            problems.append(
                f"--rollout-draft {draft} with --rollout-engine vllm: speculative rollouts are not wired to vLLM's "
                "speculative decoding yet; use --rollout-engine transformers, or drop --rollout-draft"
            )
        elif self.rollout_engine != "transformers":
            problems.append(
                f"--rollout-draft {draft}: needs --rollout-engine transformers (TRL's own generation, "
                f"--rollout-engine {self.rollout_engine}, decodes without a draft)"
            )

    def _check_rollout_server(self, problems: list[str]) -> None:
        """``--rollout-server``: an http(s) URL, and the only rollout engine (it is one)."""
        url = self.rollout_server
        if self.rollout_server_key_file and not url:
            problems.append("--rollout-server-key-file without --rollout-server: the key is the server's; drop it")
        if not url:
            return
        if not _SERVER_URL.fullmatch(url):
            problems.append(f"--rollout-server: {url!r} is not an http(s) URL such as http://127.0.0.1:8001")
        if getattr(self, "ray", False):
            problems.append(
                "--rollout-server with --ray: --ray starts its own rollout worker (of --rollout-engine); drop one"
            )
        if self.rollout_engine != "trainer":
            problems.append(
                f"--rollout-server with --rollout-engine {self.rollout_engine}: the server is the rollout engine; "
                "drop --rollout-engine (or drop --rollout-server to run that engine in the trainer's process)"
            )


@dataclass
class RolloutOptions(SamplingOptions):
    """Options the reward-driven recipes (``grpo``, ``rloo``, ``reinforce_pp``) share, beyond sampling
    (flag ``--num-generations`` -> field ``num_generations``).

    Attributes:
        reward: the rewards, by name (``swiftcore rewards`` lists them; ``name@plugin`` picks a provider).
        reward_option: ``REWARD.KEY=VALUE`` options of the rewards (``format.pattern=^<answer>``).
        reward_weight: ``REWARD=WEIGHT``; a reward not named weighs 1.
        reward_fallback: the reward a sample gets from a reward function that raised or gave NaN for it.
        reward_timeout: seconds a reward function may take for one batch before its samples get the fallback
            (None: no limit).
        num_generations: completions sampled per prompt (the group whose rewards are compared).
        num_iterations: optimisation passes over each batch of rollouts (the clipped ratio matters above 1).
        mask_truncated_completions: leave completions that hit ``max_completion_length`` out of the loss.
        environment: a multi-turn environment by name (``grpo`` and ``reinforce_pp``; ``swiftcore plugins`` lists
            them): each rollout becomes an episode of replies and tool results (see
            :mod:`swiftcore_recipe_rl.episodes`). Empty: single-turn rollouts.
        environment_option: ``KEY=VALUE`` options of the environment, passed to its factory as keyword arguments
            (``max_calls=2`` for the ``calculator``); the keys it takes, and their types, are its factory's keyword
            parameters (checked when the run starts:
            :func:`~swiftcore_recipe_rl.environment_options.environment_factory`).
        max_turns: with ``environment``, the most replies per episode.
        async_rollouts: with a rollout engine or server (``grpo``, ``reinforce_pp``), generate and score the next
            generation round while the policy trains on this one (:mod:`swiftcore_recipe_rl.prefetch`); its
            rollouts are then up to ``max_staleness`` optimiser steps stale, which the importance-sampling
            correction accounts for.
        max_staleness: ``K``, with async rollouts: up to ``K`` rounds generated ahead, each trained at most ``K``
            optimiser steps after the weights it was sampled from (a round that would be staler waits until the
            engine can be synced). None: 1 with ``async_rollouts``; 0: synchronous rollouts (refused with
            ``async_rollouts``); ``K >= 1`` turns ``async_rollouts`` on.
        rollout_importance_sampling: one of :data:`IMPORTANCE_SAMPLING_MODES`: weigh each rollout token's loss by
            the current policy's probability of it over the engine's sampling probability, truncated at (or masked
            above) ``rollout_is_clip_max`` per token or per sequence (TRL's correction of vLLM rollouts).
        rollout_is_clip_max: the importance ratio's upper bound.
        ray: run the trainer, the rollout engine and each reward as Ray actors (:mod:`swiftcore_recipe_rl.ray_actors`;
            a local cluster, or the one ``RAY_ADDRESS`` names).
    """

    reward: tuple[str, ...] = ()
    reward_option: tuple[str, ...] = ()
    reward_weight: tuple[str, ...] = ()
    reward_fallback: float = 0.0
    reward_timeout: float | None = None
    num_generations: int = 8
    num_iterations: int = 1
    mask_truncated_completions: bool = False
    environment: str = ""
    environment_option: tuple[str, ...] = ()
    max_turns: int = 3
    async_rollouts: bool = False
    max_staleness: int | None = None
    rollout_importance_sampling: str = "auto"
    rollout_is_clip_max: float = 3.0
    ray: bool = False

    def _check(self, problems: list[str]) -> None:
        self._check_async(problems)
        self.reward = _strings(self.reward)
        self.reward_option = _strings(self.reward_option)
        self.reward_weight = _strings(self.reward_weight)
        self.environment_option = _strings(self.environment_option)
        if not self.reward and self._rewards_required():
            problems.append("--reward: name at least one reward (e.g. --reward format); `swiftcore rewards` lists them")
        if int(self.max_turns) < 1:
            problems.append(f"--max-turns: {self.max_turns} must be at least 1")
        if self.environment and self.recipe not in ENVIRONMENT_RECIPES:
            problems.append(
                f"--environment: not supported by {self.recipe} (TRL 1.16's RLOOTrainer cannot mask tool results out "
                f"of the loss); use --recipe {' or '.join(ENVIRONMENT_RECIPES)}"
            )
        if self.environment and self.rollout_engine == "vllm":
            problems.append(
                "--environment with --rollout-engine vllm: not supported yet (its episodes are untested on vLLM); "
                "use --rollout-engine trainer or transformers"
            )
        if not self.environment and any(r.partition("@")[0] == "environment" for r in self.reward):
            problems.append("--reward environment: scores an episode's environment; give --environment NAME")
        if self.environment_option and not self.environment:
            problems.append(
                f"--environment-option {self.environment_option[0]!r}: options of an environment; give --environment "
                "NAME too (e.g. --environment calculator --environment-option max_calls=2), or drop the option"
            )
        # Syntax only: swiftcore_train.rewards parses the reward options for the run, and the environment's
        # factory decides which keys it takes and their types
        # (swiftcore_recipe_rl.environment_options.environment_factory).
        for item in self.reward_option:
            try:
                split_option(item, flag="--reward-option", key=_REWARD_OPTION_KEY, expected=_REWARD_OPTION_FORM)
            except ValueError as exc:
                problems.append(str(exc))
        try:
            self.environment_options()
        except ValueError as exc:
            problems.append(str(exc))
        try:
            self.weights()
        except ValueError as exc:
            problems.append(str(exc))
        for name in ("num_generations", "num_iterations"):
            if int(getattr(self, name)) < 1:
                problems.append(f"{_flag(name)}: must be at least 1")
        if self.num_generations < 2:
            problems.append(
                f"--num-generations: {self.recipe} compares completions of a prompt with each other; give at least 2"
            )
        _check_finite(self, {"reward_fallback": (-math.inf, math.inf)}, problems)
        timeout = self.reward_timeout
        if timeout is not None and not (math.isfinite(timeout) and timeout > 0):
            problems.append(f"--reward-timeout: {timeout!r} must be a positive number of seconds")
        super()._check(problems)

    def _rewards_required(self) -> bool:
        """Whether the recipe needs ``--reward`` (``opd`` without a reward weight does not)."""
        return True

    def _check_async(self, problems: list[str]) -> None:
        """``--async-rollouts`` and ``--rollout-importance-sampling``: an engine generates the rollouts (the sampling
        log-probs are its), the recipe is on TRL's GRPOTrainer, single-turn rollouts."""
        mode = self.rollout_importance_sampling
        if mode not in IMPORTANCE_SAMPLING_MODES:
            problems.append(
                f"--rollout-importance-sampling: {mode!r} is not one of {', '.join(IMPORTANCE_SAMPLING_MODES)}"
            )
            return
        _check_finite(self, {"rollout_is_clip_max": (0.0, math.inf)}, problems)
        asked = ["--async-rollouts"] if self.async_rollouts else []
        staleness = self._check_staleness(problems)
        if staleness and not self.async_rollouts:
            self.async_rollouts = True  # --max-staleness K >= 1 is asynchronous rollouts K rounds ahead
            asked.append(f"--max-staleness {staleness}")
        if mode not in ("auto", "none"):
            asked.append(f"--rollout-importance-sampling {mode}")
        if not asked:
            return
        if self.rollout_engine == "trainer" and not self.rollout_server and not self.ray:
            problems.append(
                f"{' and '.join(asked)}: needs a swiftcore rollout engine (--rollout-engine transformers or vllm, "
                "--rollout-server URL, or --ray): TRL's own generation neither runs ahead nor reports sampling "
                "log-probs"
            )
        if self.recipe not in IMPORTANCE_SAMPLING_RECIPES:
            problems.append(
                f"{' and '.join(asked)}: not supported by {self.recipe} (TRL 1.16's RLOOTrainer has no "
                f"importance-sampling correction for rollouts of another policy); use --recipe "
                f"{' or '.join(IMPORTANCE_SAMPLING_RECIPES)}"
            )
        if self.async_rollouts and self.environment:
            problems.append(
                "--async-rollouts with --environment: not supported yet (an episode's later turns need this step's "
                "tool results); drop one of them"
            )

    def _check_staleness(self, problems: list[str]) -> int:
        """``--max-staleness K``: a whole number >= 0, not 0 with ``--async-rollouts``. Returns ``K`` when valid and
        given, else 0."""
        value = self.max_staleness
        if value is None:
            return 0
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            problems.append(
                f"--max-staleness: {value!r} must be a whole number >= 0 (the most optimiser steps between a "
                "round's weights and the step it is trained at; 0: synchronous rollouts)"
            )
            return 0
        if value == 0 and self.async_rollouts:
            problems.append(
                "--max-staleness 0 with --async-rollouts: 0 means synchronous rollouts; give --max-staleness 1 or "
                "more, or drop --async-rollouts"
            )
        return value

    def importance_sampling_mode(self) -> str | None:
        """TRL's ``vllm_importance_sampling_mode`` for this run (``auto`` resolved), or None for no correction."""
        mode = self.rollout_importance_sampling
        if mode == "auto":
            mode = "token_truncate" if self.async_rollouts else "none"
        return None if mode == "none" else mode

    def environment_options(self) -> dict[str, str]:
        """``--environment-option KEY=VALUE`` values as ``{key: value}``, the values as given (strings; the last
        of a key given twice wins, as with ``--reward-option``).

        Raises:
            ValueError: a value that is not ``KEY=VALUE`` with a keyword name as its key.
        """
        expected = "KEY=VALUE, e.g. --environment-option max_calls=2"
        return dict(
            split_option(item, flag="--environment-option", key=_ENVIRONMENT_OPTION_KEY, expected=expected)
            for item in self.environment_option
        )

    def weights(self) -> dict[str, float]:
        """``--reward-weight NAME=W`` values as ``{name: weight}`` (a reward not named weighs 1)."""
        out = {}
        for item in self.reward_weight:
            name, sep, value = item.partition("=")
            try:
                weight = float(value)
            except ValueError:
                weight = math.nan
            if not sep or not name or not math.isfinite(weight):
                raise ValueError(f"--reward-weight {item!r}: expected REWARD=WEIGHT with a finite number")
            if name not in self.reward:
                raise ValueError(f"--reward-weight {item!r}: {name!r} is not one of the --reward values")
            out[name] = weight
        return out


@dataclass
class GRPOOptions(RolloutOptions):
    """Options of ``--recipe grpo``: :class:`RolloutOptions` and GRPO's own (its loss variants: ``docs/rl.md``).

    Attributes:
        grpo_loss_type: one of :data:`GRPO_LOSS_TYPES` (the per-token loss and how it is averaged).
        grpo_beta: weight of the KL penalty to the reference model (0: no reference model is kept).
        grpo_epsilon: the ratio clipping range's lower side, ``1 - epsilon``.
        grpo_epsilon_high: its upper side, ``1 + epsilon_high`` (default: ``grpo_epsilon``; DAPO uses 0.28); with
            ``cispo`` the cap of the importance weight itself (TRL's convention; it recommends 5).
        grpo_delta: TRL's ``delta``: the unclipped ratio is also capped at ``delta`` (two-sided clipping,
            INTELLECT-2); with ``fipo`` also the ratio above which a token is left out of the future-KL sum.
        scale_rewards: one of :data:`SCALE_REWARDS`.
        sapo_temperature_pos: ``sapo``: the gate's temperature for tokens with a positive advantage.
        sapo_temperature_neg: ``sapo``: the gate's temperature for the others.
        fipo_decay_rate: ``fipo``: the future-KL's half-life in tokens (``gamma = 2 ** (-1 / decay_rate)``).
        fipo_clip_range: ``fipo``: the influence weight is clipped to ``[1 - range, 1 + range]``.
        fipo_clip_high_only: ``fipo``: clip it to ``[1, 1 + range]`` instead (the FIPO paper's default).
        fipo_safety_threshold: ``fipo``: a negative-advantage token whose ratio exceeds this keeps a weight in
            ``[0.8, 1]`` (0: off).
        dynamic_sampling: DAPO's dynamic sampling: groups whose rewards are all equal (zero advantage, no signal)
            are left out of the loss and of its token count; with ``dapo_max_resample`` the batch is refilled.
        dapo_max_resample: DAPO's refill: up to this many extra generation rounds (each a generation batch of
            prompts drawn from the dataset) per training batch, whose informative groups replace the dropped ones
            until the batch is full of groups with a signal (0: the filter form, no refill).
        overlong_buffer: DAPO's soft overlong punishment: the last ``overlong_buffer`` tokens before
            ``max_completion_length`` earn a penalty growing linearly to ``-overlong_penalty`` (0: off).
        overlong_penalty: the penalty's largest size (also given to completions cut at ``max_completion_length``).
        chord_dataset: CHORD (:mod:`swiftcore_recipe_rl.chord`): expert chat data (``messages``) whose
            cross-entropy is mixed into the loss, ``(1 - mu) L_GRPO + mu L_SFT`` (empty: off).
        chord_mu_peak: CHORD: ``mu`` at the end of the warmup.
        chord_mu_valley: CHORD: ``mu`` after the cosine decay.
        chord_mu_warmup_steps: CHORD: optimiser steps of ``mu``'s linear warmup from 0 to ``chord_mu_peak``.
        chord_mu_decay_steps: CHORD: optimiser steps of its cosine decay from ``chord_mu_peak`` to
            ``chord_mu_valley``.
        chord_batch_size: CHORD: expert samples per device and micro-batch of the loss.
        chord_phi: CHORD-phi: weight each expert token's loss by ``p (1 - p)``.
        fp32_lm_head: compute the policy's LM head (and so its log-probs) in float32 when it trains in bfloat16 or
            float16: TRL's ``cast_lm_head_to_fp32``, one of the training-inference mismatch remedies (docs/rl.md).
    """

    grpo_loss_type: str = "dapo"
    grpo_beta: float = 0.0
    grpo_epsilon: float = 0.2
    grpo_epsilon_high: float | None = None
    grpo_delta: float | None = None
    scale_rewards: str = "group"
    sapo_temperature_pos: float = 1.0
    sapo_temperature_neg: float = 1.05
    fipo_decay_rate: float = 32.0
    fipo_clip_range: float = 0.2
    fipo_clip_high_only: bool = True
    fipo_safety_threshold: float = 4.0
    dynamic_sampling: bool = False
    dapo_max_resample: int = 0
    overlong_buffer: int = 0
    overlong_penalty: float = 1.0
    chord_dataset: str = ""
    # the mu settings of ms-swift's CHORD example (swift rlhf --rlhf_type grpo ... --chord_mu_*)
    chord_mu_peak: float = 0.9
    chord_mu_valley: float = 0.05
    chord_mu_warmup_steps: int = 0
    chord_mu_decay_steps: int = 200
    chord_batch_size: int = 1
    chord_phi: bool = False
    fp32_lm_head: bool = False

    recipe = "grpo"

    def _check_method(self, problems: list[str]) -> None:
        loss = self.grpo_loss_type
        if loss not in GRPO_LOSS_TYPES:
            problems.append(f"--grpo-loss-type: {loss!r} is not one of {', '.join(GRPO_LOSS_TYPES)}")
        if self.scale_rewards not in SCALE_REWARDS:
            problems.append(f"--scale-rewards: {self.scale_rewards!r} is not one of {', '.join(SCALE_REWARDS)}")
        _check_finite(self, {"grpo_beta": (-1e-12, math.inf), "grpo_epsilon": (0.0, math.inf)}, problems)
        _check_epsilon_high("grpo_epsilon_high", self.grpo_epsilon_high, problems)
        if loss == "cispo" and not (self.grpo_epsilon_high is not None and self.grpo_epsilon_high > 1):
            problems.append(
                f"--grpo-loss-type cispo: caps the importance weight at --grpo-epsilon-high itself (TRL's convention), "
                f"so give one above 1 (TRL recommends 5.0); got {self.grpo_epsilon_high!r}"
            )
        if self.grpo_delta is not None and not (math.isfinite(self.grpo_delta) and self.grpo_delta > 1):
            problems.append(f"--grpo-delta: {self.grpo_delta!r} must be a finite number above 1")
        _check_finite(
            self,
            {"sapo_temperature_pos": (0.0, math.inf), "sapo_temperature_neg": (0.0, math.inf),
             "fipo_decay_rate": (0.0, math.inf), "fipo_clip_range": (0.0, 1.0),
             "fipo_safety_threshold": (-1e-12, math.inf), "overlong_penalty": (0.0, math.inf)},
            problems,
        )  # fmt: skip
        self._check_only_with("sapo", ("sapo_temperature_pos", "sapo_temperature_neg"), problems)
        fipo = ("fipo_decay_rate", "fipo_clip_range", "fipo_clip_high_only", "fipo_safety_threshold")
        self._check_only_with("fipo", fipo, problems)
        if not 0 <= int(self.overlong_buffer) < int(self.max_completion_length):
            problems.append(
                f"--overlong-buffer: {self.overlong_buffer} must be in [0, --max-completion-length "
                f"{self.max_completion_length}) (0: off)"
            )
        self._check_chord(problems)
        self._check_resample(problems)

    def _check_resample(self, problems: list[str]) -> None:
        """``--dapo-max-resample``: a count >= 0, with ``--dynamic-sampling``, with TRL's own or a synchronous
        engine's generation (an async engine's next round is already under way for the dataset's next prompts)."""
        rounds = self.dapo_max_resample
        if not (isinstance(rounds, int) and rounds >= 0):
            problems.append(f"--dapo-max-resample: {rounds!r} must be a whole number >= 0 (0: no refill)")
        elif rounds and not self.dynamic_sampling:
            problems.append(
                f"--dapo-max-resample {rounds}: refills the groups --dynamic-sampling drops; add --dynamic-sampling"
            )
        elif rounds and self.async_rollouts:
            problems.append(
                f"--dapo-max-resample {rounds} with --async-rollouts: not supported (the engine already generates the "
                "next batch's prompts while the refill would need it); drop one of them"
            )

    def _check_chord(self, problems: list[str]) -> None:
        """CHORD's flags: weights in [0, 1], step counts >= 0, a batch of at least 1; refused without
        ``--chord-dataset`` (they would silently do nothing)."""
        for name in ("chord_mu_peak", "chord_mu_valley"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and 0.0 <= value <= 1.0):
                problems.append(f"{_flag(name)}: {value!r} must be in [0, 1] (the SFT term's weight mu)")
        for name, low in (("chord_mu_warmup_steps", 0), ("chord_mu_decay_steps", 0), ("chord_batch_size", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                problems.append(f"{_flag(name)}: {value!r} must be an integer >= {low}")
        if self.chord_dataset:
            return
        defaults = {f.name: f.default for f in fields(GRPOOptions)}
        for name in ("chord_mu_peak", "chord_mu_valley", "chord_mu_warmup_steps", "chord_mu_decay_steps",
                     "chord_batch_size", "chord_phi"):  # fmt: skip
            if getattr(self, name) != defaults[name]:
                problems.append(f"{_flag(name)}: only read with --chord-dataset PATH (CHORD); give one or drop it")

    def _check_only_with(self, loss: str, names: tuple[str, ...], problems: list[str]) -> None:
        """A loss variant's own flags, set away from their defaults while another variant runs: refused (they would
        silently do nothing)."""
        if self.grpo_loss_type == loss:
            return
        defaults = {f.name: f.default for f in fields(GRPOOptions)}
        for name in names:
            if getattr(self, name) != defaults[name]:
                problems.append(f"{_flag(name)}: only read by --grpo-loss-type {loss}; drop it or set that loss")


@dataclass
class RLOOOptions(RolloutOptions):
    """Options of ``--recipe rloo``: :class:`RolloutOptions` and RLOO's own (TRL 1.16's ``RLOOConfig``).

    Attributes:
        rloo_beta: weight of the sequence-level KL penalty subtracted from each reward (``beta * sum_t (log pi -
            log pi_ref)``, RLOO's first-order estimate; 0: no reference model is kept).
        rloo_epsilon: the sequence-ratio clipping range's lower side, ``1 - epsilon``.
        rloo_epsilon_high: its upper side (default: ``rloo_epsilon``).
        rloo_normalize_advantages: also standardise the leave-one-out advantages over the batch.
    """

    rloo_beta: float = 0.05
    rloo_epsilon: float = 0.2
    rloo_epsilon_high: float | None = None
    rloo_normalize_advantages: bool = False

    recipe = "rloo"

    def _check_method(self, problems: list[str]) -> None:
        _check_finite(self, {"rloo_beta": (-1e-12, math.inf), "rloo_epsilon": (0.0, math.inf)}, problems)
        _check_epsilon_high("rloo_epsilon_high", self.rloo_epsilon_high, problems)


@dataclass
class ReinforcePPOptions(RolloutOptions):
    """Options of ``--recipe reinforce_pp``: :class:`RolloutOptions` and REINFORCE++'s own.

    Attributes:
        reinforce_pp_beta: weight of the token-level KL penalty in the reward, ``-beta (log pi_old - log pi_ref)``
            on every completion token (0: no reference model is kept).
        reinforce_pp_epsilon: the per-token ratio clipping range's lower side, ``1 - epsilon``.
        reinforce_pp_epsilon_high: its upper side (default: ``reinforce_pp_epsilon``).
        reinforce_pp_baseline: REINFORCE++-baseline: subtract each prompt's group-mean reward before the returns
            (else plain REINFORCE++: raw rewards).
    """

    reinforce_pp_beta: float = 0.01
    reinforce_pp_epsilon: float = 0.2
    reinforce_pp_epsilon_high: float | None = None
    reinforce_pp_baseline: bool = True

    recipe = "reinforce_pp"

    def _check_method(self, problems: list[str]) -> None:
        _check_finite(
            self, {"reinforce_pp_beta": (-1e-12, math.inf), "reinforce_pp_epsilon": (0.0, math.inf)}, problems
        )
        _check_epsilon_high("reinforce_pp_epsilon_high", self.reinforce_pp_epsilon_high, problems)


@dataclass
class GKDOptions(SamplingOptions):
    """Options of ``--recipe gkd``: on-policy distillation on TRL 1.16's ``DistillationTrainer``.

    The student samples completions of each prompt; the loss is the generalised Jensen-Shannon divergence between
    the student's and the teacher's next-token distributions on those completions.

    Attributes:
        teacher_model: the teacher, a local model directory (same tokenizer vocabulary as the student).
        teacher_api: an OpenAI-compatible teacher URL: refused (TRL 1.16 has no such teacher; see the message).
        teacher_server: refused with ``gkd`` (its loss needs the teacher's whole next-token distributions; a server
            returns at most 20 alternatives per token): ``--recipe opd`` takes it.
        gkd_beta: the divergence: 0 forward KL(teacher || student), 1 reverse KL(student || teacher), between them the
            generalised JSD with mixture ``(1 - beta) p_student + beta p_teacher``.
    """

    teacher_model: str = ""
    teacher_api: str = ""
    teacher_server: str = ""
    gkd_beta: float = 0.5

    recipe = "gkd"

    def _check_method(self, problems: list[str]) -> None:
        if self.teacher_server:
            problems.append(
                f"--teacher-server {self.teacher_server!r} with --recipe gkd: gkd's divergence needs the teacher's "
                "whole next-token distribution at every position, and a server returns at most 20 log-probs per "
                "token; use --recipe opd (KL advantages from the teacher's log-prob of each sampled token), or give "
                "the teacher as a local directory with --teacher-model"
            )
        elif self.teacher_api:
            problems.append(
                f"--teacher-api {self.teacher_api!r}: not supported: TRL 1.16 distils from a local teacher "
                "(DistillationTrainer) or from a TRL vLLM server's top-k logprobs (experimental "
                "ServerDistillationTrainer, `trl vllm-serve`), not from an OpenAI-compatible API; give the teacher "
                "as a local directory with --teacher-model"
            )
        elif not self.teacher_model:
            problems.append("--teacher-model: give the teacher model's directory (gkd distils the student towards it)")
        value = self.gkd_beta
        if not (isinstance(value, int | float) and math.isfinite(value) and 0.0 <= value <= 1.0):
            problems.append(f"--gkd-beta: {value!r} must be in [0, 1]")


@dataclass
class OPDOptions(GRPOOptions):
    """Options of ``--recipe opd``: on-policy distillation with KL advantages on the ``grpo`` trainer.

    Every GRPO option applies (the loss, ``--grpo-loss-type`` and its variants, the rollout engines, the
    importance-sampling correction). The student samples; the teacher scores each sampled token; a token's advantage
    is ``log p_teacher(y_t) - log p_student(y_t)`` (the negative k1 estimate of the reverse KL, detached), plus
    ``opd_reward_weight`` times GRPO's group advantage of the task reward (:func:`~swiftcore_recipe_rl.losses.
    kl_advantages`).

    Attributes:
        teacher_model: the teacher, a local model directory with the student's tokenizer vocabulary (as ``gkd``'s).
        teacher_server: instead of ``teacher_model``, the URL of an OpenAI-compatible server (``swiftcore deploy``,
            ``vllm serve``) of a teacher with the student's vocabulary, asked for the log-probs of each sampled
            completion (:mod:`swiftcore_recipe_rl.teacher_server`); needs ``rollout_temperature`` 1.
        opd_reward_weight: weight of GRPO's reward advantage added to each token's KL advantage (0: pure
            distillation; ``--reward`` is then optional and, when given, only logged).
    """

    teacher_model: str = ""
    teacher_server: str = ""
    opd_reward_weight: float = 0.0

    recipe = "opd"

    def _rewards_required(self) -> bool:
        return self.opd_reward_weight != 0

    def _check_method(self, problems: list[str]) -> None:
        super()._check_method(problems)
        self._check_teacher(problems)
        value = self.opd_reward_weight
        if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
            problems.append(f"--opd-reward-weight: {value!r} must be a finite number >= 0 (0: pure distillation)")
        elif value and not self.reward:
            problems.append(
                f"--opd-reward-weight {value:g}: adds the task reward's advantage; name the reward with --reward NAME "
                "(or drop the weight for pure distillation)"
            )
        if self.dynamic_sampling:
            problems.append(
                f"--dynamic-sampling with --recipe {self.recipe}: groups of equal rewards still carry the teacher's "
                "signal (with --opd-reward-weight 0 every group would be dropped); drop --dynamic-sampling"
            )

    def _check_teacher(self, problems: list[str]) -> None:
        if self.teacher_server:
            if self.teacher_model:
                problems.append(
                    f"--teacher-server {self.teacher_server!r} and --teacher-model {self.teacher_model!r}: give one "
                    "teacher, a served one or a local directory"
                )
            if not self.teacher_server.startswith(("http://", "https://")):
                problems.append(
                    f"--teacher-server {self.teacher_server!r}: give the server's URL, e.g. http://127.0.0.1:8000"
                )
            if self.rollout_temperature != 1:
                problems.append(
                    f"--teacher-server with --rollout-temperature {self.rollout_temperature!r}: a server returns the "
                    "teacher's log-probs at temperature 1, while the local teacher's are taken at the rollout "
                    "temperature; sample at --rollout-temperature 1, or use --teacher-model"
                )
        elif not self.teacher_model:
            problems.append(
                "--teacher-model: give the teacher model's directory, or --teacher-server the URL of a server of it "
                "(opd's advantages are the teacher's log-probs of the student's tokens minus the student's)"
            )


#: Who scores the student's tokens in ``--recipe opsd`` (``--opsd-teacher``).
OPSD_TEACHERS = ("current", "initial")


@dataclass
class OPSDOptions(OPDOptions):
    """Options of ``--recipe opsd``: on-policy self-distillation, ``opd`` whose teacher is the policy itself shown
    privileged context (:mod:`swiftcore_recipe_rl.opsd`).

    Every ``opd`` option applies except ``teacher_model`` (refused: the teacher is the policy).

    Attributes:
        opsd_context: the dataset column holding each prompt's privileged context (a reference answer or solution);
            the teacher sees it, the student does not.
        opsd_context_format: how the teacher's last user message is written, a ``str.format`` pattern with
            ``{prompt}`` (the message as the student sees it) and ``{context}`` (the column's value).
        opsd_teacher: ``current``: the policy's current weights, without gradient (the OPSD paper's); ``initial``: the
            policy as it started (LoRA: the adapter switched off; full fine-tuning: a frozen copy of ``--model``).
    """

    opsd_context: str = "answer"
    opsd_context_format: str = "{prompt}\n\nReference answer: {context}"
    opsd_teacher: str = "current"

    recipe = "opsd"

    def _check_teacher(self, problems: list[str]) -> None:
        if self.teacher_server:
            problems.append(
                f"--teacher-server {self.teacher_server!r} with --recipe opsd: the teacher is the policy itself, "
                "shown the --opsd-context column; drop --teacher-server, or use --recipe opd for a served teacher"
            )
        if self.teacher_model:
            problems.append(
                f"--teacher-model {self.teacher_model!r} with --recipe opsd: the teacher is the policy itself, shown "
                "the --opsd-context column; drop --teacher-model, or use --recipe opd for another teacher model"
            )
        if self.opsd_teacher not in OPSD_TEACHERS:
            problems.append(f"--opsd-teacher: {self.opsd_teacher!r} is not one of {', '.join(OPSD_TEACHERS)}")
        if not self.opsd_context:
            problems.append("--opsd-context: name the dataset column holding each prompt's privileged context")
        try:
            shown = self.opsd_context_format.format(prompt="", context="\0")
        except (KeyError, IndexError, ValueError) as exc:
            problems.append(
                f"--opsd-context-format {self.opsd_context_format!r}: not a pattern of {{prompt}} and {{context}} "
                f"({type(exc).__name__}: {exc})"
            )
        else:
            if "\0" not in shown:
                problems.append(
                    f"--opsd-context-format {self.opsd_context_format!r}: has no {{context}}, so the teacher would "
                    "see no privileged context"
                )


#: The recipes of this plugin and their options classes.
RL_RECIPES: dict[str, type[RolloutOptions]] = {
    "grpo": GRPOOptions,
    "rloo": RLOOOptions,
    "reinforce_pp": ReinforcePPOptions,
    "gkd": GKDOptions,
    "opd": OPDOptions,
    "opsd": OPSDOptions,
}

_HELP = {
    "reward": "Reward function by name (repeatable; `swiftcore rewards` lists them, NAME@PLUGIN picks a provider).",
    "reward_option": "A reward's option as REWARD.KEY=VALUE (repeatable), e.g. format.pattern='^<answer>'.",
    "reward_weight": "A reward's weight as REWARD=WEIGHT (repeatable; default 1).",
    "reward_fallback": "Reward given to a sample whose reward function raised or returned NaN (logged).",
    "reward_timeout": "Seconds a reward function may take per batch; then its samples get the fallback (logged).",
    "num_generations": "Completions sampled per prompt (the group whose rewards are compared).",
    "max_completion_length": "Most tokens per completion.",
    "rollout_temperature": "Sampling temperature of the rollouts.",
    "rollout_top_p": "Nucleus sampling of the rollouts (1 = off).",
    "rollout_top_k": "Top-k sampling of the rollouts (0 = off).",
    "num_iterations": "Optimisation passes over each batch of rollouts.",
    "mask_truncated_completions": "Leave completions cut at --max-completion-length out of the loss.",
    "rollout_engine": "Who generates rollouts: trainer (TRL's generate), or transformers or vllm (a swiftcore engine "
    "of that backend in the trainer's process, synced to the policy before each generation round).",
    "rollout_server": "URL of a `swiftcore rollout` server (e.g. http://127.0.0.1:8001) that generates the rollouts "
    "instead of the trainer: it must serve this --model and --template; the policy's weights are pushed to it before "
    "each generation round (LoRA: the adapter only). Not with --rollout-engine.",
    "rollout_server_timeout": "Seconds a call to the --rollout-server may take (a rollout round, a sync bucket); "
    "longer stops the run as if the server had died (resume with --resume-from-checkpoint latest).",
    "rollout_server_key_file": "File holding the --rollout-server's key (the file `swiftcore rollout --api-key-file` "
    "reads; first line), sent with every call. Default: $SWIFTCORE_ROLLOUT_KEY, else none (a server started with "
    "--no-api-key).",
    "rollout_draft": "A draft model's directory (an Eagle3 draft: `swiftcore train --recipe eagle3` on --model) that "
    "the --rollout-engine transformers engine decodes the rollouts with speculatively: greedy rollouts are the "
    "policy's token for token, sampled ones distributed as the policy's, log-probs the policy's. The draft stays as "
    "trained while the policy's weights are synced, so its acceptance falls as the policy drifts (docs/rl.md). Full "
    "fine-tuning only (--tuner full).",
    "environment": "A multi-turn environment by name (grpo, reinforce_pp; `swiftcore plugins` lists them, e.g. "
    "calculator): each rollout generates, runs the tool calls the family's template parses, appends the results and "
    "generates again; only the model's tokens are trained.",
    "environment_option": "An option of the --environment as KEY=VALUE (repeatable), passed to its factory as a "
    "keyword argument and converted to the type that keyword declares; an unknown key is refused, naming the ones it "
    "takes. The calculator takes max_calls=N: the most tool calls per episode; later ones are answered with an error "
    "(default: no limit).",
    "max_turns": "With --environment: the most replies per episode.",
    "async_rollouts": "With --rollout-engine or --rollout-server (grpo, reinforce_pp): generate and score the next "
    "round's rollouts while the policy trains on this round's; they are then up to --max-staleness steps stale "
    "(logged as rollout_staleness), corrected by --rollout-importance-sampling.",
    "max_staleness": "Asynchronous rollouts up to K rounds ahead (implies --async-rollouts; default 1 with it, "
    "reinforce_pp: 1 only): every round is trained at most K optimiser steps after the weights the engine sampled "
    "it with; a round that would be staler waits until the engine, idle, can be synced (docs/rl.md). 0: "
    "synchronous rollouts.",
    "rollout_importance_sampling": "Correct engine rollouts for the gap between the engine's sampling and the policy "
    "being trained (staleness, numerics): " + ", ".join(IMPORTANCE_SAMPLING_MODES[2:]) + " (TRL's modes: truncate "
    "clips the ratio at --rollout-is-clip-max, mask zeroes tokens or sequences above it; token_truncate is TIS, "
    "token_mask and sequence_mask are MIS), none, or auto (token_truncate with --async-rollouts, else none). With a "
    "correction on, the engine-trainer mismatch is logged as rollout_kl (docs/rl.md).",
    "rollout_is_clip_max": "Upper bound of the importance ratio of --rollout-importance-sampling (the cap C of TIS "
    "and MIS).",
    "ray": "Run the trainer, the rollout engine (--rollout-engine; transformers when it is trainer) and each reward as "
    "Ray actors (pip install ray): a local Ray cluster, or the one RAY_ADDRESS names. Not with --rollout-server.",
    "sync_bucket_mb": "Weight sync to the rollout engine with --tuner full: largest bucket in MiB (LoRA sends only "
    "the adapter).",
    "grpo_loss_type": "GRPO loss variant (docs/rl.md has each formula): grpo (per-sequence token mean), bnpo (token "
    "mean of the micro-batch), dr_grpo (token sum / max length, Dr. GRPO), dapo (token sum / tokens of the generation "
    "batch, DAPO), gspo (one length-normalised ratio per sequence, GSPO; use small epsilons, e.g. 3e-4 / 4e-4), cispo "
    "(clipped, detached importance weight times log-prob, CISPO; needs --grpo-epsilon-high > 1), sapo (soft sigmoid "
    "gate instead of clipping, SAPO), fipo (dapo with advantages weighted by the discounted future log-ratio, FIPO).",
    "grpo_beta": "KL penalty weight to the reference model (0 = no reference model).",
    "grpo_epsilon": "Clipping range of the probability ratio: [1 - eps, 1 + eps_high].",
    "grpo_epsilon_high": "Upper clipping epsilon, clip-higher (default: --grpo-epsilon; DAPO uses 0.28). With "
    "--grpo-loss-type cispo: the cap of the importance weight itself (e.g. 5.0).",
    "grpo_delta": "Cap of the unclipped probability ratio (two-sided clipping, INTELLECT-2; > 1, e.g. 10); with fipo "
    "also the ratio above which a token is left out of the future-KL sum. Default: none.",
    "sapo_temperature_pos": "sapo: temperature of the soft gate for tokens with a positive advantage.",
    "sapo_temperature_neg": "sapo: temperature of the soft gate for tokens with a non-positive advantage.",
    "fipo_decay_rate": "fipo: half-life of the future-KL sum in tokens (discount 2 ** (-1 / rate)).",
    "fipo_clip_range": "fipo: the influence weight exp(future KL) is clipped to [1 - range, 1 + range].",
    "fipo_clip_high_only": "fipo: clip the influence weight to [1, 1 + range] (the paper's default; "
    "--no-fipo-clip-high-only: two-sided).",
    "fipo_safety_threshold": "fipo: a token with a negative advantage and a ratio above this keeps an influence "
    "weight in [0.8, 1] (0 = off).",
    "dynamic_sampling": "DAPO's dynamic sampling (filter form): leave groups whose rewards are all equal out of the "
    "loss and its token count, so the batch's update comes from groups that carry a signal (refilled with "
    "--dapo-max-resample).",
    "dapo_max_resample": "DAPO's refill, with --dynamic-sampling: generate up to N more rounds of prompts drawn from "
    "the dataset per training batch and put their informative groups in place of the dropped ones, until every "
    "group of the batch carries a signal; when N rounds do not fill it a warning says so and the rest stays masked "
    "out of the loss (0 = no refill).",
    "overlong_buffer": "DAPO's soft overlong punishment: completions longer than --max-completion-length minus this "
    "many tokens get a reward penalty growing linearly to --overlong-penalty at the limit (0 = off).",
    "overlong_penalty": "Largest size of the --overlong-buffer penalty (added to the reward as a negative number).",
    "chord_dataset": "CHORD (arXiv:2508.11408): expert chat data (messages rows, read and encoded as --recipe sft "
    "reads --dataset) whose token-mean cross-entropy L_SFT is mixed into the loss: (1 - mu) L_GRPO + mu L_SFT, mu "
    "scheduled by --chord-mu-*. Default: off.",
    "chord_mu_peak": "CHORD: weight mu of the SFT term at the end of its warmup (in [0, 1]).",
    "chord_mu_valley": "CHORD: mu after the cosine decay, kept for the rest of the run (in [0, 1]).",
    "chord_mu_warmup_steps": "CHORD: optimiser steps over which mu rises linearly from 0 to --chord-mu-peak.",
    "chord_mu_decay_steps": "CHORD: optimiser steps after the warmup over which mu falls from --chord-mu-peak to "
    "--chord-mu-valley along a half cosine.",
    "chord_batch_size": "CHORD: expert samples per device in each micro-batch's SFT term (the data is cycled).",
    "chord_phi": "CHORD-phi: weight each expert token's loss by p (1 - p), p the policy's probability of the token "
    "(detached), so tokens it already predicts or finds far off-policy pull less.",
    "fp32_lm_head": "Compute the policy's LM head in float32 (TRL's cast_lm_head_to_fp32), for --dtype bfloat16 or "
    "float16 runs: the trainer's log-probs then lose less precision against the rollout engine's (a "
    "training-inference mismatch remedy; no effect with --dtype float32).",
    "scale_rewards": f"Reward scaling into advantages: {', '.join(SCALE_REWARDS)}.",
    "rloo_beta": "Weight of the KL penalty subtracted from each reward: beta * sum over tokens of "
    "(log pi - log pi_ref) (0 = no reference model).",
    "rloo_epsilon": "Clipping range of the sequence probability ratio: [1 - eps, 1 + eps_high].",
    "rloo_epsilon_high": "Upper clipping epsilon (default: --rloo-epsilon).",
    "rloo_normalize_advantages": "Standardise the leave-one-out advantages over the batch.",
    "reinforce_pp_beta": "Weight of the per-token KL penalty in the reward, -beta (log pi_old - log pi_ref) "
    "(0 = no reference model).",
    "reinforce_pp_epsilon": "Clipping range of the per-token probability ratio: [1 - eps, 1 + eps_high].",
    "reinforce_pp_epsilon_high": "Upper clipping epsilon (default: --reinforce-pp-epsilon).",
    "teacher_model": "The teacher: a local model directory with the student's tokenizer vocabulary (gkd: the "
    "distributions to match; opd: scores the student's sampled tokens).",
    "teacher_api": "An OpenAI-compatible teacher URL: refused with an explanation (TRL 1.16 cannot use one).",
    "teacher_server": "opd: the URL of an OpenAI-compatible server of the teacher (swiftcore deploy, vllm serve) "
    "asked for the log-probs of each sampled completion, instead of --teacher-model (key: $SWIFTCORE_TEACHER_KEY).",
    "opd_reward_weight": "opd: weight of the task reward's GRPO advantage added to each token's KL advantage "
    "log p_teacher - log p_student (0 = pure distillation; --reward is then optional and only logged).",
    "opsd_context": "opsd: the dataset column holding each prompt's privileged context (e.g. the reference answer "
    "or solution), shown to the teacher only.",
    "opsd_context_format": "opsd: the teacher's last user message, a pattern of {prompt} (the message the student "
    "sees) and {context} (the --opsd-context column).",
    "opsd_teacher": "opsd: the teacher is the policy's current weights without gradient (current, the OPSD paper's) or "
    "the policy as it started (initial: LoRA adapter off, or a frozen copy of --model).",
    "gkd_beta": "Divergence: 0 forward KL(teacher||student), 1 reverse KL(student||teacher), else generalised JSD.",
    "reinforce_pp_baseline": "REINFORCE++-baseline: subtract the prompt's group-mean reward before the returns "
    "(--no-reinforce-pp-baseline: plain REINFORCE++).",
}

_TYPES = {"grpo_epsilon_high": float, "grpo_delta": float, "rloo_epsilon_high": float,
          "reinforce_pp_epsilon_high": float, "reward_timeout": float, "max_staleness": int}  # fmt: skip

_TITLES = {
    "grpo": "GRPO online RL (swiftcore-recipe-rl)",
    "rloo": "RLOO online RL, leave-one-out baseline (swiftcore-recipe-rl)",
    "reinforce_pp": "REINFORCE++ online RL, globally normalised KL-penalised returns (swiftcore-recipe-rl)",
    "gkd": "GKD on-policy distillation to a teacher model (swiftcore-recipe-rl)",
    "opd": "On-policy distillation with KL advantages (swiftcore-recipe-rl)",
    "opsd": "On-policy self-distillation: the policy with privileged context as the teacher (swiftcore-recipe-rl)",
}


def _add_fields(group: Any, names: list[Any]) -> None:
    for f in names:
        flag = _flag(f.name)
        default = f.default
        kwargs: dict[str, Any] = {"help": _HELP[f.name], "default": default}
        if isinstance(default, bool):
            group.addoption(f"{flag}/--no-{f.name.replace('_', '-')}", **kwargs)
        elif isinstance(default, tuple):
            group.addoption(flag, multiple=True, **kwargs)
        elif f.name in _TYPES:
            group.addoption(flag, type=_TYPES[f.name], **kwargs)
        else:
            group.addoption(flag, type=type(default), **kwargs)


def add_rl_options(parser: Any, recipes: tuple[str, ...] = tuple(RL_RECIPES)) -> None:
    """Add the sampling options (valid with every recipe of ``recipes``), the reward/rollout ones (valid with the
    reward-driven recipes among them) and each recipe's own."""
    sampling = list(fields(SamplingOptions))
    rollout = [f for f in fields(RolloutOptions) if f.name not in {g.name for g in sampling}]
    episodes = [f for f in rollout if f.name in ("environment", "environment_option", "max_turns")]
    rollout = [f for f in rollout if f not in episodes]
    rewarded = tuple(r for r in recipes if issubclass(RL_RECIPES[r], RolloutOptions))
    _add_fields(parser.getgroup("rl-sampling", "on-policy sampling (swiftcore-recipe-rl)", recipe=recipes), sampling)
    if rewarded:
        _add_fields(
            parser.getgroup("rl", "online RL rollouts and rewards (swiftcore-recipe-rl)", recipe=rewarded), rollout
        )
    multi_turn = tuple(r for r in rewarded if r in ENVIRONMENT_RECIPES)
    if multi_turn:
        title = "multi-turn environments (swiftcore-recipe-rl)"
        _add_fields(parser.getgroup("rl-environment", title, recipe=multi_turn), episodes)
    base = {f.name for f in (*sampling, *rollout, *episodes)}
    # A flag is one option: one several recipes have (opd has GRPO's, gkd and opd --teacher-model) goes into a group
    # of those recipes, named after them (``grpo-opd``); a recipe's flags of its own into the group of its name.
    owners: dict[str, list[str]] = {}
    named: dict[str, Any] = {}
    for name in recipes:
        for f in fields(RL_RECIPES[name]):
            if f.name not in base:
                owners.setdefault(f.name, []).append(name)
                named[f.name] = f
    groups: dict[tuple[str, ...], list[Any]] = {}
    for field_name, owned_by in owners.items():
        groups.setdefault(tuple(owned_by), []).append(named[field_name])
    for owned_by, own in groups.items():
        name = "-".join(owned_by)
        title = _TITLES[name] if len(owned_by) == 1 else f"{', '.join(owned_by)} (swiftcore-recipe-rl)"
        _add_fields(parser.getgroup(name, title, recipe=owned_by if len(owned_by) > 1 else name), own)


def add_grpo_options(parser: Any) -> None:
    """Add every RL recipe's options (kept under its first name; see :func:`add_rl_options`)."""
    add_rl_options(parser)
