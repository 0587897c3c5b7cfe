"""The training configuration: one frozen-by-convention dataclass, filled from CLI flags or a YAML file.

No torch here: ``swiftcore train --help`` and config validation stay fast.
"""

from __future__ import annotations

import math
import sys
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from swiftcore.api import SwiftcoreError

__all__ = [
    "TrainConfig",
    "TrainResult",
    "load_config_file",
    "recipe_for",
    "DEFAULT_ENGINE",
    "TUNERS",
    "LOSS_POLICIES",
    "TRUNCATION",
]

TUNERS = ("lora", "full")
LOSS_POLICIES = ("all_assistant", "last_round", "all")
TRUNCATION = ("error", "truncate_left", "drop")
#: The engine every recipe runs on unless ``--engine`` names another (a plugin's ``RECIPE.ENGINE`` recipe).
DEFAULT_ENGINE = "transformers"


@dataclass
class TrainConfig:
    """Everything ``swiftcore train`` needs. Field names equal the CLI flags (``--lora-rank`` -> ``lora_rank``).

    Attributes:
        model: a local ``save_pretrained`` directory.
        dataset: dataset sources, ``path[#ratio]`` or ``hf:NAME[:SPLIT][#ratio]``.
        output_dir: where checkpoints, ``logs.jsonl``, ``loss.png`` and ``args.json`` go.
        model_type: force a model spec (``name`` or ``name@plugin``) instead of resolving it.
        template: the chat template (default: the model spec's ``default_template``).
        tuner: ``lora`` or ``full``.
        recipe: the training recipe (a :class:`~swiftcore.specs.RecipeSpec` name; ``sft`` by default, and
            ``--task NAME`` alone picks the recipe of that name when one is registered).
        engine: what the recipe trains on: ``transformers`` (the default), or another engine a plugin provides as
            the recipe ``RECIPE.ENGINE`` (``--engine megatron`` runs ``sft.megatron``).
        recipe_options: the values of the options plugins added (``swiftcore_addoption``) that this recipe
            reads, by destination name (filled by the CLI).
        val_dataset: validation sources; else ``split_ratio`` of the training data is held out.
        plugins: the resolved plugin set (filled by the CLI, recorded in ``args.json``).
        config_file: the ``--config`` file the arguments came from (filled by the CLI; an input of the run).
        fsdp: shard the model over the data-parallel processes with torch's FSDP2 (``fully_shard``).
        fsdp_offload: with ``fsdp``, keep parameters, gradients and optimizer state on the CPU.
        deepspeed: ``zero2``, ``zero3`` or a DeepSpeed JSON config file (see :mod:`swiftcore_train.distributed`).
    """

    model: str = ""
    dataset: tuple[str, ...] = ()
    output_dir: str = "output"
    model_type: str | None = None
    template: str | None = None
    tuner: str = "lora"
    lora_rank: int = 8
    lora_alpha: int = 32
    lora_dropout: float = 0.0
    target_modules: tuple[str, ...] = ()
    lora_exclude_modules: tuple[str, ...] = ()
    freeze_vision: bool = True
    freeze_audio: bool = True
    freeze_projector: bool = False
    val_dataset: tuple[str, ...] = ()
    split_ratio: float = 0.0
    max_length: int = 2048
    truncation: str = "error"
    packing: bool = False
    padding_free: bool = False
    loss_policy: str = "all_assistant"
    enable_thinking: bool | None = None
    skip_bad_rows: bool = False
    learning_rate: float = 1e-4
    lr_scheduler: str = "cosine"
    warmup_ratio: float = 0.0
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    num_train_epochs: float = 1.0
    max_steps: int = -1
    batch_size: int = 1
    gradient_accumulation_steps: int = 1
    gradient_checkpointing: bool = False
    fsdp: bool = False
    fsdp_offload: bool = False
    deepspeed: str | None = None
    dtype: str = "float32"
    seed: int = 42
    logging_steps: int = 5
    save_steps: int = 500
    eval_steps: int | None = None
    save_total_limit: int | None = None
    resume_from_checkpoint: str | None = None
    overwrite_output_dir: bool = False
    plot: bool = True
    task: str = "causal_lm"
    recipe: str = "sft"
    engine: str = DEFAULT_ENGINE
    recipe_options: dict[str, Any] = field(default_factory=dict)
    plugins: tuple[str, ...] = field(default=(), repr=False)
    config_file: str | None = field(default=None, repr=False)
    dry_run: bool = False

    def __post_init__(self) -> None:
        self.recipe = recipe_for(self.task, self.recipe, self.engine)

    def validate(self) -> None:
        """Raise one :class:`SwiftcoreError` listing every invalid field."""
        problems = []
        if not self.model:
            problems.append("--model: give a local model directory (e.g. from `swiftcore make-tiny`)")
        if not self.dataset and not self.dry_run:
            problems.append("--dataset: give at least one dataset file")
        if self.tuner not in TUNERS:
            problems.append(f"--tuner: {self.tuner!r} is not one of {', '.join(TUNERS)}")
        if self.loss_policy not in LOSS_POLICIES:
            problems.append(f"--loss-policy: {self.loss_policy!r} is not one of {', '.join(LOSS_POLICIES)}")
        if self.truncation not in TRUNCATION:
            problems.append(f"--truncation: {self.truncation!r} is not one of {', '.join(TRUNCATION)}")
        if self.dtype not in ("float32", "bfloat16", "float16"):
            problems.append(f"--dtype: {self.dtype!r} is not one of float32, bfloat16, float16")
        if not 0.0 <= self.split_ratio < 1.0:
            problems.append(f"--split-ratio: {self.split_ratio} must be in [0, 1)")
        for name in (
            "lora_rank",
            "batch_size",
            "gradient_accumulation_steps",
            "max_length",
            "logging_steps",
            "save_steps",
        ):
            if getattr(self, name) < 1:
                problems.append(f"--{name.replace('_', '-')}: must be at least 1")
        problems.extend(self._number_problems())
        if self.resume_from_checkpoint and self.overwrite_output_dir:
            problems.append(
                "--resume-from-checkpoint and --overwrite-output-dir: pick one (continue the run, or "
                "replace what an earlier run wrote)"
            )
        problems.extend(self._sharding_problems())
        if self.packing and self.padding_free:
            problems.append("--packing and --padding-free: pick one (packing already implies padding-free batches)")
        if problems:
            raise SwiftcoreError("invalid training arguments:\n  " + "\n  ".join(problems))

    def _sharding_problems(self) -> list[str]:
        """``--fsdp`` / ``--deepspeed`` combinations that cannot run (no torch: checked before any launch)."""
        problems = []
        if self.fsdp and self.deepspeed:
            problems.append("--fsdp and --deepspeed: pick one (both shard the model over the processes)")
        if self.fsdp_offload and not self.fsdp:
            problems.append("--fsdp-offload: offloads FSDP shards; add --fsdp (or drop --fsdp-offload)")
        sharded = "--fsdp" if self.fsdp else f"--deepspeed {self.deepspeed}" if self.deepspeed else None
        if sharded and self.engine != DEFAULT_ENGINE:
            problems.append(
                f"{sharded} with --engine {self.engine}: FSDP and DeepSpeed shard the transformers trainer; "
                f"--engine {self.engine} has its own parallelism (e.g. --tp/--pp/--ep): drop {sharded} or --engine"
            )
        elif sharded and self.recipe != "sft":
            problems.append(
                f"{sharded} with recipe {self.recipe!r}: sharded training is supported (and tested) for the sft "
                f"recipe only; train {self.recipe!r} with --nproc-per-node N (data parallel) without {sharded}"
            )
        if self.deepspeed and self.deepspeed not in ("zero2", "zero3") and not self.deepspeed.endswith(".json"):
            problems.append(
                f"--deepspeed: {self.deepspeed!r} is neither zero2, zero3 nor a DeepSpeed config file (FILE.json)"
            )
        return problems

    def _number_problems(self) -> list[str]:
        """Every float must be finite and in range (a NaN passes ``<`` checks silently); step counts positive."""
        problems = []
        ranges: dict[str, tuple[float, float, str]] = {
            "learning_rate": (0.0, math.inf, "a positive number, e.g. 1e-4"),
            "num_train_epochs": (0.0, math.inf, "a positive number of epochs"),
            "max_grad_norm": (0.0, math.inf, "a positive clipping norm"),
        }
        for name, (low, high, what) in ranges.items():
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and low < value < high):
                problems.append(f"--{name.replace('_', '-')}: {value!r} is not {what}")
        for name in ("warmup_ratio", "lora_dropout"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and 0.0 <= value < 1.0):
                problems.append(f"--{name.replace('_', '-')}: {value!r} must be in [0, 1)")
        decay = self.weight_decay
        if not (isinstance(decay, int | float) and math.isfinite(decay) and decay >= 0):
            problems.append(f"--weight-decay: {self.weight_decay!r} must be a finite number >= 0")
        if self.lora_alpha < 1:
            problems.append(f"--lora-alpha: {self.lora_alpha} must be at least 1")
        if self.max_steps == 0 or self.max_steps < -1:
            problems.append(f"--max-steps: {self.max_steps} trains nothing; give a positive number (or -1: use epochs)")
        for name in ("eval_steps", "save_total_limit"):
            value = getattr(self, name)
            if value is not None and value < 1:
                problems.append(f"--{name.replace('_', '-')}: must be at least 1 when given")
        return problems

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (``args.json``)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}


def recipe_for(task: str, recipe: str, engine: str = DEFAULT_ENGINE) -> str:
    """The recipe a run uses: ``--task NAME`` with the default recipe (``sft``) picks the recipe NAME (the heads'
    recipes are named after their tasks), from Python as from the CLI; any other ``--recipe`` wins. On another
    ``engine`` than transformers the recipe is ``NAME.ENGINE`` (``sft.megatron``), which that engine's plugin
    registers."""
    name = task if recipe == "sft" and task != "causal_lm" else recipe
    if engine != DEFAULT_ENGINE and not name.endswith(f".{engine}"):
        name = f"{name}.{engine}"
    return name


#: The most values (scalars, lists, mappings) a ``--config`` file may hold once its YAML aliases are expanded.
MAX_CONFIG_VALUES = 100_000


def _expanded_size(root: Any) -> int:
    """The number of nodes under ``root`` (a composed YAML node) with every alias expanded, counted without
    expanding them (each shared node's count is computed once); an alias cycle counts as unbounded."""
    if root is None:
        return 0
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()  # entered, not yet counted: the path from the root
    stack = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in sizes:
            continue
        value = node.value if isinstance(node.value, list) else []
        children = [c for item in value for c in (item if isinstance(item, tuple) else (item,))]
        if children_done:
            sizes[id(node)] = min(1 + sum(sizes[id(c)] for c in children), sys.maxsize)
            open_nodes.discard(id(node))
            continue
        if id(node) in open_nodes:  # reached again from inside itself: an alias cycle
            return sys.maxsize
        open_nodes.add(id(node))
        stack.append((node, True))
        stack.extend((c, False) for c in children if id(c) not in sizes)
    return sizes[id(root)]


def load_config_file(path: str | Path, extra_keys: tuple[str, ...] = ()) -> dict[str, Any]:
    """Read a YAML (or JSON) file of training arguments; keys are flag names with ``-`` or ``_``.

    Args:
        path: the file.
        extra_keys: destination names of options plugins added (``swiftcore_addoption``), also accepted.

    Raises:
        SwiftcoreError: the file is missing, unparsable, nested too deeply, expands (through YAML aliases) to more
            than :data:`MAX_CONFIG_VALUES` values, or has keys that are not training arguments.
    """
    import yaml

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
        # Composed first (aliases stay shared nodes), so a few hundred bytes of nested aliases (a "billion laughs")
        # are refused before anything expands them.
        size = _expanded_size(yaml.compose(text, Loader=yaml.SafeLoader))
        if size > MAX_CONFIG_VALUES:
            shown = "without end (an alias inside its own anchor)" if size == sys.maxsize else f"to {size} values"
            raise SwiftcoreError(
                f"--config {str(path)!r}: its YAML aliases (*name) expand {shown}, more than the {MAX_CONFIG_VALUES} "
                "a file of arguments may hold; write the values out instead of repeating anchors"
            )
        data = yaml.safe_load(text) or {}
    except FileNotFoundError as exc:
        raise SwiftcoreError(f"--config {str(path)!r}: no such file") from exc
    except yaml.YAMLError as exc:
        raise SwiftcoreError(f"--config {str(path)!r}: not valid YAML: {exc}") from exc
    except RecursionError:
        raise SwiftcoreError(f"--config {str(path)!r}: nested too deeply to be a file of arguments") from None
    if not isinstance(data, dict):
        raise SwiftcoreError(f"--config {str(path)!r}: expected a mapping of argument: value")
    known = {f.name for f in fields(TrainConfig) if f.name != "recipe_options"} | set(extra_keys)
    out = {}
    unknown = []
    for key, value in data.items():
        name = str(key).replace("-", "_")
        if name not in known or name == "plugins":
            unknown.append(str(key))
            continue
        out[name] = value
    if unknown:
        import difflib

        hints = [
            f"{k} (did you mean {m[0]}?)" if (m := difflib.get_close_matches(k.replace("-", "_"), known, 1)) else k
            for k in unknown
        ]
        raise SwiftcoreError(f"--config {str(path)!r}: unknown argument(s): {', '.join(hints)}")
    return out


@dataclass
class TrainResult:
    """Where a run left its outputs."""

    output_dir: Path
    last_checkpoint: Path | None
    log_file: Path
    plot_file: Path | None
    train_samples: int
    global_step: int
    final_loss: float | None
    #: The last in-training evaluation's accuracy (``--eval-every``), None without one.
    eval_accuracy: float | None = None
    #: The best checkpoint by ``--best-metric``, and its value; None without the option.
    best_checkpoint: Path | None = None
    best_value: float | None = None
