"""Write tiny random checkpoints of a model family (tests, the demo, ``swiftcore make-tiny``).

A plugin's :class:`~swiftcore.api.ModelSpec` names two factories:

* ``tiny_tokenizer``: ``fn(out_dir) -> None`` writes the tokenizer (with the family's special tokens
  and official chat template) and, for multimodal families, the processor files;
* ``tiny_config``: ``fn(tokenizer=None) -> PretrainedConfig`` returns a tiny config; when it takes
  ``tokenizer``, it gets the tokenizer just written, so that ``vocab_size`` and the special-token ids
  in the config match it.

The checkpoint is written into a temporary sibling directory and renamed at the end, so
``out_dir`` never holds a half-written checkpoint.

Why the final norm's gain is raised (:data:`TINY_LOGIT_MARGIN`): with RMS-normalised hidden states of
width ``d`` and head rows of init std ``sigma``, the largest logit a hidden state can reach is about
``gain * sigma * d``. At a real width (``d`` in the thousands, ``sigma`` = 0.02) that is tens, as in
trained models, but at a tiny width (64) it is about 1.3, well below ``log(vocab)``: the logits cannot
peak. LoRA trains neither the final norm nor the head, so LoRA on such a checkpoint stalls near chance
(loss ~5 of ~6.2) however long it trains. ``make_tiny`` therefore multiplies the final norm's gain so that
the reach is ``log(vocab) + TINY_LOGIT_MARGIN`` (about 10 for a 512-token tiny vocabulary): one token can
then take ~95% of the probability, so LoRA can memorise. Only that gain moves: the embeddings (tied to
the head in some families) and every other weight keep the family's own init, and the checkpoint stays a
plain ``save_pretrained`` one.

Why not more: an untrained model's logits spread with std ~``reach / sqrt(d)`` (1.3 here), and the
float32 differences between two implementations of the model (the Megatron bridges' parity checks,
tolerance 1e-5) grow with that scale. Measured on the DeepSeek-V4 bridge's tightest check: 1e-6 at the old
scale, 6.3e-6 at this one, 1.0e-5 (over the tolerance) at a reach of 16.
"""

from __future__ import annotations

import inspect
import logging
import math
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swiftcore.api import SwiftcoreError, resolve
from swiftcore.api.models import check_requirements


class TinyModelError(SwiftcoreError):
    """A tiny checkpoint could not be written (no tiny config, output directory in the way)."""


__all__ = ["TINY_LOGIT_MARGIN", "TinyCheckpoint", "describe_checkpoint", "make_tiny"]

logger = logging.getLogger("swiftcore.models")

#: How far above ``log(vocab)`` a tiny checkpoint's frozen head can push one logit (see the module
#: docstring). 4 nats leave one token ~95% of the mass against a vocabulary's worth of others (whose
#: logits spread with std ~1.3), i.e. a loss floor of ~0.05 where the old init's was ~5.
TINY_LOGIT_MARGIN = 4.0


@dataclass(frozen=True)
class TinyCheckpoint:
    """What a checkpoint directory holds.

    Attributes:
        path: the directory.
        parameters: the number of parameters in its safetensors files.
        files: the file names, sorted.
    """

    path: Path
    parameters: int
    files: tuple[str, ...]


def describe_checkpoint(path: str | Path) -> TinyCheckpoint:
    """Count the parameters (from safetensors headers, without loading tensors) and list the files."""
    from safetensors import safe_open

    directory = Path(path)
    total = 0
    for file in sorted(directory.glob("*.safetensors")):
        with safe_open(str(file), framework="numpy") as handle:
            for key in handle.keys():
                count = 1
                for dim in handle.get_slice(key).get_shape():
                    count *= dim
                total += count
    files = tuple(sorted(p.name for p in directory.iterdir() if p.is_file()))
    return TinyCheckpoint(directory, total, files)


def make_tiny(
    spec: Any,
    out_dir: str | Path,
    seed: int = 0,
    *,
    overwrite: bool = False,
    tokenizer_texts: Sequence[str] = (),
    vocab_size: int = 1024,
) -> Path:
    """Write a random tiny checkpoint of ``spec`` (weights, config, tokenizer, processor) to ``out_dir``.

    Args:
        spec: the :class:`~swiftcore.api.ModelSpec`; it must name ``tiny_config``.
        out_dir: the directory to create; its parent is created if missing.
        seed: the random seed for the weights.
        overwrite: replace an existing non-empty ``out_dir`` (otherwise that is an error).
        tokenizer_texts: text the tiny tokenizer also learns (with the built-in corpus, ``vocab_size`` pieces),
            keeping the family's layout, special tokens and chat template (transformers'
            ``train_new_from_iterator``). A task whose prompts repeat a long text (a tool preamble) then
            tokenizes about as compactly as a real tokenizer makes it: DeepSeek-V4's tool rows take ~370 tokens
            instead of ~880 with the 512-piece tokenizer, and a training step several times less time. Only for
            families whose ``tiny_config`` takes the tokenizer (the vocabulary follows it).
        vocab_size: the retrained tokenizer's vocabulary (with ``tokenizer_texts`` only).

    The final norm's gain is raised so that the frozen head's top logit can clear ``log(vocab)`` by
    :data:`TINY_LOGIT_MARGIN`, as a trained model's can; otherwise LoRA, which trains neither the norm
    nor the head, cannot make the logits peak on a tiny checkpoint (see the module docstring).

    Returns:
        ``out_dir`` as a :class:`~pathlib.Path`.

    Raises:
        TinyModelError: the spec has no ``tiny_config``, or ``out_dir`` is a file or a non-empty
            directory and ``overwrite`` is False.
        RequirementsError: ``spec.requires`` are not met.
    """
    if not spec.tiny_config:
        raise TinyModelError(
            f"model {spec.name!r} ({spec.provider}) declares no tiny_config, so it cannot be made tiny; "
            "ask the plugin's authors to add one (a 'module:fn' returning a small config)"
        )
    check_requirements(spec)
    out = Path(out_dir).absolute()
    _check_target(out, overwrite)
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        _write(spec, work, seed, tuple(tokenizer_texts), vocab_size)
        _replace(work, out, overwrite)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    logger.info("make-tiny: wrote %s model %r to %s", spec.provider, spec.name, out)
    return out


def _check_target(out: Path, overwrite: bool) -> None:
    if out.is_file():
        raise TinyModelError(f"{out} is a file; choose a directory path for the tiny checkpoint")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise TinyModelError(f"{out} exists and is not empty; choose another directory or pass --force to replace it")


def _replace(work: Path, out: Path, overwrite: bool) -> None:
    """Move the finished checkpoint into place; an old one is removed only after the rename."""
    old = None
    if out.exists():
        _check_target(out, overwrite)  # it may have been filled while we worked
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        os.replace(out, old)
    os.replace(work, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _write(spec: Any, work: Path, seed: int, texts: tuple[str, ...] = (), vocab_size: int = 1024) -> None:
    import torch

    tokenizer = None
    if texts and not spec.tiny_tokenizer:
        raise TinyModelError(f"model {spec.name!r} ({spec.provider}) has no tiny_tokenizer to retrain on texts")
    if spec.tiny_tokenizer:
        resolve(spec.tiny_tokenizer, what=f"tiny_tokenizer of model {spec.name!r} ({spec.provider})")(work)
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(work))
        if texts:
            from swiftcore_tiny._corpus import TINY_CORPUS

            tokenizer.train_new_from_iterator([*TINY_CORPUS, *texts], vocab_size=vocab_size).save_pretrained(work)
            tokenizer = AutoTokenizer.from_pretrained(str(work))
    factory = resolve(spec.tiny_config, what=f"tiny_config of model {spec.name!r} ({spec.provider})")
    takes_tokenizer = "tokenizer" in inspect.signature(factory).parameters
    config = factory(tokenizer=tokenizer) if takes_tokenizer else factory()
    if tokenizer is not None and getattr(config, "get_text_config", None):
        vocab = config.get_text_config().vocab_size
        if vocab < len(tokenizer):
            raise TinyModelError(
                f"tiny_config of model {spec.name!r} ({spec.provider}): vocab_size {vocab} is smaller than its "
                f"tiny tokenizer ({len(tokenizer)} tokens); take vocab_size from the tokenizer"
            )

    from swiftcore.api.models import model_class_for

    cls = model_class_for(spec) if spec.model_class else _auto_class()
    # Seed inside a forked RNG: the weights are reproducible and the caller's RNG state is untouched.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = cls(config) if spec.model_class else cls.from_config(config)
    model = model.to(torch.float32)
    _let_logits_peak(model, TINY_LOGIT_MARGIN)
    if tokenizer is not None and getattr(model, "generation_config", None) is not None:
        # generate() should stop at the tokenizer's EOS and pad with its pad token.
        gen = model.generation_config
        gen.eos_token_id = _first_not_none(config, "eos_token_id", tokenizer.eos_token_id)
        gen.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else gen.pad_token_id
        gen.bos_token_id = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else gen.bos_token_id
    model.save_pretrained(str(work))


def _let_logits_peak(model: Any, margin: float) -> float:
    """Scale the final norm's gain so the output head's top logit can reach ``log(vocab) + margin``.

    The normalised hidden state ``gain * rmsnorm(x)`` has norm ``gain * sqrt(d)`` (``gain`` the RMS of the
    per-channel gains), so its logit on a head row is at most that times ``|row|``: the reach. The gain is
    multiplied until the reach, averaged over rows, is ``log(vocab) + margin`` (it is never lowered). The
    final norm is the decoder's ``norm`` (its name in every transformers decoder here); whether it stores
    its gain as ``w`` or, like Qwen3.5's and Gemma's zero-centred norms, as ``1 + w`` is probed, not
    assumed. A model without that layout is left as it is, with a warning.

    Returns:
        the factor the gain was multiplied by (1.0 when unchanged).
    """
    import torch

    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    norm: Any = getattr(decoder, "norm", None)
    weight = getattr(norm, "weight", None)
    head_weight = getattr(head, "weight", None)
    if (
        not isinstance(weight, torch.Tensor)
        or not isinstance(head_weight, torch.Tensor)
        or weight.ndim != 1
        or head_weight.shape[-1] != weight.shape[0]
    ):
        logger.warning("make-tiny: no final norm feeding the output head found; its logits may not be able to peak")
        return 1.0
    width = weight.shape[0]
    probe = torch.randn(2, 3, width, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        saved = weight.detach().clone()
        before = norm(probe)
        weight.zero_()
        at_zero = norm(probe)
        weight.fill_(1.0)
        unit = norm(probe) - at_zero  # the normalised input, whatever the parameterisation
        weight.copy_(saved)
        if not float(unit.abs().max()) > 0:  # the weight is not used (a norm without a scale)
            logger.warning("make-tiny: %s has no gain to raise; left as is", type(norm).__name__)
            return 1.0
        # out = unit * (offset + w): offset is 0 for a plain gain, 1 for a zero-centred (1 + w) one.
        offset = round(float((at_zero * unit).sum() / (unit * unit).sum()))
        gain = offset + saved
        reach = float(gain.pow(2).mean().sqrt()) * width**0.5 * float(head_weight.norm(dim=-1).mean())
        target = math.log(head_weight.shape[0]) + margin
        factor = target / reach if reach > 0 else 1.0
        if factor <= 1.0:
            return 1.0
        weight.copy_(gain * factor - offset)
        # A norm of another form than unit * (offset + w) would not scale linearly: undo and say so.
        if not torch.allclose(norm(probe), before * factor, rtol=1e-4, atol=1e-5):
            weight.copy_(saved)
            logger.warning("make-tiny: %s's gain is not unit * (offset + w); left as is", type(norm).__name__)
            return 1.0
    logger.info("make-tiny: final norm gain x%.2f (head reach %.2f -> %.2f)", factor, reach, target)
    return factor


def _first_not_none(config: Any, attribute: str, fallback: Any) -> Any:
    for cfg in (config, config.get_text_config() if hasattr(config, "get_text_config") else None):
        value = getattr(cfg, attribute, None) if cfg is not None else None
        if value is not None:
            return value
    return fallback


def _auto_class() -> Any:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM
