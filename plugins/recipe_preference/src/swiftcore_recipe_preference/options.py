"""The preference recipes' own options, added to ``swiftcore train`` by this plugin (``swiftcore_addoption``).

The core's :class:`~swiftcore_train.config.TrainConfig` carries model, data, tuner, optimiser and checkpoints; the
dataclasses here carry what only the preference recipes read, one per recipe. A flag several recipes share
(``--beta``) is one option valid with each of them; its default is ``None`` on the command line and the
recipe's own default in its dataclass (β is 0.1 for DPO but 2.0 for SimPO). Each dataclass is built from
the flags before anything is loaded, so a bad value fails in ``__post_init__`` within a second.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

__all__ = [
    "CPO_LOSS_TYPES",
    "CPOOptions",
    "DPO_LOSS_TYPES",
    "DPOOptions",
    "KTO_DEFAULT_BATCH_SIZE",
    "KTO_LOSS_TYPES",
    "KTOOptions",
    "MPO_LOSS_TYPES",
    "MPO_LOSS_WEIGHTS",
    "MPOOptions",
    "ORPOOptions",
    "RMOptions",
    "SimPOOptions",
    "add_preference_options",
]

#: The loss types TRL 1.16's DPOTrainer implements (``DPOConfig.loss_type``); several may be combined.
DPO_LOSS_TYPES = (
    "sigmoid",
    "ipo",
    "hinge",
    "robust",
    "exo_pair",
    "nca_pair",
    "bco_pair",
    "sppo_hard",
    "aot",
    "aot_unpaired",
    "apo_zero",
    "apo_down",
    "discopop",
    "sft",
    "sigmoid_norm",
)
#: Mixed Preference Optimization's losses and their weights (Wang et al. 2024, arXiv:2411.10442: preference
#: 0.8, quality 0.2, generation 1.0), as TRL's DPOConfig documents them for MPO.
MPO_LOSS_TYPES = ("sigmoid", "bco_pair", "sft")
MPO_LOSS_WEIGHTS = (0.8, 0.2, 1.0)
#: The loss types of TRL 1.16's KTOTrainer.
KTO_LOSS_TYPES = ("kto", "apo_zero_unpaired")
#: The ``kto`` recipe's batch when ``--batch-size`` is not given (see ``swiftcore_recipe_preference.kto``).
KTO_DEFAULT_BATCH_SIZE = 8
#: The loss types of TRL 1.16's CPOTrainer for ``--recipe cpo`` (``simpo`` has its own recipe).
CPO_LOSS_TYPES = ("sigmoid", "hinge", "ipo")


def _names(value: Any) -> tuple[str, ...]:
    """``"sigmoid,sft"`` or ``["sigmoid", "sft"]`` -> ``("sigmoid", "sft")``."""
    items = [value] if isinstance(value, str) else list(value or ())
    return tuple(part.strip() for item in items for part in str(item).split(",") if part.strip())


def _positive(name: str, value: float, problems: list[str]) -> None:
    if not (math.isfinite(value) and value > 0):
        problems.append(f"--{name}: {value!r} must be a finite positive number")


def _non_negative(name: str, value: float, problems: list[str]) -> None:
    if not (math.isfinite(value) and value >= 0):
        problems.append(f"--{name}: {value!r} must be a finite number >= 0")


def _chunk_size(value: Any, problems: list[str]) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        problems.append(f"--loss-chunk-size: {value!r} must be 0 (TRL's fused head) or a positive number of tokens")


def _raise(problems: list[str]) -> None:
    if problems:
        raise ValueError("; ".join(problems))


@dataclass
class DPOOptions:
    """Options of ``--recipe dpo`` (flag ``--loss-type`` -> field ``loss_type``).

    Attributes:
        beta: the KL strength β (the implicit reward is β·log(π/π_ref)); τ for ipo. Default 0.1.
        loss_type: one or more of :data:`DPO_LOSS_TYPES` (comma-separated), summed with ``loss_weights``.
        loss_weights: one weight per loss type (default 1 each).
        label_smoothing: the assumed label-noise rate of the robust / exo_pair / aot losses.
        precompute_ref_logps: compute the reference log-probs once before training (the reference model
            then leaves memory for full fine-tuning).
        ref_model: a reference model directory other than ``--model`` (full fine-tuning only; its tokenizer
            must be the policy's).
        loss_chunk_size: swiftcore-train's ``--loss-chunk-size``: tokens per chunk of the chunked lm_head that
            scores the policy and the reference (None: its default, 1024; 0: TRL's fused head).
    """

    beta: float | None = None
    loss_type: tuple[str, ...] | str | None = None
    loss_weights: tuple[float, ...] = ()
    label_smoothing: float = 0.0
    precompute_ref_logps: bool = False
    ref_model: str | None = None
    loss_chunk_size: int | None = None

    def __post_init__(self) -> None:
        self.beta = 0.1 if self.beta is None else float(self.beta)
        self.loss_type = _names(self.loss_type) or ("sigmoid",)
        try:
            self.loss_weights = tuple(float(v) for v in _names(self.loss_weights))
        except ValueError as exc:
            raise ValueError(f"--loss-weights: not a comma-separated list of numbers ({exc})") from None
        problems: list[str] = []
        unknown = [t for t in self.loss_type if t not in DPO_LOSS_TYPES]
        if unknown:
            problems.append(f"--loss-type: {', '.join(map(repr, unknown))} not one of {', '.join(DPO_LOSS_TYPES)}")
        if self.loss_weights and len(self.loss_weights) != len(self.loss_type):
            problems.append(
                f"--loss-weights: {len(self.loss_weights)} weight(s) for {len(self.loss_type)} --loss-type value(s)"
            )
        _positive("beta", self.beta, problems)
        if not 0.0 <= self.label_smoothing < 0.5:
            problems.append(f"--label-smoothing: {self.label_smoothing!r} must be in [0, 0.5)")
        if "exo_pair" in self.loss_type and self.label_smoothing == 0.0:
            problems.append("--loss-type exo_pair needs --label-smoothing > 0 (the EXO paper uses 1e-3)")
        _chunk_size(self.loss_chunk_size, problems)
        _raise(problems)


@dataclass
class MPOOptions(DPOOptions):
    """Options of ``--recipe mpo``: :class:`DPOOptions` whose loss is MPO's weighted sum by default.

    Mixed Preference Optimization trains TRL's DPOTrainer on ``0.8·sigmoid + 0.2·bco_pair + 1.0·sft``
    (:data:`MPO_LOSS_TYPES`, :data:`MPO_LOSS_WEIGHTS`): the DPO preference loss, BCO's quality loss on each reply's
    own log-ratio, and the chosen reply's NLL. ``loss_type`` / ``loss_weights`` change the mix; MPO's weights are
    the default only for MPO's loss types, any other ``loss_type`` weighs 1 each unless ``loss_weights`` says.
    """

    def __post_init__(self) -> None:
        if not _names(self.loss_type) or _names(self.loss_type) == MPO_LOSS_TYPES:
            self.loss_type = MPO_LOSS_TYPES
            self.loss_weights = self.loss_weights or MPO_LOSS_WEIGHTS
        super().__post_init__()


@dataclass
class KTOOptions:
    """Options of ``--recipe kto``.

    Attributes:
        beta: the KL strength β of the implicit reward (default 0.1).
        loss_type: one of :data:`KTO_LOSS_TYPES` (default kto).
        desirable_weight: weight of the desirable replies' losses.
        undesirable_weight: weight of the undesirable replies' losses.
        precompute_ref_logps: compute the reference log-probs once before training.
        ref_model: a reference model directory other than ``--model`` (full fine-tuning only).
        loss_chunk_size: as :class:`DPOOptions`'.
    """

    beta: float | None = None
    loss_type: tuple[str, ...] | str | None = None
    desirable_weight: float = 1.0
    undesirable_weight: float = 1.0
    precompute_ref_logps: bool = False
    ref_model: str | None = None
    loss_chunk_size: int | None = None

    def __post_init__(self) -> None:
        self.beta = 0.1 if self.beta is None else float(self.beta)
        names = _names(self.loss_type) or ("kto",)
        problems: list[str] = []
        if len(names) != 1 or names[0] not in KTO_LOSS_TYPES:
            problems.append(f"--loss-type: {','.join(names)!r} is not one of {', '.join(KTO_LOSS_TYPES)} for kto")
        self.loss_type = names[0]
        _positive("beta", self.beta, problems)
        _positive("desirable-weight", self.desirable_weight, problems)
        _positive("undesirable-weight", self.undesirable_weight, problems)
        _chunk_size(self.loss_chunk_size, problems)
        _raise(problems)


@dataclass
class CPOOptions:
    """Options of ``--recipe cpo`` (contrastive preference optimisation: no reference model).

    Attributes:
        beta: temperature of the preference term (default 0.1).
        loss_type: one of :data:`CPO_LOSS_TYPES` (default sigmoid).
        label_smoothing: label-noise rate of the sigmoid loss.
        cpo_alpha: weight of the NLL term on the chosen reply (default 1.0, as in the CPO paper).
    """

    beta: float | None = None
    loss_type: tuple[str, ...] | str | None = None
    label_smoothing: float = 0.0
    cpo_alpha: float | None = None

    def __post_init__(self) -> None:
        self.beta = 0.1 if self.beta is None else float(self.beta)
        self.cpo_alpha = 1.0 if self.cpo_alpha is None else float(self.cpo_alpha)
        names = _names(self.loss_type) or ("sigmoid",)
        problems: list[str] = []
        if len(names) != 1 or names[0] not in CPO_LOSS_TYPES:
            problems.append(f"--loss-type: {','.join(names)!r} is not one of {', '.join(CPO_LOSS_TYPES)} for cpo")
        self.loss_type = names[0]
        _positive("beta", self.beta, problems)
        _non_negative("cpo-alpha", self.cpo_alpha, problems)
        if not 0.0 <= self.label_smoothing < 0.5:
            problems.append(f"--label-smoothing: {self.label_smoothing!r} must be in [0, 0.5)")
        _raise(problems)


@dataclass
class SimPOOptions:
    """Options of ``--recipe simpo`` (length-normalised, reference-free, with a target margin).

    Attributes:
        beta: reward scale β (default 2.0, the SimPO paper's range is 2.0-2.5).
        simpo_gamma: target reward margin γ (default 0.5).
        label_smoothing: label-noise rate.
        cpo_alpha: weight of an NLL term on the chosen reply (default 0: pure SimPO; > 0 is CPO-SimPO).
    """

    beta: float | None = None
    simpo_gamma: float = 0.5
    label_smoothing: float = 0.0
    cpo_alpha: float | None = None

    def __post_init__(self) -> None:
        self.beta = 2.0 if self.beta is None else float(self.beta)
        self.cpo_alpha = 0.0 if self.cpo_alpha is None else float(self.cpo_alpha)
        problems: list[str] = []
        _positive("beta", self.beta, problems)
        _non_negative("simpo-gamma", self.simpo_gamma, problems)
        _non_negative("cpo-alpha", self.cpo_alpha, problems)
        if not 0.0 <= self.label_smoothing < 0.5:
            problems.append(f"--label-smoothing: {self.label_smoothing!r} must be in [0, 0.5)")
        _raise(problems)


@dataclass
class ORPOOptions:
    """Options of ``--recipe orpo`` (odds-ratio preference optimisation: SFT + odds-ratio term, no reference).

    Attributes:
        beta: weight λ of the odds-ratio term (default 0.1, as in the ORPO paper).
    """

    beta: float | None = None

    def __post_init__(self) -> None:
        self.beta = 0.1 if self.beta is None else float(self.beta)
        problems: list[str] = []
        _positive("beta", self.beta, problems)
        _raise(problems)


@dataclass
class RMOptions:
    """Options of ``--recipe rm``.

    Attributes:
        center_rewards_coefficient: weight of the ``mean((r_chosen + r_rejected)**2)`` term that keeps the
            rewards centred on zero (None: off), as in TRL's RewardConfig.
    """

    center_rewards_coefficient: float | None = None

    def __post_init__(self) -> None:
        problems: list[str] = []
        if self.center_rewards_coefficient is not None:
            _non_negative("center-rewards-coefficient", self.center_rewards_coefficient, problems)
        _raise(problems)


#: option -> (the recipes it is valid with, type, help). The order is the order of ``swiftcore train --help``.
_OPTIONS: dict[str, tuple[tuple[str, ...], Any, str]] = {
    "beta": (
        ("dpo", "kto", "cpo", "simpo", "orpo", "mpo"),
        float,
        "Preference strength: DPO/KTO/CPO/MPO beta (default 0.1; tau for ipo), SimPO beta (default 2.0), ORPO lambda "
        "(default 0.1).",
    ),
    "loss_type": (
        ("dpo", "kto", "cpo", "mpo"),
        str,
        f"Loss: dpo and mpo {', '.join(DPO_LOSS_TYPES)} (comma-separated to combine; default dpo sigmoid, mpo "
        f"{','.join(MPO_LOSS_TYPES)}); kto "
        f"{', '.join(KTO_LOSS_TYPES)} (default kto; the kto recipe trains {KTO_DEFAULT_BATCH_SIZE} rows a batch "
        f"unless --batch-size is given, as the kto loss's KL estimate pairs rows of a batch); cpo "
        f"{', '.join(CPO_LOSS_TYPES)} (default sigmoid).",
    ),
    "loss_weights": (
        ("dpo", "mpo"),
        "multiple",
        f"One weight per --loss-type value (default 1 each; mpo {','.join(map(str, MPO_LOSS_WEIGHTS))} for its "
        "default loss types).",
    ),
    "label_smoothing": (
        ("dpo", "cpo", "simpo", "mpo"),
        float,
        "Label-noise rate (dpo robust/exo_pair/aot, cpo and simpo sigmoid); 0 = none.",
    ),
    "precompute_ref_logps": (("dpo", "kto", "mpo"), bool, "Compute the reference log-probs once before training."),
    "desirable_weight": (("kto",), float, "KTO: weight of the desirable replies' losses."),
    "undesirable_weight": (("kto",), float, "KTO: weight of the undesirable replies' losses."),
    "ref_model": (
        ("dpo", "kto", "mpo"),
        str,
        "Reference model directory (full fine-tuning; default: --model itself). Must share the policy's tokenizer.",
    ),
    "cpo_alpha": (
        ("cpo", "simpo"),
        float,
        "Weight of the NLL term on the chosen reply (default: cpo 1.0, simpo 0).",
    ),
    "simpo_gamma": (("simpo",), float, "SimPO target reward margin gamma (default 0.5)."),
    "center_rewards_coefficient": (
        ("rm",),
        float,
        "Weight of the reward-centring term mean((r_c + r_r)^2) (default: off).",
    ),
}

_DEFAULTS: dict[str, Any] = {
    f.name: f.default
    for cls in (DPOOptions, KTOOptions, CPOOptions, SimPOOptions, ORPOOptions, RMOptions)
    for f in fields(cls)
    if f.name not in ("beta", "loss_type", "cpo_alpha")  # recipe-dependent defaults: None on the command line
}


def add_preference_options(parser: Any) -> None:
    """Add the preference options to ``swiftcore train``, each valid with its recipes only."""
    for name, (recipes, kind, help_text) in _OPTIONS.items():
        group = parser.getgroup(
            "preference: " + ", ".join(recipes), "preference training (swiftcore-recipe-preference)", recipe=recipes
        )
        flag = "--" + name.replace("_", "-")
        default = _DEFAULTS.get(name)
        if kind is bool:
            group.addoption(f"{flag}/--no-{name.replace('_', '-')}", default=bool(default), help=help_text)
        elif kind == "multiple":
            group.addoption(flag, multiple=True, default=default, help=help_text)
        else:
            group.addoption(flag, type=kind, default=default, help=help_text)
