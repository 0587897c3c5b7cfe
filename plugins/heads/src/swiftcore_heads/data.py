"""Head datasets: validate rows, turn them into token ids, and collate groups of texts into one batch.

Rows (jsonl / json / parquet / HF datasets, read with swiftcore's readers):

- classification: ``{"text": str, "label": int | float | list}`` or ``{"messages": [...], "label": ...}``.
- embedding: ``{"query": str, "positive": str, "negatives": [str, ...]}`` (negatives optional), or
  ``{"messages": [user turn, assistant turn], "negatives": [...]}`` (the user turn is the query, the
  assistant turn the positive); with ``--loss cosine_similarity|contrastive``:
  ``{"query", "positive" | "document", "label"}``.
- reranker / generative_reranker: ``{"query", "positive", "negatives"}`` (listwise or pointwise), or
  ``{"query", "document", "label"}`` (pointwise).

Every row is checked before the model is loaded; a bad row raises :class:`swiftcore_data.errors.DataError`
naming the file, line and field.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from swiftcore_data import DataError

__all__ = [
    "Example",
    "parse_rows",
    "load_examples",
    "encode_examples",
    "pair_text",
    "generative_prompt",
    "GroupCollator",
    "DEFAULT_INSTRUCTION",
]

log = logging.getLogger("swiftcore.heads")

DEFAULT_INSTRUCTION = "Given a query, retrieve relevant passages that answer the query"
_JUDGE_SYSTEM = (
    "Judge whether the Document meets the requirements based on the Query and the Instruct provided. "
    'Note that the answer can only be "yes" or "no".'
)


@dataclass
class Example:
    """One validated row: the texts a step encodes and its target.

    Attributes:
        texts: classification: ``[text]``; embedding / reranker: ``[query, positive, *negatives]`` or
            ``[query, document]`` for labelled pairs.
        label: the class / value / multi-hot list (classification), similarity (pairs), or None (groups).
        where: ``file:line`` of the row.
    """

    texts: list[str]
    label: Any = None
    where: str = "?"
    ids: list[list[int]] = field(default_factory=list)


def _text(row: dict, key: str, where: str) -> str:
    value = row.get(key)
    if not isinstance(value, str) or not value:
        raise DataError(where, key, f"expected a non-empty string, got {value!r}")
    return value


def _from_messages(row: dict, where: str) -> tuple[str, str | None]:
    messages = row.get("messages")
    if not isinstance(messages, list) or not messages:
        raise DataError(where, "messages", "expected a non-empty list of {'role', 'content'} turns")
    users = [m.get("content") for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    answers = [m.get("content") for m in messages if isinstance(m, dict) and m.get("role") == "assistant"]
    if not users or not isinstance(users[0], str):
        raise DataError(where, "messages", "needs a user turn with string content (the query)")
    return users[0], answers[0] if answers and isinstance(answers[0], str) else None


def _negatives(row: dict, where: str) -> list[str]:
    negatives = row.get("negatives", [])
    if not isinstance(negatives, list) or not all(isinstance(n, str) and n for n in negatives):
        raise DataError(where, "negatives", "expected a list of non-empty strings")
    return negatives


def _classification(row: dict, where: str, num_labels: int, problem_type: str) -> Example:
    if "text" in row:
        text = _text(row, "text", where)
    else:
        query, answer = _from_messages(row, where)
        text = query if answer is None else f"{query}\n{answer}"
    if "label" not in row:
        raise DataError(where, "label", "missing; add the class index (or value, or list of 0/1)")
    label = row["label"]
    if problem_type == "single_label_classification":
        if isinstance(label, bool) or not isinstance(label, int) or not 0 <= label < num_labels:
            raise DataError(where, "label", f"{label!r} is not a class index in [0, {num_labels}); check --num-labels")
    elif problem_type == "multi_label_classification":
        if not isinstance(label, list) or len(label) != num_labels or not all(v in (0, 1) for v in label):
            raise DataError(where, "label", f"{label!r} must be a list of {num_labels} values 0/1 (multi-label)")
    elif not isinstance(label, int | float) or isinstance(label, bool):
        raise DataError(where, "label", f"{label!r} must be a number (regression)")
    return Example([text], label, where)


def _grouped(row: dict, where: str, task: str, loss: str) -> Example:
    if "messages" in row and "query" not in row:
        query, positive = _from_messages(row, where)
    else:
        query, positive = _text(row, "query", where), None
    pair_loss = loss in ("cosine_similarity", "contrastive", "pointwise")
    if "label" in row and pair_loss:
        doc_key = "document" if "document" in row else "positive"
        label = row["label"]
        if not isinstance(label, int | float) or isinstance(label, bool):
            raise DataError(where, "label", f"{label!r} must be a number (1 relevant, 0 not)")
        return Example([query, _text(row, doc_key, where)], float(label), where)
    if positive is None:
        positive = _text(row, "positive", where)
    negatives = _negatives(row, where)
    if loss in ("listwise",) and not negatives:
        raise DataError(
            where,
            "negatives",
            f"the listwise {task} loss needs at least one negative per row; add 'negatives' or use --loss pointwise",
        )
    if pair_loss and loss != "pointwise":
        raise DataError(where, "label", f"--loss {loss} needs labelled pairs: {{'query', 'document', 'label'}}")
    return Example([query, positive, *negatives], None, where)


def parse_rows(rows: Iterable[tuple[str, Any]], task: str, cfg: Any) -> list[Example]:
    """Validate ``(where, row)`` pairs into examples for ``task`` (see the module docstring for the forms).

    Raises:
        DataError: the first bad row (file, line, field, what to do).
    """
    examples = []
    for where, row in rows:
        if isinstance(row, Exception):
            raise row
        if not isinstance(row, dict):
            raise DataError(where, None, f"expected a JSON object, got {type(row).__name__}")
        if task == "classification":
            examples.append(_classification(row, where, cfg.num_labels, cfg.problem_type))
        else:
            examples.append(_grouped(row, where, task, cfg.loss))
    if not examples:
        raise DataError(", ".join(cfg.dataset) or "--dataset", None, "no rows")
    return _even_groups(examples)


def _even_groups(examples: list[Example]) -> list[Example]:
    """Cut every group to the smallest number of negatives: a batch of groups must be rectangular."""
    grouped = [e for e in examples if e.label is None and len(e.texts) >= 2]
    if not grouped:
        return examples
    smallest = min(len(e.texts) for e in grouped)
    cut = sum(1 for e in grouped if len(e.texts) > smallest)
    if cut:
        log.info("using %d negative(s) per row (the fewest any row has); %d row(s) cut", smallest - 2, cut)
        for e in grouped:
            del e.texts[smallest:]
    return examples


def load_examples(sources: Sequence[str], task: str, cfg: Any) -> list[Example]:
    """Read ``--dataset`` arguments with swiftcore's readers and validate them for ``task``."""
    from swiftcore_data import iter_rows, parse_dataset_arg

    rows: list[tuple[str, Any]] = []
    for arg in sources:
        rows.extend(iter_rows(parse_dataset_arg(arg)))
    return parse_rows(rows, task, cfg)


def pair_text(query: str, document: str) -> str:
    """The single text a cross-encoder reranker reads for a (query, document) pair."""
    return f"Query: {query}\nDocument: {document}"


def generative_prompt(tokenizer: Any, query: str, document: str, instruction: str | None = None) -> str:
    """The Qwen3-Reranker prompt, rendered with the model's own chat template up to the answer."""
    messages = [
        {"role": "system", "content": _JUDGE_SYSTEM},
        {
            "role": "user",
            "content": f"<Instruct>: {instruction or DEFAULT_INSTRUCTION}\n<Query>: {query}\n<Document>: {document}",
        },
    ]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, enable_thinking=False)


def texts_to_ids(tokenizer: Any, texts: Sequence[str], max_length: int, *, templated: bool = False) -> list[list[int]]:
    """Token ids of ``texts`` as sentence-transformers tokenizes them (special tokens unless already templated)."""
    if templated:
        # A rendered prompt ends with the answer position the score is read at: cut from the left instead.
        enc = tokenizer(list(texts), add_special_tokens=False)
        return [list(ids)[-max_length:] for ids in enc["input_ids"]]
    enc = tokenizer(list(texts), add_special_tokens=True, truncation=True, max_length=max_length)
    return [list(ids) for ids in enc["input_ids"]]


def model_texts(task: str, texts: Sequence[str], tokenizer: Any, instruction: str | None = None) -> list[str]:
    """What the model reads for one example: the texts as is, or (query, document) pairs joined per task."""
    if task in ("classification", "embedding"):
        return list(texts)
    query, docs = texts[0], texts[1:]
    if task == "reranker":
        return [pair_text(query, d) for d in docs]
    return [generative_prompt(tokenizer, query, d, instruction) for d in docs]


def encode_examples(examples: list[Example], task: str, tokenizer: Any, cfg: Any) -> list[Example]:
    """Fill ``example.ids`` with the token ids of what the model reads for each example."""
    templated = task == "generative_reranker"
    for e in examples:
        e.ids = texts_to_ids(
            tokenizer,
            model_texts(task, e.texts, tokenizer, cfg.reranker_instruction),
            cfg.max_length,
            templated=templated,
        )
    return examples


@dataclass
class GroupCollator:
    """Collate examples into one batch of texts, padded (left or right) or packed (padding-free).

    Text order in the batch: for embedding, every query first, then each query's documents in turn
    (positive first); otherwise each example's texts in turn. Extra keys (not model inputs):
    ``labels`` (always present, so the Trainer evaluates), ``n_groups`` and ``group_size``.
    """

    task: str
    pad_token_id: int
    padding_free: bool = False
    padding_side: str = "right"

    def __call__(self, examples: Sequence[Any]) -> dict[str, Any]:
        """Collate ``examples`` (see the class docstring)."""
        import torch
        from swiftcore_data import PaddingCollator, PaddingFreeCollator

        ids = [e.ids for e in examples]
        if self.task == "embedding" and all(e.label is None for e in examples):
            flat = [group[0] for group in ids] + [doc for group in ids for doc in group[1:]]
        else:
            flat = [t for group in ids for t in group]
        samples = [{"input_ids": t} for t in flat]
        if self.padding_free:
            batch = PaddingFreeCollator()(samples)
            batch.pop("labels", None)
            batch.pop("use_cache", None)
        else:
            batch = PaddingCollator(self.pad_token_id, padding_side=self.padding_side)(samples)
        labels = [e.label if e.label is not None else 0 for e in examples]
        is_float = any(isinstance(v, float) for v in labels) or isinstance(labels[0], list)
        batch["labels"] = torch.tensor(labels, dtype=torch.float if is_float else torch.long)
        batch["n_groups"] = len(examples)
        batch["group_size"] = len(ids[0])
        return batch
