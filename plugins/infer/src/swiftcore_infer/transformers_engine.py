"""The default backend: transformers ``generate`` with left-padded batches, a KV cache and LoRA adapters.

Prompts are encoded by the same swiftcore template as in training (see :class:`~swiftcore_infer.engine.Engine`),
so the text a model was trained on and the text it is asked with cannot drift apart. Several peft LoRA
adapters can be loaded; one batch may mix them (peft's ``adapter_names``), the base model included.
A prompt with images or audio (a :class:`~swiftcore_infer.media.Prompt`) runs in a batch of its own, its
media tensors passed to ``generate`` as training passes them to the forward pass.

With a draft (``draft=DIR``, ``swiftcore infer --draft DIR``) requests decode speculatively, one at a time:
the installed plugins are asked for a decoder through the ``swiftcore_speculative_decoder`` hook (declared in
:mod:`swiftcore_infer.hookspecs`; swiftcore-plugin-eagle3 implements it for Eagle3 drafts); this module names no draft
plugin. A greedy request's output is the target's greedy output; a sampling one (``temperature`` > 0, with
``top_k`` and ``top_p``) is drawn by speculative sampling from a generator seeded with the request's ``seed`` (a
fresh seed without one, drawn from torch's global generator), distributed as the target's own sampling. The accepted
proposals per verification step are counted (:attr:`TransformersEngine.speculative_stats`) and logged. Sampled
log-probabilities (``generate_rollouts(logprobs=True)``: RL rollouts, ``--rollout-draft``) are the target's, from one
forward over prompt and reply.
"""

from __future__ import annotations

import collections
import contextlib
import inspect
import logging
import queue
import threading
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swiftcore.api import SwiftcoreError
from swiftcore.api.models import resolve_checkpoint
from swiftcore_infer.engine import Engine
from swiftcore_infer.errors import InvalidRequestError, UnsupportedError
from swiftcore_infer.types import Generation, SamplingParams, TokenLogprob

if TYPE_CHECKING:
    from swiftcore.api import PluginSet

__all__ = ["Generation", "TransformersEngine", "create_engine", "probe", "resolve_checkpoint"]

logger = logging.getLogger("swiftcore.infer")

#: peft's name for "no adapter" in a mixed-adapter batch.
_PEFT_BASE = "__base__"
#: generation_config fields whose warpers ``generate`` applies when sampling but draft sampling does not, each with
#: the value that switches it off (generate applies typical_p below 1, epsilon and eta cutoffs in (0, 1)).
_UNSUPPORTED_WARPERS: dict[str, Any] = {
    "min_p": None,
    "typical_p": 1.0,
    "epsilon_cutoff": 0.0,
    "eta_cutoff": 0.0,
    "top_h": None,
}


class TransformersEngine(Engine):
    """Batched generation with a transformers model.

    Args:
        model_dir: a checkpoint directory, or a LoRA adapter directory (its base model is found from it).
        plugins: the loaded plugin set (for the model spec and template).
        adapter: a peft adapter directory to apply on top of ``model_dir`` (the default adapter).
        template: template name (default: the model spec's).
        dtype: ``float32``, ``bfloat16`` or ``float16``.
        model_type: force the model spec.
        merge_lora: merge the constructor's adapter into the weights (faster; no per-request adapters).
        device: a torch device (default: CUDA when available, else CPU).
        draft: a draft model directory for speculative decoding (see the module docstring).
        num_speculative_tokens: the draft's proposals per verification step (default: the draft's own).
        draft_flag: the option that named ``draft``, for messages (``--rollout-draft`` for RL rollouts).
    """

    backend = "transformers"
    capabilities = frozenset({"generate", "stream", "embed", "lora", "update_weights"})
    #: Whether peft can run only one adapter per batch on this model (parameter-level LoRA is loaded).
    _one_adapter_per_batch = False
    accepts_media = True
    takes_video = True

    def __init__(
        self,
        model_dir: str | Path,
        plugins: PluginSet,
        *,
        adapter: str | Path | None = None,
        template: str | None = None,
        dtype: str = "float32",
        model_type: str | None = None,
        merge_lora: bool = False,
        device: str | None = None,
        draft: str | Path | None = None,
        num_speculative_tokens: int | None = None,
        draft_flag: str = "--draft",
    ) -> None:
        import torch

        from swiftcore.api.models import load_model

        #: adapter name -> its tensors under peft's state-dict names, views of the model's parameters (the in-place
        #: path of :meth:`_update_adapter`, recorded by its first update).
        self._adapter_targets: dict[str, dict[str, Any]] = {}
        super().__init__(model_dir, plugins, adapter=adapter, template=template, model_type=model_type)
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        model = load_model(self.spec, str(self.base_dir), plugins, torch_dtype=dtype)
        if merge_lora and self._initial_adapter is not None:
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, str(self._initial_adapter)).merge_and_unload()
            self._initial_adapter = None
        self.model = model.to(self.device).eval()
        #: Speculative decoding's counts (None without a draft): ``steps`` (verification steps), ``accepted`` and
        #: ``proposed`` (draft tokens), ``forwards`` (target forwards, prompts' included), ``tokens`` (generated).
        self.speculative_stats: dict[str, int] | None = None
        self._decoder: Any = None
        self._speculative_tokens: int | None = None
        self._draft_flag = draft_flag
        if draft is not None:
            self._start_draft(plugins, Path(draft), num_speculative_tokens)
        self._after_load()

    # ------------------------------------------------------------------ speculative decoding

    def _start_draft(self, plugins: PluginSet, draft: Path, num_speculative_tokens: int | None) -> None:
        """Ask the plugins for ``draft``'s decoder (``swiftcore_speculative_decoder``); refuse what it cannot serve."""
        flag = self._draft_flag
        if not (draft / "config.json").is_file():
            raise SwiftcoreError(f"{flag} {str(draft)!r}: no config.json there; give a draft model's directory")
        if self._initial_adapter is not None:
            raise SwiftcoreError(
                f"{flag} {str(draft)!r} with a LoRA adapter: the draft was trained for one set of weights; merge the "
                f"adapter (--merge-lora) or drop {flag}"
            )
        if num_speculative_tokens is not None and num_speculative_tokens < 1:
            raise SwiftcoreError(f"num_speculative_tokens={num_speculative_tokens}: give 1 or more")
        # Declared by this distribution (swiftcore_infer.hookspecs); a draft plugin implements it.
        decoder = plugins.pm.hook.swiftcore_speculative_decoder(draft_dir=str(draft), target=self.model)
        if decoder is None:
            raise SwiftcoreError(
                f"{flag} {str(draft)!r}: no installed plugin recognises this draft (an Eagle3 draft's config.json "
                "says speculators_model_type 'eagle3', decoded by swiftcore-plugin-eagle3: pip install it if it is "
                f"missing); give a `swiftcore train --recipe eagle3` checkpoint, or drop {flag}"
            )
        self._decoder = decoder
        self._speculative_tokens = num_speculative_tokens or int(decoder.num_speculative_tokens)
        self.speculative_stats = dict.fromkeys(("steps", "accepted", "proposed", "forwards", "tokens"), 0)
        # A draft decodes one request at a time, without adapters: what it cannot do is refused, not faked
        # (_prompt, load_adapter, _generate).
        logger.info("speculative decoding with %s: %d proposals per verification step", draft, self._speculative_tokens)

    def _speculative_refusal(self, params: SamplingParams) -> str | None:
        """Why a request with these settings cannot decode with the draft (None: it can)."""
        if not params.greedy:
            # The hook's contract: a decoder samples when its steps() takes these; a greedy-only one is refused.
            takes = inspect.signature(self._decoder.steps).parameters
            if not {"temperature", "top_k", "top_p", "generator"} <= takes.keys():
                return (
                    f"temperature={params.temperature}: this draft's decoder ({type(self._decoder).__qualname__}) "
                    f"decodes greedily only; send temperature 0, or serve without {self._draft_flag}"
                )
            # Sampling without a draft also applies the checkpoint's other generation_config warpers; draft
            # sampling applies temperature, top_k and top_p only, so a checkpoint asking for more is refused.
            config = getattr(self.model, "generation_config", None)
            others = {
                name: getattr(config, name, None)
                for name, neutral in _UNSUPPORTED_WARPERS.items()
                if getattr(config, name, None) not in (None, neutral)
            }
            if others:
                return (
                    f"temperature={params.temperature}: the checkpoint's generation_config.json sets {others}, "
                    f"which sampling with a draft ({self._draft_flag}) does not apply (it applies temperature, top_k "
                    f"and top_p); send temperature 0, or serve without {self._draft_flag}"
                )
        if params.repetition_penalty != 1.0:
            return (
                f"repetition_penalty={params.repetition_penalty}: not applied by draft decoding ({self._draft_flag}); "
                f"send 1.0, or serve without {self._draft_flag}"
            )
        return None

    def _prompt(self, request: Any) -> list[int]:
        """See :meth:`Engine._prompt`; with a draft, a request it cannot decode is refused here, before it runs."""
        if self._decoder is not None:
            refusal = self._speculative_refusal(request.sampling)
            if refusal is not None:
                raise InvalidRequestError(refusal)
        return super()._prompt(request)

    def load_adapter(self, name: str, path: str | Path) -> None:
        """See :meth:`Engine.load_adapter`; refused on an engine that decodes with a draft."""
        if self._decoder is not None:
            raise UnsupportedError(
                f"adapter {name!r}: this engine decodes with a draft (--draft), trained for its base weights only; "
                "serve the adapter merged (--merge-lora) with a draft trained for it, or without --draft"
            )
        super().load_adapter(name, path)

    def _speculative_steps(self, prompt: list[int], params: SamplingParams) -> Iterator[list[int]]:
        """One prompt's new tokens per target forward, decoded with the draft; counted in :attr:`speculative_stats`."""
        import torch

        refusal = self._speculative_refusal(params)
        if refusal is not None:
            raise InvalidRequestError(refusal)
        if getattr(prompt, "media", None):
            raise InvalidRequestError("images or audio: this engine decodes with a draft (--draft), text only")
        stats = self.speculative_stats
        if stats is None:  # pragma: no cover - set with the decoder
            raise RuntimeError("no draft")
        k = self._speculative_tokens
        sampling: dict[str, Any] = {}
        if not params.greedy:
            generator = torch.Generator(device=self.device)
            if params.seed is None:
                # A fresh seed (a generator's default one would repeat the same draws each request), drawn from torch's
                # global generator as generate() without a draft samples from it: torch.manual_seed (a trainer's
                # --seed) then makes draft sampling reproducible too.
                generator.manual_seed(int(torch.randint(0, 2**62, (), dtype=torch.int64)))
            else:
                generator.manual_seed(params.seed)
            sampling = {
                "temperature": params.temperature,
                "top_k": params.top_k,
                "top_p": params.top_p,
                "generator": generator,
            }
        steps = self._decoder.steps(
            list(prompt),
            max_new_tokens=params.max_new_tokens,
            eos_token_ids=self.stop_token_ids,
            num_speculative_tokens=k,
            **sampling,
        )
        while True:
            with torch.inference_mode():  # per step: the mode must not stay on in the consumer between steps
                step = next(steps, None)
            if step is None:
                return
            tokens, accepted = step
            stats["forwards"] += 1
            stats["tokens"] += len(tokens)
            if accepted is not None:
                stats["steps"] += 1
                stats["accepted"] += accepted
                stats["proposed"] += k or 0
            yield tokens

    def _target_logprobs(self, prompt: list[int], tokens: list[int], params: SamplingParams) -> list[float]:
        """The target's log-probability of each of ``tokens`` after ``prompt`` under the distribution it samples from
        with ``params`` (temperature, then top-k, then top-p, as ``generate`` warps its scores; raw when greedy): what
        ``generate(output_scores=True)`` reports without a draft, from one forward over the whole sequence. Never the
        draft's: the importance-sampling correction compares them with the policy's own."""
        import torch
        from transformers import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

        if not tokens:
            return []
        ids = torch.tensor([[*prompt, *tokens]], device=self.device)
        with torch.inference_mode():
            logits = self.model(input_ids=ids, use_cache=False).logits[0, len(prompt) - 1 : -1].float()
        if not params.greedy:
            logits = TemperatureLogitsWarper(params.temperature)(None, logits)
            if params.top_k:
                logits = TopKLogitsWarper(top_k=params.top_k)(None, logits)
            if params.top_p < 1.0:
                logits = TopPLogitsWarper(top_p=params.top_p)(None, logits)
        picked = torch.log_softmax(logits, dim=-1).gather(-1, ids[0, len(prompt) :, None]).squeeze(-1)
        return picked.tolist()

    def speculative_summary(self) -> str | None:
        """The draft's acceptance so far in words (None without a draft), as the engine logs it."""
        stats = self.speculative_stats
        if stats is None:
            return None
        per_step = stats["accepted"] / stats["steps"] if stats["steps"] else 0.0
        per_forward = stats["tokens"] / stats["forwards"] if stats["forwards"] else 0.0
        return (
            f"draft: {per_step:.2f} of {self._speculative_tokens} proposed tokens accepted per verification step "
            f"({stats['steps']} steps), {per_forward:.2f} tokens per target forward"
        )

    # ------------------------------------------------------------------ adapters and weights

    @property
    def _is_peft(self) -> bool:
        return hasattr(self.model, "peft_config")

    def _load_adapter(self, name: str, path: Path) -> None:
        from peft import PeftModel

        if self._is_peft:
            self.model.load_adapter(str(path), adapter_name=name)
        else:
            self.model = PeftModel.from_pretrained(self.model, str(path), adapter_name=name).eval()
        # peft runs parameter-level LoRA (``target_parameters``: fused expert weights) through ParamWrapper, which
        # refuses ``adapter_names`` ("does not support mixed adapter batches yet"): such a model gets one adapter
        # per batch, switched on with ``set_adapter``.
        self._one_adapter_per_batch = any(type(m).__name__ == "ParamWrapper" for m in self.model.modules())
        self._adapter_targets.pop(name, None)  # a reloaded adapter has new tensors

    def _update_weights(self, named: list[tuple[str, Any]]) -> None:
        import torch

        base = self.model.get_base_model() if self._is_peft else self.model
        params = dict(base.named_parameters())
        params.update(dict(base.named_buffers()))
        unknown = []
        with torch.no_grad():
            for name, tensor in named:
                target = params.get(name)
                if target is None:
                    target = params.get(_base_layer_name(name))
                if target is None:
                    unknown.append(name)
                    continue
                if tuple(target.shape) != tuple(tensor.shape):
                    raise InvalidRequestError(
                        f"update_weights: {name} has shape {tuple(tensor.shape)}, the model's is {tuple(target.shape)}"
                    )
                target.copy_(tensor.to(target.dtype))
        if unknown:
            raise InvalidRequestError(
                f"update_weights: the model has no parameter {', '.join(unknown[:5])}"
                f"{' ...' if len(unknown) > 5 else ''} (names must be the model's own)"
            )

    def _update_adapter(self, name: str, tensors: dict[str, Any]) -> None:
        """Copy peft state-dict tensors into adapter ``name`` (peft's own name mapping; strict on names and
        shapes, so a tensor that would silently not arrive is an error).

        The first update goes through peft (``set_peft_model_state_dict``), which walks the whole model's state
        dict and modules three times to place a few adapter tensors: on the tiny Qwen3.5 that is ~20 ms for 0.25 MB,
        ten times a full sync of ten times the bytes (bench figure 10). It also records where each of the adapter's
        names lives (:meth:`_record_adapter_targets`), so that an update with exactly those names and shapes (online
        RL's every sync after the first) is one in-place copy per tensor.
        """
        import torch
        from peft import set_peft_model_state_dict

        if not self._is_peft:  # pragma: no cover - load_adapter always makes the model a PeftModel
            raise InvalidRequestError(f"update_adapter: no adapter {name!r} is loaded")
        targets = self._adapter_targets.get(name)
        if (
            targets is not None
            and targets.keys() == tensors.keys()
            and all(targets[k].shape == tensors[k].shape for k in tensors)
        ):
            with torch.no_grad():
                for key, tensor in tensors.items():
                    targets[key].copy_(tensor)
            return
        expected = {k for k in self.model.state_dict() if f".{name}." in k}
        try:
            result = set_peft_model_state_dict(self.model, tensors, adapter_name=name)
        except RuntimeError as exc:  # size mismatch
            raise InvalidRequestError(f"update_adapter: {exc}") from exc
        unexpected = list(getattr(result, "unexpected_keys", []) or [])
        if unexpected:
            raise InvalidRequestError(
                f"update_adapter: adapter {name!r} has no tensor {', '.join(unexpected[:5])}"
                f"{' ...' if len(unexpected) > 5 else ''} (names must be peft's, as get_peft_model_state_dict "
                "gives them)"
            )
        missing = [k for k in (getattr(result, "missing_keys", []) or []) if k in expected]
        if len(missing) == len(expected):
            raise InvalidRequestError(f"update_adapter: none of the tensors belongs to adapter {name!r}")
        self._record_adapter_targets(name)

    def _record_adapter_targets(self, name: str) -> None:
        """Remember adapter ``name``'s tensors under peft's state-dict names (``get_peft_model_state_dict``, the
        names :meth:`_update_adapter` receives), as views of the model's own parameters, for the in-place path;
        nothing when one of them is not such a view (a copy would not reach the model)."""
        from peft import get_peft_model_state_dict

        live = {p.data_ptr() for p in self.model.parameters()}
        state = get_peft_model_state_dict(self.model, adapter_name=name)
        if state and all(t.data_ptr() in live for t in state.values()):
            self._adapter_targets[name] = state

    # ------------------------------------------------------------------ generation

    def _adapter_kwargs(self, adapters: list[str | None]) -> dict[str, Any]:
        """peft's ``adapter_names`` for a batch that mixes adapters (or adapters and the base model); nothing for a
        batch of one adapter, which :meth:`_adapter_active` switches on instead."""
        if not self._is_peft or self._one_adapter_per_batch or len(set(adapters)) == 1:
            return {}
        return {"adapter_names": [a or _PEFT_BASE for a in adapters]}

    def _adapter_active(self, adapters: list[str | None]) -> Any:
        """A context in which the model runs the batch's one adapter (or the base model); a no-op for a batch that
        mixes them (:meth:`_adapter_kwargs` passes ``adapter_names`` instead).

        Why a batch of one adapter does not pass ``adapter_names`` too: peft's mixed-batch forward splits every
        LoRA layer's input by adapter and gathers it back, work a batch of one adapter (online RL's rollouts, every
        request on the policy's adapter) does not need; with the adapter set active peft runs its plain LoRA forward.
        Measured side by side on the tiny Qwen3.5 (16 sampled rollouts of 16 tokens, rank-8 adapter on every linear
        layer, median of 5 over 4 alternating rounds): 1.20 s against 1.30 s. Parameter-level LoRA
        (``ParamWrapper``) refuses ``adapter_names`` altogether, so such a model always gets one adapter per batch."""
        if not self._is_peft:
            return contextlib.nullcontext()
        if len(set(adapters)) != 1:
            if self._one_adapter_per_batch:  # pragma: no cover - _groups keeps one adapter per batch for such a model
                raise RuntimeError("a model with parameter-level LoRA cannot mix adapters in one batch")
            return contextlib.nullcontext()
        if adapters[0] is None:
            return self.model.disable_adapter()
        self.model.set_adapter(adapters[0])
        return contextlib.nullcontext()

    def _media_kwargs(self, prompts: list[list[int]]) -> dict[str, Any]:
        """The media tensors of a batch's prompt (a prompt with media is always batched alone), on the model's
        device, floating ones in its dtype."""
        import torch

        media = getattr(prompts[0], "media", None) if len(prompts) == 1 else None
        if not media:
            if any(getattr(p, "media", None) for p in prompts):
                raise RuntimeError("a prompt with media must be generated in a batch of its own")
            return {}
        dtype = getattr(self.model, "dtype", None)
        out: dict[str, Any] = {}
        for key, value in media.items():
            tensor = torch.as_tensor(value)
            if key == "mm_token_type_ids" and tensor.dim() == 1:
                tensor = tensor.unsqueeze(0)
            if tensor.is_floating_point() and dtype is not None:
                tensor = tensor.to(dtype)
            out[key] = tensor.to(self.device)
        return out

    def _groups(
        self, prompts: list[list[int]], params: list[SamplingParams], adapters: list[str | None]
    ) -> list[list[int]]:
        """Rows that can share one ``generate`` call: same sampling settings; a prompt with media alone; one adapter
        per call where the model cannot mix them (parameter-level LoRA)."""
        split = self._one_adapter_per_batch
        groups: dict[tuple, list[int]] = {}
        for i, p in enumerate(params):
            alone = i if getattr(prompts[i], "media", None) else None
            key = (p.temperature, p.top_p, p.top_k, p.seed, p.repetition_penalty, alone, adapters[i] if split else 0)
            groups.setdefault(key, []).append(i)
        return list(groups.values())

    def _batch_tensors(self, prompts: list[list[int]]) -> tuple[Any, Any]:
        import torch

        width = max(len(p) for p in prompts)
        # Left padding: every row's last prompt token sits in the last column, where generation continues.
        input_ids = torch.tensor([[self.pad_token_id] * (width - len(p)) + list(p) for p in prompts])
        attention_mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        return input_ids.to(self.device), attention_mask.to(self.device)

    def _generate_kwargs(self, params: SamplingParams, max_new_tokens: int) -> dict[str, Any]:
        """``generate``'s ``generation_config``: the checkpoint's generation defaults overridden by ``params``.

        A ready GenerationConfig (rather than loose kwargs) also spares ``generate`` from re-building the
        model's default config on every call to check for legacy generation fields (about 15 ms a call
        for Qwen3.5, 10% of a short batch on a CPU).
        """
        from transformers import GenerationConfig

        # Callers run generate under torch.inference_mode (not no_grad): no version counters or view
        # tracking, about 8% faster on a CPU for small batches, and nothing generated is trained on.
        sample = not params.greedy
        # When sampling, switched-off settings get their neutral values, not None: ``generate`` fills None
        # fields from the checkpoint's generation_config (a top_k=20 there would quietly undo --top-k 0).
        # Greedy decoding ignores them, so they stay unset there (no "flag ignored" warnings).
        overrides = {
            "max_new_tokens": max_new_tokens,
            "do_sample": sample,
            "temperature": params.temperature if sample else None,
            "top_p": params.top_p if sample else None,
            "top_k": params.top_k if sample else None,
            "repetition_penalty": params.repetition_penalty,
            "eos_token_id": self.stop_token_ids,
            "pad_token_id": self.pad_token_id,
        }
        base = getattr(self.model, "generation_config", None)
        config = GenerationConfig(**(base.to_dict() if base is not None else {}))
        config.update(**overrides)
        return {"generation_config": config}

    def _generate_ids(
        self, prompts: list[list[int]], params: list[SamplingParams], adapters: list[str | None]
    ) -> list[list[int]]:
        return self._generate(prompts, params, adapters, logprobs=False)[0]

    def _generate_ids_with_logprobs(
        self, prompts: list[list[int]], params: list[SamplingParams], adapters: list[str | None]
    ) -> tuple[list[list[int]], list[list[float]]]:
        ids, logprobs = self._generate(prompts, params, adapters, logprobs=True)
        return ids, logprobs  # type: ignore[return-value]

    def _generate(
        self, prompts: list[list[int]], params: list[SamplingParams], adapters: list[str | None], *, logprobs: bool
    ) -> tuple[list[list[int]], list[list[float]] | None]:
        """Each prompt's new ids and, with ``logprobs``, each new token's log-probability under the scores
        ``generate`` sampled it from (``output_scores``: the logits after every processor, temperature, top-k and
        top-p included, so the same distribution as vLLM's ``processed_logprobs``)."""
        import torch

        if self._decoder is not None:
            ids = [
                [t for step in self._speculative_steps(p, q) for t in step]
                for p, q in zip(prompts, params, strict=True)
            ]
            logger.info("%s", self.speculative_summary())
            if not logprobs:
                return ids, None
            return ids, [self._target_logprobs(p, t, q) for p, t, q in zip(prompts, ids, params, strict=True)]
        # Rows are batched when they sample alike; each row is cut to its own max_new_tokens afterwards.
        out: list[list[int]] = [[] for _ in prompts]
        out_logprobs: list[list[float]] = [[] for _ in prompts]
        for rows in self._groups(prompts, params, adapters):
            first = params[rows[0]]
            if first.seed is not None:
                torch.manual_seed(first.seed)
            input_ids, attention_mask = self._batch_tensors([prompts[i] for i in rows])
            media = self._media_kwargs([prompts[i] for i in rows])
            extra = {"output_scores": True, "return_dict_in_generate": True} if logprobs else {}
            with torch.inference_mode(), self._adapter_active([adapters[i] for i in rows]):
                generated = self.model.generate(
                    input_ids=input_ids,
                    attention_mask=attention_mask,
                    **media,
                    **self._generate_kwargs(first, max(params[i].max_new_tokens for i in rows)),
                    **self._adapter_kwargs([adapters[i] for i in rows]),
                    **extra,
                )
            sequences = generated.sequences if logprobs else generated
            new = sequences[:, input_ids.shape[1] :]
            for i, row in zip(rows, new.tolist(), strict=True):
                out[i] = row[: params[i].max_new_tokens]
            if logprobs:
                # One (rows, vocab) score tensor per generated step; only the sampled token's entry is kept.
                picked = torch.stack(
                    [
                        torch.log_softmax(scores.float(), dim=-1).gather(-1, new[:, t, None]).squeeze(-1)
                        for t, scores in enumerate(generated.scores)
                    ],
                    dim=1,
                )
                for i, row in zip(rows, picked.tolist(), strict=True):
                    out_logprobs[i] = row[: params[i].max_new_tokens]
        return out, (out_logprobs if logprobs else None)

    def _prompt_logprobs(
        self, prompts: list[list[int]], top_logprobs: int, adapters: list[str | None]
    ) -> list[list[tuple[float, list[tuple[int, float]]]]]:
        """One forward pass per sequence (no padding, so each is scored exactly as alone), in float32."""
        import torch

        out = []
        for prompt, adapter in zip(prompts, adapters, strict=True):
            input_ids, attention_mask = self._batch_tensors([prompt])
            with torch.inference_mode(), self._adapter_active([adapter]):
                logits = self.model(
                    input_ids=input_ids, attention_mask=attention_mask, **self._media_kwargs([prompt]), use_cache=False
                ).logits
            logps = torch.log_softmax(logits[0, :-1].float(), dim=-1)
            picked = logps.gather(-1, input_ids[0, 1:, None]).squeeze(-1).tolist()
            if top_logprobs:
                values, indices = logps.topk(top_logprobs, dim=-1)
                tops = [list(zip(i, v, strict=True)) for i, v in zip(indices.tolist(), values.tolist(), strict=True)]
            else:
                tops = [[] for _ in picked]
            out.append(list(zip(picked, tops, strict=True)))
        return out

    def _stream_many_ids(
        self, prompts: list[list[int]], params: list[SamplingParams], adapters: list[str | None]
    ) -> Iterator[tuple[int, list[int]] | tuple[int, list[int], list[TokenLogprob]]]:
        """Each step's new token per row; a row whose ``logprobs`` is set gets its token's entry with it (the raw
        log-probs of the very logits it was sampled from). Not with a draft model (its tokens come unscored)."""
        if self._decoder is not None:  # one request after the other, each target forward's tokens as they come
            for row, (prompt, param) in enumerate(zip(prompts, params, strict=True)):
                for tokens in self._speculative_steps(prompt, param):
                    yield row, tokens
            logger.info("%s", self.speculative_summary())
            return
        # Rows that sample alike stream together as one left-padded batch (one token per row per step).
        for rows in self._groups(prompts, params, adapters):
            tops = [params[i].logprobs for i in rows]
            steps = self._stream_batch(
                [prompts[i] for i in rows],
                params[rows[0]],
                max(params[i].max_new_tokens for i in rows),
                [adapters[i] for i in rows],
                tops,
            )
            try:
                for step, scored in steps:
                    for j, (row, token) in enumerate(zip(rows, step, strict=True)):
                        if scored is None or tops[j] is None:
                            yield row, [token]
                        else:
                            logprob, top = scored[j]
                            yield row, [token], [TokenLogprob(token, logprob, tuple(top[: tops[j]]))]
            finally:
                steps.close()

    def _stream_batch(
        self,
        prompts: list[list[int]],
        params: SamplingParams,
        max_new_tokens: int,
        adapters: list[str | None],
        tops: list[int | None] | None = None,
    ) -> Generator[tuple[list[int], list[tuple[float, list[tuple[int, float]]]] | None], None, None]:
        """Run ``generate`` on a thread and yield each step's new token per row, with (where a row of ``tops`` is
        not None) each row's ``(raw log-prob of its token, the most likely (id, log-prob))`` at that step."""
        import torch
        from transformers import StoppingCriteria, StoppingCriteriaList
        from transformers.generation.streamers import BaseStreamer

        steps: queue.Queue[tuple[list[int], Any] | BaseException | None] = queue.Queue()
        cancelled = threading.Event()
        wanted = [t for t in tops or () if t is not None]
        k = max(wanted, default=0)
        # The logits of each step's forward pass, caught on their way out of the model, before any processor
        # (temperature, top-k/p, repetition penalty) sees them: the raw log-probs prompt_logprobs reports. First in,
        # first out: a streamer that receives a step's tokens late (generate defers it on some devices) still pairs
        # them with their own forward's.
        forwards: collections.deque[Any] = collections.deque()
        generating: dict[str, int] = {}

        def catch_logits(module: Any, args: Any, output: Any) -> None:
            if threading.get_ident() == generating.get("thread"):  # generate's own forwards, not another caller's
                logits = output.logits if hasattr(output, "logits") else output[0]
                forwards.append(torch.log_softmax(logits[:, -1].float(), dim=-1))

        class _Streamer(BaseStreamer):
            """Receives each step's new tokens from ``generate`` (the first call carries the prompt)."""

            def __init__(self) -> None:
                self.seen_prompt = False

            def put(self, value: Any) -> None:
                if not self.seen_prompt:
                    self.seen_prompt = True
                    return
                tokens = value.reshape(-1)
                scored = None
                if wanted:
                    if not forwards:
                        raise RuntimeError("generate sampled a token without a forward pass of the model seen")
                    logps = forwards.popleft()
                    picked = logps.gather(-1, tokens[:, None].to(logps.device)).squeeze(-1).tolist()
                    values, indices = logps.topk(k, dim=-1) if k else (logps[:, :0], logps[:, :0].long())
                    alternatives = [
                        list(zip(i, v, strict=True)) for i, v in zip(indices.tolist(), values.tolist(), strict=True)
                    ]
                    scored = list(zip(picked, alternatives, strict=True))
                steps.put((tokens.tolist(), scored))

            def end(self) -> None:
                steps.put(None)

        class _Cancel(StoppingCriteria):
            """Stops generation when the consumer went away (every client disconnected)."""

            def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
                return torch.full((input_ids.shape[0],), cancelled.is_set(), dtype=torch.bool, device=input_ids.device)

        def run() -> None:
            generating["thread"] = threading.get_ident()
            try:
                if params.seed is not None:
                    torch.manual_seed(params.seed)
                input_ids, attention_mask = self._batch_tensors(prompts)
                media = self._media_kwargs(prompts)
                with torch.inference_mode(), self._adapter_active(adapters):
                    self.model.generate(
                        input_ids=input_ids,
                        attention_mask=attention_mask,
                        **media,
                        streamer=_Streamer(),
                        stopping_criteria=StoppingCriteriaList([_Cancel()]),
                        **self._generate_kwargs(params, max_new_tokens),
                        **self._adapter_kwargs(adapters),
                    )
            except BaseException as exc:  # handed to the consumer, which re-raises it
                steps.put(exc)
                steps.put(None)

        model = self.model.get_base_model() if self._is_peft else self.model  # the module generate calls
        hook = model.register_forward_hook(catch_logits) if wanted else None
        thread = threading.Thread(target=run, name="swiftcore-stream", daemon=True)
        thread.start()
        try:
            while True:
                item = steps.get()
                if item is None:
                    break
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            cancelled.set()
            thread.join()
            if hook is not None:
                hook.remove()

    def _embed_ids(self, prompts: list[list[int]], normalize: bool) -> list[list[float]]:
        import torch

        input_ids, attention_mask = self._batch_tensors(prompts)
        with torch.inference_mode(), self._adapter_active([self.default_adapter]):
            # Embeddings come from the default model (not whichever adapter peft left active).
            out = self.model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                output_hidden_states=True,
                **self._adapter_kwargs([self.default_adapter] * len(prompts)),
            )
        # Left padding puts every row's last token in the last column.
        vectors = out.hidden_states[-1][:, -1, :].float()
        if normalize:
            vectors = torch.nn.functional.normalize(vectors, dim=-1)
        return vectors.cpu().tolist()

    def close(self) -> None:
        """Drop the model so its memory can be freed."""
        self.model = None


def _base_layer_name(name: str) -> str:
    """The parameter's name once peft wrapped its layer (``q_proj.weight`` -> ``q_proj.base_layer.weight``)."""
    module, _, leaf = name.rpartition(".")
    return f"{module}.base_layer.{leaf}"


def create_engine(model_dir: str | Path, plugins: PluginSet, **options: Any) -> TransformersEngine:
    """The ``transformers`` BackendSpec factory: ``TransformersEngine(model_dir, plugins, **options)``."""
    return TransformersEngine(model_dir, plugins, **options)


def probe() -> str | None:
    """None when torch and transformers can be imported (without importing them), else why not."""
    from importlib.util import find_spec

    missing = [name for name in ("torch", "transformers") if find_spec(name) is None]
    return f"{' and '.join(missing)} not installed: pip install 'swiftcore[train]'" if missing else None
