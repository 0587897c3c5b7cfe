"""Hook implementations of swiftcore-template-gemma: the gemma4 and gemma4_launch templates."""

from __future__ import annotations

from swiftcore.api import TemplateSpec, hookimpl

SWIFTCORE_API = "1.0"

_PKG = "swiftcore_template_gemma"
_SPECIAL = ("<bos>", "<eos>", "<|turn>", "<turn|>", "<|think|>", "<|channel>", "<channel|>", "<|tool>", "<tool|>",
            "<|tool_call>", "<tool_call|>", "<|tool_response>", "<tool_response|>", '<|"|>', "<|image|>",
            "<|audio|>", "<|video|>")


@hookimpl
def swiftcore_register_templates() -> list[TemplateSpec]:
    """The gemma family's templates (each reproduces the official Jinja packaged in ``official/``)."""
    return [
        TemplateSpec(
            name="gemma4",
            factory=f"{_PKG}.gemma4:Gemma4Template",
            official=f"{_PKG}:official/gemma4.jinja",
            special_tokens=_SPECIAL,
            supports=("system", "thinking", "tools", "image", "audio", "video"),
            description="Gemma 4 (Google's updated template)",
        ),
        TemplateSpec(
            name="gemma4_launch",
            factory=f"{_PKG}.gemma4_launch:Gemma4LaunchTemplate",
            official=f"{_PKG}:official/gemma4_launch.jinja",
            special_tokens=_SPECIAL,
            supports=("system", "thinking", "tools", "image", "audio", "video"),
            description="Gemma 4, the template it launched with",
        ),
    ]
