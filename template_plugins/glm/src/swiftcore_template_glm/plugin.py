"""Hook implementations of swiftcore-template-glm: the ``glm5`` template."""

from __future__ import annotations

from swiftcore.api import TemplateSpec, hookimpl

SWIFTCORE_API = "1.0"

_PKG = "swiftcore_template_glm"


@hookimpl
def swiftcore_register_templates() -> list[TemplateSpec]:
    """GLM-5's template (reproduces the official Jinja packaged in ``official/``; GLM-4.7 renders the same)."""
    return [
        TemplateSpec(
            name="glm5",
            factory=f"{_PKG}.glm5:Glm5Template",
            official=f"{_PKG}:official/glm5.jinja",
            special_tokens=("[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>",
                            "<|endoftext|>", "<think>", "</think>", "<tool_call>", "</tool_call>", "<arg_key>",
                            "</arg_key>", "<arg_value>", "</arg_value>", "<tool_response>", "</tool_response>"),
            supports=("system", "thinking", "tools"),
            description="GLM-5 / GLM-4.7 ([gMASK]<sop>, <|role|> turns, thinking on by default, XML-ish tool calls)",
        ),
    ]
