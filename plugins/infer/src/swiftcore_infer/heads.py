"""Serving head checkpoints (embedding, classification, rerankers) through the plugin that made them.

A head checkpoint is a directory holding :data:`HEAD_INFO_FILE` (``swiftcore_head.json``) whose
``task`` (and ``head``, the HeadSpec name, when it differs) names the head. Core never imports a head
plugin: :func:`load_head_engine` looks the :class:`~swiftcore.api.HeadSpec` up in the registry and
calls its lazy ``predictor``, so a third-party head plugin serves the same way::

    engine = load_head_engine("out/emb", plugins)          # task read from the checkpoint
    engine.embed(["a text"], dimensions=64)                 # list[list[float]]

:class:`HeadEngine` is what ``swiftcore infer --task`` and ``swiftcore deploy`` use: it has the
attributes the OpenAI server reads from an engine (``backend``, ``base_dir``, ``adapters``,
``capabilities``) and refuses text generation with a 400 that says what the model is for.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from swiftcore.api import SwiftcoreError
from swiftcore_infer.errors import InvalidRequestError, UnsupportedError

if TYPE_CHECKING:
    from swiftcore.api import PluginSet

__all__ = [
    "HEAD_INFO_FILE",
    "HeadCheckpointError",
    "HeadEngine",
    "find_head_checkpoint",
    "load_head_engine",
    "read_head_info",
]

#: The file that makes a directory a head checkpoint (written by every head's save).
HEAD_INFO_FILE = "swiftcore_head.json"

#: capability each task serves, and the route a client uses for it.
_TASK_CAPABILITY = {
    "embedding": ("embed", "/v1/embeddings"),
    "classification": ("classify", "/v1/classify"),
    "reranker": ("score", "/v1/rerank"),
    "generative_reranker": ("score", "/v1/rerank"),
}


class HeadCheckpointError(SwiftcoreError):
    """A directory is not a head checkpoint, or not the head the user asked for."""


def _checkpoint_step(path: Path) -> int:
    try:
        return int(path.name.rpartition("-")[2])
    except ValueError:
        return -1


def find_head_checkpoint(model_dir: str | Path) -> Path | None:
    """The head checkpoint in ``model_dir``: the directory itself, else its last ``checkpoint-N`` that is one.

    ``swiftcore train --task`` writes heads into ``output_dir/checkpoint-N``, so the output directory
    works as well as a checkpoint. Returns None when neither holds :data:`HEAD_INFO_FILE`.
    """
    root = Path(model_dir)
    if (root / HEAD_INFO_FILE).is_file():
        return root
    steps = [p for p in root.glob("checkpoint-*") if (p / HEAD_INFO_FILE).is_file() and _checkpoint_step(p) >= 0]
    return max(steps, key=_checkpoint_step) if steps else None


def read_head_info(checkpoint_dir: str | Path) -> dict[str, Any]:
    """The checkpoint's ``swiftcore_head.json``.

    Raises:
        HeadCheckpointError: the file is missing, not JSON, or names no ``task``.
    """
    path = Path(checkpoint_dir) / HEAD_INFO_FILE
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise HeadCheckpointError(
            f"{checkpoint_dir}: no {HEAD_INFO_FILE}; not a head checkpoint (train one with `swiftcore train --task`)"
        ) from None
    except ValueError as exc:
        raise HeadCheckpointError(f"{path}: not valid JSON ({exc}); re-save the checkpoint") from exc
    if not isinstance(info, dict) or not isinstance(info.get("task"), str):
        raise HeadCheckpointError(f"{path}: field 'task' is missing; re-save the checkpoint")
    return info


def load_head_engine(
    model_dir: str | Path, plugins: PluginSet, *, task: str | None = None, dtype: str = "float32"
) -> HeadEngine:
    """Load a head checkpoint with the predictor of the HeadSpec that reads it.

    Args:
        model_dir: a head checkpoint, or a training output directory holding ``checkpoint-N`` heads.
        plugins: the loaded plugins.
        task: the task the caller expects (``--task``); None accepts the checkpoint's own.
        dtype: ``float32``, ``bfloat16``, ``float16`` or ``auto``.

    Raises:
        HeadCheckpointError: not a head checkpoint, ``task`` differs from the checkpoint's, or its head
            cannot be served (no ``predictor``).
        UnknownNameError: no loaded plugin provides the head (the message says what to install).
    """
    from swiftcore.api import resolve

    checkpoint = find_head_checkpoint(model_dir)
    if checkpoint is None:
        hint = f" (--task {task} serves the output of `swiftcore train --task {task}`)" if task else ""
        raise HeadCheckpointError(f"{model_dir}: no {HEAD_INFO_FILE} in it or in a checkpoint-N inside it{hint}")
    info = read_head_info(checkpoint)
    if task is not None and task != info["task"]:
        raise HeadCheckpointError(
            f"{checkpoint} holds a {info['task']!r} head, not {task!r}: pass --task {info['task']} or omit --task"
        )
    spec = plugins.registry.get("head", info.get("head") or info["task"])
    if spec.predictor is None:
        raise HeadCheckpointError(
            f"head {spec.name!r} ({spec.provider}) declares no predictor (HeadSpec.predictor); it cannot be served"
        )
    load = resolve(spec.predictor, what=f"predictor of head {spec.name!r} ({spec.provider})")
    return HeadEngine(load(checkpoint, spec=spec, dtype=dtype), spec, checkpoint)


class HeadEngine:
    """A head predictor with the engine attributes the server reads; it serves its task's route only.

    Args:
        predictor: what ``HeadSpec.predictor`` returned (``task``, ``tokenizer``, ``count_tokens`` and
            ``embed`` / ``classify`` / ``score``).
        spec: the HeadSpec.
        checkpoint: the checkpoint directory.

    Attributes:
        head_task: the task (``embedding``, ``classification``, ``reranker``, ``generative_reranker``).
        capabilities: ``{"embed"}``, ``{"classify"}`` or ``{"score"}``.
        route: the OpenAI-server route for the task.
    """

    backend: ClassVar[str] = "head"

    def __init__(self, predictor: Any, spec: Any, checkpoint: Path) -> None:
        self.predictor = predictor
        self.spec = spec
        self.base_dir = Path(checkpoint)
        self.head_task: str = predictor.task
        capability, self.route = _TASK_CAPABILITY.get(self.head_task, ("", ""))
        self.capabilities = frozenset({capability} - {""})
        self.tokenizer = predictor.tokenizer
        self.template = None
        self.adapters: dict[str, Path] = {}
        self.default_adapter: str | None = None

    @property
    def embedding_dim(self) -> int | None:
        """The full embedding width (embedding heads)."""
        return getattr(self.predictor, "embedding_dim", None)

    def _require(self, capability: str) -> None:
        if capability not in self.capabilities:
            raise InvalidRequestError(self.not_for(capability), param="model")

    def not_for(self, what: str) -> str:
        """The message refusing ``what`` (a capability or "chat") on this model."""
        use = f"; send it to {self.route}" if self.route else ""
        article = "an" if self.head_task[:1] in "aeiou" else "a"
        return f"the model at {self.base_dir} is {article} {self.head_task} model: it does not serve {what}{use}"

    def count_tokens(self, texts: Sequence[str]) -> int:
        """Tokens of ``texts`` (for ``usage``)."""
        return int(self.predictor.count_tokens(list(texts)))

    def embed(self, inputs: Sequence[str], *, dimensions: int | None = None) -> list[list[float]]:
        """Embeddings; ``dimensions`` truncates (Matryoshka) and renormalises.

        Raises:
            InvalidRequestError: not an embedding model, token-id inputs, or ``dimensions`` out of range.
        """
        self._require("embed")
        if any(not isinstance(i, str) for i in inputs):
            raise InvalidRequestError("this model embeds text: send 'input' as strings, not token ids", param="input")
        full = self.embedding_dim
        if dimensions is not None and full is not None and not 0 < dimensions <= full:
            raise InvalidRequestError(f"dimensions must be in [1, {full}]", param="dimensions")
        return self.predictor.embed(list(inputs), dimensions=dimensions)

    def classify(self, texts: Sequence[str]) -> list[dict[str, Any]]:
        """One result dict per text (``label``/``probabilities``, ``labels``, or ``value``)."""
        self._require("classify")
        return self.predictor.classify(list(texts))

    def score(self, query: str, documents: Sequence[str]) -> list[float]:
        """Relevance of each document to ``query``, in the documents' order (higher = more relevant)."""
        self._require("score")
        return [float(s) for s in self.predictor.score(query, list(documents))]

    def rerank(self, query: str, documents: Sequence[str], top_n: int | None = None) -> list[tuple[int, float]]:
        """``(index, score)`` of the documents, most relevant first, the first ``top_n`` of them."""
        scores = self.score(query, documents)
        order = sorted(range(len(scores)), key=lambda i: -scores[i])
        return [(i, scores[i]) for i in order[: top_n if top_n is not None else len(order)]]

    # What a generation engine has: refused, so a misrouted request gets a 400 that says why.
    def generate_requests(self, requests: Sequence[Any], *, batch_size: int = 8) -> list[Any]:
        """Refused: a head model does not generate text."""
        raise InvalidRequestError(self.not_for("chat or completions"), param="model")

    def stream_many(self, requests: Sequence[Any]) -> Any:
        """Refused: a head model does not generate text."""
        raise InvalidRequestError(self.not_for("chat or completions"), param="model")

    def load_adapter(self, name: str, path: str | Path) -> None:
        """Refused: serve a head with its adapters merged (``swiftcore train --task`` saves it merged)."""
        raise UnsupportedError(f"{self.head_task} head checkpoints are served merged; --lora is not supported")

    def close(self) -> None:
        """Nothing to release (the model is freed with the engine)."""
