"""Test helpers for templates: a small local tokenizer carrying a family's special tokens.

Nothing is downloaded: a byte-level BPE is trained in a fraction of a second on the given texts, and
the special tokens are added as special (never split) tokens, so token-level checks see the same
special-token boundaries a real checkpoint's tokenizer has.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from swiftcore.api.template import generation_record

__all__ = [
    "build_test_tokenizer",
    "OffsetsOnlyTokenizer",
    "check_labels",
    "check_train_serve_prefix",
    "compare_fast_and_slow",
    "compare_with_official",
    "generation_record",
    "load_records",
    "loss_runs",
]


def build_test_tokenizer(
    special_tokens: Iterable[str],
    texts: Iterable[str] = (),
    vocab_size: int = 600,
    chat_template: str | None = None,
    eos_token: str | None = None,
) -> Any:
    """A ``PreTrainedTokenizerFast`` (byte-level BPE) trained on ``texts`` with ``special_tokens``.

    Args:
        special_tokens: the family's special tokens (from its :class:`~swiftcore.api.TemplateSpec`).
        texts: training text (e.g. rendered conversations); a little English is always added.
        vocab_size: BPE vocabulary size.
        chat_template: stored as the tokenizer's ``chat_template``.
        eos_token: the tokenizer's eos token.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    special = list(dict.fromkeys(special_tokens))
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=special,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    corpus = [*texts, "The quick brown fox jumps over the lazy dog.\nHello, world! 1234567890"]
    tok.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=eos_token)
    fast.add_special_tokens({"additional_special_tokens": special})
    if chat_template is not None:
        fast.chat_template = chat_template
    return fast


def loss_runs(input_ids: list[int], labels: list[int], tokenizer: Any) -> list[str]:
    """The decoded text of each contiguous run of loss-carrying tokens (for readable assertions)."""
    runs: list[list[int]] = []
    previous = False
    for token, label in zip(input_ids, labels, strict=False):
        if label != -100:
            if not previous:
                runs.append([])
            runs[-1].append(token)
        previous = label != -100
    return [tokenizer.decode(run) for run in runs]


def load_records(path: str | Path) -> list[dict[str, Any]]:
    """Read a JSONL file of records."""
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


def compare_with_official(
    template: Any, chat_template: str, records: Iterable[Mapping[str, Any]], extra: Mapping[str, Any] | None = None
) -> tuple[int, int, list[str]]:
    """Render every record in full and generation-prompt mode with ``template`` and with the official
    Jinja (through transformers), on the normalised record.

    Returns:
        ``(rendered, raised, failures)``: how many cases rendered equal, how many raised on both
        sides, and a readable description of each case that differs.
    """
    from swiftcore.api.template import TemplateError, normalize_record, render_official

    rendered = raised = 0
    failures: list[str] = []
    for record in records:
        for gen in (False, True):
            case = generation_record(record) if gen else dict(record)
            where = f"{record.get('id')} ({'generation prompt' if gen else 'full'})"
            try:
                expected, expected_error = (
                    render_official(chat_template, normalize_record(case), gen, extra=extra),
                    None,
                )
            except Exception as exc:  # whatever the official template raises
                expected, expected_error = None, f"{type(exc).__name__}: {exc}"
            try:
                got, error = template.render(case, add_generation_prompt=gen), None
            except TemplateError as exc:
                got, error = None, str(exc)
            if expected_error and error:
                raised += 1
            elif expected == got and not expected_error and not error:
                rendered += 1
            else:
                failures.append(
                    f"{where}:\n  official: {expected!r}{' raised ' + expected_error if expected_error else ''}"
                    f"\n  swiftcore: {got!r}{' raised ' + error if error else ''}"
                )
    return rendered, raised, failures


def reply_prompt_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """The record cut before its reply: the messages up to and including the last user message (what an
    inference request for that reply holds)."""
    messages = list(record["messages"])
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    return {**record, "messages": messages[: last_user + 1]}


def check_train_serve_prefix(
    template: Any, tokenizer: Any, records: Iterable[Mapping[str, Any]]
) -> tuple[int, list[str]]:
    """The train/serve rule, token for token: for each record that ends in a reply (assistant turns after
    the last user message) the training encoding's ids before the reply's first loss token equal the
    inference prompt's ids (the record cut before the reply, encoded with ``add_generation_prompt`` in the
    thinking mode the reply is trained in). A template with a thinking switch is checked in both modes:
    each plain reply also in its thinking form (with reasoning added), so a record's mode and its reply
    agree (a reply forced into thinking mode without reasoning is a contradiction no prompt can serve).

    Returns:
        ``(checked, failures)`` with a readable description of each failure.
    """
    from swiftcore.api.template import TemplateError

    checked = 0
    failures: list[str] = []
    for record in records:
        messages = record.get("messages") or []
        if not messages or messages[-1].get("role") != "assistant":
            continue
        cases = [("as given", dict(record))]
        if template.thinking_switch and not (messages[-1].get("reasoning_content") or messages[-1].get("reasoning")):
            thought = {**messages[-1], "reasoning_content": "Let me think about it."}
            cases.append(("thinking form", {**record, "messages": [*messages[:-1], thought]}))
        for label, case in cases:
            try:
                trained = template.encode(tokenizer, case, loss_policy="last_round")
                trained_mode = template.thinking_mode(case)
                request = reply_prompt_record(case)
                if trained_mode is not None:
                    request["chat_template_kwargs"] = {
                        **(case.get("chat_template_kwargs") or {}),
                        "enable_thinking": trained_mode,
                    }
                served = template.encode(tokenizer, request, add_generation_prompt=True)
            except TemplateError:
                continue
            first = next((i for i, label_id in enumerate(trained.labels) if label_id != -100), None)
            if first is None:
                continue
            checked += 1
            if trained.input_ids[:first] != served.input_ids:
                where = f"{record.get('id')} ({label}, enable_thinking={trained_mode})"
                failures.append(
                    f"{where}: the reply is trained after {tokenizer.decode(trained.input_ids[:first])[-80:]!r} "
                    f"but inference prompts {tokenizer.decode(served.input_ids)[-80:]!r}"
                )
    return checked, failures


def check_labels(
    template: Any, tokenizer: Any, records: Iterable[Mapping[str, Any]], end_of_turn: str, forbidden: Iterable[str] = ()
) -> tuple[int, list[str]]:
    """Token-level checks on every record the template renders.

    Checks that ``input_ids`` equal ``tokenizer(text, add_special_tokens=False)``, that there is one loss
    run per assistant message, that each run ends with ``end_of_turn`` and holds that message's text
    content, and that no run contains a ``forbidden`` string (e.g. a turn-start token).

    Returns:
        ``(checked, failures)`` with a readable description of each failure.
    """
    from swiftcore.api.template import TemplateError

    checked = 0
    failures: list[str] = []
    for record in records:
        try:
            enc = template.encode(tokenizer, record)
        except TemplateError:
            continue
        checked += 1
        where = record.get("id")
        expected_ids = tokenizer(enc.text, add_special_tokens=False)["input_ids"]
        if enc.input_ids != expected_ids:
            failures.append(f"{where}: input_ids differ from tokenizer(text)")
        runs = loss_runs(enc.input_ids, enc.labels, tokenizer)
        answers = [m for m in record["messages"] if m.get("role") == "assistant"]
        if len(runs) != len(answers):
            failures.append(f"{where}: {len(answers)} assistant turns but {len(runs)} loss runs: {runs!r}")
            continue
        for run, answer in zip(runs, answers, strict=False):
            content = answer.get("content")
            text = content if isinstance(content, str) else ""
            if not run.endswith(end_of_turn) or text.strip() not in run:
                failures.append(f"{where}: loss run {run!r} is not assistant content {text!r} + {end_of_turn!r}")
            bad = [f for f in forbidden if f in run]
            if bad:
                failures.append(f"{where}: loss run {run!r} contains {bad!r}")
    return checked, failures


class OffsetsOnlyTokenizer:
    """A tokenizer that hides its Rust backend, so encoding takes the reference path.

    the template engine's ``tokenize`` then calls the tokenizer with
    ``return_offsets_mapping=True`` and maps span boundaries by bisecting every token's start offset,
    the rule the fast path (``char_to_token`` on boundaries only) must reproduce.
    """

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._tokenizer(*args, **kwargs)

    @property
    def eos_token(self) -> Any:
        """The wrapped tokenizer's EOS: the encoder reads it to close a last reply that renders no stop."""
        return self._tokenizer.eos_token

    def get_added_vocab(self) -> dict[str, int]:
        """The wrapped tokenizer's added tokens (which stop words are single special tokens)."""
        return self._tokenizer.get_added_vocab()


def compare_fast_and_slow(
    template: Any,
    tokenizer: Any,
    records: Iterable[Mapping[str, Any]],
    loss_policies: Iterable[str] = ("all_assistant", "last_round"),
) -> tuple[int, list[str]]:
    """Encode every record the template renders with the fast path and the reference path; compare.

    Args:
        template: the template.
        tokenizer: a fast (Rust-backed) tokenizer.
        records: the records (those the template refuses are skipped).
        loss_policies: the loss policies to compare under.

    Returns:
        ``(compared, failures)``: how many samples were compared and a description of each difference
        in ``input_ids``, ``labels`` or media positions.
    """
    from swiftcore.api.template import TemplateError

    usable = []
    for record in records:
        try:
            template.render(record)
        except TemplateError:
            continue
        usable.append(record)
    slow_tokenizer = OffsetsOnlyTokenizer(tokenizer)
    failures: list[str] = []
    for policy in loss_policies:
        fast = template.encode_batch(tokenizer, usable, loss_policy=policy)
        slow = template.encode_batch(slow_tokenizer, usable, loss_policy=policy)
        for record, a, b in zip(usable, fast, slow, strict=True):
            for what in ("input_ids", "labels", "media", "text"):
                if getattr(a, what) != getattr(b, what):
                    failures.append(
                        f"{record.get('id')} ({policy}): {what} differ between the fast and the "
                        f"reference path:\n  fast: {getattr(a, what)!r}\n  slow: {getattr(b, what)!r}"
                    )
    return len(usable), failures
