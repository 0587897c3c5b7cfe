"""``PluginContract``: the checks every swiftcore plugin passes, inherited with one line.

::

    from swiftcore_testing import PluginContract

    class TestAcme(PluginContract):
        plugin = "acme"          # entry-point name, distribution, dotted module or .py path

Each rule is its own test; spec-specific checks are parametrized by spec name (one test per model,
template, bridge and head the plugin provides), and a failure starts with the rule it breaks
(see :data:`swiftcore_testing.rules.RULES`). The model pipeline builds one tiny checkpoint per model
spec per class.
"""

from __future__ import annotations

import inspect
import math
import types
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import pytest

from swiftcore.api import SwiftcoreError
from swiftcore_testing import bridge_checks, head_checks, model_checks, rules, template_checks
from swiftcore_testing.plugin_set import contract_plugins, own_names
from swiftcore_testing.rules import violation
from swiftcore_testing.samples import load_samples

if TYPE_CHECKING:
    from swiftcore.api import PluginSet

__all__ = ["PluginContract"]

#: parametrized test -> how to list its parameters from the plugin's specs by kind.
_PARAMETRIZED: dict[str, str] = {
    "test_model_make_tiny_loads": "model",
    "test_model_template_renders": "model",
    "test_model_template_official": "model_official",
    "test_model_template_train_serve": "model",
    "test_model_lora_trains": "model",
    "test_model_generates": "model",
    "test_template_renders": "template",
    "test_template_official": "template_official",
    "test_template_train_serve": "template",
    "test_bridge_round_trip": "bridge",
    "test_bridge_logit_parity": "bridge",
    "test_head_pooled_shapes": "head",
    "test_head_save_load": "head",
}


def _check(rule: str, problems: list[str]) -> None:
    if problems:
        raise violation(rule, problems)


def _spec_names(
    plugin: str, also_load: tuple[str, ...], referenced: AbstractSet[str] | None = frozenset()
) -> dict[str, list[str]]:
    """Parameter lists per :data:`_PARAMETRIZED` group (empty when the plugin does not load: the
    generic tests then say why).

    Args:
        plugin: the plugin under test.
        also_load: the extra plugins of the contract.
        referenced: the template names the contract's reference renderings are for (None: every template).
    """
    from swiftcore.api.template import official_chat_template

    try:
        plugins = contract_plugins(plugin, also_load)
        specs = rules.own_specs(plugins, own_names(plugin))
    except SwiftcoreError:
        return {}
    groups = {kind: [s.name for s in items] for kind, items in specs.items()}

    def has_reference(name: str | None) -> bool:
        return name is not None and (referenced is None or name in referenced)

    # An official format that is not Jinja (e.g. DeepSeek's encoding script) is compared through reference
    # renderings, or by the plugin's own golden tests.
    groups["template_official"] = [
        s.name for s in specs.get("template", []) if (s.official or "").endswith(".jinja") or has_reference(s.name)
    ]
    official = []
    for spec in specs.get("model", []):
        template = plugins.registry.find("template", spec.default_template) if spec.default_template else None
        try:
            # The tiny tokenizer may carry the model's own chat template: whether it does shows only once made.
            if spec.tiny_tokenizer or has_reference(spec.default_template):
                official.append(spec.name)
            elif template is not None and official_chat_template(template) is not None:
                official.append(spec.name)
        except SwiftcoreError:
            official.append(spec.name)  # the test reports the unreadable template
    groups["model_official"] = official
    return groups


def _fresh(func: Any) -> Any:
    """A copy of ``func`` without its marks, so each subclass parametrizes its own copy."""
    copy = types.FunctionType(func.__code__, func.__globals__, func.__name__, func.__defaults__, func.__closure__)
    copy.__doc__, copy.__qualname__ = func.__doc__, func.__qualname__
    return copy


class PluginContract:
    """Base class of a plugin's contract tests; set :attr:`plugin` in a subclass called ``Test*``.

    Attributes:
        plugin: the plugin under test (entry-point name, distribution name, dotted module or ``.py`` path).
        also_load: extra plugins to load beside it (its distribution's plugin dependencies load anyway).
        conversations: a JSONL file of sample conversations (default: ``data/conversations.jsonl`` beside
            the test module, when it exists); the kit's plain-text samples are always added.
        models: the model specs to run the model pipeline on (None: all the plugin provides).
        import_budget_s: the most seconds importing and registering the plugin may take.
        bridge_checkpoints: model_type -> ``"module:fn"``, ``fn(out_dir) -> Path`` writing the tiny HF
            checkpoint a bridge converts (default: an installed model plugin's ``make_tiny``, else
            transformers' config class shrunk).
        bridge_config_overrides: model_type -> config values for that transformers fallback.
        head_backbone: the model spec a head is built on.
        renderings: a JSONL file of reference renderings of the sample conversations (default:
            ``data/conversations_expected.jsonl`` beside the test module, when it exists; the format is
            :data:`swiftcore_testing.template_checks.REFERENCE_FILE`'s), which templates must reproduce.
    """

    plugin: ClassVar[str] = ""
    also_load: ClassVar[tuple[str, ...]] = ()
    conversations: ClassVar[str | None] = None
    models: ClassVar[tuple[str, ...] | None] = None
    import_budget_s: ClassVar[float] = 2.0
    bridge_checkpoints: ClassVar[dict[str, str]] = {}
    bridge_config_overrides: ClassVar[dict[str, dict[str, Any]]] = {}
    head_backbone: ClassVar[str | None] = None
    renderings: ClassVar[str | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not cls.plugin:
            return
        rows = template_checks.load_reference(cls._renderings_path())
        groups = _spec_names(cls.plugin, cls.also_load, template_checks.reference_templates(rows) if rows else set())
        if cls.models is not None:
            for key in ("model", "model_official"):
                groups[key] = [n for n in groups.get(key, []) if n in cls.models]
        for test_name, group in _PARAMETRIZED.items():
            names = groups.get(group, [])
            if names:
                base = getattr(PluginContract, test_name)
                setattr(cls, test_name, pytest.mark.parametrize("name", names)(_fresh(base)))
            else:
                # Nothing of that kind: no test at all (rather than a skipped one that looks covered).
                setattr(cls, test_name, None)

    @classmethod
    def _beside_test(cls, configured: str | None, default: str) -> str:
        """``configured``, else ``default`` relative to the directory of the module defining the class."""
        return configured if configured is not None else str(Path(inspect.getfile(cls)).parent / default)

    @classmethod
    def _renderings_path(cls) -> str:
        return cls._beside_test(cls.renderings, template_checks.REFERENCE_FILE)

    # ------------------------------------------------------------------ fixtures

    @pytest.fixture(scope="class")
    @classmethod
    def contract_plugin_set(cls) -> Any:
        """The plugin under test with its dependencies (nothing else installed leaks in)."""
        return contract_plugins(cls.plugin, cls.also_load)

    @pytest.fixture(scope="class")
    @classmethod
    def contract_probe(cls) -> dict[str, Any]:
        """:func:`swiftcore.api.plugins.check_plugin`'s report on the plugin, from a fresh interpreter."""
        return rules.import_probe(cls.plugin)

    @pytest.fixture(scope="class")
    @classmethod
    def contract_samples(cls) -> list[dict[str, Any]]:
        """The plugin's sample conversations plus the kit's."""
        return load_samples(cls._beside_test(cls.conversations, "data/conversations.jsonl"))

    @pytest.fixture(scope="class")
    @classmethod
    def contract_renderings(cls) -> list[dict[str, Any]]:
        """The reference renderings (see :attr:`renderings`); empty without a file."""
        return template_checks.load_reference(cls._renderings_path())

    @pytest.fixture(scope="class")
    @classmethod
    def contract_tiny(cls, contract_plugin_set: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
        """``tiny(name) -> Path``: one tiny checkpoint per model spec, made once per class."""
        from swiftcore_tiny import make_tiny

        made: dict[str, Path] = {}
        root = tmp_path_factory.mktemp("contract-tiny")

        def tiny(name: str) -> Path:
            if name not in made:
                spec = contract_plugin_set.registry.get("model", name)
                try:
                    made[name] = make_tiny(spec, root / name, seed=0)
                except SwiftcoreError as exc:
                    raise violation("model-make-tiny-loads", f"make_tiny({name!r}) failed: {exc}") from exc
            return made[name]

        return tiny

    def _own(self, plugins: PluginSet) -> dict[str, list[Any]]:
        """The specs of the plugin under test (not of its dependencies)."""
        return rules.own_specs(plugins, own_names(self.plugin, plugins))

    def _spec(self, plugins: PluginSet, kind: str, name: str) -> Any:
        return next(s for s in self._own(plugins).get(kind, []) if s.name == name)

    # ------------------------------------------------------------------ rules for every plugin

    def test_entry_point_loads(self) -> None:
        """The plugin's module imports."""
        try:
            rules.import_module(self.plugin)
        except Exception as exc:  # whatever the plugin raises on import
            raise violation("entry-point-loads", f"{self.plugin}: {type(exc).__name__}: {exc}") from exc

    def test_import_is_light(self, contract_probe: dict[str, Any]) -> None:
        """Importing the plugin (in a fresh interpreter) imports no torch, transformers or megatron."""
        if "heavy_imports" not in contract_probe:
            raise violation("import-is-light", f"could not import the plugin: {contract_probe['problems']}")
        heavy = contract_probe["heavy_imports"]
        _check(
            "import-is-light",
            [f"importing {self.plugin} imported {', '.join(heavy)}; import them inside the functions that need them"]
            if heavy
            else [],
        )

    def test_import_time_budget(self, contract_probe: dict[str, Any]) -> None:
        """Importing and registering the plugin takes less than :attr:`import_budget_s`."""
        seconds: list[float | None] = [contract_probe.get("import_seconds")]
        # A busy machine can stall one import; the best of three fresh interpreters measures the plugin.
        while seconds[-1] is not None and min(s for s in seconds if s is not None) > self.import_budget_s:
            if len(seconds) >= 3:
                break
            seconds.append(rules.import_probe(self.plugin).get("import_seconds"))
        if seconds[-1] is None or min(s for s in seconds if s is not None) > self.import_budget_s:
            raise violation("import-time-budget", f"import took {seconds} s; the budget is {self.import_budget_s} s")

    def test_api_compatible(self) -> None:
        """``SWIFTCORE_API`` is declared and compatible with this core."""
        try:
            module = rules.import_module(self.plugin)
        except Exception as exc:
            raise violation("api-compatible", f"cannot import the plugin to read SWIFTCORE_API: {exc}") from exc
        _check("api-compatible", rules.api_problems(module, f"plugin {self.plugin!r}"))

    def test_specs_validate(self, contract_plugin_set: Any) -> None:
        """Every hook returns valid specs."""
        _check("specs-validate", rules.spec_problems(contract_plugin_set, set(contract_plugin_set.explicit)))

    def test_references_resolve(self, contract_plugin_set: Any) -> None:
        """Every ``"module:attr"`` of the plugin's specs imports."""
        _check("references-resolve", rules.reference_problems(self._own(contract_plugin_set)))

    def test_references_conform(self, contract_plugin_set: Any) -> None:
        """Every reference is what its field promises (a template has ``encode``, a recipe takes three arguments)."""
        _check("references-conform", rules.conformance_problems(self._own(contract_plugin_set)))

    def test_static_index_matches(self, contract_probe: dict[str, Any]) -> None:
        """The ``swiftcore.<kind>s`` entry-point tables list what the hooks return."""
        _check("static-index-matches", [p for p in contract_probe.get("problems", []) if "capability index" in p])

    def test_no_core_clash(self, contract_plugin_set: Any) -> None:
        """No spec or command takes a name swiftcore, a plugin loaded beside it or any installed plugin provides
        (the problem names both providers)."""
        names = own_names(self.plugin, contract_plugin_set)
        _check("no-core-clash", rules.core_clash_problems(self._own(contract_plugin_set), contract_plugin_set, names))

    def test_load_twice_harmless(self) -> None:
        """Loading the plugin twice registers its specs once, and the hooks keep no global state."""
        _check("load-twice-harmless", rules.load_twice_problems(self.plugin))

    # ------------------------------------------------------------------ model plugins

    def _model_template(self, spec: Any, plugins: PluginSet, rule: str) -> tuple[Any, Any]:
        """``(template, template_spec)`` of the model's default template; a template name two plugins provide
        is reported as theirs, naming both, not as the model's."""
        providers = plugins.registry.providers("template", spec.default_template) if spec.default_template else []
        if len(providers) > 1:
            raise violation(
                rule,
                f"model {spec.name!r}: its default template {spec.default_template!r} is provided by "
                f"{' and by '.join(str(p.provider) for p in providers)}; one of those plugins must rename it (or the "
                f"model can name one as default_template='{spec.default_template}@PLUGIN')",
            )
        return model_checks.template_for(spec, plugins)

    def test_model_make_tiny_loads(self, name: str, contract_plugin_set: Any, contract_tiny: Any) -> None:
        """make_tiny -> resolve -> load -> parts and special tokens agree."""
        spec = self._spec(contract_plugin_set, "model", name)
        _check("model-make-tiny-loads", model_checks.load_problems(spec, contract_tiny(name), contract_plugin_set))

    def test_model_template_renders(
        self, name: str, contract_plugin_set: Any, contract_tiny: Any, contract_samples: list[dict[str, Any]]
    ) -> None:
        """The default template renders and encodes the samples with the tiny tokenizer, keeping every system
        prompt and reply."""
        from swiftcore.api.models import load_tokenizer

        spec = self._spec(contract_plugin_set, "model", name)
        template, _ = self._model_template(spec, contract_plugin_set, "model-template-renders")
        tokenizer = load_tokenizer(contract_tiny(name))
        problems = model_checks.render_problems(template, tokenizer, contract_samples)
        _check("model-template-renders", problems + template_checks.kept_message_problems(template, contract_samples))

    def test_model_template_official(
        self,
        name: str,
        contract_plugin_set: Any,
        contract_tiny: Any,
        contract_samples: list[dict[str, Any]],
        contract_renderings: list[dict[str, Any]],
    ) -> None:
        """The default template renders every sample, byte for byte, as renderings made without it do: the
        tiny tokenizer's own chat template (through transformers' ``apply_chat_template``), the template's
        official Jinja and the reference renderings, each where there is one."""
        from swiftcore.api.models import load_tokenizer
        from swiftcore.api.template import official_chat_template

        spec = self._spec(contract_plugin_set, "model", name)
        template, template_spec = self._model_template(spec, contract_plugin_set, "model-template-official")
        tokenizer = load_tokenizer(contract_tiny(name))
        compared, problems = [], []
        if isinstance(getattr(tokenizer, "chat_template", None), str):
            compared.append("the tokenizer's chat template")
            problems += template_checks.tokenizer_template_problems(template, tokenizer, contract_samples)
        try:
            has_official = official_chat_template(template_spec) is not None
        except SwiftcoreError as exc:
            has_official, problems = False, [*problems, str(exc)]
        if has_official:
            compared.append(f"the official {template_spec.official}")
            problems += model_checks.official_problems(template, template_spec, contract_samples, tokenizer)
        rows = [r for r in contract_renderings if r.get("template", template_spec.name) == template_spec.name]
        if rows:
            compared.append(f"{len(rows)} reference renderings")
            problems += template_checks.reference_problems(template, template_spec.name, rows, contract_samples)
        if not compared and not problems:
            pytest.skip(
                f"model {name!r}: nothing to compare its template with (its tiny tokenizer has no chat_template, its "
                f"template no official Jinja); add reference renderings ({template_checks.REFERENCE_FILE})"
            )
        _check("model-template-official", problems)

    def test_model_template_train_serve(
        self, name: str, contract_plugin_set: Any, contract_tiny: Any, contract_samples: list[dict[str, Any]]
    ) -> None:
        """Each sample's reply is trained after exactly the ids inference prompts with, in every thinking mode,
        and up to a token the checkpoint's generation config stops at."""
        from swiftcore.api.models import load_tokenizer

        spec = self._spec(contract_plugin_set, "model", name)
        template, _ = self._model_template(spec, contract_plugin_set, "model-template-train-serve")
        model_dir = contract_tiny(name)
        tokenizer = load_tokenizer(model_dir)
        problems = model_checks.train_serve_problems(template, tokenizer, contract_samples)
        problems += template_checks.stop_token_problems(template, tokenizer, model_dir, contract_samples)
        _check("model-template-train-serve", problems)

    def test_model_lora_trains(
        self, name: str, contract_plugin_set: Any, contract_tiny: Any, contract_samples: list[dict[str, Any]]
    ) -> None:
        """Two LoRA steps on one batch: finite, decreasing loss."""
        spec = self._spec(contract_plugin_set, "model", name)
        template, _ = self._model_template(spec, contract_plugin_set, "model-lora-trains")
        losses = model_checks.lora_losses(spec, contract_tiny(name), contract_plugin_set, template, contract_samples)
        if not all(math.isfinite(x) for x in losses):
            raise violation("model-lora-trains", f"losses {losses} are not finite")
        if len(losses) < 2 or not losses[1] < losses[0]:
            raise violation("model-lora-trains", f"losses {losses} do not decrease")

    def test_model_generates(
        self, name: str, contract_plugin_set: Any, contract_tiny: Any, contract_samples: list[dict[str, Any]]
    ) -> None:
        """The tiny model generates a reply with the transformers backend."""
        _check(
            "model-generates",
            model_checks.generation_problems(contract_tiny(name), contract_plugin_set, contract_samples),
        )

    # ------------------------------------------------------------------ template plugins

    def _template(self, name: str, plugins: PluginSet) -> tuple[Any, Any]:
        """``(template, spec)`` of the plugin's template ``name`` (its own, when another plugin has the name too)."""
        from swiftcore.api.template import get_template

        spec = self._spec(plugins, "template", name)
        return get_template(f"{name}@{spec.provider.plugin}", plugins), spec

    def test_template_renders(
        self, name: str, contract_plugin_set: Any, contract_samples: list[dict[str, Any]]
    ) -> None:
        """The template renders every plain-text sample, keeping every system prompt and reply."""
        template, _ = self._template(name, contract_plugin_set)
        problems = model_checks.render_problems(template, None, contract_samples)
        _check("template-renders", problems + template_checks.kept_message_problems(template, contract_samples))

    def test_template_train_serve(
        self, name: str, contract_plugin_set: Any, contract_samples: list[dict[str, Any]]
    ) -> None:
        """Each sample's reply is trained after exactly the ids inference prompts with (a test tokenizer with
        the template's special tokens), in every thinking mode, and up to one of the template's stop words."""
        from swiftcore_testing.templates import build_test_tokenizer

        template, spec = self._template(name, contract_plugin_set)
        tokenizer = build_test_tokenizer(spec.special_tokens, model_checks.rendered_texts(template, contract_samples))
        problems = model_checks.train_serve_problems(template, tokenizer, contract_samples)
        problems += template_checks.stop_word_problems(template, tokenizer, contract_samples)
        _check("template-train-serve", problems)

    def test_template_official(
        self,
        name: str,
        contract_plugin_set: Any,
        contract_samples: list[dict[str, Any]],
        contract_renderings: list[dict[str, Any]],
    ) -> None:
        """The template reproduces, byte for byte, its declared official Jinja and the reference renderings."""
        from swiftcore.api.template import official_chat_template

        template, spec = self._template(name, contract_plugin_set)
        problems: list[str] = []
        try:
            if official_chat_template(spec) is not None:
                problems += model_checks.official_problems(template, spec, contract_samples)
        except SwiftcoreError as exc:
            problems.append(str(exc))
        problems += template_checks.reference_problems(template, name, contract_renderings, contract_samples)
        _check("template-official", problems)

    # ------------------------------------------------------------------ bridge plugins

    def _bridge_checkpoint(self, name: str, plugins: PluginSet, work: Path) -> tuple[Any, Path]:
        """The bridge spec and the tiny HF checkpoint it converts (as written: the checks perturb a copy)."""
        spec = self._spec(plugins, "bridge", name)
        model_type = spec.model_types[0]
        if model_type in self.bridge_checkpoints:
            from swiftcore.api import resolve

            writer = resolve(self.bridge_checkpoints[model_type], what=f"bridge_checkpoints[{model_type!r}]")
            return spec, Path(writer(work / "hf"))
        overrides = self.bridge_config_overrides.get(model_type)
        # The contract's plugins first, then any installed model plugin: bridges do not depend on model plugins.
        from swiftcore.api.plugins import load_plugins

        sets: Any = [plugins, load_plugins(env={})]  # tiny_hf_checkpoint looks the family up in each in turn
        return spec, bridge_checks.tiny_hf_checkpoint(model_type, work / "hf", sets, overrides)

    def test_bridge_round_trip(self, name: str, contract_plugin_set: Any, tmp_path: Path) -> None:
        """HF -> Megatron-core -> HF is bit-exact (first model_type of each bridge)."""
        spec, hf = self._bridge_checkpoint(name, contract_plugin_set, tmp_path)
        _check("bridge-round-trip", bridge_checks.round_trip_problems(spec, hf, tmp_path))

    def test_bridge_logit_parity(self, name: str, contract_plugin_set: Any, tmp_path: Path) -> None:
        """The Megatron-core model's logits equal transformers' (float32, TP 1)."""
        spec, hf = self._bridge_checkpoint(name, contract_plugin_set, tmp_path)
        _check("bridge-logit-parity", bridge_checks.parity_problems(spec, hf, tmp_path))

    # ------------------------------------------------------------------ head plugins

    def _head(self, name: str, plugins: PluginSet, tiny: Any) -> tuple[Any, Any, Any]:
        import torch

        from swiftcore.api import resolve
        from swiftcore.api.models import load_model

        if not self.head_backbone:
            raise violation("head-pooled-shapes", "set head_backbone = '<model spec>' on the contract class")
        spec = self._spec(plugins, "head", name)
        backbone_spec = plugins.registry.get("model", self.head_backbone)
        backbone = load_model(backbone_spec, tiny(self.head_backbone), plugins)
        factory = resolve(spec.factory, what=f"head {name!r} factory")
        head = factory(backbone, spec=spec)
        input_ids = torch.randint(0, backbone.config.get_text_config().vocab_size, (2, 8))
        return factory, head, (input_ids, torch.ones_like(input_ids))

    def test_head_pooled_shapes(self, name: str, contract_plugin_set: Any, contract_tiny: Any) -> None:
        """The head pools one row per input."""
        _, head, (ids, mask) = self._head(name, contract_plugin_set, contract_tiny)
        _check("head-pooled-shapes", head_checks.pooled_shape_problems(head, ids, mask))

    def test_head_save_load(self, name: str, contract_plugin_set: Any, contract_tiny: Any, tmp_path: Path) -> None:
        """A saved head loads back with the same outputs."""
        factory, head, (ids, mask) = self._head(name, contract_plugin_set, contract_tiny)
        saved_as = self._spec(contract_plugin_set, "head", name).saved_as
        problems = head_checks.save_load_problems(head, factory, ids, mask, tmp_path / "head")
        _check("head-save-load", problems + head_checks.saved_format_problems(tmp_path / "head", saved_as))
