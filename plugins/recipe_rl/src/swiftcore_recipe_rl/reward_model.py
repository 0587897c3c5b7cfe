"""The ``reward_model`` reward: a reward model trained by ``swiftcore train --recipe rm`` scores each completion.

    swiftcore train --recipe grpo --reward reward_model --reward-option reward_model.path=RM_CHECKPOINT ...

``RM_CHECKPOINT`` is a ``checkpoint-N`` of the ``rm`` recipe: a ``*ForSequenceClassification`` with one label,
which ``AutoModelForSequenceClassification`` loads as is. Each completion is scored on the conversation the ``rm``
recipe would have trained on: the prompt's chat record (the ``records`` keyword the RL recipes pass) with the
completion as its last assistant reply, rendered by the template the checkpoint records in its manifest (else its
family's default) and encoded by the same sample path (the reply closed by the template's stop token and whatever
the template writes after it). A completion with reasoning keeps it in the reply's text, as the template parses it.

The model is loaded once per process (float32, eval mode, on the CPU) and scores one sequence at a time, so no
padding enters a score. Like every reward it runs on the reward worker thread: a missing ``path``, a checkpoint
that does not load, or a recipe that passes no ``records`` costs the batch the fallback reward and a logged error.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from swiftcore.api import SwiftcoreError

__all__ = ["reward_model"]

_LOCK = threading.Lock()  # one model per path, loaded once even when reward batches overlap


@functools.lru_cache(maxsize=2)
def _load(path: str) -> tuple[Any, Any, Any]:
    """The reward model at ``path``, its tokenizer and its template (cached: read once per process)."""
    import torch
    from transformers import AutoModelForSequenceClassification

    from swiftcore.api import load_plugins
    from swiftcore.api.models import load_tokenizer, manifest_template, read_manifest, resolve_model_spec
    from swiftcore.api.template import get_template

    try:
        model = AutoModelForSequenceClassification.from_pretrained(path, dtype=torch.float32).eval()
    except (OSError, ValueError) as exc:
        raise SwiftcoreError(
            f"--reward-option reward_model.path={path}: not a reward model checkpoint ({exc}); give a checkpoint-N "
            "directory of `swiftcore train --recipe rm`"
        ) from None
    if model.config.num_labels != 1:
        raise SwiftcoreError(
            f"--reward-option reward_model.path={path}: the model has {model.config.num_labels} labels; a reward "
            "model has one (train it with --recipe rm)"
        )
    plugins = load_plugins()
    name = manifest_template(read_manifest(path), plugins) or resolve_model_spec(path, plugins).default_template
    return model, load_tokenizer(path), get_template(name, plugins)


def reward_model(
    completions: Sequence[str],
    *,
    records: Sequence[Mapping[str, Any]] | None = None,
    options: Mapping[str, str] | None = None,
    **kwargs: Any,
) -> list[float]:
    """One reward-model score per completion (see the module docstring)."""
    import torch

    from swiftcore.api.template import SampleEncoder

    path = (options or {}).get("path")
    if not path:
        raise SwiftcoreError("--reward reward_model needs --reward-option reward_model.path=RM_CHECKPOINT")
    if records is None:
        raise SwiftcoreError("--reward reward_model: the recipe passed no prompt records to score the replies with")
    with _LOCK:
        model, tokenizer, template = _load(str(path))
    encoder = SampleEncoder(template, tokenizer)
    conversations = [
        {**record, "messages": [*record["messages"], {"role": "assistant", "content": completion}]}
        for record, completion in zip(records, completions, strict=True)
    ]
    scores = []
    with torch.inference_mode():
        for encoded in encoder.encode(conversations, loss_policy="last_round"):
            scores.append(float(model(input_ids=torch.tensor([list(encoded.input_ids)])).logits[0, 0]))
    return scores
