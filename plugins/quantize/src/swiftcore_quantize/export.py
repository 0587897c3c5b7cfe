"""``swiftcore export --model DIR --to-hf OUT --quantize SCHEME``: quantize a Hugging Face checkpoint with
llm-compressor and write it as compressed-tensors, atomically, next to the files it came with."""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from swiftcore.api import SwiftcoreError
from swiftcore_quantize.heads import head_ignore, head_kept_files, mark_dequantize_on_load, read_head
from swiftcore_quantize.moe import has_experts, transformers_load_problem
from swiftcore_quantize.schemes import Scheme, build_recipe, get_scheme

__all__ = ["REPORT_FILE", "QuantizeReport", "default_ignore", "quantize_checkpoint", "weight_bytes"]

#: Written into the output directory: the scheme, what was kept in full precision, the sizes.
REPORT_FILE = "swiftcore_quantize.json"
# Files of the input checkpoint that save_pretrained rewrites (weights, their index, config), and a training
# checkpoint's resumption state, which an export does not carry; every other file (tokenizer, chat template,
# generation config, processor, swiftcore_args.json) is copied unchanged.
_REWRITTEN = ("*.safetensors", "pytorch_model*.bin", "*.index.json", "config.json")
_TRAINING_STATE = (
    "optimizer.pt", "scheduler.pt", "scaler.pt", "rng_state*.pth", "trainer_state.json", "training_args.bin",
)  # fmt: skip


@dataclass(frozen=True)
class QuantizeReport:
    """What an export did: the scheme, the ignore list it ran with, the calibration samples, the weight sizes."""

    scheme: str
    ignore: list[str]
    calibration_samples: int
    bytes_before: int
    bytes_after: int
    #: Mixture-of-experts models: "ok" when plain transformers loads every expert weight, else what goes wrong and
    #: what to pass instead (:mod:`swiftcore_quantize.moe`); "not checked" for dense models.
    transformers_load: str = "not checked"

    @property
    def ratio(self) -> float:
        """Weight bytes after / before (0.25: four times smaller)."""
        return self.bytes_after / self.bytes_before


def weight_bytes(model_dir: str | Path) -> int:
    """Bytes of a checkpoint's weight files (safetensors, else .bin)."""
    files = list(Path(model_dir).glob("*.safetensors")) or list(Path(model_dir).glob("*.bin"))
    return sum(f.stat().st_size for f in files)


def _anchored(pattern: str) -> str:
    # llm-compressor matches "re:" targets with re.match (anchored at the start only); peft's LoRA exclusions are
    # full matches. Anchor the end too, so ".*\.mlp\.gate" keeps the router and not every "mlp.gate_proj".
    return f"re:(?:{pattern})$"


def default_ignore(spec: Any) -> list[str]:
    """Modules kept in full precision by default: the output head, the model's LoRA exclusions (routers, towers,
    indexers) and its vision/audio towers and projectors, from the model spec; ``["lm_head"]`` without a spec."""
    if spec is None:
        return ["lm_head"]
    parts = spec.parts
    prefixes = [*parts.lm_head, *parts.vision_tower, *parts.audio_tower, *parts.projector]
    patterns = [prefix.replace(".", r"\.") + r"(\..*)?" for prefix in prefixes] + list(spec.lora_exclude_modules)
    return [_anchored(p) for p in dict.fromkeys(patterns)]  # in order, once each (towers are often in both)


def _check_input(model: Path) -> None:
    if (model / "adapter_config.json").is_file() and not (model / "config.json").is_file():
        raise SwiftcoreError(
            f"{model} is a LoRA adapter: merge it first (swiftcore export --model {model} --merge-lora MERGED), "
            "then quantize MERGED"
        )
    if not (model / "config.json").is_file():
        raise SwiftcoreError(
            f"{model} has no config.json: --quantize takes a Hugging Face checkpoint (convert a Megatron one with "
            "--to-hf first)"
        )
    config = json.loads((model / "config.json").read_text())
    if config.get("quantization_config"):
        method = config["quantization_config"].get("quant_method", "?")
        raise SwiftcoreError(f"{model} is already quantized ({method}); quantize the full-precision checkpoint")


def _resolve_spec(model: Path, plugins: Any) -> Any:
    from swiftcore.api.models import UnknownModelTypeError, resolve_model_spec

    try:
        return resolve_model_spec(model, plugins)
    except UnknownModelTypeError:
        return None  # a plain transformers checkpoint: quantized with default ignores and no template


def _load(model: Path) -> Any:
    """The checkpoint as the transformers class its config.json names, in its own dtype: the quantized checkpoint
    must be what that class loads, with no swiftcore code involved."""
    import transformers

    config = json.loads((model / "config.json").read_text())
    cls = next(
        (getattr(transformers, a) for a in config.get("architectures") or () if hasattr(transformers, a)),
        transformers.AutoModelForCausalLM,
    )
    return cls.from_pretrained(str(model), dtype="auto")


@contextlib.contextmanager
def _cpu_only_host() -> Iterator[None]:
    """llm-compressor's settings for a host with no accelerator (none changed where there is one).

    - AWQ pins its activation cache for faster host-to-device copies, which fails with no accelerator ("Cannot
      access accelerator device"); pinning is only a speed-up, so it is skipped.
    - With a ``torch.distributed`` process group initialised in this process (a CPU torchrun, or a caller that set
      one up), llm-compressor takes the distributed path, whose all-reduces run on the accelerator device and fail
      without one ("'NoneType' object has no attribute 'type'"); compressed-tensors' ``as_single_threaded`` keeps
      this process's export to itself.
    """
    import torch

    if torch.accelerator.is_available():
        yield
        return
    from compressed_tensors.offload import as_single_threaded
    from llmcompressor.pipelines.cache import IntermediatesCache

    original = IntermediatesCache.pin_memory
    IntermediatesCache.pin_memory = lambda self, *args, **kwargs: None  # type: ignore[method-assign]
    try:
        with as_single_threaded():
            yield
    finally:
        IntermediatesCache.pin_memory = original  # type: ignore[method-assign]


def _oneshot(model: Any, src: Path, scheme: Scheme, recipe: list[Any], ids: list[list[int]], max_length: int) -> None:
    from llmcompressor import oneshot

    from swiftcore.api.models import load_tokenizer

    if not scheme.calibrated:
        with _cpu_only_host():
            oneshot(model=model, recipe=recipe)
        return
    from datasets import Dataset

    data = Dataset.from_dict({"input_ids": ids, "attention_mask": [[1] * len(x) for x in ids]})
    try:
        with _cpu_only_host():
            oneshot(
                model=model,
                dataset=data,
                recipe=recipe,
                # The samples are token ids already; the tokenizer only stands in for the processor llm-compressor
                # builds from the model's name otherwise (which fails for a local multimodal checkpoint).
                processor=load_tokenizer(src),
                max_seq_length=max_length,
                num_calibration_samples=len(ids),
            )
    except ValueError as err:
        if "group_size" in str(err):
            raise SwiftcoreError(
                f"--quantize {scheme.name}: {str(err).splitlines()[0]}\n{_layers_of(err)}\n"
                "Pass a --group-size that divides these layers' input sizes, or keep them with --ignore"
            ) from None
        raise


def _layers_of(err: Exception) -> str:
    return "\n".join(line for line in str(err).splitlines() if line.strip().startswith("- "))


def quantize_checkpoint(
    model: str | Path,
    out: str | Path,
    plugins: Any,
    *,
    scheme: str,
    ignore: tuple[str, ...] = (),
    calibration_dataset: str | None = None,
    num_samples: int = 128,
    max_length: int = 512,
    group_size: int = 128,
    echo: Callable[[str], Any] = print,
) -> QuantizeReport:
    """Quantize the HF checkpoint ``model`` with ``scheme`` and write it to ``out`` (atomically) as compressed-tensors.

    ``ignore`` adds module names or ``re:`` regexes to :func:`default_ignore`'s; calibration data (calibrated schemes)
    is ``calibration_dataset`` encoded by the model's template, or the bundled set.

    Raises:
        SwiftcoreError: the input is not a full-precision HF checkpoint, calibration data cannot be encoded, or the
            scheme cannot apply to the model (naming the layers and what to pass instead).
    """
    from swiftcore.api.models import atomic_output_dir, check_output_dir

    chosen = get_scheme(scheme)
    src = Path(model)
    _check_input(src)
    check_output_dir(out)
    head = read_head(src)
    spec = _resolve_spec(src, plugins)
    kept = default_ignore(spec) + (head_ignore(head) if head else []) + list(ignore)
    ids: list[list[int]] = []
    if chosen.calibrated:
        if head:
            from swiftcore_quantize.calibration import default_dataset_path
            from swiftcore_quantize.heads import head_calibration_ids

            source = calibration_dataset or str(default_dataset_path())
            ids = head_calibration_ids(str(src), head, source, num_samples, max_length)
        else:
            from swiftcore_quantize.calibration import calibration_ids

            ids = calibration_ids(str(src), spec, plugins, calibration_dataset, num_samples, max_length)
        echo(f"calibrating on {len(ids)} samples ({sum(map(len, ids))} tokens)")
    loaded = _load(src)
    moe = has_experts(loaded)
    _oneshot(loaded, src, chosen, build_recipe(chosen, kept, group_size, model=loaded), ids, max_length)
    with atomic_output_dir(out) as tmp:
        loaded.save_pretrained(str(tmp), save_compressed=True)
        if head:
            mark_dequantize_on_load(tmp / "config.json")
        rewritten = {f.name for pattern in (*_REWRITTEN, *_TRAINING_STATE) for f in src.glob(pattern)}
        rewritten -= set(head_kept_files(head) if head else ())  # the head's own weights, copied unchanged
        for file in src.iterdir():
            if file.is_file() and file.name not in rewritten and not (tmp / file.name).exists():
                shutil.copy2(file, tmp / file.name)
        problem = None
        if moe:
            kept_experts = any(_experts_kept(loaded, name) for name in kept)
            problem = transformers_load_problem(tmp, type(loaded), kept_experts)
        load = "not checked" if not moe else (problem or "ok")
        report = QuantizeReport(chosen.name, kept, len(ids), weight_bytes(src), weight_bytes(tmp), load)
        (tmp / REPORT_FILE).write_text(json.dumps({**asdict(report), "ratio": round(report.ratio, 4)}, indent=2))
    echo(
        f"wrote {out}: {chosen.name}, weights {report.bytes_before / 1e6:.2f} MB -> {report.bytes_after / 1e6:.2f} MB "
        f"({report.ratio:.0%}); kept in full precision: {', '.join(kept)}"
    )
    echo(f"note: {chosen.cpu_note}")
    if problem:
        echo(f"WARNING: {problem}")
    return report


def _experts_kept(model: Any, pattern: str) -> bool:
    """Whether the ignore entry ``pattern`` (a name or ``re:REGEX``, llm-compressor's syntax) matches an expert."""
    import re

    names = (name for name, _ in model.named_modules() if ".experts." in f"{name}.")
    if pattern.startswith("re:"):
        return any(re.match(pattern[3:], name) for name in names)
    return any(name == pattern for name in names)
