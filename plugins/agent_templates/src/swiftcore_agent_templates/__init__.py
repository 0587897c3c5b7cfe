"""swiftcore-plugin-agent-templates: tool calls (Hermes, ReAct) for families whose official template has none.

``swiftcore train --agent-template hermes`` on OLMoE or Qwen3-ASR renders the tools, calls and results in the
family's own chat template (see :mod:`~swiftcore_agent_templates.agent`); the agent templates are registered as
``olmoe_hermes``, ``olmoe_react``, ``qwen3_asr_hermes`` and ``qwen3_asr_react``. Importing this package imports no
template plugin, torch or transformers.
"""

from __future__ import annotations

from swiftcore_agent_templates.agent import AgentTemplate, HermesTemplate, ReactTemplate
from swiftcore_agent_templates.families import AGENTS, FAMILIES, Family, build

__all__ = ["AGENTS", "FAMILIES", "AgentTemplate", "Family", "HermesTemplate", "ReactTemplate", "build"]

SWIFTCORE_API = "1.5"
