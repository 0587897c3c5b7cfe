"""Multi-turn environments for the RL recipes (``--environment NAME``): the built-in ``calculator``, the
``environment`` reward, and the episode loop that runs any environment inside a rollout.

An environment is an :class:`~swiftcore.api.EnvironmentSpec` some plugin registers
(``swiftcore_register_environments``); its factory makes one environment per episode (called with the run's
``--environment-option KEY=VALUE`` values as keyword arguments: :func:`environment_factory`), a gym env over chat
messages (:class:`~swiftcore.api.protocols.EnvironmentProtocol`): ``reset(row)`` returns the prompt record (its
``messages`` and the ``tools`` the family's template shows the model), ``step(reply)`` takes the model's reply as
the family's template parsed it (``content``, ``reasoning_content``, ``tool_calls``) and returns the tool messages
to append, whether the episode is done, and a reward contribution.

The episode loop (:class:`EpisodeRollout`, TRL's ``rollout_func``) generates, parses the reply with the family's
template (:meth:`Template.parse_response`), steps the environment, appends the tool messages as the template renders
them after that reply, and generates again, until the environment says done, the model replies without a tool
call, ``--max-turns`` replies were generated, or the ``--max-completion-length`` budget (all turns and tool results
together) is spent. The model's own tokens are kept verbatim (never re-tokenized); the tool-result tokens between
them are context, masked out of the loss (TRL's ``env_mask`` -> ``tool_mask``). The rewards see the last reply as
the completion and, by keyword, the episode (:data:`EPISODE_KEYWORDS`).

Importing this module imports neither torch nor TRL.
"""

from __future__ import annotations

import ast
import inspect
import json
import logging
import math
import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = [
    "CALCULATOR_TOOL",
    "EPISODE_KEYWORDS",
    "Calculator",
    "CalculatorError",
    "EpisodeRollout",
    "environment_factory",
    "environment_reward",
    "evaluate_expression",
    "tool_suffix_ids",
]

log = logging.getLogger("swiftcore.rl")

#: What the rewards get by keyword from a multi-turn rollout, one value per completion: ``messages`` (the episode's
#: conversation: the prompt's messages, then each parsed reply and tool message, ending with the last reply; the
#: ``reward_model`` reward scores it), ``tool_calls`` (how many tool results were fed back to the model), ``turns``
#: (replies generated) and ``env_reward`` (the sum of the environment's step rewards).
EPISODE_KEYWORDS = ("messages", "tool_calls", "turns", "env_reward")

# ---------------------------------------------------------------------------------------------- the calculator

#: The calculator's tool schema (OpenAI function format), shown to the model by the family's template.
CALCULATOR_TOOL = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression: numbers, + - * / // % **, parentheses.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string", "description": "e.g. (3 + 4) * 12"}},
            "required": ["expression"],
        },
    },
}

_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type, Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
#: Limits that keep one expression cheap: its length, its nesting, and the size of any intermediate number.
MAX_EXPRESSION_CHARS = 200
MAX_DIGITS = 100
_MAX_ABS = 10**MAX_DIGITS


class CalculatorError(ValueError):
    """An expression the calculator refuses or cannot evaluate (the message goes back to the model)."""


def _check_size(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        raise CalculatorError("the result is not a finite number")
    if abs(value) >= _MAX_ABS:
        raise CalculatorError(f"the result has more than {MAX_DIGITS} digits")
    return value


def _pow(base: Any, exponent: Any) -> Any:
    # Refuse before computing: 9**9**9 would run for minutes and fill memory.
    if base != 0 and exponent * math.log10(abs(base)) >= MAX_DIGITS:
        raise CalculatorError(f"the power has more than {MAX_DIGITS} digits")
    result = operator.pow(base, exponent)
    if isinstance(result, complex):
        raise CalculatorError("the result is not a real number")
    return result


def _evaluate(node: ast.AST, depth: int = 0) -> Any:
    if depth > 50:
        raise CalculatorError("the expression is nested too deeply")
    if isinstance(node, ast.Expression):
        return _evaluate(node.body, depth + 1)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return _check_size(node.value)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand, depth + 1))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left, depth + 1), _evaluate(node.right, depth + 1)
        try:
            if isinstance(node.op, ast.Pow):
                return _check_size(_pow(left, right))
            return _check_size(_BINARY[type(node.op)](left, right))
        except ZeroDivisionError:
            raise CalculatorError("division by zero") from None
        except OverflowError:
            raise CalculatorError("the result is too large") from None
    raise CalculatorError(f"{type(node).__name__} is not allowed (only numbers, + - * / // % ** and parentheses)")


def evaluate_expression(expression: str) -> int | float:
    """The value of an arithmetic expression, computed from its syntax tree (never ``eval``): numbers, ``+ - * / //
    % **``, unary signs and parentheses; no names, calls or attributes.

    Raises:
        CalculatorError: the expression is not one, is too long, divides by zero, or a number in it or its result
            would have more than :data:`MAX_DIGITS` digits (``2**10000`` is refused before it is computed).
    """
    if not isinstance(expression, str) or not expression.strip():
        raise CalculatorError("give the expression as a non-empty string")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"the expression is longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression.strip().replace("^", "**"), mode="eval")
    except (SyntaxError, ValueError) as exc:
        raise CalculatorError(f"not an arithmetic expression ({getattr(exc, 'msg', exc)})") from None
    return _evaluate(tree)


def _format(value: int | float) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.12g}" if isinstance(value, float) else str(value)


class Calculator:
    """The ``calculator`` environment: one tool, ``calculator(expression)``, evaluated safely
    (:func:`evaluate_expression`).

    ``reset(row)`` returns the row's record with the calculator added to its ``tools``; ``step(reply)`` answers each
    tool call with a tool message (the value, or ``error: ...`` for a malformed call, an unknown tool, a bad or
    refused expression, or a call past ``max_calls``) and ends the episode on a reply without tool calls. Its reward
    contribution comes on that last reply: 1.0 when the row has an ``answer`` column, the reply's final answer equals
    it (the ``accuracy`` reward's matching) and at least one calculator call succeeded in the episode; else 0.0.

    Args:
        max_calls: the most tool calls an episode may make (``--environment-option max_calls=N``): every call
            counts, malformed ones too, in the order the replies make them; the calls past it are answered
            ``error: ...`` without being evaluated (and count as errors). None: no limit (``--max-turns`` and the
            completion budget still bound an episode); 0: every call is refused.

    Raises:
        ValueError: ``max_calls`` is negative.
    """

    name = "calculator"

    def __init__(self, max_calls: int | None = None) -> None:
        if max_calls is not None and (isinstance(max_calls, bool) or not isinstance(max_calls, int) or max_calls < 0):
            raise ValueError(f"max_calls: {max_calls!r} must be a whole number >= 0 (0: every call is refused)")
        self.max_calls = max_calls
        self.answer: Any = None
        self.calls = 0
        self.successes = 0
        self.errors = 0

    def reset(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """Start an episode on ``row`` (its record and columns); the prompt record, with the calculator tool."""
        self.answer, self.calls, self.successes, self.errors = row.get("answer"), 0, 0, 0
        record = {k: v for k, v in row.items() if k in ("messages", "chat_template_kwargs", "system")}
        tools = [t for t in row.get("tools") or () if _tool_name(t) != self.name]
        return {**record, "tools": [*tools, CALCULATOR_TOOL]}

    def step(self, reply: Mapping[str, Any]) -> dict[str, Any]:
        """Answer the reply's tool calls; done (with the reward contribution) when it has none."""
        calls = reply.get("tool_calls") or []
        if not calls:
            return {"messages": [], "done": True, "reward": self._final_reward(str(reply.get("content") or ""))}
        return {"messages": [self._answer(call) for call in calls], "done": False, "reward": 0.0}

    def _answer(self, call: Any) -> dict[str, Any]:
        name = _tool_name(call) if isinstance(call, Mapping) else None
        self.calls += 1
        try:
            if self.max_calls is not None and self.calls > self.max_calls:
                raise CalculatorError(
                    f"no calls left: at most {self.max_calls} calculator call(s) per episode; give your answer"
                )
            if name != self.name:
                raise CalculatorError(f"unknown tool {name!r}; the only tool is 'calculator'")
            arguments = (call.get("function") or call).get("arguments")
            if isinstance(arguments, str):
                try:
                    arguments = json.loads(arguments) if arguments.strip() else {}
                except ValueError:
                    raise CalculatorError("the arguments are not a JSON object") from None
            if not isinstance(arguments, Mapping) or "expression" not in arguments:
                raise CalculatorError("call calculator with an 'expression' argument")
            expression = arguments["expression"]
            if isinstance(expression, int | float) and not isinstance(expression, bool):
                expression = str(expression)
            content = _format(evaluate_expression(expression))
            self.successes += 1
        except CalculatorError as exc:
            self.errors += 1
            content = f"error: {exc}"
        return {"role": "tool", "name": name or self.name, "content": content}

    def _final_reward(self, content: str) -> float:
        if self.answer is None or not self.successes:
            return 0.0
        from swiftcore_train import answers_match, extract_answer

        return float(answers_match(extract_answer(content), self.answer))


def _tool_name(item: Any) -> str | None:
    if not isinstance(item, Mapping):
        return None
    function = item.get("function")
    return (function if isinstance(function, Mapping) else item).get("name")


def environment_reward(completions: Sequence[str], *, env_reward: Sequence[float], **kwargs: Any) -> list[float]:
    """``environment``: the episode's reward from its environment (the sum of its step rewards)."""
    return [float(r) for r in env_reward]


# ---------------------------------------------------------------------------------------------- options


def _option_types(annotation: Any, default: Any) -> tuple[type, ...]:
    """The types a factory keyword takes, from its annotation (``int``, ``int | None``, ``Optional[float]``) or,
    without a usable one, its default's type (a default of None: any string). Empty: any string."""
    import types
    import typing

    if isinstance(annotation, type) and annotation is not inspect.Parameter.empty:
        return (annotation,)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = typing.get_args(annotation)
        if all(isinstance(a, type) for a in args):
            return tuple(args)
    if default is not inspect.Parameter.empty and default is not None:
        return (type(default),)
    return ()


_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


def _convert(value: str, kinds: tuple[type, ...]) -> Any:
    """``value`` (the string given) as the first of ``kinds`` it is; a ``ValueError`` if none."""
    if not kinds or str in kinds:
        return value
    text = value.strip()
    if type(None) in kinds and text.lower() in ("none", "null"):
        return None
    for kind in kinds:
        if kind is bool and text.lower() in _TRUE + _FALSE:
            return text.lower() in _TRUE
        if kind is int:
            try:
                return int(text)
            except ValueError:
                continue
        if kind is float:
            try:
                number = float(text)
            except ValueError:
                continue
            if math.isfinite(number):
                return number
        if kind not in (bool, int, float, type(None)):  # another class (a Path, an enum): built from the string
            try:
                return kind(text)
            except (TypeError, ValueError):
                continue
    raise ValueError(value)


def _type_names(kinds: tuple[type, ...]) -> str:
    names = {bool: "true or false", int: "a whole number", float: "a finite number", type(None): "none"}
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def environment_factory(
    factory: Callable[..., Any], options: Mapping[str, str], *, name: str = "?", provider: Any = None
) -> Callable[[], Any]:
    """The factory an episode loop calls, ``--environment-option KEY=VALUE`` bound to it as keyword arguments.

    The options an environment takes are its factory's keyword parameters (a class: its ``__init__``'s), and each
    value, given as a string, is converted to the type the parameter's annotation names (``int``, ``float``,
    ``bool``, ``str``, or a union of those and None; without one, its default's type; else it stays a string).
    A factory with ``**kwargs`` takes any key, its values as strings. With options, one environment is made here,
    so a value the factory itself refuses (``ValueError``/``TypeError``) fails before any model is loaded.

    Args:
        factory: the resolved ``EnvironmentSpec.factory``.
        options: key -> value, as :meth:`~swiftcore_recipe_rl.options.RolloutOptions.environment_options` gives.
        name: the environment's name, for messages.
        provider: its provider plugin, for messages.

    Raises:
        SwiftcoreError: a key the factory does not take (naming those it does), a value of the wrong type, or a value
            the factory refuses.
    """
    import functools

    from swiftcore.api import SwiftcoreError

    if not options:
        return factory
    who = f"environment {name!r}" + (f" ({provider})" if provider else "")
    try:
        try:
            signature = inspect.signature(factory, eval_str=True)
        except (NameError, TypeError, SyntaxError):  # an annotation that does not evaluate: go by the defaults
            signature = inspect.signature(factory)
    except (TypeError, ValueError):  # a callable without a signature (a builtin): take the options as strings
        signature = None
    params = {} if signature is None else dict(signature.parameters)
    any_key = signature is None or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    takes = {
        key: p for key, p in params.items()
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    }  # fmt: skip
    values: dict[str, Any] = {}
    for key, value in options.items():
        if key not in takes:
            if any_key:
                values[key] = value
                continue
            accepted = ", ".join(sorted(takes)) if takes else "no options"
            raise SwiftcoreError(
                f"--environment-option {key}={value}: {who} does not take {key!r}; it takes {accepted}"
                + ("" if takes else " (drop --environment-option)")
            )
        kinds = _option_types(takes[key].annotation, takes[key].default)
        try:
            values[key] = _convert(value, kinds)
        except ValueError:
            raise SwiftcoreError(
                f"--environment-option {key}={value}: {who} takes {key} as {_type_names(kinds)}, not {value!r}; "
                f"e.g. --environment-option {key}={_example(kinds)}"
            ) from None
    try:
        factory(**values)
    except (TypeError, ValueError) as exc:
        given = " ".join(f"{k}={v}" for k, v in options.items())
        raise SwiftcoreError(f"--environment-option {given}: {who} refused its options: {exc}") from None
    return functools.partial(factory, **values)


def _example(kinds: tuple[type, ...]) -> str:
    for kind, example in ((int, "2"), (float, "0.5"), (bool, "true")):
        if kind in kinds:
            return example
    return "VALUE"


# ---------------------------------------------------------------------------------------------- the episode loop


def tool_suffix_ids(
    template: Any, tokenizer: Any, record: Mapping[str, Any], messages: list, tool_messages: list
) -> list[int]:
    """The ids the family's template puts after a reply (ending at its stop word) when ``tool_messages`` follow it:
    the tool turn(s) and the next generation prompt, e.g. Qwen3.5's ``\\n<|im_start|>user\\n<tool_response>\\n...
    </tool_response><|im_end|>\\n<|im_start|>assistant\\n<think>\\n``.

    ``messages`` is the conversation up to and including that reply. The suffix is the text the template renders
    with the tool messages and a generation prompt, past the reply's stop word in its rendering without them.

    Raises:
        SwiftcoreError: the template renders the earlier turns differently once tool messages follow (its prefix
            is not kept), so no suffix can be appended to the model's own tokens.
    """
    from swiftcore.api import SwiftcoreError

    before = template.render({**record, "messages": messages}, add_generation_prompt=False)
    after = template.render({**record, "messages": [*messages, *tool_messages]}, add_generation_prompt=True)
    end = max((before.rfind(w) + len(w) for w in template.stop_words if w in before), default=len(before))
    if not after.startswith(before[:end]):
        raise SwiftcoreError(
            f"template {getattr(template, 'name', '?')!r} renders the conversation differently once a tool message "
            "follows a reply; multi-turn rollouts need a template that keeps the earlier turns as they are"
        )
    return [int(t) for t in tokenizer.encode(after[end:], add_special_tokens=False)]


class EpisodeRollout:
    """TRL's ``rollout_func(prompts, trainer)`` for ``--environment``: one episode per prompt (see the module).

    Args:
        factory: makes one environment per episode (the resolved ``EnvironmentSpec.factory``, its options bound:
            :func:`environment_factory`).
        codec: the run's :class:`~swiftcore_recipe_rl.rollout.PromptCodec` (the template and tokenizer).
        rows: prompt text -> the record it was encoded from (its columns come from the batch's rows).
        max_turns: the most replies per episode.
        name: the environment's name, for messages.
    """

    def __init__(
        self, factory: Callable[[], Any], codec: Any, rows: dict[str, dict], *, max_turns: int, name: str = "?"
    ) -> None:
        self.factory = factory
        self.codec = codec
        self.rows = rows
        self.max_turns = max_turns
        self.name = name
        #: The last batch's episodes (tests and logging): one dict per prompt.
        self.episodes: list[dict[str, Any]] = []

    def row(self, prompt: str, columns: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """What ``reset`` gets for ``prompt``: its record and its dataset row's columns."""
        return {**self.rows.get(prompt, {}), **{k: v for k, v in (columns or {}).items() if k != "prompt"}}

    def reset(self, row: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
        """A fresh environment and the prompt record its ``reset`` returned (checked)."""
        from swiftcore.api import SwiftcoreError

        env = self.factory()
        record = env.reset(row)
        if not isinstance(record, Mapping) or not isinstance(record.get("messages"), list):
            raise SwiftcoreError(
                f"environment {self.name!r}: reset(row) must return a record with a 'messages' list, "
                f"got {type(record).__name__}"
            )
        return env, dict(record)

    def __call__(self, prompts: list[str], trainer: Any) -> dict[str, Any]:
        """Run one episode per prompt; TRL's rollout output (``prompt_ids``, ``completion_ids``, ``logprobs``,
        ``env_mask``) and the episode keywords (:data:`EPISODE_KEYWORDS`) for the rewards."""
        inputs = getattr(trainer, "episode_inputs", None) or [{}] * len(prompts)
        episodes = []
        for prompt, columns in zip(prompts, inputs, strict=True):
            env, record = self.reset(self.row(prompt, columns))
            _, ids = self.codec.encode(record)
            episodes.append({
                "env": env, "record": record, "prompt_ids": ids, "completion_ids": [], "mask": [], "logprobs": [],
                "messages": list(record["messages"]), "turns": 0, "tool_calls": 0, "env_reward": 0.0,
                "last_ids": [], "done": False,
            })  # fmt: skip
        budget = int(trainer.max_completion_length)
        stops = set(int(t) for t in trainer.eos_token_ids)
        mode = "train" if trainer.model.training else "eval"
        n = trainer.num_generations if mode == "train" else trainer.num_generations_eval
        have_logprobs = True
        active = list(range(len(episodes)))
        while active:
            inputs_ids = [episodes[i]["prompt_ids"] + episodes[i]["completion_ids"] for i in active]
            generated, logprobs = self._generate(trainer, inputs_ids, n, budget, [episodes[i] for i in active])
            n = 1  # later turns: each episode has its own history
            have_logprobs = have_logprobs and logprobs is not None
            for k, i in enumerate(active):
                self._turn(episodes[i], list(generated[k]), logprobs[k] if logprobs is not None else None,
                           budget=budget, stops=stops)  # fmt: skip
            active = [i for i in active if not episodes[i]["done"]]
        self.episodes = episodes
        decoded = [self.codec.decode(e["last_ids"]) for e in episodes]
        return {
            "prompt_ids": [e["prompt_ids"] for e in episodes],
            "completion_ids": [e["completion_ids"] for e in episodes],
            "logprobs": [e["logprobs"] for e in episodes] if have_logprobs else None,
            "env_mask": [e["mask"] for e in episodes],
            "final_completion": decoded,
            **{key: [e[key] for e in episodes] for key in EPISODE_KEYWORDS},
        }

    def _generate(self, trainer: Any, ids: list[list[int]], n: int, budget: int, episodes: list[dict]) -> tuple:
        """One turn for the active episodes, no longer than the budget any of them has left."""
        config = getattr(trainer, "generation_config", None)
        room = max(budget - len(e["completion_ids"]) for e in episodes)
        saved = getattr(config, "max_new_tokens", None)
        if config is not None:
            config.max_new_tokens = max(1, min(room, saved or room))
        try:
            out = trainer._generate_single_turn(ids, None, {}, n)
        finally:
            if config is not None:
                config.max_new_tokens = saved
        return out if isinstance(out, tuple) else (out, None)

    def _turn(self, e: dict, ids: list[int], logprobs: list | None, *, budget: int, stops: set[int]) -> None:
        """Append one reply to episode ``e``; step its environment; append the tool messages or end it."""
        ids = ids[: budget - len(e["completion_ids"])]
        e["completion_ids"] += ids
        e["mask"] += [1] * len(ids)
        e["logprobs"] += list(logprobs[: len(ids)]) if logprobs is not None else [0.0] * len(ids)
        e["last_ids"] = ids
        e["turns"] += 1
        reply = self.codec.template.parse_response(self.codec.decode(ids))
        message = {"role": "assistant", "content": reply.get("content") or "", "tool_calls": reply.get("tool_calls")}
        if reply.get("reasoning_content"):
            message["reasoning_content"] = reply["reasoning_content"]
        e["messages"].append(message)
        if not ids or ids[-1] not in stops:  # cut at the budget: the reply is unfinished, the episode over
            e["done"] = True
            return
        try:
            out = e["env"].step(reply)
            tool_messages = list(out.get("messages") or ())
            e["env_reward"] += float(out.get("reward") or 0.0)
            done = bool(out.get("done")) or not tool_messages
        except Exception as exc:  # environment code may raise anything: the episode ends, the run goes on
            log.error("environment %r raised %s: %s; the episode ends", self.name, type(exc).__name__, exc)
            e["done"] = True
            return
        if done or e["turns"] >= self.max_turns:
            e["done"] = True
            return
        suffix = tool_suffix_ids(self.codec.template, self.codec.tokenizer, e["record"], e["messages"], tool_messages)
        if len(e["completion_ids"]) + len(suffix) >= budget:  # no room left for the tool result and a reply
            e["done"] = True
            return
        e["completion_ids"] += suffix
        e["mask"] += [0] * len(suffix)
        e["logprobs"] += [0.0] * len(suffix)
        e["messages"] += tool_messages
        e["tool_calls"] += len(tool_messages)
