"""``--model`` before an engine is built: a directory that is no Hugging Face checkpoint is offered to the plugins
(``swiftcore_infer_prepare_checkpoint``, :mod:`swiftcore_infer.hookspecs`), which may return one they made from it.

swiftcore-infer names no format here but Megatron-LM's own tracker file, only to say what to install when no plugin
converts such a directory; the conversion is the plugin's (swiftcore-megatron). Nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from swiftcore.api import SwiftcoreError

if TYPE_CHECKING:
    from swiftcore.api import PluginSet

__all__ = ["prepare_model_dir"]

#: What a Hugging Face model or peft adapter directory holds: such a directory is served as it is.
_HF_FILES = ("config.json", "adapter_config.json")
#: Megatron-LM's checkpoint tracker; ``mcore/`` is where ``swiftcore train --engine megatron`` keeps its shards.
_MEGATRON_MARKERS = ("latest_checkpointed_iteration.txt", "mcore/latest_checkpointed_iteration.txt")


def prepare_model_dir(plugins: PluginSet, model_dir: str, echo: Callable[[str], None] = print) -> str:
    """The directory to build the engine from: ``model_dir`` itself when it is a Hugging Face checkpoint, else the
    one a plugin's ``swiftcore_infer_prepare_checkpoint`` returns for it.

    Args:
        plugins: the loaded plugin set.
        model_dir: the ``--model`` directory.
        echo: where a plugin's progress line goes.

    Returns:
        ``model_dir``, or the Hugging Face checkpoint a plugin materialised from it.

    Raises:
        SwiftcoreError: ``model_dir`` is a Megatron checkpoint and no loaded plugin converts it (the message says
            what to install), or a plugin refused it (incomplete or damaged).
    """
    path = Path(model_dir)
    if not path.is_dir() or any((path / name).is_file() for name in _HF_FILES):
        return model_dir
    hook = getattr(plugins.pm.hook, "swiftcore_infer_prepare_checkpoint", None)  # None: swiftcore-infer not loaded
    prepared = hook(model_dir=str(path), plugins=plugins, echo=echo) if hook is not None else None
    if prepared is not None:
        return str(prepared)
    marker = next((name for name in _MEGATRON_MARKERS if (path / name).is_file()), None)
    if marker is not None:
        raise SwiftcoreError(
            f"--model {model_dir!r} is a Megatron checkpoint ({marker}) and no installed plugin converts it for "
            "serving: install swiftcore-megatron and the Megatron bridge plugin of its model family (it serves what "
            "`swiftcore train --engine megatron` and `swiftcore export --to-mcore` write), or pass a Hugging Face "
            "checkpoint (`swiftcore export --model DIR --to-hf OUT`)"
        )
    return model_dir
