"""Quantizing a head checkpoint (``swiftcore train --task ...`` of swiftcore-heads): what is kept, and the
calibration texts, read as the head reads them.

A head checkpoint carries ``swiftcore_head.json`` (task and format). Its backbone is quantized like a causal LM's
decoder; the head's own layer stays in full precision:

- ``classification`` / ``reranker`` saved as ``*ForSequenceClassification``: the ``score`` Linear is ignored;
- saved as decoder + ``score.safetensors``: the decoder is quantized, ``score.safetensors`` copied unchanged;
- ``embedding`` (sentence-transformers): the decoder only (pooling and normalisation have no weights);
- ``generative_reranker`` (a causal LM): its ``lm_head`` rows are the scores, kept as any output head is.

The quantized checkpoint loads through swiftcore-heads' normal path (``load_head_model``: transformers'
``AutoModel*`` classes, which decompress compressed-tensors). Nothing here imports torch until a function runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from swiftcore.api import SwiftcoreError

__all__ = [
    "HEAD_FILE", "head_calibration_ids", "head_ignore", "head_kept_files", "mark_dequantize_on_load", "read_head",
]  # fmt: skip

#: The file every head checkpoint carries (swiftcore-heads' ``HEAD_FILE``; read here without importing it).
HEAD_FILE = "swiftcore_head.json"
#: Head formats this export quantizes (swiftcore-heads' ``FORMATS``); any other is refused by name.
_FORMATS = (
    "sentence-transformers", "transformers-sequence-classification", "swiftcore-score", "transformers-causal-lm",
)  # fmt: skip
#: Text fields of head rows (swiftcore-heads' data forms) and of chat rows, in the order a row reads.
_TEXT_FIELDS = ("text", "query", "positive", "document")


def read_head(model_dir: Path) -> dict[str, Any] | None:
    """The checkpoint's ``swiftcore_head.json``, or None when it is no head checkpoint.

    Raises:
        SwiftcoreError: the head's format is one this export cannot quantize.
    """
    path = model_dir / HEAD_FILE
    if not path.is_file():
        return None
    info = json.loads(path.read_text(encoding="utf-8"))
    if info.get("format") not in _FORMATS:
        raise SwiftcoreError(
            f"{model_dir}: head format {info.get('format')!r} in {HEAD_FILE} cannot be quantized (known: "
            f"{', '.join(_FORMATS)}); save the head with a current swiftcore-heads and export again"
        )
    return info


def head_ignore(info: dict[str, Any]) -> list[str]:
    """The head's own layer, kept in full precision (llm-compressor ``re:`` syntax); the output head of a
    generative reranker is already in every export's default ignore list."""
    if info["format"] == "transformers-sequence-classification":
        return [r"re:(?:.*\.)?score$"]
    return []


def head_kept_files(info: dict[str, Any]) -> tuple[str, ...]:
    """Weight files of the head that the export copies unchanged (not rewritten by ``save_pretrained``)."""
    return ("score.safetensors",) if info["format"] == "swiftcore-score" else ()


def mark_dequantize_on_load(config_file: Path) -> None:
    """Ask transformers to dequantize the weights when it loads the checkpoint (``"dequantize": true`` in its
    compressed-tensors ``quantization_config``, read by ``CompressedTensorsConfig``).

    Without it, transformers leaves the weights compressed and decompresses them in a hook on the loaded model's own
    forward; swiftcore-heads runs the decoder inside it (``seq.model``, ``lm.get_decoder()``) and the score layer
    beside it, so that hook never fires and the first int8 matmul fails ("expected m1 and m2 to have the same dtype").
    """
    config = json.loads(config_file.read_text(encoding="utf-8"))
    config["quantization_config"]["dequantize"] = True
    config_file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _row_texts(row: Any) -> list[str]:
    """A row's texts in reading order: head rows' fields, or a chat row's message contents."""
    if not isinstance(row, dict):
        return []
    if isinstance(row.get("messages"), list):
        return [m["content"] for m in row["messages"] if isinstance(m, dict) and isinstance(m.get("content"), str)]
    texts = [row[k] for k in _TEXT_FIELDS if isinstance(row.get(k), str)]
    return texts + [n for n in row.get("negatives") or () if isinstance(n, str)]


def head_calibration_ids(
    model_dir: str, info: dict[str, Any], dataset: str, num_samples: int, max_length: int
) -> list[list[int]]:
    """Up to ``num_samples`` token-id lists of what the head reads for the rows of ``dataset`` (a ``--dataset``
    value): each text tokenized as swiftcore-heads tokenizes it, a reranker's (query, document) pairs joined as it
    joins them (its ``model_texts`` / ``texts_to_ids``).

    Raises:
        SwiftcoreError: swiftcore-heads is not installed, or no row holds a text.
    """
    try:
        from swiftcore_heads import model_texts, texts_to_ids
    except ImportError:
        raise SwiftcoreError(
            f"{model_dir} is a head checkpoint ({HEAD_FILE}): install swiftcore-heads to calibrate on what the head "
            "reads (pip install ./plugins/heads)"
        ) from None
    from swiftcore_data import iter_rows, parse_dataset_arg

    from swiftcore.api.models import load_tokenizer

    tokenizer = load_tokenizer(model_dir)
    task, texts = info["task"], []
    for _where, row in iter_rows(parse_dataset_arg(dataset)):
        row_texts = _row_texts(row)
        if task in ("reranker", "generative_reranker") and len(row_texts) >= 2:
            row_texts = model_texts(task, row_texts, tokenizer, info.get("instruction"))
        texts.extend(row_texts)
        if len(texts) >= num_samples:
            break
    if not texts:
        raise SwiftcoreError(f"--calibration-dataset {dataset}: no row holds a text for the {task} head to read")
    templated = task == "generative_reranker"
    return [ids for ids in texts_to_ids(tokenizer, texts[:num_samples], max_length, templated=templated) if ids]
