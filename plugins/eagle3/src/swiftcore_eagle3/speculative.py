"""Greedy speculative decoding on transformers: the draft proposes ``k`` tokens, the target checks them in one
forward, the longest agreeing prefix is kept and the target's own next token appended. Every kept token is the
target's greedy choice, so the output is the target's greedy output, whatever the draft proposes; a good draft
only makes each target forward yield more tokens.

The target runs over the whole sequence at each verification (no KV cache): Qwen3.5's linear-attention state
cannot be rolled back past rejected tokens, and on CPU with tiny or small models the recomputation is cheap.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["SpeculativeOutput", "speculative_generate"]


@dataclass
class SpeculativeOutput:
    """What :func:`speculative_generate` produced.

    Attributes:
        tokens: the generated token ids (without the prompt), ending at the first end token when one came.
        accepted: per verification step, how many of the draft's proposals the target accepted.
    """

    tokens: list[int]
    accepted: list[int] = field(default_factory=list)

    @property
    def mean_accepted(self) -> float:
        """Draft tokens accepted per verification step (0 without a step); each step also yields the target's
        own token, so it yields ``mean_accepted + 1`` tokens per target forward."""
        return sum(self.accepted) / len(self.accepted) if self.accepted else 0.0


def speculative_generate(
    target: Any,
    draft: Any,
    prompt_ids: list[int],
    *,
    max_new_tokens: int,
    num_speculative_tokens: int = 3,
    eos_token_ids: Iterable[int] = (),
) -> SpeculativeOutput:
    """Generate greedily from ``target`` with ``draft`` (an Eagle3 head, :func:`~swiftcore_eagle3.draft.load_draft`)
    proposing ``num_speculative_tokens`` tokens per target forward.

    Args:
        target: a transformers causal LM (eval mode).
        draft: the Eagle3 draft head trained for ``target``.
        prompt_ids: the prompt's token ids (e.g. :meth:`~swiftcore.api.template.SampleEncoder.prompt`'s).
        max_new_tokens: at most this many tokens are generated.
        num_speculative_tokens: draft proposals per verification step.
        eos_token_ids: generation stops after the first of these (it is kept in ``tokens``).

    Returns:
        The tokens (those ``target.generate(do_sample=False)`` gives) and the accepted proposals per step.
    """
    import torch

    from swiftcore_eagle3.draft import draft_propose, target_features

    if not prompt_ids:
        raise ValueError("prompt_ids is empty: give at least one token")
    eos = set(eos_token_ids)
    aux_ids = list(draft.config.eagle_aux_hidden_state_layer_ids)
    device = next(target.parameters()).device
    seq = list(prompt_ids)
    features = target_features(target, torch.tensor([seq], device=device), aux_ids)
    first = int(torch.argmax(features.logits[0, -1]))
    seq.append(first)
    out = SpeculativeOutput(tokens=[first])
    aux = features.aux
    while len(out.tokens) < max_new_tokens and out.tokens[-1] not in eos:
        k = min(num_speculative_tokens, max_new_tokens - len(out.tokens))
        guesses = draft_propose(draft, seq, aux, k)
        features = target_features(target, torch.tensor([seq + guesses], device=device), aux_ids)
        # The target's choices after seq, seq + guesses[:1], ..., seq + guesses: k + 1 tokens.
        choices = torch.argmax(features.logits[0, len(seq) - 1 :], dim=-1).tolist()
        accepted = 0
        while accepted < k and guesses[accepted] == choices[accepted] and guesses[accepted] not in eos:
            accepted += 1
        if accepted < k and guesses[accepted] == choices[accepted]:
            accepted += 1  # an accepted end token: generation stops after it
            new = guesses[:accepted]
        else:
            new = guesses[:accepted] + [choices[accepted]]
        out.accepted.append(accepted)
        seq.extend(new)
        out.tokens.extend(new)
        aux = features.aux[:, : len(seq) - 1]
    tokens = out.tokens[:max_new_tokens]
    for i, token in enumerate(tokens):
        if token in eos:
            tokens = tokens[: i + 1]
            break
    out.tokens = tokens
    return out
