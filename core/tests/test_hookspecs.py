"""One test per hook: a plugin implementing it is seen by the registry / the caller, with its provider."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from swiftcore import (
    BackendSpec,
    BridgeSpec,
    CommandSpec,
    ConflictError,
    HeadSpec,
    ModelSpec,
    PluginError,
    SwiftcoreError,
    TemplateSpec,
    UnknownNameError,
    hookimpl,
    hookspecs,
)
from swiftcore.registry import HOOK_FOR_KIND
from swiftcore.specs import EnvironmentSpec, RecipeSpec, RewardSpec

HOOK_NAMES = sorted(n for n in dir(hookspecs) if n.startswith("swiftcore_"))


def test_every_hook_is_documented_with_a_version() -> None:
    assert len(HOOK_NAMES) == 14
    for name in HOOK_NAMES:
        doc = inspect.getdoc(getattr(hookspecs, name)) or ""
        assert "versionadded" in doc, name
        assert len(doc.splitlines()[0]) > 10, name


def test_every_collector_kind_has_a_hook() -> None:
    assert set(HOOK_FOR_KIND.values()) <= set(HOOK_NAMES)


def _collector_plugin(hook: str, specs: list) -> type:
    class Plugin:
        SWIFTCORE_API = "1.0"

    setattr(Plugin, hook, staticmethod(hookimpl(lambda: specs)))
    # pluggy looks hooks up by attribute name; give the lambda the hook's name for its messages.
    getattr(Plugin, hook).__name__ = hook
    return Plugin


COLLECTED = [
    ("model", ModelSpec(name="m", model_types=("m",), model_class="transformers:AutoModel")),
    ("template", TemplateSpec(name="t", factory="a.b:c")),
    ("head", HeadSpec(name="h", task="embedding", factory="a.b:c")),
    ("bridge", BridgeSpec(name="b", model_types=("m",), factory="a.b:C")),
    ("backend", BackendSpec(name="be", factory="a.b:c", capabilities=("generate", "stream"))),
    ("command", CommandSpec(name="hello", target="a.b:c")),
    ("recipe", RecipeSpec(name="toy", run="a.b:run", config="a.b:Config")),
    ("reward", RewardSpec(name="shout", function="a.b:shout", columns=("answer",), options=("level",))),
    ("environment", EnvironmentSpec(name="abacus", factory="a.b:Abacus", description="counts beads")),
]


@pytest.mark.parametrize(("kind", "spec"), COLLECTED, ids=[k for k, _ in COLLECTED])
def test_collector_hook(kind: str, spec, swiftcore_plugins, register_plugin) -> None:
    register_plugin(_collector_plugin(HOOK_FOR_KIND[kind], [spec]), "acme", distribution="acme-dist", version="2.0")
    got = swiftcore_plugins.registry.get(kind, spec.name)
    assert got == spec
    assert got.provider.plugin == "acme"
    assert got.provider.distribution == "acme-dist"
    assert got.provider.version == "2.0"
    assert spec.name in swiftcore_plugins.registry.names(kind)


def test_collector_returning_a_wrong_type_names_plugin_and_hook(swiftcore_plugins, register_plugin) -> None:
    register_plugin(_collector_plugin("swiftcore_register_models", ["not a spec"]), "sloppy")
    with pytest.raises(PluginError, match=r"plugin 'sloppy'.*swiftcore_register_models\(\).*expected ModelSpec"):
        swiftcore_plugins.registry.all("model")


def test_a_bad_spec_names_plugin_and_field(swiftcore_plugins, register_plugin) -> None:
    class Plugin:
        SWIFTCORE_API = "1.0"

        @staticmethod
        @hookimpl
        def swiftcore_register_models():
            return [ModelSpec(name="m", model_types=("m",), model_class="oops")]

    register_plugin(Plugin, "sloppy")
    with pytest.raises(PluginError) as info:
        swiftcore_plugins.registry.all("model")
    assert "plugin 'sloppy'" in str(info.value) and "field 'model_class'" in str(info.value)


def test_bad_spec_from_an_auto_loaded_plugin_is_reported_not_raised(swiftcore_plugins, register_plugin, capsys) -> None:
    class Plugin:
        SWIFTCORE_API = "1.0"

        @staticmethod
        @hookimpl
        def swiftcore_register_models():
            raise RuntimeError("boom")

    register_plugin(Plugin, "shaky", explicit=False)
    assert swiftcore_plugins.registry.all("model") == []
    assert "shaky" in capsys.readouterr().err
    assert any("boom" in p for p in swiftcore_plugins.registry.problems)


def test_resolve_model_is_firstresult(swiftcore_plugins, register_plugin) -> None:
    calls = []

    class First:
        SWIFTCORE_API = "1.0"

        @staticmethod
        @hookimpl(tryfirst=True)
        def swiftcore_resolve_model(model_dir, hf_config, candidates):
            calls.append("first")
            return "gemma4" if hf_config.get("model_type") == "gemma4" else None

    class Second:
        SWIFTCORE_API = "1.0"

        @staticmethod
        @hookimpl
        def swiftcore_resolve_model(model_dir, hf_config):  # fewer args than the spec: allowed
            calls.append("second")
            return "fallback"

    register_plugin(First, "first")
    register_plugin(Second, "second")
    hook = swiftcore_plugins.pm.hook.swiftcore_resolve_model
    assert hook(model_dir="/m", hf_config={"model_type": "gemma4"}, candidates=[]) == "gemma4"
    assert calls == ["first"]
    assert hook(model_dir="/m", hf_config={}, candidates=[]) == "fallback"
    assert calls == ["first", "first", "second"]


def test_post_model_load_calls_every_implementation(swiftcore_plugins, register_plugin) -> None:
    seen = []

    def make(tag):
        class Plugin:
            SWIFTCORE_API = "1.0"

            @staticmethod
            @hookimpl
            def swiftcore_post_model_load(model, spec, model_dir):
                seen.append((tag, model["id"], spec.name, model_dir))

        return Plugin

    register_plugin(make("a"), "a")
    register_plugin(make("b"), "b")
    spec = ModelSpec(name="m", model_types=("m",), model_class="transformers:AutoModel")
    swiftcore_plugins.pm.hook.swiftcore_post_model_load(model={"id": 7}, spec=spec, model_dir="/d")
    assert sorted(seen) == [("a", 7, "m", "/d"), ("b", 7, "m", "/d")]


def test_duplicate_names_conflict_on_use_and_name_at_plugin_selects(swiftcore_plugins, register_plugin) -> None:
    spec = TemplateSpec(name="chat", factory="a.b:c")
    register_plugin(_collector_plugin("swiftcore_register_templates", [spec]), "one", distribution="d-one", version="1")
    register_plugin(_collector_plugin("swiftcore_register_templates", [spec]), "two", distribution="d-two", version="2")
    registry = swiftcore_plugins.registry
    with pytest.raises(ConflictError) as info:
        registry.get("template", "chat")
    assert "one (d-one 1)" in str(info.value) and "two (d-two 2)" in str(info.value)
    assert "chat@" in str(info.value)
    assert registry.get("template", "chat@two").provider.plugin == "two"
    assert registry.get("template", "chat@d-one").provider.plugin == "one"
    assert ("template", "chat") in registry.conflicts()
    with pytest.raises(UnknownNameError, match="not provided by plugin 'three'"):
        registry.get("template", "chat@three")


def test_unknown_name_suggests_close_matches_and_install(swiftcore_plugins, register_plugin) -> None:
    register_plugin(_collector_plugin("swiftcore_register_models", [COLLECTED[0][1]]), "acme")
    registry = swiftcore_plugins.registry
    with pytest.raises(UnknownNameError, match=r"'falcon9'.*named like swiftcore-plugin-<name>; check the name"):
        registry.get("model", "falcon9")
    with pytest.raises(UnknownNameError, match="Did you mean: m"):
        registry.get("model", "mm")


#: A plugin declaring a hook of its own (``swiftcore_acme_ping``), as swiftcore-train declares its training hooks.
DECLARES = """
from swiftcore.api import hookimpl, hookspec

SWIFTCORE_API = "1.5"


class Specs:
    @staticmethod
    @hookspec
    def swiftcore_acme_ping(value):
        \"\"\"Answer a ping.\"\"\"


@hookimpl
def swiftcore_addhooks(pluginmanager):
    pluginmanager.add_hookspecs(Specs)
"""

#: A plugin implementing it (``ARGS`` is replaced by the implementation's arguments).
IMPLEMENTS = """
from swiftcore.api import hookimpl

SWIFTCORE_API = "1.5"


@hookimpl
def swiftcore_acme_ping(ARGS):
    return value + 1
"""


def _plugin_files(tmp_path: Path, tag: str, args: str = "value") -> tuple[str, str]:
    """The declaring and the implementing plugin as ``.py`` files (names unique per test: file plugins are cached)."""
    declares, implements = tmp_path / f"declares_{tag}.py", tmp_path / f"implements_{tag}.py"
    declares.write_text(DECLARES)
    implements.write_text(IMPLEMENTS.replace("ARGS", args))
    return str(declares), str(implements)


@pytest.mark.parametrize("implementer_first", [True, False])
def test_addhooks_declares_a_plugin_s_hooks_whichever_registers_first(tmp_path, implementer_first: bool) -> None:
    """``swiftcore_addhooks`` is historic: the declaring plugin gets it when registered, after the core's call; an
    implementation registered before the declaration is accepted, because hooks are checked once the set is loaded."""
    from swiftcore._plugins import load_plugins

    declares, implements = _plugin_files(tmp_path, f"order_{implementer_first}")
    plugins = load_plugins([implements, declares] if implementer_first else [declares, implements], env={})
    assert plugins.pm.hook.swiftcore_acme_ping.has_spec()
    assert plugins.pm.hook.swiftcore_acme_ping(value=1) == [2]
    assert {i.status for i in plugins.loaded()} == {"loaded"} and len(plugins.loaded()) == 3


def test_addhooks_implementation_with_arguments_the_declaration_lacks_is_named(tmp_path) -> None:
    """A wrong signature found when the hook is declared, after its implementation registered, fails the declaring
    plugin's registration with pluggy's message naming the implementing plugin and its argument."""
    from swiftcore._plugins import load_plugins

    declares, implements = _plugin_files(tmp_path, "wrong", args="value, volume")
    with pytest.raises(PluginError, match=r"(?s)plugin 'declares_wrong'.*'implements_wrong'.*'volume'"):
        load_plugins([implements, declares], env={})


def test_addhooks_with_plugins_add_takes_the_set_as_it_stands(swiftcore_plugins, tmp_path) -> None:
    """``Plugins.add`` checks at once: a plugin declaring hooks goes in before those implementing them."""
    from swiftcore._plugins import _import_file

    declares, implements = (_import_file(Path(f)) for f in _plugin_files(tmp_path, "add"))
    with pytest.raises(PluginError, match="unknown hook.*swiftcore_acme_ping.*declares them"):
        swiftcore_plugins.add(implements, "implements")
    assert not swiftcore_plugins.pm.has_plugin("implements")
    swiftcore_plugins.add(declares, "declares")
    swiftcore_plugins.add(implements, "implements")
    assert swiftcore_plugins.pm.hook.swiftcore_acme_ping(value=41) == [42]


WORMHOLE = """
from swiftcore.api import hookimpl

SWIFTCORE_API = "1.0"


@hookimpl
def swiftcore_register_wormholes():
    return []
"""


def test_plugin_with_an_unknown_hook_is_refused(tmp_path, capsys) -> None:
    """A hook nobody declares (a typo, or the declaring plugin left out) is refused once the whole set is
    registered: an error naming the plugin, its hooks and the fixes when asked for, a warning when auto-loaded."""
    from swiftcore._plugins import _import_file, load_plugins

    plugin = tmp_path / "wormhole.py"
    plugin.write_text(WORMHOLE)
    declares, _ = _plugin_files(tmp_path, "unknown")
    message = r"plugin 'wormhole'.*unknown hook\(s\) swiftcore_register_wormholes.*--plugin NAME.*optionalhook=True"
    with pytest.raises(PluginError, match=message):
        load_plugins([declares, str(plugin)], env={})  # another plugin declaring hooks changes nothing
    plugins = load_plugins(env={"SWIFTCORE_PLUGINS": ""})
    with pytest.raises(PluginError, match=message):
        plugins.add(_import_file(plugin), "wormhole")
    assert not plugins.pm.has_plugin("wormhole")


def test_docs_hook_reference_is_in_sync_with_hookspecs() -> None:
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("hookdocs", root / "scripts" / "hookdocs.py")
    hookdocs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hookdocs)
    render_hook_reference = hookdocs.render_hook_reference
    docs = root / "docs" / "hooks.md"
    assert docs.read_text() == render_hook_reference(), "regenerate: python scripts/hookdocs.py > docs/hooks.md"
    for name in HOOK_NAMES:
        assert f"## `{name}`" in docs.read_text()


def test_addoption_adds_options_per_plugin_and_refuses_clashes(swiftcore_plugins, register_plugin) -> None:
    """Every ``swiftcore_addoption`` implementation is called with the parser; its options carry the plugin's
    name and the recipes they belong to; a flag a core option (or another plugin) has is refused, naming both."""
    from swiftcore.options import collect_options

    class Adds:
        SWIFTCORE_API = "1.1"

        @staticmethod
        @hookimpl
        def swiftcore_addoption(parser) -> None:
            parser.getgroup("toy", recipe="toy").addoption("--toy-scale", type=float, default=1.0)
            parser.addoption("--verbose-toy", is_flag=True)

    register_plugin(Adds, "adds")
    options = collect_options(swiftcore_plugins, "train", {"--max-steps": "swiftcore train itself"})
    assert [(o.flags, o.dest, o.recipes, o.plugin) for o in options] == [
        (("--toy-scale",), "toy_scale", ("toy",), "adds"),
        (("--verbose-toy",), "verbose_toy", (), "adds"),
    ]
    assert options[0].applies_to("toy") and not options[0].applies_to("sft") and options[1].applies_to("sft")
    assert options[0].applies_to("toy.megatron") and not options[0].applies_to("sft.megatron")

    class Clashes:
        SWIFTCORE_API = "1.1"

        @staticmethod
        @hookimpl
        def swiftcore_addoption(parser) -> None:
            parser.addoption("--toy-scale", type=int)

    register_plugin(Clashes, "clashes")
    with pytest.raises(SwiftcoreError, match="plugin 'clashes' adds option '--toy-scale'.*plugin 'adds' already has"):
        collect_options(swiftcore_plugins, "train", {})


def test_addoption_dest_names_the_value_click_parses() -> None:
    """An option declared with ``dest=`` reaches the command under that name (click parses it there), as
    :meth:`OptionGroup.addoption` documents; without it, under the flag's own name."""
    import click
    from click.testing import CliRunner

    from swiftcore.options import OptionParser

    parser = OptionParser("train")
    parser.getgroup("toy").addoption("--toy-scale", "-s", dest="scale", type=float, default=1.0)
    parser.getgroup("toy").addoption("--toy-name", default="a")
    seen: dict = {}
    command = click.Command("c", params=[o.click_option() for o in parser.options], callback=seen.update)
    result = CliRunner().invoke(command, ["-s", "2.5", "--toy-name", "b"])
    assert result.exit_code == 0, result.output
    assert seen == {"scale": 2.5, "toy_name": "b"}


_TOY_EXPORTER = """
import json
from pathlib import Path

from swiftcore.api import hookimpl

SWIFTCORE_API = "1.5"


@hookimpl
def swiftcore_addoption(parser):
    parser.getgroup("toy", "the toy conversion", command="export").addoption("--tp", type=int, default=1)
    parser.getgroup("toy-train").addoption("--toy-train-only", default="x")  # train's (the default): not export's


@hookimpl(tryfirst=True)
def swiftcore_export_checkpoint(target, model, out, options, plugins):
    if target != "mcore":
        return None
    Path(out).mkdir()
    kept = {k: v for k, v in options.items() if k != "echo"}
    (Path(out) / "call.json").write_text(json.dumps({"target": target, "model": model, **kept}))
    options["echo"]("toy exporter wrote it")
    return True
"""


def test_export_checkpoint_hook_gets_the_command_s_conversion(tmp_path) -> None:
    """``swiftcore export --to-mcore`` hands the conversion to the first plugin that takes the target, with the
    export options that plugin added (``swiftcore_addoption``, ``command="export"``) and none of another
    command."""
    import json

    from click.testing import CliRunner

    from swiftcore.cli.main import cli

    plugin = tmp_path / "toy_exporter.py"
    plugin.write_text(_TOY_EXPORTER)
    model = tmp_path / "model"
    model.mkdir()
    out = tmp_path / "out"
    runner = CliRunner()
    env = {"SWIFTCORE_PLUGINS": "", "SWIFTCORE_PLUGINS_STRICT": None}
    args = ["export", "--plugin", str(plugin), "--model", str(model), "--to-mcore", str(out), "--tp", "2"]
    result = runner.invoke(cli, args, env=env)
    assert result.exit_code == 0, result.output
    assert "toy exporter wrote it" in result.output
    call = json.loads((out / "call.json").read_text())
    assert call == {"target": "mcore", "model": str(model), "adapter": None, "tp": 2}
    # --to-hf is not the toy's: with no plugin taking it, the error says what to install.
    result = runner.invoke(
        cli, ["export", "--plugin", str(plugin), "--model", str(model), "--to-hf", str(tmp_path / "hf")], env=env
    )
    assert result.exit_code != 0 and "swiftcore-megatron" in str(result.exception or result.output)
    assert not (tmp_path / "hf").exists()
    # Nor is --merge-lora (the core merges nothing itself: swiftcore-infer implements the hook for it).
    result = runner.invoke(
        cli, ["export", "--plugin", str(plugin), "--model", str(model), "--merge-lora", str(tmp_path / "m")], env=env
    )
    assert result.exit_code != 0 and "pip install swiftcore-infer" in str(result.exception or result.output)
    assert not (tmp_path / "m").exists()
