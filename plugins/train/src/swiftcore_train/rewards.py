"""Reward functions for online RL recipes: the built-ins, and the one safe way a recipe calls any reward.

A reward is a :class:`~swiftcore.specs.RewardSpec` some plugin registers (``swiftcore_register_rewards``); its
function is ``fn(completions, **kwargs) -> list[float]`` (:class:`~swiftcore.api.protocols.RewardProtocol`).
The core registers three, pure Python and torch-free, so every RL recipe (the ``grpo`` of
``swiftcore-recipe-rl``, or anyone else's) has them without another install:

- ``accuracy``: 1.0 when the completion's final answer (its last ``\\boxed{...}``, else its last number)
  equals the row's ``answer`` column, numerically when both are numbers; else 0.0;
- ``format``: 1.0 when the completion matches the ``pattern`` option (a regex, ``re.search`` with
  ``re.DOTALL``; default: the ``<think>...</think><answer>...</answer>`` layout), else 0.0;
- ``length``: DAPO's soft overlong penalty: 0 up to ``max - buffer`` tokens, falling linearly to -1 at
  ``max``, -1 beyond (tokens when the recipe passes ``completion_ids``, characters otherwise).

:func:`load_rewards` turns ``--reward`` names into :class:`Reward` objects. Calling one never raises: a reward
that raises, returns the wrong number of scores, a non-number or a NaN costs the samples concerned the
fallback reward and a logged error (``swiftcore.rewards`` logger), and so does one that does not return within
its timeout (the whole batch then: retrying sample by sample would wait that long again for each), so one bad
reward never ends a run.
"""

from __future__ import annotations

import logging
import math
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from swiftcore.api import SwiftcoreError

if TYPE_CHECKING:
    from swiftcore.api import PluginSet

__all__ = [
    "FORMAT_PATTERN",
    "Reward",
    "accuracy",
    "extract_answer",
    "format_match",
    "length_penalty",
    "load_rewards",
    "parse_reward_options",
]

log = logging.getLogger("swiftcore.rewards")

#: The ``format`` reward's default pattern: DeepSeek-R1's reasoning-then-answer layout.
FORMAT_PATTERN = r"^\s*<think>.*?</think>\s*<answer>.*?</answer>\s*$"

#: A sample whose fault is already logged and counted (its score becomes the fallback without a second line).
_FAULTED = object()

_NUMBER = re.compile(r"[-+]?(?:\d[\d,]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?:\s*/\s*\d+)?")


# ---------------------------------------------------------------------------------------------- built-ins


def _last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) in ``text``, braces balanced; None if none."""
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    i = text.index("{", start) + 1
    depth = 1
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j]
    return None  # unbalanced: a truncated completion has no final answer


def extract_answer(text: str) -> str | None:
    """The final answer of a math-style reply: its last ``\\boxed{}``, else its last number; None if neither."""
    boxed = _last_boxed(text)
    if boxed is not None:
        return boxed.strip()
    numbers = _NUMBER.findall(text)
    return numbers[-1].strip() if numbers else None


def _as_number(text: str) -> float | None:
    """``text`` as a number (``1,000``, ``3/4``, ``-2.5``, ``$5``, ``50%``); None when it is not one."""
    cleaned = text.strip().strip("$").rstrip(".").replace(",", "").replace(" ", "").removesuffix("%")
    cleaned = cleaned.removeprefix("\\$")
    try:
        if "/" in cleaned:
            top, bottom = cleaned.split("/", 1)
            return float(top) / float(bottom)
        return float(cleaned)
    except (ValueError, ZeroDivisionError):
        return None


def _normalize(text: str) -> str:
    """Answer text compared as a string: no spaces, ``$``, ``\\text{}`` wrappers or trailing period; lower case."""
    text = re.sub(r"\\text\{([^{}]*)\}", r"\1", text)
    return re.sub(r"\s+", "", text).strip("$").rstrip(".").lower()


def answers_match(predicted: str | None, gold: Any) -> bool:
    """Whether a predicted final answer equals the gold one (numbers to 1e-6 relative, else normalised text)."""
    if predicted is None or gold is None:
        return False
    gold_text = str(gold)
    gold_answer = _last_boxed(gold_text)
    gold_text = gold_answer if gold_answer is not None else gold_text
    a, b = _as_number(predicted), _as_number(gold_text)
    if a is not None and b is not None:
        return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)
    return _normalize(predicted) == _normalize(gold_text)


def accuracy(completions: Sequence[str], *, answer: Sequence[Any], **kwargs: Any) -> list[float]:
    """``accuracy``: 1.0 when a completion's final answer (:func:`extract_answer`) equals its row's ``answer``."""
    return [float(answers_match(extract_answer(c), a)) for c, a in zip(completions, answer, strict=True)]


def format_match(completions: Sequence[str], *, options: Mapping[str, str] | None = None, **kwargs: Any) -> list[float]:
    """``format``: 1.0 when a completion matches the ``pattern`` option (``re.search``, ``re.DOTALL``), else 0.0."""
    pattern = re.compile((options or {}).get("pattern", FORMAT_PATTERN), re.DOTALL)
    return [1.0 if pattern.search(c) else 0.0 for c in completions]


def length_penalty(
    completions: Sequence[str],
    *,
    completion_ids: Sequence[Sequence[int]] | None = None,
    options: Mapping[str, str] | None = None,
    **kwargs: Any,
) -> list[float]:
    """``length``: DAPO's soft overlong penalty, 0 up to ``max - buffer``, linear to -1 at ``max``, -1 beyond.

    Options ``max`` (default 512) and ``buffer`` (default ``max // 4``); lengths in tokens when
    ``completion_ids`` are given, else in characters.
    """
    options = options or {}
    limit = int(options.get("max", 512))
    buffer = int(options.get("buffer", max(limit // 4, 1)))
    if limit < 1 or not 0 < buffer <= limit:
        raise ValueError(f"length reward: need max >= 1 and 0 < buffer <= max, got max={limit}, buffer={buffer}")
    lengths = [len(ids) for ids in completion_ids] if completion_ids is not None else [len(c) for c in completions]
    free = limit - buffer
    return [0.0 if n <= free else (-1.0 if n >= limit else (free - n) / buffer) for n in lengths]


# ---------------------------------------------------------------------------------------------- calling rewards


def parse_reward_options(values: Iterable[str]) -> dict[str, dict[str, str]]:
    """``["format.pattern=^<a>", "length.max=64"]`` -> ``{"format": {"pattern": "^<a>"}, "length": {"max": "64"}}``.

    Raises:
        SwiftcoreError: a value that is not ``REWARD.KEY=VALUE``.
    """
    out: dict[str, dict[str, str]] = {}
    for value in values:
        key, sep, option_value = value.partition("=")
        reward, dot, option = key.strip().rpartition(".")
        if not sep or not dot or not reward or not option:
            raise SwiftcoreError(
                f"--reward-option {value!r}: expected REWARD.KEY=VALUE, e.g. format.pattern='^<answer>'"
            )
        out.setdefault(reward, {})[option] = option_value
    return out


@dataclass
class Reward:
    """A reward a run uses: its spec, its resolved function, its options, and the fallback for faulty scores.

    Calling it (:meth:`__call__`) never raises. ``faults`` counts the samples that got the fallback.
    """

    spec: Any
    function: Callable[..., Any]
    options: dict[str, str] = field(default_factory=dict)
    fallback: float = 0.0
    timeout: float | None = None
    faults: int = 0

    @property
    def name(self) -> str:
        """The reward's name (its spec's)."""
        return str(self.spec.name)

    def check_columns(self, columns: Iterable[str], where: str = "the dataset") -> None:
        """Refuse a dataset that lacks a column this reward reads (before any training starts)."""
        missing = [c for c in self.spec.columns if c not in set(columns)]
        if missing:
            raise SwiftcoreError(
                f"reward {self.name!r} ({self.spec.provider}) reads column(s) {', '.join(map(repr, missing))}, "
                f"which {where} does not have; add them to every row, or drop --reward {self.name}"
            )

    def __call__(self, completions: Sequence[str], **kwargs: Any) -> list[float]:
        """One finite float per completion; a fault costs the samples concerned :attr:`fallback` and a log line.

        ``kwargs`` are passed on (``prompts``, ``completion_ids``, the rows' columns), with ``options`` added.
        A batch call that raises is retried sample by sample, so only the samples it raises on pay.
        """
        n = len(completions)
        try:
            scores = self._scores(completions, kwargs, n)
        except _Timeout as exc:
            log.error(
                "reward %r (%s) %s on a batch of %d; its samples get the fallback reward %s",
                self.name,
                self.spec.provider,
                exc,
                n,
                self.fallback,
            )
            self.faults += n
            return [self.fallback] * n
        except Exception as exc:  # third-party reward code may raise anything
            log.error(
                "reward %r (%s) raised %s: %s on a batch of %d; scoring its samples one by one",
                self.name,
                self.spec.provider,
                type(exc).__name__,
                exc,
                n,
            )
            scores = [self._one(completions, kwargs, i) for i in range(n)]
        return [self._finite(score, i) for i, score in enumerate(scores)]

    def _scores(self, completions: Sequence[str], kwargs: dict[str, Any], n: int) -> list[Any]:
        result = self._timed(list(completions), {**kwargs, "options": dict(self.options)})
        scores = list(result)
        if len(scores) != n:
            raise ValueError(f"returned {len(scores)} scores for {n} completions")
        return scores

    def _timed(self, completions: list[str], kwargs: dict[str, Any]) -> Any:
        """``function(completions, **kwargs)``, given up on after :attr:`timeout` seconds (None: no limit).

        A Python thread cannot be killed: a reward that hangs keeps its (daemon) thread until it returns, and
        the run goes on without it.
        """
        if self.timeout is None:
            return self.function(completions, **kwargs)
        box: dict[str, Any] = {}

        def call() -> None:
            try:
                box["value"] = self.function(completions, **kwargs)
            except BaseException as exc:  # re-raised in the caller's thread
                box["error"] = exc

        worker = threading.Thread(target=call, name=f"reward-{self.name}", daemon=True)
        worker.start()
        worker.join(self.timeout)
        if worker.is_alive():
            raise _Timeout(f"did not return within {self.timeout:g} s (--reward-timeout)")
        if "error" in box:
            raise box["error"]
        return box["value"]

    def _one(self, completions: Sequence[str], kwargs: dict[str, Any], i: int) -> Any:
        row = {
            k: ([v[i]] if isinstance(v, list | tuple) and len(v) == len(completions) else v) for k, v in kwargs.items()
        }
        try:
            return self._scores([completions[i]], row, 1)[0]
        except Exception as exc:  # see __call__
            log.error(
                "reward %r (%s) raised %s: %s on sample %d; it gets the fallback reward %s",
                self.name,
                self.spec.provider,
                type(exc).__name__,
                exc,
                i,
                self.fallback,
            )
            self.faults += 1
            return _FAULTED

    def _finite(self, score: Any, i: int) -> float:
        if score is _FAULTED:
            return self.fallback
        try:
            value = float(score)
        except (TypeError, ValueError):
            value = math.nan
        if math.isfinite(value):
            return value
        log.error(
            "reward %r (%s) gave sample %d the score %r; it gets the fallback reward %s",
            self.name,
            self.spec.provider,
            i,
            score,
            self.fallback,
        )
        self.faults += 1
        return self.fallback


class _Timeout(Exception):
    """A reward function did not return within its timeout."""


def load_rewards(
    plugins: PluginSet,
    names: Sequence[str],
    *,
    options: Mapping[str, Mapping[str, str]] | None = None,
    fallback: float = 0.0,
    timeout: float | None = None,
) -> list[Reward]:
    """The rewards ``--reward NAME`` names (``name@plugin`` picks a provider), checked and resolved.

    Args:
        plugins: the loaded plugin set (its registry finds each reward, built-in or a third party's).
        names: the reward names, in order.
        options: reward name -> its options (:func:`parse_reward_options`); keys the spec does not declare
            are refused.
        fallback: the score a faulty sample gets.
        timeout: seconds a reward function may take for one batch (None: no limit).

    Raises:
        SwiftcoreError: no reward named, an unknown reward (with close matches), a reward named twice, an
            option for a reward not in the run or one it does not take, or a function that does not import.
    """
    from swiftcore.api import resolve

    if not names:
        raise SwiftcoreError(
            "no reward: name at least one with --reward (e.g. --reward format); see `swiftcore rewards`"
        )
    if not math.isfinite(fallback):
        raise SwiftcoreError(f"--reward-fallback: {fallback!r} must be a finite number")
    if timeout is not None and not (math.isfinite(timeout) and timeout > 0):
        raise SwiftcoreError(f"--reward-timeout: {timeout!r} must be a positive number of seconds")
    options = dict(options or {})
    seen: set[str] = set()
    rewards = []
    for name in names:
        spec = plugins.registry.get("reward", name)
        if spec.name in seen:
            raise SwiftcoreError(f"--reward {name}: named twice; name each reward once")
        seen.add(spec.name)
        own = dict(options.pop(name, {}) or {})
        if name != spec.name:
            own.update(options.pop(spec.name, {}) or {})
        unknown = sorted(set(own) - set(spec.options))
        if unknown:
            takes = ", ".join(spec.options) if spec.options else "no options"
            raise SwiftcoreError(
                f"--reward-option {spec.name}.{unknown[0]}: reward {spec.name!r} ({spec.provider}) takes {takes}"
            )
        function = resolve(spec.function, what=f"reward {spec.name!r} ({spec.provider})")
        rewards.append(Reward(spec=spec, function=function, options=own, fallback=fallback, timeout=timeout))
    if options:
        stray = sorted(options)
        raise SwiftcoreError(
            f"--reward-option {stray[0]}.*: {stray[0]!r} is not one of this run's rewards ({', '.join(names)})"
        )
    return rewards
