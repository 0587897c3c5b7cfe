"""Test helpers: an untrained head checkpoint on a tiny backbone, written in seconds (no training run).

::

    from swiftcore_heads.testing import make_head_checkpoint

    ckpt = make_head_checkpoint(tiny_dir, "embedding", tmp / "emb", plugins)
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from swiftcore.api import PluginSet

__all__ = ["make_head_checkpoint"]


def make_head_checkpoint(
    model_dir: str | Path, task: str, out_dir: str | Path, plugins: PluginSet, *, seed: int = 0, **options: Any
) -> Path:
    """Put ``task``'s head (from the registry) on the backbone in ``model_dir`` and save it to ``out_dir``.

    Args:
        model_dir: a tiny backbone checkpoint (``swiftcore make-tiny``).
        task: the head's name (``embedding``, ``classification``, ``reranker``, ``generative_reranker``).
        out_dir: where the head checkpoint is written.
        plugins: the loaded plugins (the backbone's model plugin and swiftcore-heads).
        seed: seeds the new score layer.
        **options: :func:`swiftcore_heads.factory.build_head` options (``num_labels``, ``pooling`` ...) and
            ``id2label`` (class names recorded for classification).

    Returns:
        ``out_dir``, a checkpoint :func:`swiftcore_heads.save.load_head_model` and ``swiftcore infer`` load.
    """
    import torch

    from swiftcore.api import resolve
    from swiftcore.api.models import load_model, load_tokenizer, resolve_model_spec

    id2label = options.pop("id2label", None)
    model_spec = resolve_model_spec(str(model_dir), plugins)
    spec = plugins.registry.get("head", task)
    torch.manual_seed(seed)
    backbone = load_model(model_spec, str(model_dir), plugins).eval()
    factory = resolve(spec.factory, what=f"factory of head {task!r}")
    head = factory(backbone, spec=spec, tokenizer=load_tokenizer(str(model_dir)), model_spec=model_spec, **options)
    if id2label:
        head.head_info["id2label"] = {str(k): v for k, v in dict(id2label).items()}
    return head.save_pretrained(str(out_dir))
