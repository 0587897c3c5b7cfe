"""Hook implementations of swiftcore-template-deepseek: the deepseek_v4 template."""

from __future__ import annotations

from swiftcore.api import TemplateSpec, hookimpl

SWIFTCORE_API = "1.0"

_PKG = "swiftcore_template_deepseek"


@hookimpl
def swiftcore_register_templates() -> list[TemplateSpec]:
    """The deepseek family's templates."""
    return [
        TemplateSpec(
            name="deepseek_v4",
            factory=f"{_PKG}.deepseek_v4:DeepseekV4Template",
            # DeepSeek-V4 has no Jinja template: the official encoding is a document with golden pairs
            official=f"{_PKG}:official/ENCODING.md",
            special_tokens=("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>",
                            "<｜latest_reminder｜>", "<think>", "</think>", "｜DSML｜", "<｜action｜>", "<｜query｜>",
                            "<｜authority｜>", "<｜domain｜>", "<｜title｜>", "<｜read_url｜>"),
            supports=("system", "thinking", "tools"),
            description="DeepSeek-V4 (chat/thinking modes, DSML tool calls, reasoning_effort)",
        ),
    ]
