"""Tuners: full fine-tuning or LoRA (peft), with the model spec deciding what is frozen and what LoRA skips.

``all-linear`` is resolved here, on the loaded model, not by peft (peft 0.21 rewrites it per architecture: on
MoE families it adapts routers, ignores exclusions, and never adapts fused 3D expert weights). It adapts every
linear layer (attention, dense MLPs, shared experts, per-expert linears) except the output head, routers and
gates (:func:`is_router`), the spec's ``lora_exclude_modules``, ``--lora-exclude-modules`` and frozen towers;
and the fused 3D expert weights of an experts module through peft's ``target_parameters``, with a warning
naming what is not adapted where the installed peft has no parameter targeting. :func:`lora_plan` is the
result, which ``swiftcore train --dry-run`` prints.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swiftcore.api import ModelSpec, SwiftcoreError
from swiftcore_train.config import TrainConfig

if TYPE_CHECKING:
    from swiftcore.api import PluginSet

__all__ = [
    "LoraPlan",
    "apply_tuner",
    "check_target_modules",
    "dry_run",
    "dry_run_report",
    "freeze_parts",
    "is_router",
    "lora_config",
    "lora_plan",
    "trainable_summary",
]

log = logging.getLogger("swiftcore.train")

#: peft's shorthand for "every linear layer but the output head".
ALL_LINEAR = "all-linear"


def _matches(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _frozen_parts(spec: ModelSpec, cfg: TrainConfig) -> list[tuple[str, tuple[str, ...]]]:
    """``(flag, prefixes)`` of each part the freeze flags freeze."""
    return [
        (flag, prefixes)
        for flag, on, prefixes in (
            ("--freeze-vision", cfg.freeze_vision, spec.parts.vision_tower),
            ("--freeze-audio", cfg.freeze_audio, spec.parts.audio_tower),
            ("--freeze-projector", cfg.freeze_projector, spec.parts.projector),
        )
        if on and prefixes
    ]


def freeze_parts(model: Any, spec: ModelSpec, cfg: TrainConfig) -> list[str]:
    """Freeze the vision tower / audio tower / projector as the flags ask; returns the frozen prefixes."""
    frozen = [prefix for _, prefixes in _frozen_parts(spec, cfg) for prefix in prefixes]
    if frozen:
        for name, param in model.named_parameters():
            if _matches(name, tuple(frozen)):
                param.requires_grad_(False)
    return frozen


def _user_exclude_patterns(cfg: TrainConfig) -> list[str]:
    """``--lora-exclude-modules`` entries as full-match regexes: a name also excludes every module it is a
    dotted suffix of (``mlp.gate`` excludes ``model.layers.0.mlp.gate``), as ``--target-modules`` names match."""
    return [rf"(?:{p})|(?:.*\.(?:{p}))" for p in getattr(cfg, "lora_exclude_modules", ())]


def _lora_exclude_regex(spec: ModelSpec, cfg: TrainConfig) -> str | None:
    patterns = list(spec.lora_exclude_modules) + _user_exclude_patterns(cfg)
    # Frozen towers stay out of LoRA too: adapters on a frozen encoder would train it after all.
    for _, prefixes in _frozen_parts(spec, cfg):
        patterns.extend(re.escape(p) + r"(\..*)?" for p in prefixes)
    patterns.extend(re.escape(p) + r"(\..*)?" for p in spec.parts.lm_head)
    if not patterns:
        return None
    return r"^(" + "|".join(f"(?:{p})" for p in patterns) + r")$"


def _targets(spec: ModelSpec, cfg: TrainConfig) -> tuple[str, ...]:
    return tuple(cfg.target_modules or spec.lora_target_modules)


def lora_config(spec: ModelSpec, cfg: TrainConfig, *, task_type: str | None = "CAUSAL_LM", model: Any = None) -> Any:
    """The peft ``LoraConfig`` for ``spec`` under ``cfg``: rank, alpha, targets, and the spec's exclusions.

    Args:
        spec: the model spec (default targets, modules kept out of LoRA, frozen parts).
        cfg: the training config (rank, alpha, dropout, ``--target-modules``, ``--lora-exclude-modules``,
            freeze flags).
        task_type: peft's task type; None for a bare decoder wrapped by a head (no generation wrapper).
        model: the loaded model: with it, ``all-linear`` is resolved by :func:`lora_plan` (routers never
            adapted, fused expert weights adapted); without it, it is left to peft.
    """
    from peft import LoraConfig

    targets = _targets(spec, cfg)
    extra: dict[str, Any] = {}
    exclude = _lora_exclude_regex(spec, cfg)
    if targets == (ALL_LINEAR,) and model is not None:
        plan = lora_plan(model, spec, cfg)
        target: str | list[str] = plan.target_modules
        exclude = None  # the plan applied every exclusion already
        if plan.target_parameters:
            if cfg.lora_dropout:
                raise SwiftcoreError(
                    f"--lora-dropout {cfg.lora_dropout}: peft cannot apply dropout to the fused expert weights "
                    f"LoRA adapts on {spec.name!r} ({_preview(plan.target_parameters)}); pass --lora-dropout 0, "
                    "or --lora-exclude-modules experts to leave the experts alone"
                )
            extra["target_parameters"] = plan.target_parameters
    else:
        target = ALL_LINEAR if targets == (ALL_LINEAR,) else list(targets)
    return LoraConfig(
        r=cfg.lora_rank,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules=target,
        exclude_modules=exclude,
        task_type=task_type,
        **extra,
    )


# ------------------------------------------------------------------------------ all-linear, resolved

#: Last names of the modules that pick experts (routers, gates): ``all-linear`` never adapts them, nor
#: anything inside a module so named (Gemma 4's ``router.proj``).
ROUTER_NAMES = frozenset({"gate", "router", "shared_expert_gate", "shared_experts_gate"})


def is_router(name: str, module: Any = None) -> bool:
    """Whether module ``name`` is (or is inside) an MoE router or gate: a part named as in
    :data:`ROUTER_NAMES`, or a module whose class name says ``Router``."""
    if any(part in ROUTER_NAMES for part in name.split(".")):
        return True
    return module is not None and "router" in type(module).__name__.lower()


def _is_experts(name: str, module: Any) -> bool:
    return name.split(".")[-1] == "experts" or type(module).__name__.endswith("Experts")


def _peft_targets_parameters() -> bool:
    from peft import LoraConfig

    return "target_parameters" in getattr(LoraConfig, "__dataclass_fields__", {})


@dataclass
class LoraPlan:
    """What ``all-linear`` adapts on one model.

    Attributes:
        modules: full names of the linear modules adapted.
        parameters: full names of the fused (3D) expert weights adapted through peft's ``target_parameters``.
        target_modules / target_parameters: the same as peft targets (short dotted suffixes that match
            exactly those, or full names).
        routers: the linear modules left out because they route (never adapted).
        not_adapted: what the installed peft cannot adapt (warned about): fused expert weights without
            ``target_parameters``; linear modules whose names peft's MoE conversion rewrites (glm4_moe and
            other qwen2_moe-like types: dense MLPs and shared experts).
    """

    modules: list[str] = field(default_factory=list)
    parameters: list[str] = field(default_factory=list)
    target_modules: list[str] = field(default_factory=list)
    target_parameters: list[str] = field(default_factory=list)
    routers: list[str] = field(default_factory=list)
    not_adapted: list[str] = field(default_factory=list)


def _suffixes(chosen: list[str], every: list[str]) -> list[str]:
    """Short dotted suffixes (two parts at least) matching exactly ``chosen`` among ``every`` by peft's rule
    (the name, or a dotted suffix of it); a name whose every suffix matches more stays whole."""
    want = set(chosen)
    out: set[str] = set()
    for name in chosen:
        parts = name.split(".")
        for k in range(min(2, len(parts)), len(parts) + 1):
            suffix = ".".join(parts[-k:])
            if all(n in want for n in every if _target_matches(n, suffix)):
                out.add(suffix)
                break
    return sorted(out)


def lora_plan(model: Any, spec: ModelSpec, cfg: TrainConfig) -> LoraPlan:
    """Resolve ``all-linear`` on ``model`` (see the module docstring)."""
    linear_kinds, _ = _module_kinds()
    output = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    plan = LoraPlan()
    every_module: list[str] = []
    every_parameter: list[str] = []
    fused: list[str] = []
    for name, module in model.named_modules():
        if not name:
            continue
        every_module.append(name)
        own = [f"{name}.{p}" for p, _ in module.named_parameters(recurse=False)]
        every_parameter += own
        if module is output or _kept_out_reason(name, spec, cfg) is not None:
            continue
        if isinstance(module, linear_kinds):
            (plan.routers if is_router(name, module) else plan.modules).append(name)
        elif _is_experts(name, module) and not is_router(name, module):
            fused += [f"{name}.{p}" for p, w in module.named_parameters(recurse=False) if w.dim() == 3]
    if fused and _peft_targets_parameters():
        plan.parameters = fused
        plan.target_parameters = _suffixes(fused, every_parameter)
    elif fused:
        plan.not_adapted = fused
        import peft

        log.warning(
            "peft %s cannot adapt parameters (no target_parameters; peft >= 0.17 can): the fused expert weights "
            "%s are NOT adapted by LoRA, only the other linear layers; upgrade peft, or use --tuner full",
            peft.__version__,
            _preview(sorted({re.sub(r"\.\d+\.", ".N.", n) for n in fused})),
        )
    renamed = _peft_renamed_targets(model)
    if renamed:
        lost = [n for n in plan.modules if n.split(".")[-1] in renamed]
        plan.modules = [n for n in plan.modules if n not in set(lost)]
        plan.not_adapted += lost
        if lost:
            import peft

            log.warning(
                "peft %s converts LoRA targets named %s on model type %r (its transformers v4 -> v5 MoE "
                "conversion, applied again whenever the adapter is loaded) to the fused expert weights: the "
                "linear modules %s (dense MLPs, shared experts) are NOT adapted by LoRA; use --tuner full to "
                "train them",
                peft.__version__,
                "/".join(sorted(renamed)),
                getattr(model.config, "model_type", "?"),
                _preview(sorted({re.sub(r"\.\d+\.", ".N.", n) for n in lost})),
            )
    plan.target_modules = _suffixes(plan.modules, every_module)
    return plan


def _peft_renamed_targets(model: Any) -> frozenset[str]:
    """The target names peft rewrites for ``model``'s type (peft 0.21's transformers v4 -> v5 MoE conversion:
    ``gate_proj``/``up_proj``/``down_proj`` become the fused expert weights, ``gate`` the router's weight),
    wherever they stand; empty for other types and peft versions without the conversion."""
    try:
        from peft.utils import transformers_weight_conversion as conversion

        base = conversion._MODEL_TO_CONVERSION_PATTERN.get(getattr(model.config, "model_type", None))
        if base is None or not conversion._MOE_FUSED_TARGETS.get(base):
            return frozenset()
        return frozenset(conversion._MOE_TARGET_MODULE_MAPPING.get(base, {}))
    except (ImportError, AttributeError):
        return frozenset()


# ------------------------------------------------------------------------------ target checks


def _short_name(name: str) -> str:
    """What ``--target-modules`` would name a module by: its last part (``q_proj``), or the last two
    when that is a bare index (``merger.0``), which would match every block's first child."""
    parts = name.split(".")
    return ".".join(parts[-2:]) if parts[-1].isdigit() and len(parts) > 1 else parts[-1]


def _module_kinds() -> tuple[tuple[type, ...], tuple[type, ...]]:
    """``(linear classes, every class peft's LoRA can wrap)``; as peft's ``all-linear`` and LoRA dispatch see them."""
    import torch
    from transformers.pytorch_utils import Conv1D

    linear = (torch.nn.Linear, Conv1D)
    return linear, (
        *linear,
        torch.nn.Embedding,
        torch.nn.Conv1d,
        torch.nn.Conv2d,
        torch.nn.Conv3d,
        torch.nn.MultiheadAttention,
    )


def _kept_out_reason(name: str, spec: ModelSpec, cfg: TrainConfig) -> str | None:
    """Why LoRA leaves module ``name`` alone (the same rules as :func:`_lora_exclude_regex`), or None."""
    if _matches(name, tuple(spec.parts.lm_head)):
        return "the output head, which LoRA leaves out (train it with --tuner full)"
    for pattern in spec.lora_exclude_modules:
        if re.fullmatch(pattern, name):
            return f"kept out of LoRA by model {spec.name!r} ({spec.provider}): lora_exclude_modules pattern {pattern}"
    for given, pattern in zip(getattr(cfg, "lora_exclude_modules", ()), _user_exclude_patterns(cfg), strict=True):
        if re.fullmatch(pattern, name):
            return f"kept out of LoRA by --lora-exclude-modules {given}"
    for flag, prefixes in _frozen_parts(spec, cfg):
        if _matches(name, prefixes):
            no_flag = flag.replace("--", "--no-", 1)
            return f"frozen by {flag} (pass {no_flag} to adapt it)"
    return None


def _target_matches(name: str, target: str) -> bool:
    """peft's rule for a list of targets: the full module name, or a dotted suffix of it."""
    return name == target or name.endswith("." + target)


def _preview(names: list[str], limit: int = 3) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def check_target_modules(model: Any, spec: ModelSpec, cfg: TrainConfig) -> None:
    """Check the LoRA targets against ``model`` before peft sees them.

    Every ``--target-modules`` name must match at least one module LoRA may adapt (not the output
    head, not a spec exclusion or a frozen tower), and only modules of a kind LoRA can wrap; ``all-linear``
    stands alone. peft would fail with a generic traceback, or silently skip a mistyped name.
    The spec's own default targets only need to adapt something in all (a family's default list may
    name modules that some of its variants lack).

    Args:
        model: the loaded model, not yet wrapped by peft.
        spec: its model spec (default targets, exclusions, parts).
        cfg: the training config (``target_modules``, freeze flags).

    Raises:
        SwiftcoreError: naming what matched, what did not and why, and the targetable linear modules.
    """
    targets = _targets(spec, cfg)
    given = bool(cfg.target_modules)
    source = "--target-modules" if given else f"model {spec.name!r} ({spec.provider}) lora_target_modules"
    linear_kinds, lora_kinds = _module_kinds()
    modules = [(name, module) for name, module in model.named_modules() if name]
    reasons = {name: _kept_out_reason(name, spec, cfg) for name, _ in modules}
    targetable = sorted({_short_name(n) for n, m in modules if isinstance(m, linear_kinds) and reasons[n] is None})
    available = (
        f"Targetable linear modules of {spec.name!r}: {', '.join(targetable) or 'none'} "
        f"(or {ALL_LINEAR} alone for all of them); a dotted suffix such as self_attn.q_proj narrows a name."
    )
    if ALL_LINEAR in targets:
        if len(targets) > 1:
            others = ", ".join(repr(t) for t in targets if t != ALL_LINEAR)
            raise SwiftcoreError(
                f"{source}: {ALL_LINEAR!r} already targets every linear module; give it alone, or list module "
                f"names instead of it (got {others} as well). {available}"
            )
        if not targetable:
            raise SwiftcoreError(f"{source}: {ALL_LINEAR!r} finds no linear module LoRA may adapt. {available}")
        return

    matched: dict[str, int] = {}
    problems: list[str] = []
    for target in targets:
        hits = [(n, m) for n, m in modules if _target_matches(n, target)]
        adapted = [(n, m) for n, m in hits if reasons[n] is None]
        unsupported = [f"{n} ({type(m).__name__})" for n, m in adapted if not isinstance(m, lora_kinds)]
        if unsupported:
            problems.append(
                f"{target!r} matches {_preview(unsupported)}, which LoRA cannot adapt "
                "(it wraps linear, embedding and convolution layers)"
            )
        elif adapted:
            matched[target] = len(adapted)
        elif hits:
            name = hits[0][0]
            problems.append(f"{target!r} matches only modules LoRA leaves alone: {name} is {reasons[name]}")
        else:
            problems.append(f"{target!r} matches no module of {type(model).__name__}")
    if not problems or (not given and matched):
        return
    ok = "; ".join(f"{t!r} matched {n} module{'s' if n != 1 else ''}" for t, n in matched.items())
    raise SwiftcoreError(f"{source}: {'; '.join(problems)}." + (f" ({ok}.)" if ok else "") + f" {available}")


def _absolute_base(peft_model: Any, model_dir: str) -> None:
    """Make the adapter name its base by absolute path (peft stores ``--model`` as given).

    A relative ``base_model_name_or_path`` only resolves from the training run's working directory,
    so ``infer`` / ``export --merge-lora`` on the adapter would fail from anywhere else. A hub id
    (no such local directory) is left as it is.
    """
    local = Path(model_dir).expanduser()
    if not (local / "config.json").is_file():
        return
    for config in getattr(peft_model, "peft_config", {}).values():
        config.base_model_name_or_path = os.path.abspath(local)


def apply_tuner(model: Any, spec: ModelSpec, cfg: TrainConfig) -> Any:
    """Return the model ready to train: parts frozen per flags; wrapped in a peft LoRA model for ``lora``.

    Raises:
        SwiftcoreError: a LoRA target adapts nothing, or names a module LoRA cannot wrap
            (see :func:`check_target_modules`).
    """
    if cfg.tuner == "lora":
        check_target_modules(model, spec, cfg)  # before anything is changed or peft raises
    freeze_parts(model, spec, cfg)
    if cfg.tuner == "full":
        return model
    from peft import get_peft_model

    peft_model = get_peft_model(model, lora_config(spec, cfg, model=model))
    _absolute_base(peft_model, cfg.model)
    return peft_model


def _grouped(names: list[str]) -> list[tuple[str, int]]:
    """``(pattern, count)``: names with their block indices replaced by ``*``, in first-seen order."""
    counts: dict[str, int] = {}
    for name in names:
        pattern = re.sub(r"(?<=\.)\d+(?=\.|$)", "*", name)
        counts[pattern] = counts.get(pattern, 0) + 1
    return list(counts.items())


def dry_run_report(model: Any, spec: ModelSpec, cfg: TrainConfig) -> str:
    """What training ``model`` under ``cfg`` adapts (module names grouped by pattern) and the trainable
    parameter count; ``model`` is tuned in place (:func:`apply_tuner`), nothing is trained or written."""
    lines = [f"model {spec.name!r} ({spec.provider}), tuner {cfg.tuner}"]
    if cfg.tuner == "lora" and _targets(spec, cfg) == (ALL_LINEAR,):
        check_target_modules(model, spec, cfg)
        plan = lora_plan(model, spec, cfg)
        lines.append(f"LoRA adapts {len(plan.modules)} linear modules ({ALL_LINEAR}):")
        lines += [f"  {pattern}  x{count}" for pattern, count in _grouped(plan.modules)]
        if plan.parameters:
            lines.append(f"LoRA adapts {len(plan.parameters)} fused expert weights (peft target_parameters):")
            lines += [f"  {pattern}  x{count}" for pattern, count in _grouped(plan.parameters)]
        if plan.not_adapted:
            lines.append(f"NOT adapted (peft cannot; see the warning): {len(plan.not_adapted)}:")
            lines += [f"  {pattern}  x{count}" for pattern, count in _grouped(plan.not_adapted)]
        if plan.routers:
            lines.append(f"never adapted (routers/gates): {len(plan.routers)} modules:")
            lines += [f"  {pattern}  x{count}" for pattern, count in _grouped(plan.routers)]
    tuned = apply_tuner(model, spec, cfg)
    if cfg.tuner == "lora" and _targets(spec, cfg) != (ALL_LINEAR,):
        adapted = [n for n, m in tuned.named_modules() if hasattr(m, "lora_A")]
        lines.append(f"LoRA adapts {len(adapted)} modules (--target-modules {' '.join(_targets(spec, cfg))}):")
        lines += [f"  {pattern}  x{count}" for pattern, count in _grouped(adapted)]
    lines.append(trainable_summary(tuned))
    return "\n".join(lines)


def trainable_summary(model: Any) -> str:
    """``trainable 1,234 / 56,789 parameters (2.17%)``."""
    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return f"trainable {trainable:,} / {total:,} parameters ({100.0 * trainable / max(total, 1):.2f}%)"


def dry_run(cfg: TrainConfig, plugins: PluginSet) -> str:
    """``swiftcore train --dry-run``: load ``cfg.model`` and report what the tuner adapts
    (:func:`dry_run_report`); no data is read, nothing is trained and no output directory is written."""
    from swiftcore.api.models import check_requirements, load_model, resolve_model_spec

    spec = resolve_model_spec(cfg.model, plugins, model_type=cfg.model_type)
    check_requirements(spec)
    model = load_model(spec, cfg.model, plugins, torch_dtype="float32" if cfg.dtype == "float32" else cfg.dtype)
    return dry_run_report(model, spec, cfg)
