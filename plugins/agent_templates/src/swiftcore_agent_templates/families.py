"""The family templates agent templates wrap, and one factory per (family, agent format) pair.

Only families whose official chat template has no tool format are wrapped (a family with one trains and serves its
own). Each entry names the family template's class lazily, so importing this module imports no template plugin.
"""

from __future__ import annotations

from dataclasses import dataclass

from swiftcore.api import resolve
from swiftcore_agent_templates.agent import AgentTemplate, HermesTemplate, ReactTemplate

__all__ = ["AGENTS", "FAMILIES", "Family", "build"]


@dataclass(frozen=True)
class Family:
    """A family template an agent template wraps.

    Attributes:
        template: the family template's name (``--template``).
        factory: its class or factory, ``"module:attr"``.
        special_tokens: the special tokens it emits (its TemplateSpec's).
        supports: its TemplateSpec's features (``tools`` is added).
        tool_turn: ``str.format`` text of a user turn, for a template that renders no user text (None: it does).
    """

    template: str
    factory: str
    special_tokens: tuple[str, ...]
    supports: tuple[str, ...]
    tool_turn: str | None = None


FAMILIES: dict[str, Family] = {
    # OLMoE-Instruct (Tulu style): a user turn is <|user|>\n...\n, which it renders for the tool result.
    "olmoe": Family(
        "olmoe", "swiftcore_template_olmo.olmoe:OlmoeTemplate", ("<|endoftext|>", "<|padding|>"), ("system",)
    ),
    # Qwen3-ASR renders system text, audio and replies only: the result goes in a ChatML user turn of its own.
    "qwen3_asr": Family(
        "qwen3_asr",
        "swiftcore_template_qwen.qwen3_asr:Qwen3AsrTemplate",
        ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|audio_start|>", "<|audio_pad|>", "<|audio_end|>",
         "<asr_text>"),
        ("system", "audio"),
        tool_turn="<|im_start|>user\n{}<|im_end|>\n",
    ),
}  # fmt: skip

#: ``--agent-template`` name -> the agent format's class.
AGENTS: dict[str, type[AgentTemplate]] = {"hermes": HermesTemplate, "react": ReactTemplate}


def build(family: str, agent: str) -> AgentTemplate:
    """The agent template ``agent`` (``hermes``, ``react``) on family template ``family`` (``olmoe``, ``qwen3_asr``)."""
    spec = FAMILIES[family]
    base = resolve(spec.factory, what=f"template {family!r}")()
    base.name = family
    return AGENTS[agent](base, spec.tool_turn)


def olmoe_hermes() -> AgentTemplate:
    """Hermes tool calls on OLMoE's template."""
    return build("olmoe", "hermes")


def olmoe_react() -> AgentTemplate:
    """ReAct tool calls on OLMoE's template."""
    return build("olmoe", "react")


def qwen3_asr_hermes() -> AgentTemplate:
    """Hermes tool calls on Qwen3-ASR's template."""
    return build("qwen3_asr", "hermes")


def qwen3_asr_react() -> AgentTemplate:
    """ReAct tool calls on Qwen3-ASR's template."""
    return build("qwen3_asr", "react")
