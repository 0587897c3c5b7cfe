"""The hooks swiftcore-infer declares: plugins that turn a checkpoint it cannot load into one it can, plugins that
pick the template from options they add to ``infer`` / ``deploy`` (``--agent-template``), and plugins that decode
with a draft model (``--draft DIR``) instead of an engine naming a draft plugin.

Declared through the core's ``swiftcore_addhooks`` (:mod:`swiftcore_infer.plugin`), in swiftcore's pluggy project, so a
plugin implements them with ``@swiftcore.api.hookimpl`` in its plugin module like any core hook. A plugin that does
not depend on swiftcore-infer marks its implementation ``@hookimpl(optionalhook=True)``, so that it still loads where
swiftcore-infer is not installed. ``swiftcore_infer_prepare_checkpoint`` is called by
:func:`swiftcore_infer.checkpoints.prepare_model_dir`, which ``build_engine`` (``infer``, ``deploy``, ``eval``, the
Web-UI) runs on ``--model``; ``swiftcore_infer_template`` by ``build_engine`` next, before the engine is created;
``swiftcore_speculative_decoder`` by the transformers backend started with a draft
(another draft format, Medusa heads or a model's own MTP layers, implements it as swiftcore-plugin-eagle3 does).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from swiftcore.api import hookspec

if TYPE_CHECKING:
    from swiftcore.api import PluginSet

__all__ = ["swiftcore_infer_prepare_checkpoint", "swiftcore_infer_template", "swiftcore_speculative_decoder"]


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
def swiftcore_infer_template(
    template: str | None,
    model_dir: str,
    adapter: str | None,
    model_type: str | None,
    options: Mapping[str, Any],
    plugins: PluginSet,
) -> str | None:
    """Return the template name the engine is built with, picked from options your plugin adds to ``swiftcore infer``
    / ``swiftcore deploy`` (``swiftcore_addoption``, ``command="infer"`` / ``"deploy"``), or None to leave it.

    Called by :func:`swiftcore_infer.build_engine` once per engine, after ``--model`` is prepared
    (``swiftcore_infer_prepare_checkpoint``) and before the backend builds the engine; stops at the first non-None
    result, which replaces ``--template``. E.g. swiftcore-plugin-agent-templates maps ``--agent-template hermes`` on
    an OLMoE model to ``olmoe_hermes``. Raise a :class:`~swiftcore.api.SwiftcoreError` naming your option when it
    cannot apply to the model (a template with its own tool format).

    :param template: ``--template`` as given (None: the engine would use the checkpoint's recorded template, else the
        model spec's default).
    :param model_dir: the prepared ``--model`` directory (a Hugging Face checkpoint or a peft adapter directory).
    :param adapter: ``--adapter`` (then ``model_dir`` is its base), or None.
    :param model_type: ``--model-type``, or None.
    :param options: the values of the options plugins added to the command, by destination (``agent_template``);
        empty where the caller has none (``swiftcore eval``, the Web-UI).
    :param plugins: the loaded plugin set.

    .. versionadded:: 0.1
    """


@hookspec(firstresult=True)
def swiftcore_speculative_decoder(draft_dir: str, target: Any) -> Any | None:
    """Load the draft in ``draft_dir`` for ``target`` and return a speculative decoder, or None when the directory
    holds no draft of this plugin's format.

    Called once by an inference engine started with a draft (``--draft DIR``), after its target is loaded. Stops at
    the first non-None result. The decoder decodes as the target alone would: greedily (token for token) at
    temperature 0, and above it by speculative sampling, distributed as the target's sampling with those settings:

    - ``decoder.num_speculative_tokens``: the draft's proposals per verification step by default;
    - ``decoder.steps(prompt_ids, *, max_new_tokens, eos_token_ids, num_speculative_tokens=None, temperature=0.0,
      top_k=0, top_p=1.0, generator=None)``: an iterator of ``(new token ids, accepted proposals)`` per target
      forward (``None`` for the prompt's forward), stopping after an end token or at ``max_new_tokens``; sampled
      draws come from ``generator``. A decoder whose ``steps`` has no sampling arguments gets sampled requests
      refused.

    Raise a :class:`~swiftcore.api.SwiftcoreError` for a draft of this plugin's format that cannot serve ``target``.

    :param draft_dir: the draft directory given by the user.
    :param target: the engine's loaded model (a transformers causal LM, eval mode, on its device).
    :return: the decoder, or None to pass.

    .. versionadded:: 0.1
    .. versionchanged:: 0.2 the sampling arguments of ``steps``.
    """
