"""Speculative decoding on transformers: the draft proposes ``k`` tokens, the target checks them in one forward.

Greedy (``temperature`` 0): the longest prefix agreeing with the target's greedy choices is kept and the target's
own next token appended, so the output is the target's greedy output whatever the draft proposes; a good draft only
makes each target forward yield more tokens. Sampling (``temperature`` > 0): speculative sampling (Leviathan et al.
2023, algorithm 1; Chen et al. 2023): proposal ``x`` drawn from the draft's ``q`` is kept with probability
``min(1, p(x) / q(x))`` under the target's ``p``; at the first rejection the token is drawn from the residual
``max(p - q, 0)`` normalised, and after ``k`` acceptances from ``p``; each token is then distributed as the target
sampling alone at that temperature. ``top_k`` and ``top_p`` apply as transformers' ``generate`` applies them
(its own warpers, :func:`~swiftcore_eagle3.draft.sampling_probs`), to ``p`` and ``q`` alike; the output is then
distributed as ``generate(do_sample=True, temperature=..., top_k=..., top_p=...)``'s.

The target keeps its KV cache across verification steps (``kv_cache=True``): each step feeds only the last chosen
token and the ``k`` proposals, and the rejected proposals are cropped off the cache (transformers'
``Cache.crop``). Linear-attention layers (Qwen3.5's gated delta rule) keep a recurrent state that ``crop`` cannot
roll back: for those models the state before the step is kept, and on a rejection the cache is cropped to before
the step, the state restored, and the kept tokens fed again (so a step with a rejection feeds ``k + 1`` plus the
kept tokens). The draft keeps its own cache the same way. ``kv_cache=False`` runs the target over the whole
sequence at each step (the reference the cached path is tested against).
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
    temperature: float = 0.0,
    generator: Any = None,
    kv_cache: bool = True,
    top_k: int = 0,
    top_p: float = 1.0,
) -> SpeculativeOutput:
    """Generate from ``target`` with ``draft`` (an Eagle3 head, :func:`~swiftcore_eagle3.draft.load_draft`)
    proposing ``num_speculative_tokens`` tokens per target forward.

    Args:
        target: a transformers causal LM (eval mode).
        draft: the Eagle3 draft head trained for ``target``.
        prompt_ids: the prompt's token ids (e.g. :meth:`~swiftcore.api.template.SampleEncoder.prompt`'s).
        max_new_tokens: at most this many tokens are generated.
        num_speculative_tokens: draft proposals per verification step.
        eos_token_ids: generation stops after the first of these (it is kept in ``tokens``).
        temperature: 0 for greedy; above 0, speculative sampling at this temperature (see the module docstring).
        generator: the ``torch.Generator`` sampling draws from (seed it for reproducible samples); None for torch's
            global one.
        kv_cache: keep the target's and the draft's KV caches across steps (False: rerun the whole sequence).
        top_k: when sampling, only the ``top_k`` most likely tokens (0: all), as ``generate``'s ``top_k``.
        top_p: when sampling, only the most likely tokens up to this probability mass (1: all), as ``generate``'s.

    Returns:
        The tokens (greedy: those ``target.generate(do_sample=False)`` gives; sampling: distributed as
        ``target.generate(do_sample=True, temperature=..., top_k=..., top_p=...)``'s) and the accepted proposals per
        step.
    """
    out = SpeculativeOutput(tokens=[])
    for tokens, accepted in speculative_steps(
        target,
        draft,
        prompt_ids,
        max_new_tokens=max_new_tokens,
        num_speculative_tokens=num_speculative_tokens,
        eos_token_ids=eos_token_ids,
        temperature=temperature,
        generator=generator,
        kv_cache=kv_cache,
        top_k=top_k,
        top_p=top_p,
    ):
        out.tokens.extend(tokens)
        if accepted is not None:
            out.accepted.append(accepted)
    return out


class _Target:
    """The target's forwards of one generation: over the whole sequence each time, or with a KV cache that only the
    new tokens run through and that :meth:`keep` rolls back past rejected ones."""

    def __init__(self, target: Any, aux_ids: list[int], kv_cache: bool) -> None:
        self.target = target
        self.aux_ids = aux_ids
        self.kv_cache = kv_cache
        self.device = next(target.parameters()).device
        self.cache: Any = None
        self.saved: list[tuple[Any, dict[int, Any]]] = []
        self.pending: list[int] = []  # the tokens of the last forward, while the cache holds them unverified

    def _run(self, ids: list[int]) -> Any:
        import torch

        from swiftcore_eagle3.draft import target_features

        return target_features(self.target, torch.tensor([ids], device=self.device), self.aux_ids, self.cache)

    def prefill(self, prompt: list[int]) -> Any:
        """The target's forward over the prompt (starting the cache)."""
        if not self.kv_cache:
            return self._run(prompt)
        from transformers import DynamicCache

        self.cache = DynamicCache(config=self.target.config)
        features = self._run(prompt)
        # after the prefill, as transformers' generate does: recording the past of a long prompt would be costly
        self.cache.activate_past_recording()
        return features

    def verify(self, seq: list[int], guesses: list[int]) -> Any:
        """The target's forward checking ``guesses`` after ``seq`` (the cache holding ``seq[:-1]``): features of
        ``seq[-1]`` and the guesses (all of ``seq + guesses`` without a cache)."""
        if not self.kv_cache:
            return self._run(seq + guesses)
        # the recurrent states crop cannot roll back (linear attention), kept to restore on a rejection
        self.saved = [
            (layer, {i: s.clone() for i, s in layer.recurrent_states.items() if s is not None})
            for layer in self.cache.layers
            if getattr(layer, "recurrent_states", None) and any(s is not None for s in layer.recurrent_states.values())
        ]
        self.pending = [seq[-1], *guesses]
        return self._run(self.pending)

    def keep(self, n: int) -> None:
        """Keep the first ``n`` tokens of the last :meth:`verify` forward in the cache, drop the others."""
        if not self.kv_cache:
            return
        drop = len(self.pending) - n
        if drop == 0 or not self.saved:
            self.cache.crop(-drop)  # crop(0) still trims linear-attention layers' recorded conv states
            return
        self.cache.crop(-len(self.pending))
        for layer, states in self.saved:
            for i, state in states.items():
                layer.recurrent_states[i].copy_(state)
        self._run(self.pending[:n])
        self.cache.crop(0)


def _accept_reject(guesses: list[int], q: list[Any], p: Any, generator: Any) -> tuple[int, int]:
    """Speculative sampling's acceptance test (Leviathan et al. 2023, algorithm 1): how many of ``guesses``
    (drawn from the distributions ``q``) are kept against the target's distributions ``p`` (``[k + 1, vocab]``), and
    the next token: from the residual ``max(p - q, 0)`` at the first rejection, else from ``p`` after the last
    guess."""
    import torch

    for i, (token, q_i) in enumerate(zip(guesses, q, strict=True)):
        ratio = float(p[i, token]) / max(float(q_i[token]), 1e-30)
        if float(torch.rand((), generator=generator, device=p.device)) >= ratio:
            return i, int(torch.multinomial(_residual(p[i], q_i.to(p.device)), 1, generator=generator))
    return len(guesses), int(torch.multinomial(p[len(guesses)], 1, generator=generator))


def _residual(p: Any, q: Any) -> Any:
    """The distribution a rejected position is drawn from: ``max(p - q, 0)`` normalised (``p`` where that is all
    zeros, which only rounding can make: a rejection needs ``q(x) > p(x)`` somewhere, so ``p > q`` elsewhere)."""
    residual = (p - q).clamp(min=0)
    total = float(residual.sum())
    return residual / total if total > 0 else p


def speculative_steps(
    target: Any,
    draft: Any,
    prompt_ids: list[int],
    *,
    max_new_tokens: int,
    num_speculative_tokens: int = 3,
    eos_token_ids: Iterable[int] = (),
    temperature: float = 0.0,
    generator: Any = None,
    kv_cache: bool = True,
    top_k: int = 0,
    top_p: float = 1.0,
) -> Iterator[tuple[list[int], int | None]]:
    """:func:`speculative_generate` one target forward at a time (for streaming).

    Yields:
        ``(new tokens, accepted proposals)`` per target forward: first the prompt's forward, its one token and
        None; then each verification step's kept tokens (the accepted proposals and the target's own next token) and
        how many proposals were accepted. The tokens stop after the first end token and at ``max_new_tokens``.
    """
    import torch
    from transformers import DynamicCache

    from swiftcore_eagle3.draft import draft_propose, sampling_probs

    if not prompt_ids:
        raise ValueError("prompt_ids is empty: give at least one token")
    if temperature < 0:
        raise ValueError(f"temperature {temperature}: give 0 (greedy) or more")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
        raise ValueError(f"top_k {top_k!r}: give an integer, 0 (all tokens) or more")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p {top_p!r}: give a probability mass in (0, 1]")
    if max_new_tokens < 1:
        return
    eos = set(eos_token_ids)
    runner = _Target(target, list(draft.config.eagle_aux_hidden_state_layer_ids), kv_cache)
    draft_cache = DynamicCache() if kv_cache else None
    seq = list(prompt_ids)
    features = runner.prefill(seq)
    last_logits = features.logits[0, -1]
    if temperature > 0:
        probs = sampling_probs(last_logits[None], temperature, top_k, top_p)[0]
        first = int(torch.multinomial(probs, 1, generator=generator))
    else:
        first = int(torch.argmax(last_logits))
    seq.append(first)
    done = 1
    yield [first], None
    aux = features.aux
    while done < max_new_tokens and seq[-1] not in eos:
        k = min(num_speculative_tokens, max_new_tokens - done)
        q: list[Any] = []
        guesses = draft_propose(
            draft, seq, aux, k, cache=draft_cache, temperature=temperature, generator=generator, proposal_probs=q,
            top_k=top_k, top_p=top_p,
        )  # fmt: skip
        features = runner.verify(seq, guesses)
        # The target's logits after seq, seq + guesses[:1], ..., seq + guesses: k + 1 rows.
        logits = features.logits[0, -(k + 1) :]
        if temperature > 0:
            p = sampling_probs(logits, temperature, top_k, top_p)
            accepted, next_token = _accept_reject(guesses, q, p, generator)
        else:
            choices = torch.argmax(logits, dim=-1).tolist()
            accepted = 0
            while accepted < k and guesses[accepted] == choices[accepted]:
                accepted += 1
            next_token = choices[accepted]
        eos_at = next((i for i, g in enumerate(guesses[:accepted]) if g in eos), None)
        if eos_at is not None:  # an accepted end token: generation stops after it
            accepted = eos_at + 1
            new = guesses[:accepted]
        else:
            new = guesses[:accepted] + [next_token]
        step_aux = features.aux[:, -(k + 1) :]
        aux = torch.cat([aux, step_aux[:, : len(new)]], dim=1)  # seq[-1] and the accepted guesses
        seq.extend(new)
        kept = new[: max_new_tokens - done]
        done += len(kept)
        yield kept, accepted
        if done < max_new_tokens and seq[-1] not in eos:
            runner.keep(len(new))


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
        temperature: float = 0.0,
        generator: Any = None,
        top_k: int = 0,
        top_p: float = 1.0,
    ) -> Iterator[tuple[list[int], int | None]]:
        """Generation one target forward at a time, greedy or (``temperature`` > 0, drawing from ``generator``, with
        ``top_k`` and ``top_p`` as ``generate`` applies them) speculative sampling: :func:`speculative_steps` with this
        decoder's draft."""
        return speculative_steps(
            self.target,
            self.draft,
            prompt_ids,
            max_new_tokens=max_new_tokens,
            num_speculative_tokens=num_speculative_tokens or self.num_speculative_tokens,
            eos_token_ids=eos_token_ids,
            temperature=temperature,
            generator=generator,
            top_k=top_k,
            top_p=top_p,
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
