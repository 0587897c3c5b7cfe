"""The head recipes' own options, added to ``swiftcore train`` by this plugin (``swiftcore_addoption``).

The core's training options (model, data, tuner, optimiser, checkpoints) know nothing of heads; this module
adds ``--num-labels``, ``--pooling``, ``--mrl-dims``, ... for the four head recipes only (given with
``--recipe sft`` they are refused), and :class:`HeadTrainConfig` is what the head recipe reads: the core's
:class:`~swiftcore_train.config.TrainConfig` plus :class:`HeadOptions`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any

from swiftcore_train import TrainConfig

__all__ = ["HEAD_RECIPES", "HeadOptions", "HeadTrainConfig", "add_head_options", "head_train_config"]

HEAD_RECIPES = ("classification", "embedding", "reranker", "generative_reranker")
PROBLEM_TYPES = ("single_label_classification", "multi_label_classification", "regression")
POOLING = ("last", "mean")

_HELP = {
    "num_labels": "Classification: number of classes (1 = regression).",
    "problem_type": "Classification: single_label_classification, multi_label_classification or regression "
    "(default: from --num-labels).",
    "pooling": "Which hidden state represents a text: last (last real token) or mean.",
    "normalize": "Embedding: L2-normalise the vectors (saved as a sentence-transformers Normalize module).",
    "loss": "Head loss (default per task): embedding infonce|cosine_similarity|contrastive; reranker "
    "listwise|pointwise; classification follows --problem-type.",
    "temperature": "Softmax temperature of infonce (default 0.05) or the listwise reranker loss (default 1.0).",
    "in_batch_negatives": "Embedding infonce: use the other queries' documents as extra negatives.",
    "mrl_dims": "Embedding: Matryoshka dims, e.g. 64,128,256 (each prefix is trained as an embedding).",
    "mrl_weights": "Embedding: one loss weight per --mrl-dims value (default 1 each).",
    "positive_token": "Generative reranker: the answer token whose logit means relevant.",
    "negative_token": "Generative reranker: the answer token whose logit means not relevant.",
    "reranker_instruction": "Generative reranker: the <Instruct> line of the prompt (default: a retrieval "
    "instruction).",
}


def _numbers(values: Any, kind: type) -> tuple:
    """``("64,128", 256)`` -> ``(64, 128, 256)``: flags may repeat or carry comma-separated lists."""
    if isinstance(values, str | int | float):
        values = (values,)
    out = []
    for value in values or ():
        parts = str(value).split(",") if isinstance(value, str) else [value]
        out.extend(kind(p) for p in parts if str(p).strip())
    return tuple(out)


@dataclass
class HeadOptions:
    """The options of the head recipes (the flags are the field names, ``--num-labels`` -> ``num_labels``)."""

    num_labels: int = 2
    problem_type: str | None = None
    pooling: str = "last"
    normalize: bool = True
    loss: str | None = None
    temperature: float | None = None
    in_batch_negatives: bool = True
    mrl_dims: tuple[int, ...] = ()
    mrl_weights: tuple[float, ...] = ()
    positive_token: str = "yes"
    negative_token: str = "no"
    reranker_instruction: str | None = None

    def __post_init__(self) -> None:
        problems = self.head_problems()
        if problems:
            raise ValueError("; ".join(problems))

    def head_problems(self) -> list[str]:
        """Every invalid head option, each naming its flag (Matryoshka lists are parsed here too)."""
        try:
            self.mrl_dims = _numbers(self.mrl_dims, int)
            self.mrl_weights = _numbers(self.mrl_weights, float)
        except ValueError as exc:
            return [f"--mrl-dims / --mrl-weights: not a comma-separated list of numbers ({exc})"]
        problems = []
        if self.num_labels < 1:
            problems.append("--num-labels: must be at least 1")
        if self.problem_type is not None and self.problem_type not in PROBLEM_TYPES:
            problems.append(f"--problem-type: {self.problem_type!r} is not one of {', '.join(PROBLEM_TYPES)}")
        if self.pooling not in POOLING:
            problems.append(f"--pooling: {self.pooling!r} is not one of {', '.join(POOLING)}")
        if self.temperature is not None and not (math.isfinite(self.temperature) and self.temperature > 0):
            problems.append(f"--temperature: {self.temperature!r} must be a finite positive number")
        if any(d < 1 for d in self.mrl_dims):
            problems.append(f"--mrl-dims: {list(self.mrl_dims)} must all be positive")
        if self.mrl_weights and len(self.mrl_weights) != len(self.mrl_dims):
            problems.append(
                f"--mrl-weights: {len(self.mrl_weights)} weight(s) for {len(self.mrl_dims)} --mrl-dims; "
                "give one per dim"
            )
        return problems


@dataclass
class HeadTrainConfig(TrainConfig, HeadOptions):
    """What the head recipe reads: the core's training options and the head options, as one config.

    Build it from Python like :class:`~swiftcore_train.config.TrainConfig`
    (``HeadTrainConfig(model=..., dataset=(...,), task="embedding", mrl_dims=(16, 32))``) and pass it to
    ``run_training``; the CLI builds it from the flags (:func:`head_train_config`).
    """

    def __post_init__(self) -> None:
        TrainConfig.__post_init__(self)

    def validate(self) -> None:
        """The core's checks, then the head options' (one error listing every problem)."""
        from swiftcore.api import SwiftcoreError

        problems = self.head_problems()
        if self.mrl_dims and self.task != "embedding":
            problems.append("--mrl-dims: Matryoshka dims apply to --task embedding only")
        if self.resume_from_checkpoint:
            problems.append(f"--resume-from-checkpoint: not supported for --task {self.task} yet")
        try:
            TrainConfig.validate(self)
        except SwiftcoreError as exc:
            problems = str(exc).split("\n  ")[1:] + problems
        if problems:
            raise SwiftcoreError("invalid training arguments:\n  " + "\n  ".join(problems))


def head_train_config(cfg: TrainConfig, options: HeadOptions | None) -> HeadTrainConfig:
    """``cfg`` with the head options: as given (a :class:`HeadTrainConfig` from Python), or from ``options``."""
    if isinstance(cfg, HeadTrainConfig):
        return cfg
    common = {f.name: getattr(cfg, f.name) for f in fields(TrainConfig)}
    return HeadTrainConfig(**common, **asdict(options or HeadOptions()))


def add_head_options(parser: Any) -> None:
    """Add the head options to ``swiftcore train``, valid with the head recipes only."""
    group = parser.getgroup("heads", "lm_head recipes (swiftcore-heads)", recipe=HEAD_RECIPES)
    defaults = HeadOptions()
    for f in fields(HeadOptions):
        flag = "--" + f.name.replace("_", "-")
        default = getattr(defaults, f.name)
        kwargs: dict[str, Any] = {"help": _HELP[f.name], "default": default}
        if isinstance(default, bool):
            group.addoption(f"{flag}/--no-{f.name.replace('_', '-')}", **kwargs)
        elif isinstance(default, tuple):
            group.addoption(flag, multiple=True, **kwargs)
        elif f.name == "pooling":
            group.addoption(flag, type=_choice(POOLING), **kwargs)
        elif f.name == "problem_type":
            group.addoption(flag, type=_choice(PROBLEM_TYPES), **kwargs)
        elif f.name == "num_labels":
            group.addoption(flag, type=int, **kwargs)
        elif f.name == "temperature":
            group.addoption(flag, type=float, **kwargs)
        else:
            group.addoption(flag, **kwargs)


def _choice(values: tuple[str, ...]) -> Any:
    """A click choice type (click is imported only when the options are built)."""
    import click

    return click.Choice(values)
