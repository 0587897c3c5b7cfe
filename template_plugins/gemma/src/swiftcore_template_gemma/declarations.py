"""Gemma 4's compact tool-declaration and argument syntax (``<|"|>`` is the string quote token).

Python versions of the official template's ``format_argument``, ``format_parameters`` and
``format_function_declaration`` macros, including Jinja's ``dictsort`` order (case-insensitive keys).
``launch=True`` gives the launch template's variant (standard keys always filtered, ``nullable`` before
the type-specific parts, literal commas before ``properties``/``required``/``items``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["Q", "dictsort", "format_argument", "format_declaration", "format_tool_response"]

Q = '<|"|>'
_STANDARD_KEYS = ("description", "type", "properties", "required", "nullable")


def dictsort(mapping: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """Items sorted like Jinja's ``dictsort`` (by key, case-insensitively)."""
    return sorted(mapping.items(), key=lambda kv: kv[0].lower() if isinstance(kv[0], str) else kv[0])


def _upper(value: Any) -> str:
    return str(value).upper()


def format_argument(argument: Any, escape_keys: bool = True) -> str:
    """A value in Gemma's argument syntax (strings quoted with ``<|"|>``, maps sorted by key)."""
    if isinstance(argument, str):
        return Q + argument + Q
    if isinstance(argument, bool):
        return "true" if argument else "false"
    if isinstance(argument, Mapping):
        inner = ",".join((Q + str(k) + Q if escape_keys else str(k)) + ":" + format_argument(v, escape_keys)
                         for k, v in dictsort(argument))
        return "{" + inner + "}"
    if isinstance(argument, (list, tuple)):
        return "[" + ",".join(format_argument(v, escape_keys) for v in argument) + "]"
    return str(argument)


def _quoted_list(items: Any) -> str:
    return "[" + ",".join(Q + str(i) + Q for i in items) + "]"


def format_parameters(properties: Mapping[str, Any], filter_keys: bool = False, launch: bool = False) -> str:
    """The official ``format_parameters`` macro."""
    if launch:
        return _format_parameters_launch(properties)
    out = []
    for key, value in dictsort(properties):
        if filter_keys and key in _STANDARD_KEYS:
            continue
        parts: list[str] = []
        p_type = _upper(value.get("type", ""))
        if value.get("description"):
            parts.append("description:" + Q + str(value["description"]) + Q)
        if p_type == "STRING":
            if value.get("enum"):
                parts.append("enum:" + format_argument(value["enum"]))
        elif p_type == "ARRAY":
            items = value.get("items")
            if isinstance(items, Mapping) and items:
                parts.append("items:{" + _format_items(items) + "}")
        if value.get("nullable"):
            parts.append("nullable:true")
        if p_type == "OBJECT":
            props = value.get("properties")
            if isinstance(props, Mapping):
                parts.append("properties:{" + format_parameters(props) + "}")
            elif isinstance(value, Mapping):
                parts.append("properties:{" + format_parameters(value, filter_keys=True) + "}")
            if value.get("required"):
                parts.append("required:" + _quoted_list(value.get("required") or []))
        parts.append("type:" + Q + p_type + Q + "}")
        # the macro puts commas between the parts it emits (the closing '}' rides on the last one)
        out.append(str(key) + ":{" + ",".join(parts))
    return ",".join(out)


def _format_parameters_launch(properties: Mapping[str, Any]) -> str:
    out = []
    for key, value in dictsort(properties):
        if key in _STANDARD_KEYS:
            continue
        text = str(key) + ":{"
        add_comma = False
        p_type = _upper(value.get("type", ""))
        if value.get("description"):
            text += "description:" + Q + str(value["description"]) + Q
            add_comma = True
        if value.get("nullable"):
            text += "," if add_comma else ""
            add_comma = True
            text += "nullable:true"
        if p_type == "STRING":
            if value.get("enum"):
                text += "," if add_comma else ""
                add_comma = True
                text += "enum:" + format_argument(value["enum"])
        elif p_type == "OBJECT":
            props = value.get("properties")
            inner = props if isinstance(props, Mapping) else value
            text += ",properties:{" + _format_parameters_launch(inner) + "}"
            if value.get("required"):
                text += ",required:" + _quoted_list(value.get("required") or [])
        elif p_type == "ARRAY":
            items = value.get("items")
            if isinstance(items, Mapping) and items:
                text += ",items:{" + _format_items(items, launch=True) + "}"
        text += ("," if add_comma else "") + "type:" + Q + p_type + Q + "}"
        out.append(text)
    return ",".join(out)


def _format_items(items: Mapping[str, Any], launch: bool = False) -> str:
    out = []
    for item_key, item_value in dictsort(items):
        if item_value is None:
            continue
        if item_key == "properties":
            inner = format_parameters(item_value, launch=launch) if isinstance(item_value, Mapping) else ""
            out.append("properties:{" + inner + "}")
        elif item_key == "required":
            out.append("required:" + _quoted_list(item_value))
        elif item_key == "type":
            if isinstance(item_value, str):
                out.append("type:" + format_argument(_upper(item_value)))
            else:
                out.append("type:" + format_argument([_upper(v) for v in item_value]))
        else:
            out.append(str(item_key) + ":" + format_argument(item_value))
    return ",".join(out)


def format_declaration(tool: Mapping[str, Any], launch: bool = False) -> str:
    """The official ``format_function_declaration`` macro, trimmed (as the template trims it)."""
    function = tool["function"]
    text = "declaration:" + str(function.get("name", "")) + "{description:" + Q + str(function.get("description", ""))
    text += Q
    params = function.get("parameters")
    if params:
        text += ",parameters:{"
        if params.get("properties"):
            text += "properties:{" + format_parameters(params.get("properties", {}), launch=launch) + "},"
        if params.get("required"):
            text += "required:" + _quoted_list(params.get("required", [])) + ","
        if params.get("type"):
            text += "type:" + Q + _upper(params.get("type", "")) + Q + "}"
    if "response" in function:
        response = function["response"]
        text += ",response:{"
        if response.get("description"):
            text += "description:" + Q + str(response.get("description", "")) + Q + ","
        if _upper(response.get("type", "")) == "OBJECT":
            text += "type:" + Q + "OBJECT" + Q + "}"
    return (text + "}").strip()


def format_tool_response(name: str, response: Any) -> str:
    """The official ``format_tool_response_block`` macro."""
    if isinstance(response, Mapping):
        body = "response:" + name + "{" + ",".join(
            str(k) + ":" + format_argument(v, escape_keys=False) for k, v in dictsort(response)) + "}"
    else:
        body = "response:" + name + "{value:" + format_argument(response, escape_keys=False) + "}"
    return "<|tool_response>" + body + "<tool_response|>"
