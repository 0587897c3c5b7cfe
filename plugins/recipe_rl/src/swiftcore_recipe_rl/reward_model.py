"""The ``reward_model`` reward: a reward model trained by ``swiftcore train --recipe rm`` scores each completion.

    swiftcore train --recipe grpo --reward reward_model --reward-option reward_model.path=RM_CHECKPOINT ...

``RM_CHECKPOINT`` is a ``checkpoint-N`` of the ``rm`` recipe: a ``*ForSequenceClassification`` with one label,
which ``AutoModelForSequenceClassification`` loads as is. Each completion is scored on the conversation the ``rm``
recipe would have trained on: the prompt's chat record (the ``records`` keyword the RL recipes pass) with the
completion as its last assistant reply, rendered by the template the checkpoint records in its manifest (else its
family's default) and encoded by the same sample path (the reply closed by the template's stop token and whatever
the template writes after it). A completion with reasoning keeps it in the reply's text, as the template parses it.

With ``--environment`` the completion is an episode's last reply, and the conversation scored is the whole episode:
the ``messages`` keyword the episode loop passes
(:data:`~swiftcore_recipe_rl.environment_reward.EPISODE_KEYWORDS`: the prompt's messages, each earlier reply as the
family's template parsed it, its ``tool_calls`` and ``reasoning_content`` included, and each tool message), with the
completion as its last assistant reply, in place of the prompt's messages alone; the record's ``tools`` and
``chat_template_kwargs`` still come from ``records``.
Single-turn runs pass no ``messages``: the conversation is the prompt's messages and the completion, as above.
(The episode is rendered and encoded by the same sample path; the ``rm`` recipe itself trains on no such pair on
Qwen3.5, whose last round then spans the tool-calling reply too, so its pair check refuses it.)

The chat-template defaults are the reward model's, not the policy's: the ``rm`` recipe encoded its pairs with
``swiftcore_train.run.sample_encoder`` and that run's ``--enable-thinking/--disable-thinking`` (recorded in the
checkpoint's manifest, ``swiftcore_args.json``, as ``swiftcore_args.enable_thinking``), so the reward encodes with
the same encoder and the same recorded options. A policy trained in the other thinking mode still gets the score
the reward model gives its own training-style encoding of the conversation.

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

__all__ = ["reward_model", "rm_sample_encoder"]

_LOCK = threading.Lock()  # one model per path, loaded once even when reward batches overlap


@functools.lru_cache(maxsize=2)
def _load(path: str) -> tuple[Any, Any]:
    """The reward model at ``path`` and the sample encoder its ``rm`` run encoded its pairs with (its tokenizer, its
    template, its run's chat-template defaults; cached: read once per process)."""
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
    manifest = read_manifest(path)
    name = manifest_template(manifest, plugins) or resolve_model_spec(path, plugins).default_template
    return model, rm_sample_encoder(manifest, get_template(name, plugins), load_tokenizer(path))


def rm_sample_encoder(manifest: Any, template: Any, tokenizer: Any) -> Any:
    """The :class:`~swiftcore.api.template.SampleEncoder` the ``rm`` run of ``manifest`` encoded its training pairs
    with: ``swiftcore_train.run.sample_encoder`` on that run's recorded options (``swiftcore_args``), so its
    ``--enable-thinking/--disable-thinking`` is each record's default thinking mode, as it was in training.

    ``generation_defaults`` (what inference on a checkpoint defaults to, when a run records them) are not used:
    they are the mode most training replies were in, not the encoder's default. A checkpoint without a manifest
    (not trained by swiftcore), or one whose run gave neither flag, gets no defaults (the template's own).
    """
    from types import SimpleNamespace

    from swiftcore_train import sample_encoder

    args = (manifest.record if manifest is not None else {}).get("swiftcore_args")
    recorded = dict(args) if isinstance(args, Mapping) else {}
    thinking = recorded.get("enable_thinking")
    recorded["enable_thinking"] = thinking if isinstance(thinking, bool) else None
    return sample_encoder(template, tokenizer, SimpleNamespace(**recorded))


def _conversation(record: Mapping[str, Any], completion: str, episode: Sequence[Any] | None) -> dict[str, Any]:
    """The record the reward model scores: ``record`` with ``completion`` as its last assistant reply, after the
    prompt's messages (single-turn: ``episode`` None) or after the episode's messages up to its last reply."""
    if episode is None:
        return {**record, "messages": [*record["messages"], {"role": "assistant", "content": completion}]}
    # The episode loop ends the episode's messages with the last reply as the template parsed it; that reply is the
    # completion, scored as text (reasoning kept in it) exactly as a single-turn completion is, so it is replaced.
    turns = list(episode)
    if turns and isinstance(turns[-1], Mapping) and turns[-1].get("role") == "assistant":
        turns.pop()
    # None values dropped as the rm recipe's row normalisation drops them (an assistant turn without a call
    # carries tool_calls=None here), so an earlier turn renders as it would have in a training pair.
    history = [{k: v for k, v in m.items() if v is not None} if isinstance(m, Mapping) else m for m in turns]
    return {**record, "messages": [*history, {"role": "assistant", "content": completion}]}


def reward_model(
    completions: Sequence[str],
    *,
    records: Sequence[Mapping[str, Any]] | None = None,
    messages: Sequence[Sequence[Any]] | None = None,
    options: Mapping[str, str] | None = None,
    **kwargs: Any,
) -> list[float]:
    """One reward-model score per completion (see the module docstring).

    Args:
        completions: the replies to score (with ``--environment``: each episode's last reply).
        records: each completion's prompt record (the RL recipes pass it).
        messages: with ``--environment``, each completion's episode conversation (the episode loop passes it);
            None in single-turn runs.
        options: the ``--reward-option reward_model.KEY=VALUE`` values (``path``).
    """
    import torch

    path = (options or {}).get("path")
    if not path:
        raise SwiftcoreError("--reward reward_model needs --reward-option reward_model.path=RM_CHECKPOINT")
    if records is None:
        raise SwiftcoreError("--reward reward_model: the recipe passed no prompt records to score the replies with")
    with _LOCK:
        model, encoder = _load(str(path))
    # The reward model's defaults first, the record's own chat_template_kwargs on top: the rm recipe let a pair's own
    # kwargs win over its run's default in the same way, so a prompt row that asks for a mode is scored in that mode.
    # The RL recipes pass the rows' own kwargs only, never the policy run's --enable-thinking default (see
    # swiftcore_recipe_rl.prompts.reward_record): that default is how the policy is prompted, not how the reward model
    # was trained, and applied here it would render the conversation unlike the reward model's training pairs.
    episodes = [None] * len(completions) if messages is None else list(messages)
    conversations = [
        _conversation(record, completion, episode)
        for record, completion, episode in zip(records, completions, episodes, strict=True)
    ]
    # An episode ending in tool rounds is scored as the rm recipe trained on it: the last of the template's
    # training_rounds (Gemma 4 renders an earlier call's turn as serving does), swiftcore_recipe_preference's encoding.
    rounds = getattr(encoder.template, "training_rounds", None) or (lambda record: [record])
    conversations = [rounds(encoder.prepare(c))[-1] for c in conversations]
    scores = []
    with torch.inference_mode():
        for encoded in encoder.encode(conversations, loss_policy="last_round"):
            scores.append(float(model(input_ids=torch.tensor([list(encoded.input_ids)])).logits[0, 0]))
    return scores
