"""The hooks swiftcore-train declares: capability plugins attach to a training run instead of being named by it.

Declared through the core's ``swiftcore_addhooks`` (:mod:`swiftcore_train.plugin`), in swiftcore's pluggy project,
so a plugin implements them with ``@swiftcore.api.hookimpl`` in its plugin module like any core hook. The ``sft``
recipe and swiftcore-heads' recipes call them (:mod:`swiftcore_train.hooks`); swiftcore-sequence-parallel is such a
capability (``--sequence-parallel-size``), and a third party's module freezer or callback is another. Every
implementation is called, in pluggy's order (the last registered first); none returns anything.

A capability checks its own options (``options["sequence_parallel_size"]``) and does nothing when they are off: the
hooks are called for every run. The version below is swiftcore-train's; the arguments only ever grow.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from swiftcore.api import hookspec

if TYPE_CHECKING:
    from swiftcore_train.config import TrainConfig
    from swiftcore_train.hooks import TrainSetup

__all__ = ["swiftcore_train_check", "swiftcore_train_setup"]


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
