"""Talker training with the thinker frozen: codec-token targets, teacher-forced exactly as upstream generates.

Qwen3-Omni speaks with its talker: a MoE decoder whose ``codec_head`` predicts the first codebook of each codec frame
(the code predictor then draws the other ``num_code_groups - 1``). Upstream's ``generate`` builds the talker's input
from the thinker (:meth:`transformers.Qwen3OmniMoeForConditionalGeneration.generate`); :func:`talker_batch` builds
the same input for a known reply and its known codes, so one forward pass scores every frame:

- the user turns: the thinker's input embeddings through ``talker.text_projection`` (text-only rows; audio/image
  turns would add the thinker's hidden states through ``hidden_projection``, not wired here);
- the assistant turn's 9-position head: ``<|im_start|>assistant\\n`` projected, 4 ``tts_pad``, ``tts_bos``, the first
  reply token, each added to the codec ids ``[0, 0, 0, nothink, think_bos, think_eos, speaker, pad, bos]``;
- frame ``t``: the sum of its codes' embeddings (group 0 the talker's, groups 1.. the code predictor's) plus the
  projected reply token ``t + 1`` (then ``tts_eos``, then ``tts_pad``), as ``prepare_inputs_for_generation`` does.

The head's last position predicts frame 0's first code, frame ``t`` predicts frame ``t + 1``'s, the last frame
predicts ``codec_eos``. The loss is the talker's own (``labels`` through its ``forward``). Rows are
``{"text": ..., "codes": [[c0, c1, ...], ...]}`` (the reply spoken back to a user turn holding the same text) or
``{"messages": [...], "codes": ...}`` (the last message is the assistant's reply); one list of
``num_code_groups`` codes per frame; a row may name a ``"speaker"`` (default: the checkpoint's first voice).
Rows with ``"audio"`` need Qwen3-Omni's codec encoder, which transformers does not ship: they are refused with
that message.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swiftcore.api import SwiftcoreError

__all__ = [
    "TalkerResult",
    "CodecScore",
    "codec_accuracy",
    "read_talker_rows",
    "residual_logits",
    "synthetic_voice_rows",
    "talker_batch",
    "train_talker",
]

#: The assistant head's length in upstream's talker input (3 role tokens, 4 pads, bos, first text token).
_HEAD = 9


def read_talker_rows(path: str | Path) -> list[dict[str, Any]]:
    """Read and check a JSONL file of talker rows (see the module docstring).

    Raises:
        SwiftcoreError: a row has no codes, ragged codes, or audio instead of codes (naming file and line).
    """
    rows = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            rows.append(_check_row(json.loads(line), f"{path}:{number}"))
    if not rows:
        raise SwiftcoreError(f"{path}: no talker rows; each line is {{'text': ..., 'codes': [[...], ...]}}")
    return rows


def _check_row(row: Mapping[str, Any], where: str) -> dict[str, Any]:
    if "codes" not in row:
        if "audio" in row:
            raise SwiftcoreError(
                f"{where}: talker rows need 'codes' (codec tokens per frame); an 'audio' file would need Qwen3-Omni's "
                "codec encoder, which transformers does not ship: encode the audio to codes first"
            )
        raise SwiftcoreError(f"{where}: a talker row needs 'codes': a list of frames, each a list of codebook ids")
    if "text" not in row and "messages" not in row:
        raise SwiftcoreError(f"{where}: a talker row needs 'text' (the reply to speak) or 'messages'")
    codes = row["codes"]
    if not codes or len({len(frame) for frame in codes}) != 1:
        raise SwiftcoreError(f"{where}: 'codes' must be a non-empty list of frames of equal length")
    return dict(row)


def _messages(row: Mapping[str, Any]) -> tuple[list[dict[str, Any]], str]:
    if "messages" in row:
        messages = list(row["messages"])
        return messages[:-1], str(messages[-1]["content"])
    return [{"role": "user", "content": row["text"]}], str(row["text"])


def talker_batch(model: Any, tokenizer: Any, row: Mapping[str, Any]) -> dict[str, Any]:
    """The talker's teacher-forced input for one row: ``inputs_embeds``, ``attention_mask``, ``labels``.

    Args:
        model: a ``Qwen3OmniMoeForConditionalGeneration`` with its talker.
        tokenizer: the checkpoint's tokenizer (its chat template renders the prompt).
        row: a talker row (see the module docstring).
    """
    import torch

    config, talker, thinker = model.config, model.talker, model.thinker
    tconfig = config.talker_config
    if getattr(tconfig, "vocab_size", None) is None:
        # The talker's forward reads config.vocab_size for its loss; Qwen3OmniMoeTalkerConfig (transformers 5.19)
        # keeps it on text_config only.
        tconfig.vocab_size = tconfig.text_config.vocab_size
    prompt, reply = _messages(row)
    prompt_ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True)
    if not isinstance(prompt_ids, list):
        prompt_ids = prompt_ids["input_ids"]
    reply_ids = tokenizer.encode(reply, add_special_tokens=False) + [config.im_end_token_id]
    ids = torch.tensor([list(prompt_ids) + reply_ids])
    codes = torch.tensor(row["codes"], dtype=torch.long)  # [frames, groups]
    if codes.shape[1] != tconfig.num_code_groups:
        raise SwiftcoreError(
            f"talker row: frames have {codes.shape[1]} codes, the checkpoint's talker {tconfig.num_code_groups} "
            "(talker_config.num_code_groups)"
        )
    codebook = tconfig.code_predictor_config.vocab_size
    if int(codes.min()) < 0 or int(codes.max()) >= codebook:
        raise SwiftcoreError(
            f"talker row: codes must lie in [0, {codebook}) (talker_config.code_predictor_config.vocab_size), got "
            f"{int(codes.min())}..{int(codes.max())}"
        )
    embed = thinker.get_input_embeddings()
    with torch.no_grad():  # the thinker is frozen: only its embedding table feeds a text-only talker input
        thinker_embed = embed(ids)
        specials = embed(torch.tensor([[config.tts_bos_token_id, config.tts_eos_token_id, config.tts_pad_token_id]]))
    bos, eos, pad = talker.text_projection(specials).chunk(3, dim=1)

    # User turns: every position whose turn's role token is `user` (upstream's user_mask), in order.
    positions = torch.arange(ids.shape[1])
    starts = torch.where(ids[0] == config.im_start_token_id, positions, torch.full_like(positions, -1))
    role = ids[0, (torch.cummax(starts, 0).values.clamp_min(0) + 1).clamp_max(ids.shape[1] - 1)]
    user = talker.text_projection(thinker_embed[:, role == config.user_token_id])

    start = len(prompt_ids) - 3  # "<|im_start|>assistant\n"
    assistant = talker.text_projection(thinker_embed[:, start:])
    head_text = torch.cat((assistant[:, :3], pad.expand(1, 4, -1), bos, assistant[:, 3:4]), dim=1)
    control = [
        tconfig.codec_nothink_id,
        tconfig.codec_think_bos_id,
        tconfig.codec_think_eos_id,
        tconfig.speaker_id[_speaker(tconfig, row)],
        tconfig.codec_pad_id,
        tconfig.codec_bos_id,
    ]
    head_codec = torch.cat(
        (torch.zeros(1, 3, head_text.shape[-1]), talker.get_input_embeddings()(torch.tensor([control]))), dim=1
    )
    trailing = torch.cat((assistant[:, 4:], eos), dim=1)  # reply token t + 1 joins frame t; then tts_eos

    frames = codes.shape[0]
    group_embeds = [talker.get_input_embeddings()(codes[:, 0])]
    group_embeds += [table(codes[:, g]) for g, table in enumerate(talker.code_predictor.get_input_embeddings(), 1)]
    frame_codec = torch.stack(group_embeds).sum(0).unsqueeze(0)  # [1, frames, hidden]
    # One more step after the last frame: its codec_eos, so that the last frame's position is scored on EOS.
    eos_codec = talker.get_input_embeddings()(torch.tensor([[tconfig.codec_eos_token_id]]))
    steps = torch.cat((frame_codec, eos_codec), dim=1)
    text = torch.cat((trailing, pad.expand(1, max(0, steps.shape[1] - trailing.shape[1]), -1)), dim=1)
    steps = steps + text[:, : steps.shape[1]]

    inputs_embeds = torch.cat((user, head_text + head_codec, steps), dim=1)
    # Unshifted labels (the loss shifts them): the token each position holds; the head's is ignored.
    targets = torch.cat((codes[:, 0], torch.tensor([tconfig.codec_eos_token_id])))
    labels = torch.full((1, inputs_embeds.shape[1]), -100, dtype=torch.long)
    labels[0, user.shape[1] + _HEAD :] = targets
    assert labels.shape[1] == user.shape[1] + _HEAD + frames + 1
    return {"inputs_embeds": inputs_embeds, "attention_mask": torch.ones_like(labels), "labels": labels}


def _speaker(tconfig: Any, row: Mapping[str, Any]) -> str:
    voices = dict(tconfig.speaker_id or {})
    name = str(row.get("speaker") or next(iter(voices), "")).lower()
    if name not in voices:
        raise SwiftcoreError(f"talker row: speaker {name!r} is not one of the checkpoint's voices {sorted(voices)}")
    return name


def residual_logits(model: Any, batch: Mapping[str, Any], codes: Any, talker_hidden: Any) -> Any:
    """The code predictor's teacher-forced logits for codebooks ``1..G-1`` of every frame: ``[frames, G - 1, V]``.

    Frame ``t``'s input is what upstream's ``prepare_inputs_for_generation`` gives the code predictor: the talker's
    last hidden state at the position that predicted the frame's first code, then the embeddings of codes
    ``0..G-2`` (code 0 the talker's, the others the predictor's); position ``j`` is read by ``lm_head[j - 1]``.

    Args:
        model: the whole model.
        batch: :func:`talker_batch`'s output for the row.
        codes: the row's codes, ``[frames, groups]`` (a tensor).
        talker_hidden: the talker's last hidden states for ``batch`` (``[1, positions, hidden]``).
    """
    import torch

    talker, predictor = model.talker, model.talker.code_predictor
    groups = codes.shape[1]
    first = int((batch["labels"][0] != -100).nonzero()[0]) - 1  # the position predicting frame 0's first code
    hidden = talker_hidden[0, first : first + codes.shape[0]]
    embeds = [talker.get_input_embeddings()(codes[:, 0])]
    embeds += [predictor.get_input_embeddings()[g - 1](codes[:, g]) for g in range(1, groups - 1)]
    states = predictor.model(inputs_embeds=torch.stack([hidden, *embeds], dim=1)).last_hidden_state
    return torch.stack([predictor.lm_head[j - 1](states[:, j]) for j in range(1, groups)], dim=1)


@dataclass(frozen=True)
class CodecScore:
    """Teacher-forced scores of a talker on rows: the first codebook (EOS included) and the residual ones."""

    first_accuracy: float
    first_loss: float
    residual_accuracy: float
    residual_loss: float


def codec_accuracy(model: Any, tokenizer: Any, rows: Iterable[Mapping[str, Any]]) -> CodecScore:
    """Teacher-forced accuracy and mean loss of the talker (first codebook) and its code predictor (the others)."""
    import torch
    import torch.nn.functional as F

    first = [0, 0, 0.0]  # hits, total, loss sum
    rest = [0, 0, 0.0]
    with torch.no_grad():
        for row in rows:
            batch = talker_batch(model, tokenizer, row)
            out = model.talker(**batch, output_hidden_states=True)
            logits, targets = out.logits[0, :-1], batch["labels"][0, 1:]
            scored = targets != -100
            for acc, lg, tg in (
                (first, logits[scored], targets[scored]),
                (rest, *_residual(model, batch, row, out)),
            ):
                acc[0] += int((lg.argmax(-1) == tg).sum())
                acc[1] += tg.numel()
                acc[2] += float(F.cross_entropy(lg, tg, reduction="sum"))
    return CodecScore(
        first[0] / max(first[1], 1), first[2] / max(first[1], 1), rest[0] / max(rest[1], 1), rest[2] / max(rest[1], 1)
    )


def _residual(model: Any, batch: Mapping[str, Any], row: Mapping[str, Any], out: Any) -> tuple[Any, Any]:
    """``(logits [N, V], targets [N])`` of the code predictor on the row's residual codes."""
    import torch

    codes = torch.tensor(row["codes"], dtype=torch.long)
    logits = residual_logits(model, batch, codes, out.hidden_states[0][-1])
    return logits.reshape(-1, logits.shape[-1]), codes[:, 1:].reshape(-1)


@dataclass
class TalkerResult:
    """What :func:`train_talker` did: per-step losses and where it saved the model."""

    losses: list[float] = field(default_factory=list)
    output_dir: Path | None = None
    model: Any = None


def train_talker(
    model_dir: str | Path,
    rows: list[Mapping[str, Any]],
    output_dir: str | Path | None = None,
    *,
    steps: int = 60,
    learning_rate: float = 3e-3,
    seed: int = 0,
    on_step: Callable[[int, float], None] | None = None,
) -> TalkerResult:
    """Train the talker of ``model_dir`` on ``rows`` with the thinker and Code2Wav frozen.

    Full fine-tuning of the talker (decoder, codec head, text/hidden projections and the code predictor; the loss is
    the talker's own on the first codebook plus the code predictor's on the others) with AdamW, one row per step
    in order (a cycle over ``rows``). The whole model is saved to ``output_dir`` (with the tokenizer), so plain
    transformers and :func:`swiftcore_plugin_qwen3_omni.speech.speak` load it.

    Args:
        model_dir: a Qwen3-Omni checkpoint with its talker.
        rows: talker rows (:func:`read_talker_rows`).
        output_dir: where to save; None keeps the model unsaved (tests).
        steps: optimizer steps.
        learning_rate: AdamW's learning rate.
        seed: torch's seed.
        on_step: called after each optimizer step with the step (from 1) and its loss (``swiftcore train`` logs it).
    """
    import torch
    import transformers

    torch.manual_seed(seed)
    model = transformers.Qwen3OmniMoeForConditionalGeneration.from_pretrained(str(model_dir), dtype=torch.float32)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(model_dir))
    model.requires_grad_(False)
    trained = list(model.talker.parameters())
    for parameter in trained:
        parameter.requires_grad_(True)
    model.talker.train()
    optimizer = torch.optim.AdamW(trained, lr=learning_rate, weight_decay=0.0)
    result = TalkerResult()
    checked = [_check_row(row, f"row {i}") for i, row in enumerate(rows)]
    for step in range(steps):
        row = checked[step % len(checked)]
        batch = talker_batch(model, tokenizer, row)
        out = model.talker(**batch, output_hidden_states=True)
        # The talker's own loss on the first codebook, plus the code predictor's on the others.
        loss = out.loss + torch.nn.functional.cross_entropy(*_residual(model, batch, row, out))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        result.losses.append(float(loss.detach()))
        if on_step is not None:
            on_step(step + 1, result.losses[-1])
    model.eval()
    if output_dir is not None:
        out = Path(output_dir)
        model.save_pretrained(str(out))
        tokenizer.save_pretrained(str(out))
        result.output_dir = out
    result.model = model
    return result


def synthetic_voice_rows(tokenizer: Any, sentences: Iterable[str], groups: int, codebook: int) -> list[dict[str, Any]]:
    """A synthetic voice: each reply token is spoken as one frame whose codes its token id decides.

    Frame ``k`` of a reply is ``[(5 i + 3) % codebook, ... + 7 g ...]`` for the reply's ``k``-th token id ``i``: the
    text determines the codes, so a talker that learned it speaks held-out sentences of the same words right.
    """
    rows = []
    for text in sentences:
        frames = []
        for token in tokenizer.encode(text, add_special_tokens=False):
            first = (5 * token + 3) % codebook
            frames.append([first] + [(first + 7 * g) % codebook for g in range(1, groups)])
        rows.append({"text": text, "codes": frames})
    return rows
