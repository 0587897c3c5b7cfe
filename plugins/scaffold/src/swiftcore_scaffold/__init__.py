"""swiftcore-scaffold: ``swiftcore new-plugin``'s generator, rendering a complete plugin distribution from
packaged templates.

The templates (``*.tmpl`` beside this module, shipped as package data) use :class:`string.Template`
``${placeholders}``; nothing is downloaded. See :func:`render_plugin`.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from swiftcore.api import SwiftcoreError

__all__ = ["DIST_PREFIXES", "KINDS", "ScaffoldError", "distribution_name", "plugin_files", "render_plugin"]

#: kind -> (spec index group, [(template, path in the distribution)]). A kind's extra dependencies (the
#: plugins its example builds on) are data: ``<kind>/requires.txt``, one requirement a line.
KINDS: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = {
    "model": (
        "swiftcore.models",
        (
            ("model/plugin.py", "src/{package}/plugin.py"),
            ("model/modeling.py", "src/{package}/modeling.py"),
            ("model/tiny.py", "src/{package}/tiny.py"),
        ),
    ),
    "template": (
        "swiftcore.templates",
        (
            ("template/plugin.py", "src/{package}/plugin.py"),
            ("template/template.py", "src/{package}/template.py"),
            ("template/official.jinja", "src/{package}/official/{name}.jinja"),
        ),
    ),
    "backend": (
        "swiftcore.backends",
        (("backend/plugin.py", "src/{package}/plugin.py"), ("backend/engine.py", "src/{package}/engine.py")),
    ),
    # A head is built on a backbone from a model plugin (head/requires.txt names the one its contract uses).
    "head": (
        "swiftcore.heads",
        (
            ("head/plugin.py", "src/{package}/plugin.py"),
            ("head/head.py", "src/{package}/head.py"),
            ("head/test_contract.py", "tests/test_contract.py"),
        ),
    ),
    # A bridge starts from the dense GPT bridge (and its megatron-core pin).
    "bridge": (
        "swiftcore.bridges",
        (
            ("bridge/plugin.py", "src/{package}/plugin.py"),
            ("bridge/bridge.py", "src/{package}/bridge.py"),
            ("bridge/tiny.py", "src/{package}/tiny.py"),
            ("bridge/test_contract.py", "tests/test_contract.py"),
        ),
    ),
}
_COMMON = (
    ("common/pyproject.toml", "pyproject.toml"),
    ("common/README.md", "README.md"),
    ("common/__init__.py", "src/{package}/__init__.py"),
    ("common/test_contract.py", "tests/test_contract.py"),
)
_USAGE = {
    # No --plugin: every installed plugin loads, the template plugin this one depends on included.
    "model": "\n```bash\nswiftcore make-tiny {name} ./tiny-{name}\n"
    "swiftcore train --model ./tiny-{name} --dataset chat.jsonl --max-steps 10\n"
    "swiftcore infer --model ./output/checkpoint-10 --input prompts.jsonl\n```\n",
    "template": "\n```bash\nswiftcore template render --template {name} --input conversations.jsonl\n```\n",
    "backend": "\n```bash\nswiftcore infer --backend {name} --model ./tiny --input prompts.jsonl\n```\n",
    "head": "\nThe head wraps any swiftcore backbone: `build_head(load_model(...), spec=spec)`.\n",
    "bridge": "\n```bash\nswiftcore export --model ./tiny-{name} --to-mcore ./mcore --bridge {name}\n```\n",
}
_LAYOUT = {
    "model": "- `src/{package}/modeling.py`: the model classes, registered with transformers' Auto classes.\n"
    "- `src/{package}/tiny.py`: the tiny config and tokenizer factories.\n",
    "template": "- `src/{package}/template.py`: the template; `official/{name}.jinja`: the official chat template.\n",
    "backend": "- `src/{package}/engine.py`: the engine factory and the availability probe.\n",
    "head": "- `src/{package}/head.py`: the head module (pooling, save/load) and its factory.\n",
    "bridge": "- `src/{package}/bridge.py`: the MegatronBridge subclass; `tiny.py`: the tiny checkpoint its "
    "contract converts.\n",
}
#: kind -> the word after ``swiftcore-`` in the distribution name (and ``swiftcore_`` in the package), as
#: docs/writing-a-plugin.md ("Publishing") and the registry's "not installed" hints name them.
DIST_PREFIXES = {"model": "plugin", "template": "template", "backend": "backend", "head": "plugin", "bridge": "bridge"}
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class ScaffoldError(SwiftcoreError):
    """The plugin cannot be generated (bad name, unknown kind, existing target)."""


@dataclass(frozen=True)
class _Names:
    name: str
    kind: str

    @property
    def dist(self) -> str:
        return f"swiftcore-{DIST_PREFIXES[self.kind]}-{self.name.replace('_', '-')}"

    @property
    def package(self) -> str:
        return f"swiftcore_{DIST_PREFIXES[self.kind]}_{self.name}"

    @property
    def cls(self) -> str:
        return "".join(part.capitalize() for part in self.name.split("_"))


def _names(name: str, kind: str) -> _Names:
    if not _NAME.match(name):
        raise ScaffoldError(f"plugin name {name!r}: use lower-case letters, digits and '_', starting with a letter")
    if kind not in KINDS:
        raise ScaffoldError(f"--kind {kind!r}: choose one of {', '.join(KINDS)}")
    return _Names(name, kind)


def plugin_files(name: str, kind: str = "model") -> dict[str, str]:
    """The generated distribution's files: relative path -> text (nothing written).

    Args:
        name: the plugin name (lower case, digits and ``_``; also the spec name).
        kind: one of :data:`KINDS`.

    Raises:
        ScaffoldError: a bad name or kind.
    """
    from swiftcore.api import API_VERSION, API_VERSION_STRING

    names = _names(name, kind)
    group, files = KINDS[kind]
    extra = _extra_dependencies(kind)
    # The swiftcore minor series this core belongs to: the API's compatibility promise.
    requirement = _swiftcore_requirement()
    values = {
        "name": name,
        "kind": kind,
        "dist": names.dist,
        "package": names.package,
        "cls": names.cls,
        "api": API_VERSION_STRING,
        "api_major": str(API_VERSION[0]),
        "index_group": group,
        "dependencies": ", ".join(f'"{d}"' for d in (requirement, *extra)),
        # The contract's template rules build a test tokenizer and render the official template (tokenizers,
        # transformers, jinja2): the test-kit's [templates] extra, so a template plugin's tests need no torch.
        "testing": "swiftcore-testing[templates]>=0.1,<0.2" if kind == "template" else "swiftcore-testing>=0.1,<0.2",
        "usage": _USAGE[kind].format(name=name),
        "layout": _LAYOUT[kind].format(name=name, package=names.package),
    }
    root = resources.files(__name__)
    out = {}
    # A kind's own file for a path (e.g. its tests/test_contract.py) replaces the common one.
    for template, target in (*_COMMON, *files):
        text = (root / f"{template}.tmpl").read_text(encoding="utf-8")
        out[target.format(package=names.package, name=name)] = string.Template(text).substitute(values)
    return out


def _swiftcore_requirement() -> str:
    from packaging.version import Version

    from swiftcore.api.plugins import core_version

    version = Version(core_version())
    return f"swiftcore>={version.major}.{version.minor},<{version.major}.{version.minor + 1}"


def distribution_name(name: str, kind: str = "model") -> str:
    """The distribution ``new-plugin NAME --kind KIND`` writes: ``swiftcore-plugin-NAME`` for a model or
    head, ``swiftcore-template-NAME``, ``swiftcore-backend-NAME``, ``swiftcore-bridge-NAME`` (``_`` become ``-``).

    Raises:
        ScaffoldError: a bad name or kind.
    """
    return _names(name, kind).dist


def render_plugin(name: str, directory: str | Path = ".", kind: str = "model", *, force: bool = False) -> Path:
    """Write the distribution :func:`distribution_name` names into ``directory``.

    Args:
        name: the plugin name.
        directory: where the distribution folder is created.
        kind: one of :data:`KINDS` (``model``, ``template``, ``backend``, ``head``, ``bridge``).
        force: overwrite files of an existing folder.

    Returns:
        The distribution folder (``directory/DISTRIBUTION``, e.g. ``directory/swiftcore-plugin-NAME``).

    Raises:
        ScaffoldError: a bad name or kind, or the folder exists and is not empty (without ``force``).
    """
    files = plugin_files(name, kind)
    target = Path(directory) / _names(name, kind).dist
    if target.exists() and any(target.iterdir()) and not force:
        raise ScaffoldError(f"{target} exists and is not empty; choose another --dir or pass --force")
    for relative, text in files.items():
        path = target / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return target


def _extra_dependencies(kind: str) -> tuple[str, ...]:
    """The requirements of ``<kind>/requires.txt`` (the plugins the kind's example builds on), if any."""
    path = resources.files(__name__) / kind / "requires.txt"
    if not path.is_file():
        return ()
    lines = (line.strip() for line in path.read_text(encoding="utf-8").splitlines())
    return tuple(line for line in lines if line and not line.startswith("#"))
