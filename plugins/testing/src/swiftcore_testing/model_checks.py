"""The model-plugin pipeline of the contract: make-tiny -> load -> template -> two LoRA steps -> generate.

Each function returns a list of problems (empty when the step works) or raises a
:class:`~swiftcore_testing.rules.ContractViolation` naming its rule when it cannot go on. Everything
runs on a tiny random checkpoint on the CPU, with samples of at most :data:`MAX_LENGTH` tokens.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swiftcore.api import SwiftcoreError
from swiftcore_testing.rules import violation
from swiftcore_testing.samples import text_only

if TYPE_CHECKING:
    from swiftcore.api import PluginSet

__all__ = [
    "MAX_LENGTH",
    "generation_problems",
    "load_problems",
    "lora_losses",
    "official_problems",
    "render_problems",
    "rendered_texts",
    "template_for",
    "train_serve_problems",
]

#: Longest training sample (tokens): keeps the two LoRA steps fast on a CPU.
MAX_LENGTH = 64


def load_problems(spec: Any, model_dir: Path, plugins: PluginSet) -> list[str]:
    """The tiny checkpoint must resolve to ``spec``, load, and agree with its tokenizer and ``parts``."""
    from swiftcore.api.models import load_model, load_tokenizer, resolve_model_spec
    from swiftcore_testing.model_spec_checks import part_problems, special_token_problems

    resolved = resolve_model_spec(model_dir, plugins)
    problems = []
    if resolved.name != spec.name:
        problems.append(f"make_tiny's checkpoint resolves to model {resolved.name!r}, not {spec.name!r}")
    model = load_model(spec, model_dir, plugins)
    problems.extend(part_problems(model, spec))
    problems.extend(special_token_problems(model.config, load_tokenizer(model_dir)))
    return problems


def template_for(spec: Any, plugins: PluginSet) -> tuple[Any, Any]:
    """``(template, template_spec)`` of the model's ``default_template``.

    Raises:
        ContractViolation: the spec names no default template, or it is not loaded.
    """
    from swiftcore.api.template import get_template

    if not spec.default_template:
        raise violation("model-template-renders", f"model {spec.name!r} names no default_template")
    try:
        return get_template(spec.default_template, plugins), plugins.registry.get("template", spec.default_template)
    except SwiftcoreError as exc:
        raise violation(
            "model-template-renders",
            f"model {spec.name!r}: default_template {spec.default_template!r}: {exc} (declare the template "
            "plugin as a dependency of the model plugin's distribution)",
        ) from exc


def render_problems(template: Any, tokenizer: Any, records: list[dict[str, Any]]) -> list[str]:
    """Every plain-text sample must render and encode with loss on the assistant turns; others must render
    or raise a :class:`~swiftcore.api.template.TemplateError` that says why."""
    from swiftcore.api.template import TemplateError

    problems = []
    plain = text_only(records)
    for record in records:
        where = record.get("id", "?")
        try:
            template.render(record)
        except TemplateError as exc:
            if record in plain:
                problems.append(f"sample {where}: rendering raised {exc}")
            continue
        except Exception as exc:  # a template bug, not a refusal
            problems.append(f"sample {where}: rendering raised {type(exc).__name__}: {exc}")
            continue
        if tokenizer is None or record not in plain:
            continue
        enc = template.encode(tokenizer, record)
        if not enc.input_ids or all(label == -100 for label in enc.labels):
            problems.append(f"sample {where}: encoding gave no token carrying loss")
    if not plain:
        problems.append("no plain-text sample to check (add one to the plugin's conversations.jsonl)")
    return problems


def train_serve_problems(template: Any, tokenizer: Any, records: list[dict[str, Any]]) -> list[str]:
    """Where a sample's reply is trained after other ids than the inference prompt's (see
    :func:`swiftcore_testing.templates.check_train_serve_prefix`); a problem too when no sample ends in a reply."""
    from swiftcore_testing.templates import check_train_serve_prefix

    checked, failures = check_train_serve_prefix(template, tokenizer, text_only(records))
    if not checked and not failures:
        return ["no sample ends in an assistant reply that the template renders: nothing was checked"]
    return failures


def rendered_texts(template: Any, records: list[dict[str, Any]]) -> list[str]:
    """The renderings of the samples the template renders (to train a test tokenizer on)."""
    from swiftcore.api.template import TemplateError

    texts = []
    for record in records:
        try:
            texts.append(template.render(record))
        except TemplateError:
            continue
    return texts


def _jinja_extra(template: Any, tokenizer: Any) -> dict[str, Any]:
    """The special-token variables transformers passes to a chat template (``bos_token`` ...)."""
    if tokenizer is not None:
        return {k: v for k, v in tokenizer.special_tokens_map.items() if isinstance(v, str)}
    # Without a tokenizer, a template that renders a BOS / EOS says which one it is (its ``eos``, else its first
    # stop word: Tulu-style official templates close every reply with ``eos_token``).
    bos = getattr(template, "bos_token", None) or getattr(template, "bos", None)
    stops = tuple(getattr(template, "stop_words", ()) or ())
    eos = getattr(template, "eos_token", None) or getattr(template, "eos", None) or (stops[0] if stops else None)
    return {name: v for name, v in (("bos_token", bos), ("eos_token", eos)) if isinstance(v, str)}


def official_problems(
    template: Any, template_spec: Any, records: list[dict[str, Any]], tokenizer: Any = None
) -> list[str]:
    """Differences between the template and its declared official Jinja on ``records`` (full and prompt).

    Args:
        template: the template object.
        template_spec: its spec (``official`` names the Jinja).
        records: the sample conversations.
        tokenizer: the model's tokenizer, whose special tokens the Jinja sees (as transformers passes them).
    """
    from swiftcore.api.template import official_chat_template
    from swiftcore_testing.templates import compare_with_official

    official = official_chat_template(template_spec)
    if official is None:
        return [f"template {template_spec.name!r} declares no official '.jinja' (official={template_spec.official!r})"]
    rendered, _raised, failures = compare_with_official(
        template, official, records, extra=_jinja_extra(template, tokenizer)
    )
    if not rendered and not failures:
        failures = ["no sample rendered on both sides"]
    return [f"template {template_spec.name!r} differs from {template_spec.official}: {f}" for f in failures]


def _batch(template: Any, tokenizer: Any, records: list[dict[str, Any]]) -> dict[str, Any]:
    from swiftcore_data import PaddingCollator

    samples = []
    for record in text_only(records):
        enc = template.encode(tokenizer, record, max_length=MAX_LENGTH, truncation="drop")
        if enc is not None and any(label != -100 for label in enc.labels):
            samples.append({"input_ids": enc.input_ids, "labels": enc.labels})
    if not samples:
        raise violation("model-lora-trains", f"no plain-text sample fits in {MAX_LENGTH} tokens")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    return PaddingCollator(pad)(samples[:4])


def lora_losses(
    spec: Any,
    model_dir: Path,
    plugins: PluginSet,
    template: Any,
    records: list[dict[str, Any]],
    steps: int = 2,
    learning_rate: float = 1e-2,
) -> list[float]:
    """Train LoRA (as ``swiftcore train --tuner lora`` sets it up) for ``steps`` steps on one batch.

    Returns:
        The loss before each optimizer step.
    """
    import torch
    from swiftcore_train import TrainConfig

    from swiftcore.api.models import load_model, load_tokenizer

    try:
        from swiftcore_train import apply_tuner
    except ImportError as exc:  # the kit itself needs no training stack; this rule does
        raise SwiftcoreError(
            "the LoRA rule trains through swiftcore-train's tuners: pip install 'swiftcore-testing[train]'"
        ) from exc

    tokenizer = load_tokenizer(model_dir)
    batch = _batch(template, tokenizer, records)
    torch.manual_seed(0)
    model = load_model(spec, model_dir, plugins)
    model = apply_tuner(model, spec, TrainConfig(model=str(model_dir), tuner="lora", lora_rank=8, lora_alpha=16))
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise violation("model-lora-trains", "LoRA left no trainable parameter; check lora_target_modules")
    optimizer = torch.optim.AdamW(params, lr=learning_rate)
    model.train()
    losses = []
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=True)
        loss = model(**batch).loss
        losses.append(float(loss.item()))
        if not math.isfinite(losses[-1]):
            break
        loss.backward()
        optimizer.step()
    return losses


def generation_problems(model_dir: Path, plugins: PluginSet, records: list[dict[str, Any]]) -> list[str]:
    """Generate a few tokens for a sample prompt with the transformers backend."""
    from swiftcore_infer import TransformersEngine

    from swiftcore_testing.templates import generation_record

    prompts = [generation_record(r) for r in text_only(records)[:1]]
    engine = TransformersEngine(str(model_dir), plugins, device="cpu")
    problems = []
    for out in engine.generate(prompts, max_new_tokens=4):
        if out.error:
            problems.append(f"generation failed: {out.error}")
        elif out.completion_tokens < 1:
            problems.append(f"generation produced no token (finish_reason {out.finish_reason!r})")
    return problems
