"""The hooks swiftcore-train declares: capability plugins attach to a training run instead of being named by it.

Declared through the core's ``swiftcore_addhooks`` (:mod:`swiftcore_train.plugin`), in swiftcore's pluggy project,
so a plugin implements them with ``@swiftcore.api.hookimpl`` in its plugin module like any core hook. The ``sft``
recipe and swiftcore-heads' recipes call them (:mod:`swiftcore_train.hooks`); swiftcore-sequence-parallel is such a
capability (``--sequence-parallel-size``), and a third party's module freezer or callback is another. Every
implementation of the check and setup hooks is called, in pluggy's order (the last registered first); none returns
anything. ``swiftcore_train_run`` is the exception: the first implementation to return a result takes the run over
(a model plugin training a part of its model its own way, e.g. Qwen3-Omni's talker with ``--train-part talker``).

A capability checks its own options (``options["sequence_parallel_size"]``) and does nothing when they are off: the
hooks are called for every run. The version below is swiftcore-train's; the arguments only ever grow.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from swiftcore.api import hookspec

if TYPE_CHECKING:
    from swiftcore.api import PluginSet
    from swiftcore_train.config import TrainConfig, TrainResult
    from swiftcore_train.hooks import TrainSetup

__all__ = ["swiftcore_train_check", "swiftcore_train_run", "swiftcore_train_setup"]


@hookspec
def swiftcore_train_check(cfg: TrainConfig, options: Mapping[str, Any], model_dir: str, kind: str) -> None:
    """Refuse a run before anything heavy loads: raise a :class:`~swiftcore.api.SwiftcoreError` naming the option.

    Called for every implementation once the options are validated and the model spec resolved, before the output
    directory is touched, the data encoded or the model loaded, so a run a capability cannot train fails in seconds
    and leaves nothing on disk. Read what you need from ``config.json`` (``swiftcore.api.models.read_hf_config``).

    :param cfg: the run's :class:`~swiftcore_train.config.TrainConfig`.
    :param options: the recipe's option values by destination name, those other plugins added included
        (``swiftcore_addoption``; e.g. ``sequence_parallel_size``).
    :param model_dir: the checkpoint directory being trained (``cfg.model``).
    :param kind: ``"sft"``, or the head task of a swiftcore-heads recipe (``"embedding"``, ``"classification"``,
        ``"reranker"``, ``"generative_reranker"``).

    .. versionadded:: 0.1
    """


@hookspec
def swiftcore_train_setup(setup: TrainSetup) -> None:
    """Change how a run trains: the model, collator, trainer class, callbacks or loss, in place on ``setup``.

    Called for every implementation after the model (tuner applied), collator, training arguments (hence
    ``torch.distributed``) and callbacks are built, and before the Trainer is instantiated from ``setup``'s fields.
    Collective under torchrun: every rank calls it. Raise a :class:`~swiftcore.api.SwiftcoreError` to refuse::

        @hookimpl
        def swiftcore_train_setup(setup):
            setup.callbacks.append(MyCallback())          # a transformers TrainerCallback
            setup.model.get_input_embeddings().requires_grad_(False)

    :param setup: the run's :class:`~swiftcore_train.hooks.TrainSetup` (``setup.kind`` as for
        :func:`swiftcore_train_check`).

    .. versionadded:: 0.1
    """


@hookspec(firstresult=True)
def swiftcore_train_run(
    cfg: TrainConfig, options: Mapping[str, Any], model_dir: str, kind: str, plugins: PluginSet
) -> TrainResult | None:
    """Take a run over: train it your own way and return its :class:`~swiftcore_train.config.TrainResult`, or None.

    For a model plugin whose model has a part the recipe's Trainer does not train (Qwen3-Omni's talker, trained on
    codec tokens with ``--train-part talker``): the plugin reads its own option from ``options`` and returns None
    for every run that does not ask for it, so the recipe trains as usual. The first implementation to return a
    result ends the recipe there (pluggy's ``firstresult``); ``swiftcore train`` reports that result as its own.

    Called after every :func:`swiftcore_train_check` (which is where such a plugin refuses the options its trainer
    does not support, naming them) and before the output directory is touched, the data read or the model loaded:
    the implementation prepares the output directory itself (``swiftcore_train.start_run``: the same rules, an
    empty directory or ``--overwrite-output-dir``), writes ``logs.jsonl`` and its checkpoint(s) under
    ``cfg.output_dir``. It may call :func:`swiftcore_train.run_training` for another part of the model with a
    config whose options no longer ask for the takeover (else it is called again).

    :param cfg: the run's :class:`~swiftcore_train.config.TrainConfig`.
    :param options: the recipe's option values by destination name, those other plugins added included.
    :param model_dir: the checkpoint directory being trained (``cfg.model``).
    :param kind: ``"sft"`` (the only recipe that calls it so far).
    :param plugins: the loaded plugin set the run uses.
    :return: the run's result when this implementation trained it, else None.

    .. versionadded:: 0.1
    """
