"""The interfaces plugins implement, as :class:`typing.Protocol` classes (vLLM's style): what the core calls.

A plugin's objects need not inherit from the core's base classes (:class:`~swiftcore.api.template.Template`,
:class:`~swiftcore_infer.Engine`, :class:`~swiftcore_megatron.MegatronBridge`) — though that is the
easy way — only provide these members. The contract kit's ``references-conform`` rule checks every lazy
reference of a plugin's specs against the protocol its field names (:data:`REFERENCE_PROTOCOLS`), so a template
factory that returns something without ``encode`` fails in the plugin's own tests, not in a user's run.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import pluggy

    from swiftcore._plugins import PluginInfo
    from swiftcore.registry import Registry

__all__ = [
    "REFERENCE_PROTOCOLS",
    "BridgeProtocol",
    "EngineProtocol",
    "EnvironmentProtocol",
    "PluginSet",
    "RecipeRun",
    "RewardProtocol",
    "TemplateProtocol",
    "conformance_problems",
    "protocol_members",
]


@runtime_checkable
class TemplateProtocol(Protocol):
    """A chat template: renders (official text), encodes (ids and loss labels) and parses replies."""

    def render(self, record: Mapping[str, Any] | list, add_generation_prompt: bool = False) -> str:
        """The conversation as the official template renders it."""

    def encode(self, tokenizer: Any, record: Mapping[str, Any] | list, **options: Any) -> Any:
        """Token ids and labels of a training record (the train/serve rule)."""

    def encode_batch(self, tokenizer: Any, records: Sequence[Any], **options: Any) -> list[Any]:
        """:meth:`encode` for many records."""

    def parse_response(self, text: str) -> dict[str, Any]:
        """A generated reply split into content, reasoning and tool calls."""

    def thinking_mode(self, record: Any) -> bool | None:
        """The thinking mode a record is trained and served in (None: the template has no switch)."""


@runtime_checkable
class EngineProtocol(Protocol):
    """An inference engine (what a backend's factory returns): generate, stream, adapters, weight updates."""

    def generate(self, records: Any, sampling: Any = None, **kwargs: Any) -> Any:
        """Replies to chat records or prompts."""

    def generate_requests(self, requests: Sequence[Any], *, batch_size: int = 8) -> list[Any]:
        """One :class:`~swiftcore_infer.types.Generation` per request."""

    def stream(self, request: Any) -> Iterator[Any]:
        """Deltas of one reply as it is generated."""

    def stream_many(self, requests: Sequence[Any]) -> Iterator[tuple[int, Any]]:
        """Deltas of several replies, interleaved."""

    def load_adapter(self, name: str, path: Any) -> None:
        """Load a LoRA adapter under ``name``."""

    def close(self) -> None:
        """Free the engine's resources."""


@runtime_checkable
class BridgeProtocol(Protocol):
    """A Hugging Face <-> Megatron-core bridge: the model it builds and the weight mapping rules."""

    def rules(self) -> list[Any]:
        """The per-tensor mapping rules (HF name <-> mcore name, with the split for tensor parallelism)."""

    def transformer_config(self, *, tp: int = 1, ep: int = 1, params_dtype: Any = None) -> Any:
        """megatron-core's ``TransformerConfig`` for the checkpoint."""

    def build_model(self, *, tp: int = 1, ep: int = 1, params_dtype: Any = None) -> Any:
        """The megatron-core model, on this rank's shard."""

    def validate_parallelism(self, tp: int, ep: int) -> None:
        """Refuse sizes the architecture cannot be split by, before anything is built."""


class PluginSet(Protocol):
    """The loaded plugins a command, recipe, hook or engine is handed (:func:`swiftcore.api.load_plugins` makes one):
    the pluggy manager, the registry of every spec by kind and name, and what was discovered and loaded."""

    pm: pluggy.PluginManager
    infos: dict[str, PluginInfo]
    explicit: set[str]
    resolved_specs: list[str]

    @property
    def registry(self) -> Registry:
        """Specs by kind and name (``registry.get("model", "qwen3_5")``), conflicts named when used."""

    def loaded(self) -> list[PluginInfo]:
        """The plugins that are registered, built-ins included."""

    def child_env(self, env: Mapping[str, str] | None = None) -> dict[str, str]:
        """An environment whose ``SWIFTCORE_PLUGINS`` makes a child process load this same set."""


class RecipeRun(Protocol):
    """A recipe's ``run``: ``run(cfg, plugins, options) -> TrainResult``; ``cfg`` is swiftcore-train's ``TrainConfig``
    (or the recipe's own subclass), ``options`` the values of the options the recipe's plugins added."""

    def __call__(self, cfg: Any, plugins: PluginSet, options: Mapping[str, Any]) -> Any:
        """Train, and say where the outputs are."""


class RewardProtocol(Protocol):
    """A reward function (``RewardSpec.function``): ``reward(completions, **kwargs) -> list[float]``.

    ``kwargs`` hold ``prompts``, ``options`` (the reward's ``--reward-option`` values) and the dataset columns the
    spec names, each a list aligned with ``completions``; more keywords may come in later versions, so the
    function must take ``**kwargs``. It returns one float per completion (NaN or an exception: the run's
    fallback reward for those samples).
    """

    def __call__(self, completions: list[str], **kwargs: Any) -> list[float]:
        """One score per completion."""


@runtime_checkable
class EnvironmentProtocol(Protocol):
    """A multi-turn RL environment (what ``EnvironmentSpec.factory()`` returns, one per episode), a gym env over chat.

    ``reset(row)`` gets the dataset row (its record and columns) and returns the prompt record to generate from
    (``messages``, and ``tools`` the template shows). ``step(reply)`` gets the model's reply as the family's template
    parsed it (``content``, ``reasoning_content``, ``tool_calls``) and returns a mapping: ``messages`` (tool
    messages, ``{"role": "tool", ...}``, appended to the conversation), ``done`` (end the episode) and ``reward``
    (optional, summed over the episode). It should answer a malformed tool call with an error message, not raise.
    """

    def reset(self, row: Mapping[str, Any]) -> Mapping[str, Any]:
        """Start an episode; the prompt record."""

    def step(self, reply: Mapping[str, Any]) -> Mapping[str, Any]:
        """One turn: ``{"messages": [...], "done": bool, "reward": float}``."""


#: (spec kind, field) -> what the reference must be: a protocol the object (or the class) provides, or
#: ``"callable:N"`` for a function taking N positional arguments (``"class"`` for a class).
REFERENCE_PROTOCOLS: dict[tuple[str, str], Any] = {
    ("template", "factory"): TemplateProtocol,
    ("bridge", "factory"): BridgeProtocol,
    ("backend", "factory"): "callable:2",  # factory(model_dir, plugins, **options) -> EngineProtocol
    ("backend", "probe"): "callable:0",
    ("recipe", "run"): "callable:3",
    ("recipe", "config"): "class",
    ("reward", "function"): RewardProtocol,
    ("environment", "factory"): EnvironmentProtocol,
    ("model", "model_class"): "class",  # e.g. "transformers:Qwen3ForCausalLM"
    ("model", "loader"): "callable:1",  # loader(model_dir, *, spec, torch_dtype, **kwargs)
    ("model", "tiny_config"): "callable:0",
    ("model", "tiny_tokenizer"): "callable:1",
    ("model", "processor"): "callable:2",  # processor(model_dir, tokenizer) -> a transformers-style processor
    ("head", "factory"): "callable:1",  # factory(backbone, *, spec, **options)
    ("head", "recipe"): "callable:3",
    ("head", "predictor"): "callable:1",
    ("command", "target"): None,  # a click.Command: checked where commands are loaded
}


def protocol_members(protocol: type) -> list[str]:
    """The methods a protocol asks for (its own, not ``object``'s)."""
    return sorted(name for name, value in vars(protocol).items() if callable(value) and not name.startswith("_"))


def _accepts(func: Callable[..., Any], n: int) -> bool:
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):  # builtins and C callables: cannot tell, trust them
        return True
    # The documented keywords (``spec=``, ``torch_dtype=``) are passed by name: only the positional arity counts.
    keywords = {
        name: None
        for name, param in signature.parameters.items()
        if param.kind is inspect.Parameter.KEYWORD_ONLY and param.default is inspect.Parameter.empty
    }
    try:
        signature.bind(*([None] * n), **keywords)
    except TypeError:
        return False
    return True


def conformance_problems(obj: Any, expected: Any, what: str) -> list[str]:
    """What ``obj`` (a resolved reference, named ``what`` in messages) lacks of ``expected``.

    A protocol is checked on the object, or on the class (a factory may name the class) or on what a
    zero-argument factory function returns (called only when it is a plain function taking no arguments).
    """
    if expected is None:
        return []
    if expected == "class":
        return [] if inspect.isclass(obj) else [f"{what}: expected a class, got {type(obj).__name__}"]
    if isinstance(expected, str) and expected.startswith("callable:"):
        n = int(expected.partition(":")[2])
        if not callable(obj):
            return [f"{what}: expected a callable, got {type(obj).__name__}"]
        if not _accepts(obj, n):
            return [f"{what}: {getattr(obj, '__name__', obj)}{_signature(obj)} cannot be called with {n} argument(s)"]
        return []
    if "__call__" in vars(expected):  # a callable protocol: the signature is the contract
        return _call_problems(obj, expected, what)
    target = obj
    if inspect.isfunction(obj) and _accepts(obj, 0) and not _accepts(obj, 1):
        target = obj()  # a zero-argument factory returning the object
    members = protocol_members(expected)
    missing = [m for m in members if not callable(getattr(target, m, None))]
    if missing:
        return [f"{what}: {expected.__name__} needs {', '.join(missing)}; {target!r} has none"]
    return []


def _call_problems(obj: Any, protocol: type, what: str) -> list[str]:
    """What keeps ``obj`` from being called as ``protocol.__call__`` says: its positional arity, and ``**kwargs``
    when the protocol passes open-ended keywords."""
    if not callable(obj):
        return [f"{what}: expected a callable ({protocol.__name__}), got {type(obj).__name__}"]
    wanted = inspect.signature(protocol.__call__)
    params = list(wanted.parameters.values())[1:]  # without self
    n = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)
    name = getattr(obj, "__name__", type(obj).__name__)
    if not _accepts(obj, n):
        return [f"{what}: {name}{_signature(obj)} cannot be called with {n} argument(s) ({protocol.__name__})"]
    try:
        got = inspect.signature(obj)
    except (TypeError, ValueError):
        return []
    open_keywords = any(p.kind is p.VAR_KEYWORD for p in params)
    if open_keywords and not any(p.kind is p.VAR_KEYWORD for p in got.parameters.values()):
        return [f"{what}: {name}{got} must take **kwargs ({protocol.__name__} passes more keywords than it names)"]
    return []


def _signature(func: Any) -> str:
    try:
        return str(inspect.signature(func))
    except (TypeError, ValueError):
        return "(...)"
