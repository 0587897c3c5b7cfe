"""The Eagle3 draft head: speculators' :class:`~speculators.models.eagle3.Eagle3DraftModel`, built for a target,
fed with the target's hidden states, saved in speculators' format (what vLLM's ``--speculative-config`` loads) and
loaded back; and one proposal of ``k`` tokens, greedy or sampled (:func:`sampling_probs`).

What differs from speculators' own training script (``speculators.train``), and why:

- the target's hidden states come from the target in this process (transformers, ``output_hidden_states``), not
  from files a vLLM server wrote;
- the frozen ``verifier_norm`` is the identity and the "last hidden state" fed to the loss is the input of the
  target's output head (captured by a hook): speculators' Eagle3 normalises with ``x * w`` whatever the target,
  while Qwen3.5's and Gemma's final norm is ``x * (1 + w)``; taking the head's input needs no norm at all;
- the embeddings and output head are the target's, taken from the loaded model (speculators reads them back from
  the target's files by key names that multimodal checkpoints such as Qwen3.5's do not use);
- attention is ``eager`` (speculators' default, flex attention, is compiled for GPUs), and the loss is its ``eager``
  KL divergence (the fused one needs Triton).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swiftcore.api import SwiftcoreError

__all__ = [
    "TargetFeatures",
    "build_draft",
    "draft_propose",
    "load_draft",
    "token_frequencies",
    "vocab_mappings",
    "require_speculators",
    "sampling_probs",
    "save_draft",
    "target_features",
]

#: The transformer layer of the draft: Llama's, the one vLLM's Eagle3 drafts run (``LlamaForCausalLMEagle3``).
DRAFT_LAYER_TYPE = "llama"


def require_speculators() -> None:
    """Check that speculators can be imported.

    Raises:
        SwiftcoreError: it is not installed (or does not import), with the command that installs it.
    """
    try:
        import speculators.models.eagle3  # noqa: F401
    except ImportError as exc:
        raise SwiftcoreError(
            f"the eagle3 recipe needs speculators ({exc}); install it without its dependencies: pip install "
            "--no-deps -r plugins/eagle3/requirements-speculators.txt (or pip install swiftcore-plugin-eagle3"
            "[speculators] where torchvision and datasets<=5.1 may be installed)"
        ) from exc


def _text_config(target: Any) -> Any:
    config = target.config
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def _rope_theta(text: Any) -> float:
    params = getattr(text, "rope_parameters", None) or {}
    return float(params.get("rope_theta", getattr(text, "rope_theta", 10000.0)))


def build_draft(
    target: Any,
    target_path: str,
    *,
    aux_layer_ids: list[int],
    num_layers: int = 1,
    speculative_tokens: int = 3,
    seed: int = 0,
    draft_vocab_size: int | None = None,
    token_freq: dict[int, int] | None = None,
) -> Any:
    """A fresh Eagle3 draft head for ``target`` (a loaded transformers causal LM from ``target_path``).

    Its decoder layers are Llama layers of the target's width (hidden size, heads, head size, MLP size); its token
    embeddings and output head are copies of the target's, frozen (Eagle3 trains the layers, the ``fc`` fusing the
    target's ``aux_layer_ids`` hidden states, and the norms). Its vocabulary is the target's, or with
    ``draft_vocab_size`` below the target's, the ``draft_vocab_size`` most frequent tokens of ``token_freq``
    (:func:`vocab_mappings`): the output head is then the target's rows of those tokens.

    Raises:
        SwiftcoreError: an ``aux_layer_ids`` index is outside the target's ``0..N`` hidden states, or
            ``draft_vocab_size`` is outside ``1..vocab``.
    """
    require_speculators()
    import torch
    from speculators.config import SpeculatorsConfig, VerifierConfig
    from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig
    from speculators.proposals.greedy import GreedyTokenProposalConfig
    from transformers import LlamaConfig

    text = _text_config(target)
    n = text.num_hidden_layers
    bad = [i for i in aux_layer_ids if not 0 <= i <= n]
    if bad:
        raise SwiftcoreError(f"--aux-layers {bad}: the target has hidden states 0..{n} ({n} layers); pick within")
    vocab = text.vocab_size
    if draft_vocab_size is not None and not 1 <= draft_vocab_size <= vocab:
        raise SwiftcoreError(
            f"--draft-vocab-size {draft_vocab_size}: the target's vocabulary has {vocab} tokens; give 1 to {vocab} "
            "(or leave it out for the whole vocabulary)"
        )
    draft_vocab = draft_vocab_size or vocab
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    layer_config = LlamaConfig(
        vocab_size=text.vocab_size,
        hidden_size=text.hidden_size,
        intermediate_size=getattr(text, "intermediate_size", None) or 4 * text.hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=text.num_attention_heads,
        num_key_value_heads=getattr(text, "num_key_value_heads", None) or text.num_attention_heads,
        head_dim=head_dim,
        rms_norm_eps=getattr(text, "rms_norm_eps", 1e-6),
        max_position_embeddings=getattr(text, "max_position_embeddings", 4096),
        rope_parameters={"rope_type": "default", "rope_theta": _rope_theta(text)},
        tie_word_embeddings=False,
    )
    layer_config._attn_implementation = "eager"  # see the module docstring
    config = Eagle3SpeculatorConfig(
        transformer_layer_config=layer_config,
        draft_vocab_size=draft_vocab,
        eagle_aux_hidden_state_layer_ids=list(aux_layer_ids),
        speculators_config=SpeculatorsConfig(
            algorithm="eagle3",
            proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=speculative_tokens)],
            default_proposal_method="greedy",
            verifier=VerifierConfig.from_pretrained(str(target_path)),
        ),
    )
    torch.manual_seed(seed)
    draft = Eagle3DraftModel(config)
    if draft.use_draft_vocab:
        d2t, t2d = vocab_mappings(token_freq or {}, draft_vocab, vocab)
        draft.load_vocab_mappings(t2d, d2t)
    _attach_target(draft, target)
    return draft


def token_frequencies(samples: list[dict[str, Any]]) -> dict[int, int]:
    """How often each token id is trained on (``labels != -100``) in ``samples`` (encoded chats), counted by
    speculators' own ``save_token_frequency_distribution`` (its data generation's ``token_freq.pt``: the input ids
    under the loss mask)."""
    import tempfile

    import torch
    from speculators.train.vocab_mapping import save_token_frequency_distribution

    items = [
        {
            "input_ids": torch.tensor(list(s["input_ids"]), dtype=torch.long),
            "loss_mask": torch.tensor([x != -100 for x in s["labels"]]),
        }
        for s in samples
    ]
    with tempfile.TemporaryDirectory() as tmp:  # speculators writes the counts to a file, and reuses an old one
        path = Path(tmp) / "token_freq.pt"
        save_token_frequency_distribution(items, path)  # type: ignore[arg-type]  # iterates rows: a list will do
        return dict(torch.load(path, weights_only=True))


def vocab_mappings(token_freq: dict[int, int], draft_vocab_size: int, target_vocab_size: int) -> tuple[Any, Any]:
    """speculators' ``(d2t, t2d)`` for the ``draft_vocab_size`` most frequent tokens of ``token_freq`` (ties to the
    lower id, then the lowest unseen ids when too few tokens were seen): draft id ``i`` is target id
    ``i + d2t[i]`` (draft ids in target-id order), ``t2d`` the boolean mask of the target ids kept. Built by
    speculators' ``build_vocab_mappings_from_distribution``."""
    from speculators.train.vocab_mapping import build_vocab_mappings_from_distribution

    return build_vocab_mappings_from_distribution(token_freq, draft_vocab_size, target_vocab_size)


def _attach_target(draft: Any, target: Any) -> None:
    """Copy the target's embeddings and output head into ``draft`` (frozen; the head's rows of the draft vocabulary
    only, as speculators' ``load_verifier_weights`` selects them by ``t2d``), and make its ``verifier_norm`` the
    identity (the loss reads the target head's input, already normalised)."""
    import torch

    with torch.no_grad():
        draft.embed_tokens.weight.copy_(target.get_input_embeddings().weight)
        head = target.get_output_embeddings().weight
        if draft.use_draft_vocab:
            head = head[draft.t2d.to(device=head.device, dtype=torch.bool)]
        draft.lm_head.weight.copy_(head)
        draft.verifier_lm_head.weight.copy_(head)
    draft.verifier_norm = torch.nn.Identity()
    for name in ("embed_tokens", "lm_head", "verifier_lm_head"):
        getattr(draft, name).weight.requires_grad_(False)


def save_draft(draft: Any, out: str | Path) -> Path:
    """Write ``draft`` to ``out`` as speculators does (``config.json`` with ``speculators_config``, and
    ``model.safetensors`` without the verifier-only weights): the directory vLLM's ``--speculative-config
    '{"model": OUT, ...}'`` and :func:`load_draft` read."""
    out = Path(out)
    draft.save_pretrained(str(out))
    return out


def load_draft(path: str | Path, target: Any) -> Any:
    """Load a draft head saved by :func:`save_draft` (or speculators) from ``path``, for ``target`` (a loaded
    transformers model: the verifier's embeddings and head are taken from it, not read from disk).

    Raises:
        SwiftcoreError: ``path`` holds no speculators Eagle3 draft, or one of another width than ``target``.
    """
    import json

    require_speculators()
    from safetensors.torch import load_file
    from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig

    path = Path(path)
    try:
        raw = json.loads((path / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise SwiftcoreError(
            f"draft {str(path)!r}: no readable config.json ({exc}); give a --recipe eagle3 output"
        ) from exc
    if raw.get("speculators_model_type") != "eagle3":
        raise SwiftcoreError(
            f"draft {str(path)!r}: config.json is not a speculators Eagle3 draft "
            f"(speculators_model_type {raw.get('speculators_model_type')!r}); give a --recipe eagle3 output"
        )
    config = Eagle3SpeculatorConfig.from_pretrained(str(path))
    config.transformer_layer_config._attn_implementation = "eager"
    width = _text_config(target).hidden_size
    if config.transformer_layer_config.hidden_size != width:
        raise SwiftcoreError(
            f"draft {str(path)!r} has hidden size {config.transformer_layer_config.hidden_size}, the target "
            f"{width}: it was trained for another model"
        )
    draft = Eagle3DraftModel(config)
    state = load_file(str(path / "model.safetensors"))
    if draft.use_draft_vocab:  # the mappings first: the head's rows are taken from the target by t2d
        if "t2d" not in state or "d2t" not in state:
            raise SwiftcoreError(
                f"draft {str(path)!r} has draft_vocab_size {config.draft_vocab_size} but no d2t/t2d mappings in "
                "model.safetensors; train it again with --recipe eagle3 --draft-vocab-size"
            )
        draft.load_vocab_mappings(state["t2d"], state["d2t"])
    _attach_target(draft, target)
    missing, unexpected = draft.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.startswith(("verifier_", "t2d", "d2t"))]
    if missing or unexpected:
        raise SwiftcoreError(f"draft {str(path)!r}: weights missing {missing}, unexpected {unexpected}")
    return draft.eval()


@dataclass
class TargetFeatures:
    """One forward of the target over a sequence.

    Attributes:
        aux: the draft's input, the ``aux_layer_ids`` hidden states concatenated, ``[1, T, len(ids) * hidden]``.
        last: the input of the target's output head (its final, normalised hidden state), ``[1, T, hidden]``.
        logits: the target's logits, ``[1, T, vocab]``.
    """

    aux: Any
    last: Any
    logits: Any


def target_features(target: Any, input_ids: Any, aux_layer_ids: list[int], cache: Any = None) -> TargetFeatures:
    """Run ``target`` (frozen) on ``input_ids`` (``[1, T]``) and return what the draft reads and learns from.

    With ``cache`` (a transformers :class:`~transformers.Cache` holding the tokens before ``input_ids``) only
    ``input_ids`` run, attending to the cached ones, and the cache grows by them; without, the target runs on
    ``input_ids`` alone and keeps no cache."""
    import torch

    captured: dict[str, Any] = {}
    hook = target.get_output_embeddings().register_forward_hook(
        lambda _module, args, _out: captured.__setitem__("last", args[0])
    )
    kwargs: dict[str, Any] = {"use_cache": False} if cache is None else {"use_cache": True, "past_key_values": cache}
    try:
        with torch.no_grad():
            out = target(input_ids=input_ids, output_hidden_states=True, **kwargs)
    finally:
        hook.remove()
    aux = torch.cat([out.hidden_states[i] for i in aux_layer_ids], dim=-1)
    return TargetFeatures(aux=aux, last=captured["last"], logits=out.logits)


def _run_layers(draft: Any, hidden: Any, position_ids: Any, mask: Any, cache: Any) -> Any:
    position_embeddings = draft.rotary_emb(hidden, position_ids)
    for layer in draft.layers:
        hidden = layer(
            hidden,
            attention_mask=mask,
            position_ids=position_ids,
            past_key_values=cache,
            position_embeddings=position_embeddings,
        )
    return hidden


def sampling_probs(logits: Any, temperature: float, top_k: int = 0, top_p: float = 1.0) -> Any:
    """The distribution transformers' ``generate(do_sample=True, ...)`` samples from, for each row of ``logits``
    (``[n, vocab]``, float32): its own warpers in its order (temperature, then top-k, then top-p), then softmax.

    Speculative sampling applies this to the target's logits (``p``) and the draft's (``q``): its output is
    distributed as ``p``, the target sampling alone with these settings, whatever ``q`` is.

    Args:
        logits: ``[n, vocab]`` next-token logits.
        temperature: above 0.
        top_k: keep the ``top_k`` most likely tokens (0: all).
        top_p: keep the smallest set of most likely tokens whose probability reaches ``top_p`` (1: all).
    """
    import torch
    from transformers import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    scores = TemperatureLogitsWarper(temperature)(None, logits.float())
    if top_k:
        scores = TopKLogitsWarper(top_k=top_k)(None, scores)
    if top_p < 1.0:
        scores = TopPLogitsWarper(top_p=top_p)(None, scores)
    return torch.softmax(scores, dim=-1)


def _draft_token(
    draft: Any, hidden: Any, temperature: float = 0.0, generator: Any = None, top_k: int = 0, top_p: float = 1.0
) -> tuple[int, Any, Any]:
    """The draft's token (in the target's vocabulary) at the last position, the hidden state it passes to the next
    step (normalised under ``norm_output``, as in training), and with ``temperature`` > 0 the distribution the token
    was sampled from (:func:`sampling_probs` over the draft's vocabulary, placed in the target's; None when
    greedy)."""
    import torch

    if draft.config.norm_output:
        hidden = draft.norm(hidden)
        logits = draft.lm_head(hidden[:, -1])
    else:
        logits = draft.lm_head(draft.norm(hidden[:, -1]))
    probs = None
    if temperature > 0:
        draft_probs = sampling_probs(logits[:1], temperature, top_k, top_p)[0]
        token = int(torch.multinomial(draft_probs, 1, generator=generator))
        ids = torch.arange(draft_probs.shape[0], device=draft_probs.device)
        if draft.d2t is not None:
            ids = ids + draft.d2t.to(ids.device)
        probs = torch.zeros(draft.config.transformer_layer_config.vocab_size, device=draft_probs.device)
        probs[ids] = draft_probs
    else:
        token = int(torch.argmax(logits, dim=-1))
    if draft.d2t is not None:  # a reduced draft vocabulary: speculators maps draft id t to t + d2t[t]
        token += int(draft.d2t[token])
    return token, hidden[:, -1:], probs


def draft_propose(
    draft: Any,
    tokens: list[int],
    aux: Any,
    k: int,
    *,
    cache: Any = None,
    temperature: float = 0.0,
    generator: Any = None,
    proposal_probs: list[Any] | None = None,
    top_k: int = 0,
    top_p: float = 1.0,
) -> list[int]:
    """The draft's ``k`` guesses of the tokens after ``tokens``: greedy, or with ``temperature`` > 0 sampled from
    its distribution at that temperature, ``top_k`` and ``top_p`` (:func:`sampling_probs`; each appended to
    ``proposal_probs`` when given: what speculative sampling's acceptance test compares with the target's).

    ``aux`` holds the target's hidden states (:attr:`TargetFeatures.aux`) for ``tokens[:-1]``; the last token is
    the one the target just chose, not yet run through it. As in training (speculators' ``shift_batch``), the
    draft's position ``t`` pairs token ``t + 1`` with the target's hidden states at ``t``, at position id ``t + 1``;
    each further guess pairs the previous guess with the draft's own hidden state, one position later, attending
    to everything before it (the TTT steps' attention).

    With ``cache`` (a :class:`~transformers.DynamicCache` this function filled on earlier calls for a prefix of the
    same ``tokens``, or a fresh one) only the positions it does not hold yet run; it is left holding all
    ``len(tokens) - 1`` positions, the guesses cropped off.
    """
    import torch
    from transformers import DynamicCache

    n = len(tokens) - 1
    if aux.shape[1] != n:
        raise ValueError(f"aux covers {aux.shape[1]} positions, expected {n} (all tokens but the last)")
    if cache is None:
        cache = DynamicCache()
    done = cache.get_seq_length()
    if not 0 <= done < n:
        raise ValueError(f"the draft cache holds {done} positions; expected fewer than {n}")
    with torch.no_grad():
        ids = torch.tensor([tokens[done + 1 :]], dtype=torch.long, device=aux.device)
        hidden = torch.cat([draft.embed_tokens(ids), draft.fc(_fused_input(draft, aux[:, done:]))], dim=-1)
        positions = torch.arange(done + 1, n + 1, device=aux.device)[None]
        # causal over the new positions, all cached ones visible
        mask = torch.full((n - done, n), float("-inf"), dtype=hidden.dtype, device=aux.device).triu(done + 1)
        out = _run_layers(draft, hidden, positions, mask[None, None], cache)
        guesses: list[int] = []
        for _ in range(k):
            token, last, probs = _draft_token(draft, out, temperature, generator, top_k, top_p)
            guesses.append(token)
            if proposal_probs is not None:
                proposal_probs.append(probs)
            if len(guesses) == k:
                break
            embed = draft.embed_tokens(torch.tensor([[token]], device=aux.device))
            positions = positions[:, -1:] + 1
            out = _run_layers(draft, torch.cat([embed, last], dim=-1), positions, None, cache)
        if k > 1:
            cache.crop(-(k - 1))  # the guesses' positions: the next call feeds the verified tokens there
    return guesses


def _fused_input(draft: Any, aux: Any) -> Any:
    """The draft's ``fc`` input from the target's hidden states, normalised as its config says (as in training)."""
    import torch

    if draft.input_norm is not None:
        aux = draft.input_norm(aux)
    if draft.fc_norm is not None:
        chunks = aux.chunk(len(draft.fc_norm), dim=-1)
        aux = torch.cat([norm(chunk) for norm, chunk in zip(draft.fc_norm, chunks, strict=True)], dim=-1)
    return aux
