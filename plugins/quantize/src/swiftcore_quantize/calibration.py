"""Calibration samples for ``--quantize``: token ids of a swiftcore dataset, encoded by the model's template exactly
as ``swiftcore train`` encodes it (the same :class:`~swiftcore.api.template.SampleEncoder`), or of the bundled
default set when no ``--calibration-dataset`` is given."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

from swiftcore.api import SwiftcoreError

__all__ = ["DEFAULT_DATASET", "calibration_ids", "default_dataset_path"]

#: The bundled calibration set: short general chat records (instructions, facts, code, arithmetic).
DEFAULT_DATASET = "calibration.jsonl"


def default_dataset_path() -> Path:
    """The path of the bundled default calibration dataset (a chat-format jsonl)."""
    return Path(str(resources.files("swiftcore_quantize") / "data" / DEFAULT_DATASET))


def calibration_ids(
    model_dir: str, spec: Any, plugins: Any, dataset: str | None, num_samples: int, max_length: int
) -> list[list[int]]:
    """Up to ``num_samples`` token-id lists of ``dataset`` (a ``--dataset`` value; None: the bundled set), each
    encoded with the template a checkpoint was trained with (its manifest) or its model's default template,
    truncated on the right to ``max_length`` tokens.

    Raises:
        SwiftcoreError: the model has no template to encode with, or no record could be encoded.
    """
    from swiftcore_data import load_records, parse_dataset_arg

    from swiftcore.api.models import load_tokenizer, manifest_template, read_manifest
    from swiftcore.api.template import SampleEncoder, get_template

    name = manifest_template(read_manifest(model_dir), plugins) or (spec.default_template if spec else None)
    if not name:
        raise SwiftcoreError(
            f"{model_dir}: no template to encode calibration data with (no swiftcore model spec or manifest names "
            "one); install the model's family plugin, or quantize with a scheme that needs no calibration (fp8)"
        )
    source = dataset or str(default_dataset_path())
    records = list(load_records([parse_dataset_arg(source)], seed=0))[:num_samples]
    # Calibration needs every token the model sees in use, so the loss policy is irrelevant; "all" keeps records
    # whose assistant turn is empty from being dropped as carrying no loss.
    samples = SampleEncoder(get_template(name, plugins), load_tokenizer(model_dir)).train_samples(
        records, loss_policy="all", max_length=max_length, truncation="truncate_right", desc="encoding calibration"
    )
    ids = [list(s["input_ids"]) for s in samples][:num_samples]
    if not ids:
        raise SwiftcoreError(f"--calibration-dataset {source}: no record could be encoded for calibration")
    return ids
