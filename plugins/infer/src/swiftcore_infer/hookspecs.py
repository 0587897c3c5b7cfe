"""The hooks swiftcore-infer declares: plugins that turn a checkpoint it cannot load into one it can, and plugins that
decode with a draft model (``--draft DIR``) instead of an engine naming a draft plugin.

Declared through the core's ``swiftcore_addhooks`` (:mod:`swiftcore_infer.plugin`), in swiftcore's pluggy project, so a
plugin implements them with ``@swiftcore.api.hookimpl`` in its plugin module like any core hook. A plugin that does
not depend on swiftcore-infer marks its implementation ``@hookimpl(optionalhook=True)``, so that it still loads where
swiftcore-infer is not installed. ``swiftcore_infer_prepare_checkpoint`` is called by
:func:`swiftcore_infer.checkpoints.prepare_model_dir`, which ``build_engine`` (``infer``, ``deploy``, ``eval``, the
Web-UI) runs on ``--model``; ``swiftcore_speculative_decoder`` by the transformers backend started with a draft
(another draft format, Medusa heads or a model's own MTP layers, implements it as swiftcore-plugin-eagle3 does).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from swiftcore.api import hookspec

if TYPE_CHECKING:
    from swiftcore.api import PluginSet

__all__ = ["swiftcore_infer_prepare_checkpoint", "swiftcore_speculative_decoder"]


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


@hookspec(firstresult=True)
def swiftcore_speculative_decoder(draft_dir: str, target: Any) -> Any | None:
    """Load the draft in ``draft_dir`` for ``target`` and return a speculative decoder, or None when the directory
    holds no draft of this plugin's format.

    Called once by an inference engine started with a draft (``--draft DIR``), after its target is loaded. Stops at
    the first non-None result. The decoder decodes greedily, token for token as the target alone would:

    - ``decoder.num_speculative_tokens``: the draft's proposals per verification step by default;
    - ``decoder.steps(prompt_ids, *, max_new_tokens, eos_token_ids, num_speculative_tokens=None)``: an iterator of
      ``(new token ids, accepted proposals)`` per target forward (``None`` for the prompt's forward), stopping after
      an end token or at ``max_new_tokens``.

    Raise a :class:`~swiftcore.api.SwiftcoreError` for a draft of this plugin's format that cannot serve ``target``.

    :param draft_dir: the draft directory given by the user.
    :param target: the engine's loaded model (a transformers causal LM, eval mode, on its device).
    :return: the decoder, or None to pass.

    .. versionadded:: 0.1
    """
