"""Speculative decoding's verification: the KV-cached path gives the uncached path's tokens while the target only
runs the new tokens each step (counted at the target's forward), on a pure-attention target (a tiny Llama, cropped
with transformers' ``Cache.crop``) and on the tiny Qwen3.5 (linear attention: its recurrent state restored and the
kept tokens fed again); and speculative sampling's tokens are distributed as the target's own sampling (a
chi-square test over seeded samples of the tokens the draft proposes, on a tiny vocabulary; also with top-k and
top-p, as ``generate`` applies them), a test that the wrong residual (sampling ``p`` after a rejection instead of
``max(p - q, 0)``) fails.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

# make test (CI) leaves this module to make test-all: the KV-cached verification against the uncached one; token-
# identical speculative output stays in make test (test_outcomes.py, test_serving.py) (docs/testing.md, "Two tiers").
pytestmark = pytest.mark.extended

K = 3


def _count_fed(target: Any) -> tuple[list[int], Any]:
    """The lengths of ``input_ids`` the target's forwards receive, appended as they run; and the hook's handle."""
    fed: list[int] = []
    handle = target.register_forward_pre_hook(
        lambda _module, _args, kwargs: fed.append(kwargs["input_ids"].shape[1]), with_kwargs=True
    )
    return fed, handle


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    """A random 2-layer Llama with an 8-token vocabulary, saved (the draft's verifier config reads it); its output
    head scaled up so its next-token distributions are peaked (far from the draft's)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=8, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, max_position_embeddings=64, tie_word_embeddings=False,
    )  # fmt: skip
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(60.0)
    path = tmp_path_factory.mktemp("tiny-llama") / "model"
    model.save_pretrained(path)
    return model, path


@pytest.fixture(scope="module")
def llama_draft(tiny_llama: tuple[Any, Path]) -> Any:
    """A random Eagle3 draft for the tiny Llama, its layers perturbed so its proposals differ from the target's."""
    import torch
    from swiftcore_eagle3.draft import build_draft

    target, path = tiny_llama
    draft = build_draft(target, str(path), aux_layer_ids=[0, 1, 2], seed=0)
    with torch.no_grad():
        for p in draft.layers.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    return draft.eval()


def _check_cached_path(target: Any, draft: Any, prompt: list[int], n: int, croppable: bool) -> list[int]:
    """Generate greedily with and without the KV cache: equal tokens; the uncached forwards run the whole sequence,
    the cached ones after the prompt only the last token and the proposals (and, without ``croppable``, the kept
    tokens again after a rejection). Returns the acceptances."""
    from swiftcore_eagle3 import speculative_generate

    fed, handle = _count_fed(target)
    try:
        plain = speculative_generate(target, draft, prompt, max_new_tokens=n, num_speculative_tokens=K, kv_cache=False)
        uncached_fed = list(fed)
        fed.clear()
        cached = speculative_generate(target, draft, prompt, max_new_tokens=n, num_speculative_tokens=K)
    finally:
        handle.remove()
    assert cached.tokens == plain.tokens
    assert cached.accepted == plain.accepted
    assert uncached_fed[0] == fed[0] == len(prompt)
    assert uncached_fed[-1] > len(prompt) + n - K - 2  # the whole sequence, again at every step
    # The cached forwards: per step k + 1 tokens (the last chosen one and k proposals); after a step with a
    # rejection, a linear-attention target runs the kept ones again (not after the last step: nothing follows).
    steps = len(cached.accepted)
    expected = [len(prompt)]
    made = 1
    for i, accepted in enumerate(cached.accepted):
        k = min(K, n - made)
        expected.append(k + 1)
        made += accepted + 1
        if not croppable and accepted < k and i < steps - 1:
            expected.append(accepted + 1)
    assert fed == expected
    assert max(fed[1:]) <= K + 1
    return cached.accepted


def test_cached_verification_on_a_pure_attention_target_feeds_only_new_tokens(
    tiny_llama: tuple[Any, Path], llama_draft: Any
) -> None:
    """Tiny Llama (every layer cropped by transformers' ``crop``), two prompts, 24 tokens: the cached path's tokens
    and acceptances are the uncached path's, and the target's forwards after the prompt take exactly ``k + 1``
    tokens each; both are the target's plain greedy output (``generate``)."""
    import torch

    target, _ = tiny_llama
    for prompt in ([1, 2, 3, 4, 5, 6], [7, 0, 3, 3, 5]):
        _check_cached_path(target, llama_draft, prompt, 24, croppable=True)
        from swiftcore_eagle3 import speculative_generate

        with torch.no_grad():
            expected = target.generate(torch.tensor([prompt]), max_new_tokens=24, do_sample=False, eos_token_id=None)
        got = speculative_generate(target, llama_draft, prompt, max_new_tokens=24, num_speculative_tokens=K)
        assert got.tokens == expected[0, len(prompt) :].tolist()


def test_cached_verification_on_qwen3_5_restores_the_linear_attention_state(
    tiny_model_dir: Callable[[str], Path], plugins: Any
) -> None:
    """Tiny Qwen3.5 (linear-attention layers: ``crop`` cannot roll the recurrent state back), a random draft: the
    cached path gives the uncached path's tokens and the target's greedy output; each step feeds ``k + 1`` tokens and
    the kept ones again after a rejection (never the whole sequence)."""
    import torch
    from swiftcore_eagle3.draft import build_draft

    from swiftcore.api.models import load_model, resolve_model_spec

    model_dir = tiny_model_dir("qwen3_5")
    target = load_model(resolve_model_spec(str(model_dir), plugins), str(model_dir), plugins).eval()
    draft = build_draft(target, str(model_dir), aux_layer_ids=[1, 2, 3], seed=0).eval()
    prompt = list(range(5, 25))
    _check_cached_path(target, draft, prompt, 20, croppable=False)
    with torch.no_grad():
        expected = target.generate(torch.tensor([prompt]), max_new_tokens=20, do_sample=False)[0, len(prompt) :]
    from swiftcore_eagle3 import speculative_generate

    assert speculative_generate(target, draft, prompt, max_new_tokens=20).tokens == expected.tolist()


@pytest.mark.parametrize("family", ["llama", "qwen3_5"])
def test_target_cache_rolls_back_to_the_kept_tokens(
    family: str, tiny_llama: tuple[Any, Path], tiny_model_dir: Callable[[str], Path], plugins: Any
) -> None:
    """The cached target's bookkeeping on its own, with proposals chosen to be all accepted, then partly rejected:
    after each step's rollback (``crop``; on Qwen3.5 also the recurrent state restored and the kept tokens fed
    again), the next verification's logits are the logits of the whole sequence run from scratch."""
    import torch
    from swiftcore_eagle3.speculative import _Target

    if family == "llama":
        target, _ = tiny_llama
        prompt, aux = [1, 2, 3, 4], [0, 1, 2]
    else:
        from swiftcore.api.models import load_model, resolve_model_spec

        model_dir = tiny_model_dir("qwen3_5")
        target = load_model(resolve_model_spec(str(model_dir), plugins), str(model_dir), plugins).eval()
        prompt, aux = list(range(5, 25)), [1, 2, 3]
    with torch.no_grad():
        greedy = target.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False, eos_token_id=None)
    g = greedy[0, len(prompt) :].tolist()
    vocab = target.get_output_embeddings().weight.shape[0]

    def check(features: Any, seq: list[int], guesses: list[int]) -> None:
        with torch.no_grad():
            full = target(input_ids=torch.tensor([seq + guesses])).logits[0, -(len(guesses) + 1) :]
        torch.testing.assert_close(features.logits[0, -(len(guesses) + 1) :], full, rtol=1e-4, atol=1e-4)

    runner = _Target(target, aux, kv_cache=True)
    runner.prefill(prompt)
    seq = [*prompt, g[0]]
    check(runner.verify(seq, g[1:4]), seq, g[1:4])  # all 3 accepted: keep seq[-1] and the 3
    runner.keep(4)
    seq += g[1:5]
    wrong = (g[7] + 1) % vocab
    check(runner.verify(seq, [*g[5:7], wrong]), seq, [*g[5:7], wrong])  # 2 accepted, the third rejected
    runner.keep(3)
    seq += g[5:8]
    wrong = (g[9] + 1) % vocab
    check(runner.verify(seq, [wrong, *g[9:11]]), seq, [wrong, *g[9:11]])  # none accepted
    runner.keep(1)
    seq += g[8:9]
    check(runner.verify(seq, g[9:11]), seq, g[9:11])


@pytest.mark.slow  # the conftest target and draft (a 40-step fine-tune, a 40-step eagle3 run)
def test_cached_verification_with_the_trained_draft(
    target: Any, trained_draft: Path, encoder: Any, held_out: list[dict[str, Any]], reply_tokens: int
) -> None:
    """The fine-tuned Qwen3.5 and its trained draft on 4 held-out prompts: most proposals accepted, and still the
    cached path's tokens are the uncached path's, with only new tokens fed per step."""
    from swiftcore_eagle3 import load_draft

    draft = load_draft(trained_draft, target)
    accepted: list[int] = []
    for record in held_out[:4]:
        ids, _ = encoder.prompt(record)
        accepted += _check_cached_path(target, draft, ids, reply_tokens, croppable=False)
    assert sum(accepted) / len(accepted) > 2.0, accepted


def _generate_probs(logits: Any, temperature: float, top_k: int, top_p: float) -> Any:
    """What ``generate(do_sample=True, temperature=..., top_k=..., top_p=...)`` samples each row of ``logits`` from:
    its warpers in its order, then softmax (in float64)."""
    import torch
    from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    warpers = LogitsProcessorList([TemperatureLogitsWarper(temperature)])
    if top_k:
        warpers.append(TopKLogitsWarper(top_k))
    if top_p < 1:
        warpers.append(TopPLogitsWarper(top_p))
    return torch.softmax(warpers(None, logits.double()), -1)


def _exact_distribution(target: Any, prompt: list[int], temperature: float, top_k: int = 0, top_p: float = 1.0) -> Any:
    """The target's own distribution of the 2nd and 3rd generated tokens (the ones the draft proposes in the first
    verification step with k = 2), ``[vocab, vocab]``, by enumerating the first two tokens."""
    import torch

    with torch.no_grad():
        vocab = target.config.vocab_size
        first = _generate_probs(target(torch.tensor([prompt])).logits[0, -1:], temperature, top_k, top_p)[0]
        joint = torch.zeros(vocab, vocab, dtype=torch.float64)
        for a in range(vocab):
            seqs = torch.tensor([[*prompt, a, b] for b in range(vocab)])
            logits = target(seqs).logits
            second = _generate_probs(logits[0, -2:-1], temperature, top_k, top_p)[0]  # the same row for every b
            third = _generate_probs(logits[:, -1], temperature, top_k, top_p)  # [b, c]
            joint += first[a] * second[:, None] * third
    return joint


def _sampled_counts(
    target: Any, draft: Any, prompt: list[int], temperature: float, n: int, top_k: int = 0, top_p: float = 1.0
) -> Any:
    """How often each (2nd, 3rd) token pair came out of ``n`` seeded speculative samples of 3 tokens (k = 2)."""
    import torch
    from swiftcore_eagle3 import speculative_generate

    vocab = target.config.vocab_size
    counts = torch.zeros(vocab, vocab, dtype=torch.float64)
    rejected = 0
    for seed in range(n):
        out = speculative_generate(
            target, draft, prompt, max_new_tokens=3, num_speculative_tokens=2, temperature=temperature,
            generator=torch.Generator().manual_seed(seed), top_k=top_k, top_p=top_p,
        )  # fmt: skip
        counts[out.tokens[1], out.tokens[2]] += 1
        rejected += out.accepted[0] < 2
    assert rejected > n // 4  # the residual step is exercised often
    return counts


def _chi_square_p(counts: Any, expected_probs: Any) -> float:
    """Pearson's chi-square p-value of ``counts`` against ``expected_probs``, cells expecting fewer than 5 pooled;
    cells of probability 0 (cut by top-k or top-p) must hold no sample."""
    from scipy.stats import chisquare

    n = float(counts.sum())
    expected = (expected_probs.flatten() * n).tolist()
    observed = counts.flatten().tolist()
    assert all(o == 0 for o, e in zip(observed, expected, strict=True) if e == 0), "a sample the warpers exclude"
    big = [i for i, e in enumerate(expected) if e >= 5]
    small = [i for i, e in enumerate(expected) if 0 < e < 5]
    obs = [observed[i] for i in big] + ([sum(observed[i] for i in small)] if small else [])
    exp = [expected[i] for i in big] + ([sum(expected[i] for i in small)] if small else [])
    return float(chisquare(obs, exp).pvalue)


SAMPLES = 1000


@pytest.mark.parametrize(
    ("residual", "top_k", "top_p"),
    [("max(p - q, 0)", 0, 1.0), ("p (wrong)", 0, 1.0), ("max(p - q, 0)", 4, 0.9)],
    ids=["residual", "wrong-residual", "top-k-top-p"],
)
def test_speculative_sampling_is_distributed_as_the_target(
    tiny_llama: tuple[Any, Path],
    llama_draft: Any,
    residual: str,
    top_k: int,
    top_p: float,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """1000 seeded samples of 3 tokens at temperature 1 (k = 2, the draft's proposals rejected in a good share of
    them): the joint distribution of the 2nd and 3rd tokens, those the draft proposed, matches the target's exact
    one (enumerated over the 8-token vocabulary), chi-square p > 0.001 and total variation < 0.04 (measured: p 0.775,
    0.015); with top-k 4 and top-p 0.9 it matches the distribution ``generate`` samples from with them (its own
    warpers; no sample outside it; measured: p 0.485, 0.011). The mutant that samples ``p`` instead of the residual
    after a rejection fails both (measured: p 2e-10, total variation 0.061)."""
    from swiftcore_eagle3 import speculative

    target, _ = tiny_llama
    if residual.startswith("p"):
        monkeypatch.setattr(speculative, "_residual", lambda p, q: p)
    prompt = [1, 2, 3]
    exact = _exact_distribution(target, prompt, 1.0, top_k, top_p)
    counts = _sampled_counts(target, llama_draft, prompt, 1.0, SAMPLES, top_k, top_p)
    p_value = _chi_square_p(counts, exact)
    tv = float((counts / SAMPLES - exact).abs().sum() / 2)
    print(f"residual {residual}, top_k {top_k}, top_p {top_p}: chi-square p {p_value:.3g}, total variation {tv:.3f}")
    if residual.startswith("max"):
        assert p_value > 1e-3 and tv < 0.04, (p_value, tv)
    else:
        assert p_value < 1e-6 and tv > 0.04, (p_value, tv)
