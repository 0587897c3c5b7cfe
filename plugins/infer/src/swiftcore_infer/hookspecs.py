"""The hooks swiftcore-infer declares: plugins that turn a checkpoint it cannot load into one it can.

Declared through the core's ``swiftcore_addhooks`` (:mod:`swiftcore_infer.plugin`), in swiftcore's pluggy project, so a
plugin implements them with ``@swiftcore.api.hookimpl`` in its plugin module like any core hook. A plugin that does
not depend on swiftcore-infer marks its implementation ``@hookimpl(optionalhook=True)``, so that it still loads where
swiftcore-infer is not installed. Called by :func:`swiftcore_infer.checkpoints.prepare_model_dir`, which
``build_engine`` (``infer``, ``deploy``, ``eval``, the Web-UI) runs on ``--model``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from swiftcore.api import hookspec

if TYPE_CHECKING:
    from swiftcore.api import PluginSet

__all__ = ["swiftcore_infer_prepare_checkpoint"]


@hookspec(firstresult=True)
def swiftcore_infer_prepare_checkpoint(model_dir: str, plugins: PluginSet, echo: Callable[[str], None]) -> str | None:
    """Return a Hugging Face checkpoint directory that serves ``model_dir``, or None when it is not yours.

    Called before an engine is built, only for a ``--model`` directory that is no Hugging Face checkpoint (no
    ``config.json``, no ``adapter_config.json``); stops at the first non-None result. An implementation recognises
    its format (e.g. swiftcore-megatron: a Megatron-core checkpoint), materialises the HF checkpoint where it owns
    the files (a cache it reuses while the source is unchanged) and returns that directory. Raise a
    :class:`~swiftcore.api.SwiftcoreError` naming ``model_dir`` for a directory of your format you cannot convert
    (incomplete, damaged); never delete files you did not write.

    :param model_dir: the ``--model`` directory as given.
    :param plugins: the loaded plugin set (e.g. to find a Megatron bridge).
    :param echo: prints one progress line for the user (stderr), e.g. where the export is written.

    .. versionadded:: 0.1
    """
