"""Greedy speculative decoding on transformers: the draft proposes ``k`` tokens, the target checks them in one
forward, the longest agreeing prefix is kept and the target's own next token appended. Every kept token is the
target's greedy choice, so the output is the target's greedy output, whatever the draft proposes; a good draft
only makes each target forward yield more tokens.

The target runs over the whole sequence at each verification (no KV cache): Qwen3.5's linear-attention state
cannot be rolled back past rejected tokens, and on CPU with tiny or small models the recomputation is cheap.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["SpeculativeDecoder", "SpeculativeOutput", "load_decoder", "speculative_generate", "speculative_steps"]


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
    out = SpeculativeOutput(tokens=[])
    for tokens, accepted in speculative_steps(
        target,
        draft,
        prompt_ids,
        max_new_tokens=max_new_tokens,
        num_speculative_tokens=num_speculative_tokens,
        eos_token_ids=eos_token_ids,
    ):
        out.tokens.extend(tokens)
        if accepted is not None:
            out.accepted.append(accepted)
    return out


def speculative_steps(
    target: Any,
    draft: Any,
    prompt_ids: list[int],
    *,
    max_new_tokens: int,
    num_speculative_tokens: int = 3,
    eos_token_ids: Iterable[int] = (),
) -> Iterator[tuple[list[int], int | None]]:
    """:func:`speculative_generate` one target forward at a time (for streaming).

    Yields:
        ``(new tokens, accepted proposals)`` per target forward: first the prompt's forward, its one token and
        None; then each verification step's kept tokens (the accepted proposals and the target's own next token) and
        how many proposals were accepted. The tokens stop after the first end token and at ``max_new_tokens``.
    """
    import torch

    from swiftcore_eagle3.draft import draft_propose, target_features

    if not prompt_ids:
        raise ValueError("prompt_ids is empty: give at least one token")
    if max_new_tokens < 1:
        return
    eos = set(eos_token_ids)
    aux_ids = list(draft.config.eagle_aux_hidden_state_layer_ids)
    device = next(target.parameters()).device
    seq = list(prompt_ids)
    features = target_features(target, torch.tensor([seq], device=device), aux_ids)
    first = int(torch.argmax(features.logits[0, -1]))
    seq.append(first)
    done = 1
    yield [first], None
    aux = features.aux
    while done < max_new_tokens and seq[-1] not in eos:
        k = min(num_speculative_tokens, max_new_tokens - done)
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
        seq.extend(new)
        aux = features.aux[:, : len(seq) - 1]
        kept = new[: max_new_tokens - done]
        done += len(kept)
        yield kept, accepted


class SpeculativeDecoder:
    """A draft bound to its target: what swiftcore-plugin-eagle3's ``swiftcore_speculative_decoder`` hook gives an
    inference engine (``swiftcore infer --draft DIR``).

    Args:
        target: the loaded transformers model (eval mode).
        draft: its Eagle3 draft head (:func:`~swiftcore_eagle3.draft.load_draft`).

    Attributes:
        num_speculative_tokens: the proposals per verification step the draft was trained for (its speculators
            config's greedy proposal, else 3).
    """

    def __init__(self, target: Any, draft: Any) -> None:
        self.target = target
        self.draft = draft
        methods = getattr(draft.config.speculators_config, "proposal_methods", None) or []
        self.num_speculative_tokens = int(getattr(methods[0], "speculative_tokens", 3)) if methods else 3

    def steps(
        self,
        prompt_ids: list[int],
        *,
        max_new_tokens: int,
        eos_token_ids: Iterable[int] = (),
        num_speculative_tokens: int | None = None,
    ) -> Iterator[tuple[list[int], int | None]]:
        """Greedy generation one target forward at a time: :func:`speculative_steps` with this decoder's draft."""
        return speculative_steps(
            self.target,
            self.draft,
            prompt_ids,
            max_new_tokens=max_new_tokens,
            num_speculative_tokens=num_speculative_tokens or self.num_speculative_tokens,
            eos_token_ids=eos_token_ids,
        )


def load_decoder(draft_dir: str, target: Any) -> SpeculativeDecoder | None:
    """The :class:`SpeculativeDecoder` for the draft in ``draft_dir``, or None when ``draft_dir`` holds no
    speculators Eagle3 draft (another plugin's draft format).

    Raises:
        SwiftcoreError: an Eagle3 draft that cannot serve ``target`` (:func:`~swiftcore_eagle3.draft.load_draft`).
    """
    import json
    from pathlib import Path

    from swiftcore_eagle3.draft import load_draft

    try:
        raw = json.loads((Path(draft_dir) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(raw, dict) or raw.get("speculators_model_type") != "eagle3":
        return None
    weights = next(target.parameters())
    # On the target's device and in its dtype: the draft reads the target's hidden states.
    return SpeculativeDecoder(target, load_draft(draft_dir, target).to(device=weights.device, dtype=weights.dtype))
