"""The calculator's arithmetic: an expression evaluated from its syntax tree, never ``eval``, with limits that keep
one expression cheap (its length, its nesting, the size of any number in it).

Importing this module imports neither torch nor TRL.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

__all__ = ["MAX_DIGITS", "MAX_EXPRESSION_CHARS", "CalculatorError", "evaluate_expression", "format_number"]

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


def format_number(value: int | float) -> str:
    """``value`` as the calculator answers it: a whole float without its ``.0``, other floats to 12 digits."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.12g}" if isinstance(value, float) else str(value)
