"""Hook implementations of swiftcore-template-mimo: the mimo_v2 template."""

from __future__ import annotations

from swiftcore.api import TemplateSpec, hookimpl

SWIFTCORE_API = "1.0"

_PKG = "swiftcore_template_mimo"


@hookimpl
def swiftcore_register_templates() -> list[TemplateSpec]:
    """MiMo-V2-Flash's template (reproduces the Jinja packaged in ``official/``)."""
    return [
        TemplateSpec(
            name="mimo_v2",
            factory=f"{_PKG}.mimo_v2:MimoV2Template",
            official=f"{_PKG}:official/mimo_v2.jinja",
            special_tokens=("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>",
                            "</tool_call>", "<tool_response>", "</tool_response>"),
            supports=("system", "thinking", "tools"),
            description="MiMo-V2-Flash (ChatML, thinking off by default, XML tool calls)",
        ),
    ]
