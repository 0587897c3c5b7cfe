"""Frozen spec dataclasses: what a plugin declares.

Specs are plain data. Heavy objects (model classes, loaders, engines) are named as lazy ``"module:attr"`` strings and
resolved only when used (:func:`swiftcore._lazy.resolve`), so that collecting every installed plugin's specs never
imports torch. Each spec validates itself on construction and raises :class:`~swiftcore.errors.SpecError` naming the
field; the registry adds the plugin's name. The registry stamps each collected spec with its :class:`Provider`.

Fields only ever get added, with defaults (see :mod:`swiftcore.plugin_api`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from swiftcore._lazy import is_reference
from swiftcore.errors import SpecError

__all__ = [
    "BACKEND_CAPABILITIES",
    "HEAD_TASKS",
    "SPEC_KINDS",
    "BackendSpec",
    "BridgeSpec",
    "CommandSpec",
    "EnvironmentSpec",
    "HeadSpec",
    "ModelParts",
    "ModelSpec",
    "Provider",
    "RecipeSpec",
    "RewardSpec",
    "TemplateSpec",
]

_NAME = re.compile(r"^[a-z0-9][a-z0-9_.\-]*$")

HEAD_TASKS = ("classification", "embedding", "reranker", "generative_reranker")
BACKEND_CAPABILITIES = ("generate", "stream", "embed", "classify", "score", "lora", "update_weights")
MODEL_TASKS = ("causal_lm", "asr") + HEAD_TASKS
MODALITIES = ("text", "image", "audio", "video")


@dataclass(frozen=True)
class Provider:
    """Who provided a spec.

    Attributes:
        plugin: the plugin name (its entry-point name, or ``"swiftcore"`` for built-ins).
        distribution: the installed distribution, e.g. ``"swiftcore-plugin-gemma4"`` (None for a file).
        version: the distribution's version (None for a file or module plugin).
    """

    plugin: str
    distribution: str | None = None
    version: str | None = None

    def __str__(self) -> str:
        if self.distribution:
            return f"{self.plugin} ({self.distribution} {self.version or '?'})"
        return self.plugin


class _Spec:
    """Validation shared by all specs (a mixin: specs stay flat dataclasses)."""

    kind: ClassVar[str] = "spec"
    _references: ClassVar[tuple[str, ...]] = ()

    def _fail(self, field_name: str, problem: str) -> None:
        raise SpecError(type(self).__name__, getattr(self, "name", "?"), field_name, problem)

    def _check_common(self) -> None:
        name = getattr(self, "name", None)
        if not isinstance(name, str) or not _NAME.match(name):
            self._fail("name", f"{name!r} must be a lower-case identifier like 'my_model' (no '@' or spaces)")
        for f in fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if f.name in self._references:
                if value is not None and not is_reference(value):
                    self._fail(f.name, f"{value!r} is not a lazy 'package.module:attribute' string")
            elif isinstance(value, list):
                self._fail(f.name, "use a tuple, not a list (specs are immutable)")

    def _check_strings(self, field_name: str, allowed: tuple[str, ...] | None = None) -> None:
        values = getattr(self, field_name)
        if not isinstance(values, tuple) or not all(isinstance(v, str) and v for v in values):
            self._fail(field_name, f"{values!r} must be a tuple of non-empty strings")
        if allowed is not None:
            bad = [v for v in values if v not in allowed]
            if bad:
                self._fail(field_name, f"unknown value(s) {bad!r}; allowed: {', '.join(allowed)}")

    def with_provider(self, provider: Provider) -> Any:
        """Return a copy stamped with ``provider`` (specs are frozen)."""
        from dataclasses import replace

        return replace(self, provider=provider)  # type: ignore[type-var]


@dataclass(frozen=True)
class ModelParts:
    """Module-name prefixes of a model's parts, for freezing and for keeping parts out of LoRA.

    Attributes:
        language_model: the decoder (e.g. ``("model.language_model",)``).
        vision_tower: the vision encoder, frozen by ``--freeze-vision``.
        audio_tower: the audio encoder, frozen by ``--freeze-audio``.
        projector: the multimodal projector(s), frozen by ``--freeze-projector``.
        lm_head: the output head(s).
    """

    language_model: tuple[str, ...] = ()
    vision_tower: tuple[str, ...] = ()
    audio_tower: tuple[str, ...] = ()
    projector: tuple[str, ...] = ()
    lm_head: tuple[str, ...] = ("lm_head",)


@dataclass(frozen=True)
class ModelSpec(_Spec):
    """A model family a plugin can load, train and make tiny.

    Attributes:
        name: the spec's name, after the HF ``model_type`` (``"qwen3_5"``).
        model_types: HF ``config.json`` ``model_type`` values this spec claims.
        architectures: HF ``architectures`` values this spec claims.
        model_class: ``"module:Class"`` with ``from_pretrained`` (e.g.
            ``"transformers:Gemma4ForConditionalGeneration"``); used when ``loader`` is None.
        loader: optional ``"module:fn"`` ``fn(model_dir, *, spec, torch_dtype, **kwargs) -> model``.
        default_template: the template used when the user passes no ``--template``.
        lora_target_modules: default LoRA targets (``("all-linear",)`` lets peft pick every linear).
        lora_exclude_modules: module-name regexes kept out of LoRA (routers, clipped layers, towers).
        parts: the model's parts (see :class:`ModelParts`).
        requires: PEP 508 requirements checked before loading, e.g. ``("transformers>=5.19",)``.
        tiny_config: ``"module:fn"`` returning a tiny HF config (random-init tests and the demo).
        tiny_tokenizer: ``"module:fn"`` ``fn(out_dir) -> None`` writing a local tokenizer with the
            family's special tokens and official chat template.
        tasks: what it can be trained for (``causal_lm``, ``asr``, head tasks); a recipe whose ``RecipeSpec.tasks``
            share none of them refuses the model (head recipes put a head on any backbone).
        modalities: input modalities (``text``, ``image``, ``audio``, ``video``).
        processor: optional ``"module:fn"`` ``fn(model_dir, tokenizer) -> processor`` building the processor that
            expands the family's image and audio placeholders, for a family whose transformers processor class
            cannot be used as is (None: the class ``processor_config.json`` names; see swiftcore-media).
        description: one line for ``swiftcore plugins``.
        demo: offer this spec as ``make demo``'s default model (it needs ``tiny_config`` and
            ``tiny_tokenizer``); the core names no family, so the demo runs what an installed plugin offers.
        provider: stamped by the registry.
    """

    kind: ClassVar[str] = "model"
    _references: ClassVar[tuple[str, ...]] = ("model_class", "loader", "tiny_config", "tiny_tokenizer", "processor")

    name: str
    model_types: tuple[str, ...] = ()
    architectures: tuple[str, ...] = ()
    model_class: str | None = None
    loader: str | None = None
    default_template: str | None = None
    lora_target_modules: tuple[str, ...] = ("all-linear",)
    lora_exclude_modules: tuple[str, ...] = ()
    parts: ModelParts = field(default_factory=ModelParts)
    requires: tuple[str, ...] = ()
    tiny_config: str | None = None
    tiny_tokenizer: str | None = None
    tasks: tuple[str, ...] = ("causal_lm",)
    modalities: tuple[str, ...] = ("text",)
    processor: str | None = None
    description: str = ""
    demo: bool = False
    provider: Provider | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        self._check_common()
        self._check_strings("model_types")
        self._check_strings("architectures")
        if not self.model_types and not self.architectures:
            self._fail("model_types", "claim at least one HF model_type or architecture")
        if self.model_class is None and self.loader is None:
            self._fail("model_class", "give model_class ('transformers:SomeClass') or loader ('mod:fn')")
        self._check_strings("lora_target_modules")
        self._check_strings("lora_exclude_modules")
        self._check_strings("requires")
        _check_requirements(self, "requires")
        self._check_strings("tasks", MODEL_TASKS)
        self._check_strings("modalities", MODALITIES)
        if not isinstance(self.parts, ModelParts):
            self._fail("parts", f"expected a ModelParts, got {type(self.parts).__name__}")
        if not isinstance(self.demo, bool):
            self._fail("demo", f"expected True or False, got {self.demo!r}")
        if self.demo and not (self.tiny_config and self.tiny_tokenizer):
            self._fail("demo", "a demo model must be makeable tiny: give tiny_config and tiny_tokenizer")


@dataclass(frozen=True)
class TemplateSpec(_Spec):
    """A chat template.

    Attributes:
        name: the template name users pass to ``--template``.
        factory: ``"module:attr"``: a template class or a zero-argument function returning a template.
        official: the official chat template this one reproduces byte for byte (a file name in the
            plugin, or a description), or None for templates with no official counterpart.
        special_tokens: the special tokens the template emits.
        supports: features (``thinking``, ``tools``, ``image``, ``audio``, ``video``, ``system``).
        description: one line for ``swiftcore template list``.
        provider: stamped by the registry.
    """

    kind: ClassVar[str] = "template"
    _references: ClassVar[tuple[str, ...]] = ("factory",)

    name: str
    factory: str = ""
    official: str | None = None
    special_tokens: tuple[str, ...] = ()
    supports: tuple[str, ...] = ()
    description: str = ""
    provider: Provider | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        self._check_common()
        if not self.factory:
            self._fail("factory", "name the template's 'module:attr'")
        self._check_strings("special_tokens")
        self._check_strings("supports", ("thinking", "tools", "image", "audio", "video", "system"))


@dataclass(frozen=True)
class HeadSpec(_Spec):
    """An lm_head: a task-specific head on any backbone.

    Three lazy references say what the head does; only ``factory`` is required:

    - ``factory(backbone, *, spec, **options) -> torch.nn.Module`` builds the head around a loaded
      backbone (the model a :class:`ModelSpec` loads). The module's ``forward(input_ids, attention_mask)``
      returns one pooled row per input, and it has ``save_pretrained(dir)``; ``factory.from_pretrained(dir)``
      or the module class's loads it back (the contract kit checks both).
    - ``recipe(cfg, plugins, spec) -> TrainResult`` trains it: ``swiftcore train --task TASK`` calls it
      with the :class:`~swiftcore_train.config.TrainConfig`. None: the head cannot be trained by swiftcore.
    - ``predictor(checkpoint_dir, *, spec, dtype) -> predictor`` loads a trained checkpoint for
      ``swiftcore infer --task`` and ``swiftcore deploy``; the object has ``task``, ``tokenizer``,
      ``count_tokens(texts) -> int``, and by task ``embed(texts, dimensions=None) -> list[list[float]]``
      (embedding), ``classify(texts) -> list[dict]`` (classification) or
      ``score(query, documents) -> list[float]`` (rerankers). None: the head cannot be served.

    A head checkpoint is a directory with ``swiftcore_head.json`` naming its ``task`` (and ``head``, the
    spec name, when it differs from the task); that is how swiftcore finds the head that reads it.

    Attributes:
        name: the head's name (usually its task).
        task: one of ``classification``, ``embedding``, ``reranker``, ``generative_reranker``.
        factory: ``"module:attr"`` building the head around a backbone (see above).
        recipe: ``"module:attr"`` of its training recipe (see above), or None.
        predictor: ``"module:attr"`` loading a trained checkpoint for inference (see above), or None.
        pooling: supported pooling methods (``last``, ``mean``, ``cls``).
        losses: supported loss names.
        saved_as: the ecosystem format it saves to (``"sentence-transformers"``,
            ``"transformers-sequence-classification"``, ``"transformers-causal-lm"``); the contract kit checks a
            saved head is in it.
        description: one line for ``swiftcore plugins``.
        provider: stamped by the registry.
    """

    kind: ClassVar[str] = "head"
    _references: ClassVar[tuple[str, ...]] = ("factory", "recipe", "predictor")

    name: str
    task: str = ""
    factory: str = ""
    recipe: str | None = None
    predictor: str | None = None
    pooling: tuple[str, ...] = ("last",)
    losses: tuple[str, ...] = ()
    saved_as: str | None = None
    description: str = ""
    provider: Provider | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        self._check_common()
        if self.task not in HEAD_TASKS:
            self._fail("task", f"{self.task!r} is not one of {', '.join(HEAD_TASKS)}")
        if not self.factory:
            self._fail("factory", "name the head's 'module:attr'")
        self._check_strings("pooling", ("last", "mean", "cls"))
        self._check_strings("losses")


@dataclass(frozen=True)
class BridgeSpec(_Spec):
    """A Hugging Face <-> Megatron-core weight bridge.

    Attributes:
        name: the bridge's name.
        model_types: HF ``model_type`` values it converts.
        factory: ``"module:Class"`` of the bridge.
        parallelism: sharding it supports (``tp``, ``pp``, ``ep``).
        requires: PEP 508 requirements (megatron-core) checked before use.
        description: one line for ``swiftcore plugins``.
        provider: stamped by the registry.
    """

    kind: ClassVar[str] = "bridge"
    _references: ClassVar[tuple[str, ...]] = ("factory",)

    name: str
    model_types: tuple[str, ...] = ()
    factory: str = ""
    parallelism: tuple[str, ...] = ("tp",)
    requires: tuple[str, ...] = ()
    description: str = ""
    provider: Provider | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        self._check_common()
        self._check_strings("model_types")
        if not self.model_types:
            self._fail("model_types", "name at least one HF model_type")
        if not self.factory:
            self._fail("factory", "name the bridge's 'module:Class'")
        self._check_strings("parallelism", ("tp", "pp", "ep", "etp", "cp"))
        self._check_strings("requires")
        _check_requirements(self, "requires")


@dataclass(frozen=True)
class BackendSpec(_Spec):
    """An inference backend.

    Attributes:
        name: ``transformers``, ``vllm``, ``sglang`` ...
        factory: ``"module:attr"`` building the engine.
        probe: ``"module:fn"`` returning ``None`` when usable or a string saying why not; it must
            not start the engine.
        capabilities: subset of ``generate``, ``stream``, ``embed``, ``classify``, ``score``,
            ``lora``, ``update_weights``.
        requires: PEP 508 requirements.
        description: one line for ``swiftcore plugins``.
        provider: stamped by the registry.
    """

    kind: ClassVar[str] = "backend"
    _references: ClassVar[tuple[str, ...]] = ("factory", "probe")

    name: str
    factory: str = ""
    probe: str | None = None
    capabilities: tuple[str, ...] = ("generate",)
    requires: tuple[str, ...] = ()
    description: str = ""
    provider: Provider | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        self._check_common()
        if not self.factory:
            self._fail("factory", "name the engine factory's 'module:attr'")
        self._check_strings("capabilities", BACKEND_CAPABILITIES)
        self._check_strings("requires")
        _check_requirements(self, "requires")


@dataclass(frozen=True)
class CommandSpec(_Spec):
    """An extra ``swiftcore`` sub-command.

    Attributes:
        name: the sub-command name; it may not be a core command's name.
        target: ``"module:attr"`` of a ``click.Command``, imported only when the command runs.
        short_help: one line for ``swiftcore --help``.
        provider: stamped by the registry.
    """

    kind: ClassVar[str] = "command"
    _references: ClassVar[tuple[str, ...]] = ("target",)

    name: str
    target: str = ""
    short_help: str = ""
    provider: Provider | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        self._check_common()
        if not self.target:
            self._fail("target", "name the click command's 'module:attr'")


@dataclass(frozen=True)
class RecipeSpec(_Spec):
    """A training recipe: what ``swiftcore train --recipe NAME`` runs (torchtune's recipes, as plugins).

    The recipe reads the common training options (:class:`swiftcore_train.config.TrainConfig`) and its own,
    which its plugin adds to ``swiftcore train`` with the ``swiftcore_addoption`` hook (pytest's
    ``pytest_addoption``), tagged with the recipe's name so they are refused with any other recipe.

    Attributes:
        name: the recipe name, e.g. ``"sft"``, ``"dpo"``.
        run: ``"module:attr"`` of ``run(cfg, plugins, options) -> TrainResult``: ``cfg`` the common
            options, ``plugins`` the loaded plugin set, ``options`` the recipe's own options (an
            instance of ``config`` when given, else a ``dict`` keyed by option name).
        config: ``"module:attr"`` of a dataclass built from the recipe's options (by field name), so a
            bad value fails in its ``__post_init__`` before anything is loaded. Optional.
        tasks: the model tasks it trains; a model whose ``ModelSpec.tasks`` share none of them is refused.
        description: one line for ``swiftcore recipes``.
        provider: stamped by the registry.
    """

    kind: ClassVar[str] = "recipe"
    _references: ClassVar[tuple[str, ...]] = ("run", "config")

    name: str
    run: str = ""
    config: str | None = None
    tasks: tuple[str, ...] = ("causal_lm",)
    description: str = ""
    provider: Provider | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        self._check_common()
        if not self.run:
            self._fail("run", "name the recipe's run function as 'module:attr'")
        self._check_strings("tasks")


@dataclass(frozen=True)
class RewardSpec(_Spec):
    """A reward function for online RL recipes (``swiftcore train --recipe grpo --reward NAME``).

    ``function(completions, **kwargs) -> list[float]`` scores one batch: ``completions`` the generated
    replies (text), and by keyword ``prompts`` (the rendered prompts), ``options`` (a ``dict`` of this
    reward's ``--reward-option NAME.KEY=VALUE`` values, as strings), every column named in ``columns`` (one
    value per completion, from the completion's dataset row) and possibly more keywords in later versions,
    so it must take ``**kwargs``. It returns one float per completion. A reward that raises, returns the
    wrong number of scores or a NaN, or outlasts the run's reward timeout, costs the samples concerned the
    run's fallback reward and a logged error; it never stops the run.

    Attributes:
        name: the name users pass to ``--reward``, e.g. ``"accuracy"``.
        function: ``"module:attr"`` of the reward function (see above); it must not need torch at import.
        columns: dataset columns it reads (e.g. ``("answer",)``); a dataset without one is refused before
            training starts.
        options: the option keys it takes (``--reward-option format.pattern=...``); another key is refused.
        description: one line for ``swiftcore plugins`` and ``swiftcore rewards``.
        provider: stamped by the registry.
    """

    kind: ClassVar[str] = "reward"
    _references: ClassVar[tuple[str, ...]] = ("function",)

    name: str
    function: str = ""
    columns: tuple[str, ...] = ()
    options: tuple[str, ...] = ()
    description: str = ""
    provider: Provider | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        self._check_common()
        if not self.function:
            self._fail("function", "name the reward function as 'module:attr'")
        self._check_strings("columns")
        self._check_strings("options")
        for key in self.options:
            if not _NAME.match(key) or "." in key:
                self._fail("options", f"{key!r} must be a lower-case identifier like 'pattern' (no dots or spaces)")
        for column in ("prompts", "completions", "options"):
            if column in self.columns:
                self._fail("columns", f"{column!r} is passed to every reward already; it is not a dataset column")


@dataclass(frozen=True)
class EnvironmentSpec(_Spec):
    """A multi-turn environment for online RL recipes (``--environment NAME``): ``factory()`` makes one episode's
    environment (:class:`~swiftcore.api.protocols.EnvironmentProtocol`: ``reset(row)``, ``step(reply)``); it must not
    need torch at import. ``description``: one line for ``swiftcore plugins``; ``provider``: stamped by the registry.
    """

    kind: ClassVar[str] = "environment"
    _references: ClassVar[tuple[str, ...]] = ("factory",)

    name: str
    factory: str = ""
    description: str = ""
    provider: Provider | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        self._check_common()
        if not self.factory:
            self._fail("factory", "name the environment factory as 'module:attr'")


SPEC_KINDS: dict[str, type] = {
    "model": ModelSpec,
    "template": TemplateSpec,
    "head": HeadSpec,
    "bridge": BridgeSpec,
    "backend": BackendSpec,
    "command": CommandSpec,
    "recipe": RecipeSpec,
    "reward": RewardSpec,
    "environment": EnvironmentSpec,
}


def _check_requirements(spec: _Spec, field_name: str) -> None:
    from packaging.requirements import InvalidRequirement, Requirement

    for value in getattr(spec, field_name):
        try:
            Requirement(value)
        except InvalidRequirement as exc:
            spec._fail(field_name, f"{value!r} is not a PEP 508 requirement: {exc}")
