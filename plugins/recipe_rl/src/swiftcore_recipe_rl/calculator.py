"""The built-in ``calculator`` environment (``--environment calculator``): one tool, ``calculator(expression)``,
evaluated safely (:func:`~swiftcore_recipe_rl.expression.evaluate_expression`), and a reward for a correct final
answer reached with a call.

An environment is a gym env over chat messages (:class:`~swiftcore.api.protocols.EnvironmentProtocol`):
``reset(row)`` returns the prompt record (its ``messages`` and the ``tools`` the family's template shows the model),
``step(reply)`` takes the model's reply as the family's template parsed it (``content``, ``reasoning_content``,
``tool_calls``) and returns the tool messages to append, whether the episode is done, and a reward contribution.
The episode loop that drives one is :mod:`swiftcore_recipe_rl.episodes`.

Importing this module imports neither torch nor TRL.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from swiftcore_recipe_rl.expression import CalculatorError, evaluate_expression, format_number

__all__ = ["CALCULATOR_TOOL", "Calculator"]

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


class Calculator:
    """The ``calculator`` environment: one tool, ``calculator(expression)``, evaluated safely
    (:func:`~swiftcore_recipe_rl.expression.evaluate_expression`).

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
            content = format_number(evaluate_expression(expression))
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
