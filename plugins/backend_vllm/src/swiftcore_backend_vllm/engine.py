"""The vLLM engine behind swiftcore's engine contract.

swiftcore encodes every prompt with its own template and hands vLLM token ids (``TokensPrompt``), so
vLLM, transformers and training see the same tokens; vLLM's own chat templating is never used. LoRA
adapters become ``LoRARequest`` s chosen per request; weight updates go through the worker's
``reload_weights`` and, on CPUs, re-pack the output head (see ``notes/vllm_cpu.md``: with tied
embeddings the pre-packed head otherwise keeps serving the old weights).

The engine runs in-process by default (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, ``distributed_executor_backend
="uni"``): it starts in seconds and tensors pass to the worker without serialisation.

Images and audio: vLLM runs the family's processor itself, so a prompt with media reaches it as the template's ids
with one placeholder per item plus the decoded items (:func:`vllm_prompt`), and vLLM expands the placeholders. The
engine then checks that vLLM's expanded prompt is training's, token for token (:func:`expansion_mismatch`), and
fails the request otherwise. Which media a model takes is what the started vLLM serves for its architecture
(:func:`media_refusals`); vLLM's CPU build cannot load the project's multimodal families at all (their vLLM model
files import torchvision, which a CPU torch cannot have), so there the engine refuses to start on them.
"""

from __future__ import annotations

import importlib
import itertools
import json
import logging
import os
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swiftcore_infer import (
    PLURAL,
    Engine,
    InferError,
    InvalidRequestError,
    SamplingParams,
    TokenLogprob,
    UnsupportedError,
)
from swiftcore_infer import merge_lora as merge_lora_into

from swiftcore_backend_vllm.probe import installed_vllm

if TYPE_CHECKING:
    from swiftcore.api import PluginSet

__all__ = [
    "VllmEngine",
    "configure_environment",
    "expansion_mismatch",
    "media_refusals",
    "moe_lora_refusal",
    "num_experts",
    "speculative_config",
    "to_vllm_sampling",
    "token_logprobs",
    "vllm_prompt",
]

logger = logging.getLogger("swiftcore.infer.vllm")

_GENERATE_CAPABILITIES = frozenset({"generate", "stream", "lora", "update_weights"})
_POOLING_CAPABILITIES = frozenset({"embed"})


def configure_environment(*, in_process: bool, cpu: bool) -> None:
    """Set vLLM's environment before it is imported (the user's own settings win, except in-process mode).

    Args:
        in_process: run the engine core in this process (fast start, tensors passed directly).
        cpu: the CPU build (``vllm-cpu``) is installed.
    """
    if cpu:
        os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; the default would take 4
        # Binding OpenMP threads to cores fights other processes on small machines (tests, CI).
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    if in_process:
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"


def num_experts(model_dir: str | Path) -> int:
    """How many routed experts the checkpoint's (text) config declares, 0 for a dense model: the fields vLLM reads
    (``ModelArchConfigConvertor.get_num_experts``), read from ``config.json`` without importing vLLM."""
    try:
        config = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return 0
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    for name in ("num_experts", "moe_num_experts", "n_routed_experts", "num_local_experts"):
        value = text.get(name)
        if isinstance(value, list):  # some remote-code configs give one count per layer
            value = value[0] if value else 0
        if isinstance(value, int) and value > 0:
            return value
    return 0


def moe_lora_refusal(model_dir: str | Path, version: str) -> str | None:
    """Why the CPU build cannot run LoRA on this checkpoint (a mixture-of-experts model), None when it can.

    vLLM wraps every fused-MoE layer in a LoRA layer once LoRA is enabled, and that layer runs Triton kernels,
    which have no CPU backend: every request then fails (``triton.language`` has no ``float32``), base-model requests
    included. Measured with vllm-cpu 0.32.0 on OLMoE.
    """
    if num_experts(model_dir) == 0:
        return None
    return (
        f"vLLM {version} (vllm-cpu) runs LoRA on mixture-of-experts models only through Triton kernels, which have "
        "no CPU backend"
    )


def speculative_config(draft_dir: str | Path, num_speculative_tokens: int | None = None) -> dict[str, Any]:
    """vLLM's ``speculative_config`` for a draft in speculators' format (``swiftcore train --recipe eagle3`` writes
    one): ``{"method": ..., "model": DIR, "num_speculative_tokens": K}``.

    The method is the draft's own ``speculators_model_type`` (``eagle3``: the method vLLM's Eagle3 proposer runs),
    so the backend names no draft plugin; ``K`` defaults to the draft's greedy proposal length
    (``speculators_config.proposal_methods[0].speculative_tokens``), else 3.

    Raises:
        InvalidRequestError: ``draft_dir`` holds no speculators-format ``config.json``, or ``K`` is below 1.
    """
    path = Path(draft_dir)
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InvalidRequestError(f"--draft {str(path)!r}: no readable config.json ({exc})") from exc
    method = config.get("speculators_model_type") if isinstance(config, dict) else None
    if not isinstance(method, str) or not method:
        raise InvalidRequestError(
            f"--draft {str(path)!r}: config.json has no speculators_model_type, so the vLLM method is unknown; give "
            "a draft in speculators' format (swiftcore train --recipe eagle3 writes one)"
        )
    if num_speculative_tokens is None:
        methods = (config.get("speculators_config") or {}).get("proposal_methods") or [{}]
        num_speculative_tokens = int(methods[0].get("speculative_tokens") or 3)
    if num_speculative_tokens < 1:
        raise InvalidRequestError(f"num_speculative_tokens={num_speculative_tokens}: give 1 or more")
    return {"method": method, "model": str(path.resolve()), "num_speculative_tokens": num_speculative_tokens}


def to_vllm_sampling(params: SamplingParams, stop_token_ids: list[int], **extra: Any) -> Any:
    """vLLM ``SamplingParams`` for swiftcore's: the template's stop tokens stop, stop strings are cut by swiftcore."""
    from vllm import SamplingParams as VllmSamplingParams

    return VllmSamplingParams(
        max_tokens=params.max_new_tokens,
        temperature=params.temperature,
        top_p=params.top_p,
        top_k=params.top_k if params.top_k > 0 else 0,
        seed=params.seed,
        repetition_penalty=params.repetition_penalty,
        stop_token_ids=list(stop_token_ids),
        # swiftcore decodes with the template's tokenizer; vLLM's detokenizer would be wasted work.
        detokenize=False,
        **extra,
    )


def token_logprobs(token_ids: Sequence[int], steps: Sequence[Mapping[int, Any]], top: int) -> list[TokenLogprob]:
    """One :class:`~swiftcore_infer.TokenLogprob` per generated token from vLLM's sample ``logprobs`` (one
    ``{token id: Logprob}`` per token, as ``SamplingParams(logprobs=top)`` returns them).

    Each of vLLM's dicts holds the sampled token (its ``rank`` its place among all tokens) and the ``top`` most
    likely (ranks 1 to ``top``); a sampled token among those is one entry with its top-``top`` rank. The entry's
    alternatives are those ranked 1 to ``top``, most likely first, as the transformers engine and
    :meth:`~swiftcore_infer.Engine.prompt_logprobs` give them.

    Raises:
        InferError: vLLM returned fewer dicts than tokens, or a dict without its token (a vLLM that changed).
    """
    if len(steps) < len(token_ids):
        raise InferError(f"vLLM returned log-probs for {len(steps)} of {len(token_ids)} new tokens")
    entries = []
    for token, step in zip(token_ids, steps, strict=False):
        if token not in step:
            raise InferError(f"vLLM's log-probs of a generated token do not hold the token ({token})")
        ranked = sorted((lp.rank, t, lp.logprob) for t, lp in step.items() if 0 < (lp.rank or 0) <= top)
        entries.append(
            TokenLogprob(int(token), float(step[token].logprob), tuple((int(t), float(v)) for _, t, v in ranked))
        )
    return entries


def vllm_prompt(prompt: Sequence[int]) -> dict[str, Any]:
    """The prompt vLLM's ``generate`` gets for one of swiftcore's: ``TokensPrompt(prompt_token_ids=ids)``, and for a
    :class:`~swiftcore_infer.media.Prompt` with media items also its ``multi_modal_data``.

    What vLLM 0.32 wants for a token prompt with media (read in its source):

    - ``multi_modal_data`` holds the raw items, one list per media type: PIL images, and audio as ``(waveform,
      sampling_rate)`` (``vllm/inputs/llm.py`` ``_PromptOptions.multi_modal_data``; ``vllm/multimodal/inputs.py``
      ``ImageItem`` / ``AudioItem``). vLLM runs the model's Hugging Face processor on them itself
      (``vllm/renderers/base.py`` ``_process_tokens`` -> ``_process_multimodal`` -> the model's processor
      ``apply``); a processor's tensors cannot be passed instead (a 3-D tensor is taken as precomputed embeddings:
      ``vllm/multimodal/parse.py`` ``is_embeddings``). Audio at the model's own rate is not resampled
      (``vllm/multimodal/audio.py`` ``AudioResampler.resample``).
    - The token ids carry each item's placeholder *unexpanded*, as the chat template writes it: vLLM processes the
      media without the text, then replaces each item's target (the single ``<|image_pad|>`` of Qwen3.5, ``<|image|>``
      / ``<|audio|>`` of Gemma 4, ``<|audio_pad|>`` of Qwen3-ASR) by the full expansion
      (``vllm/multimodal/processing/processor.py`` ``BaseMultiModalProcessor.apply`` -> ``_apply_prompt_updates``).
      It does not recognise an already expanded prompt: training's expanded ids would have their first placeholder
      token expanded again. So the template's ids (``Prompt.placeholder_ids``) go to vLLM, and
      :func:`expansion_mismatch` compares vLLM's result with training's expanded ids.

    Args:
        prompt: prompt token ids, or a :class:`~swiftcore_infer.media.Prompt` encoded with ``media_as_items``.

    Raises:
        InferError: a prompt with media tensors but no items (encoded for another backend).
    """
    from vllm.inputs import TokensPrompt

    items = getattr(prompt, "items", ())
    if not items:
        if getattr(prompt, "media", None):
            raise InferError("this prompt carries processor tensors, not media items: encode it with the vLLM engine")
        return TokensPrompt(prompt_token_ids=list(prompt))
    data: dict[str, list[Any]] = {}
    for kind, value in items:
        data.setdefault(kind, []).append((value["array"], value["sampling_rate"]) if kind == "audio" else value)
    return TokensPrompt(prompt_token_ids=list(prompt.placeholder_ids or ()), multi_modal_data=data)


def expansion_mismatch(expected: Sequence[int], ran: Sequence[int] | None) -> str | None:
    """Why the prompt vLLM ran (its own expansion of the media placeholders) is not ``expected`` (training's expanded
    prompt), or None when they are the same ids.

    vLLM and the transformers processor count a media item's tokens each in their own code; a difference would mean
    the model sees a prompt it was never trained on, so it fails the request rather than pass unnoticed.
    """
    ran = list(ran or ())
    expected = list(expected)
    if ran == expected:
        return None
    first = next((i for i, (a, b) in enumerate(zip(expected, ran)) if a != b), min(len(expected), len(ran)))
    return (
        f"vLLM expanded this prompt's media placeholders into {len(ran)} tokens, training's processor into "
        f"{len(expected)} (they differ from token {first} on): the model would not see the prompt it was trained "
        "on; serve it with --backend transformers"
    )


def media_refusals(
    modalities: Sequence[str], allowed: Mapping[str, int], architecture: str, version: str
) -> dict[str, str | None]:
    """For each media type the checkpoint takes, why the started vLLM cannot serve it (None: it can).

    Args:
        modalities: the media types the checkpoint takes (``Engine.media_modalities``).
        allowed: media type -> items per prompt the started vLLM allows for this model (its processing info's
            ``allowed_mm_limits``): a type its model class does not take is absent, one switched off
            (``language_model_only``, ``limit_mm_per_prompt`` 0) is 0.
        architecture: the checkpoint's architecture, for the messages.
        version: the vLLM version and build, for the messages.
    """
    out: dict[str, str | None] = {}
    for kind in modalities:
        limit = allowed.get(kind)
        if limit is None:
            out[kind] = f"vLLM {version} serves {architecture} without {PLURAL[kind]}"
        elif limit < 1:
            out[kind] = (
                f"this vLLM engine was started with {PLURAL[kind]} switched off for {architecture} "
                f"(language_model_only, or limit_mm_per_prompt {kind}=0)"
            )
        else:
            out[kind] = None
    return out


class VllmEngine(Engine):
    """vLLM behind the swiftcore engine contract.

    Args:
        model_dir: a checkpoint directory, or a LoRA adapter directory (its base model is found from it).
        plugins: the loaded plugins.
        adapter: a peft LoRA adapter served by default (as ``default``).
        template: the template name (default: the model spec's).
        dtype: ``float32``, ``bfloat16``, ``float16`` or ``auto`` (Qwen3.5 on CPU needs ``bfloat16``).
        model_type: force the model spec.
        merge_lora: merge ``adapter`` into a temporary checkpoint and serve that (no LoRA at run time).
        max_model_len: the longest prompt plus reply (default: the model's, at most 8192).
        runner: ``generate`` (chat, completions) or ``pooling`` (embeddings only), as vLLM's ``runner``.
        embeddings: with ``runner='generate'``, also serve embeddings from a second, pooling vLLM
            instance on the same weights, started on the first embedding request.
        enable_lora: reserve LoRA slots, so adapters can be loaded after start.
        max_lora_rank: the largest adapter rank accepted.
        max_loras: adapters active in one batch.
        in_process: run vLLM's engine core in this process (see the module docstring).
        seed: vLLM's global seed.
        draft: a draft directory in speculators' format: vLLM decodes speculatively with it
            (:func:`speculative_config`); its output is the target's.
        num_speculative_tokens: the draft's proposals per step (default: the draft's own).
        **llm_kwargs: passed to ``vllm.LLM`` (``gpu_memory_utilization``, ``tensor_parallel_size`` ...).
    """

    backend = "vllm"
    # vLLM runs the family's processor on the items and expands the placeholders itself (see vllm_prompt).
    media_as_items = True

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
        max_model_len: int | None = None,
        runner: str = "generate",
        embeddings: bool = False,
        enable_lora: bool = True,
        max_lora_rank: int = 16,
        max_loras: int = 4,
        in_process: bool = True,
        seed: int = 0,
        draft: str | Path | None = None,
        num_speculative_tokens: int | None = None,
        **llm_kwargs: Any,
    ) -> None:
        super().__init__(model_dir, plugins, adapter=adapter, template=template, model_type=model_type)
        if runner not in ("generate", "pooling"):
            raise InvalidRequestError(f"runner must be 'generate' or 'pooling', got {runner!r}")
        build = installed_vllm()
        self.on_cpu = build is not None and build[0] == "vllm-cpu"
        self.vllm_version = f"{build[1]} ({build[0]})" if build else "(not installed)"
        self.in_process = in_process
        self.runner = runner
        self.capabilities = _GENERATE_CAPABILITIES if runner == "generate" else _POOLING_CAPABILITIES
        if embeddings:
            self.capabilities = self.capabilities | {"embed"}
        self._embeddings = embeddings and runner == "generate"
        self._pooler: Any = None
        if not enable_lora:
            self.capabilities = self.capabilities - {"lora"}
        configure_environment(in_process=in_process, cpu=self.on_cpu)

        serve_dir = self.base_dir
        self._tmp: tempfile.TemporaryDirectory | None = None
        if merge_lora and self._initial_adapter is not None:
            self._tmp = tempfile.TemporaryDirectory(prefix="swiftcore-vllm-merged-")
            serve_dir = merge_lora_into(
                self.base_dir, self._tmp.name, plugins, adapter=self._initial_adapter, dtype="float32"
            )
            self._initial_adapter = None
        if self._initial_adapter is not None and not enable_lora:
            raise InvalidRequestError("an adapter was given with enable_lora=False; pass --merge-lora instead")
        #: Why adapters cannot be loaded on this engine (None: they can, or LoRA was not asked for).
        self.lora_refusal: str | None = None
        if self.on_cpu and enable_lora and runner == "generate":
            self.lora_refusal = moe_lora_refusal(serve_dir, build[1] if build else "")
        if self.lora_refusal is not None:
            if self._initial_adapter is not None:
                raise UnsupportedError(
                    f"{self.lora_refusal}: serve the adapter merged (--merge-lora) or with the transformers backend"
                )
            # LoRA enabled would break base-model requests too: start without it and refuse adapters by name.
            logger.warning("%s: LoRA is off for %s", self.lora_refusal, serve_dir)
            enable_lora = False
            self.capabilities = self.capabilities - {"lora"}

        from vllm import LLM

        self.max_model_len = min(self.max_model_len, max_model_len or 8192)
        options: dict[str, Any] = {
            "model": str(serve_dir),
            "dtype": dtype,
            "max_model_len": self.max_model_len,
            "seed": seed,
            "runner": runner,
            "enforce_eager": self.on_cpu,  # no CUDA graphs on a CPU
        }
        if in_process:
            options["distributed_executor_backend"] = "uni"
        if draft is not None:
            options["speculative_config"] = speculative_config(draft, num_speculative_tokens)
            options["disable_log_stats"] = False  # the draft's acceptance counters (speculative_summary)
        #: vLLM's speculative_config (None without a draft).
        self.speculative = options.get("speculative_config")
        if enable_lora and runner == "generate":
            options.update(enable_lora=True, max_lora_rank=max_lora_rank, max_loras=max_loras)
            if num_experts(serve_dir) > 0:
                # swiftcore's MoE adapters carry fused 3D expert weights (peft target_parameters); vLLM loads
                # those only in its mixed MoE-LoRA format (requests then say is_3d_lora_weight).
                options["enable_mixed_moe_lora_format"] = True
        options.update(llm_kwargs)
        logger.info("starting vLLM: %s", options)
        try:
            self.llm = LLM(**options)
        except Exception as exc:
            if draft is not None:
                raise UnsupportedError(self._cannot_draft(options["speculative_config"], exc)) from exc
            raise UnsupportedError(self._cannot_run(serve_dir, exc)) from exc
        self._pooler_options = {
            k: v for k, v in options.items() if k not in ("enable_lora", "max_lora_rank", "max_loras")
        } | {"runner": "pooling"}
        self._lora_requests: dict[str, Any] = {}
        self._adapter_state: dict[str, tuple[str, dict[str, Any]]] = {}
        self._adapters_tmp: tempfile.TemporaryDirectory | None = None
        self._adapter_versions = itertools.count(1)
        self._lora_ids = itertools.count(1)
        self._request_ids = itertools.count()
        #: For each media type the checkpoint takes, why this engine refuses it (None: vLLM serves it).
        self._media_refusals = self._decide_media(serve_dir)
        self.accepts_media = any(reason is None for reason in self._media_refusals.values())
        self._after_load()

    def _cannot_run(self, serve_dir: Path, exc: BaseException) -> str:
        """The refusal when vLLM cannot start on this checkpoint: family, architecture, vLLM version and the cause."""
        architectures = _architectures(serve_dir)
        arch = ", ".join(architectures or ["?"])
        return (
            f"vLLM {self.vllm_version} cannot run model family {self.spec.name!r} ({arch}) from {serve_dir}: "
            f"{_root_cause(exc, architectures)}. Serve it with the transformers backend "
            "(--backend transformers)"
        )

    def _cannot_draft(self, config: dict[str, Any], exc: BaseException) -> str:
        """The refusal when vLLM cannot start with the draft: its speculative_config, vLLM's build and the cause."""
        return (
            f"vLLM {self.vllm_version} cannot decode with the draft {config['model']} (speculative_config "
            f"{json.dumps(config)}): {_root_cause(exc, [])}. Serve it with the transformers backend (--backend "
            "transformers --draft DIR, greedy), or with vLLM's CUDA build on a GPU"
        )

    def speculative_stats(self) -> dict[str, int] | None:
        """vLLM's speculative-decoding counters so far (None without a draft): ``steps`` (drafts verified),
        ``proposed`` and ``accepted`` (draft tokens)."""
        if self.speculative is None:
            return None
        names = {
            "vllm:spec_decode_num_drafts": "steps",
            "vllm:spec_decode_num_draft_tokens": "proposed",
            "vllm:spec_decode_num_accepted_tokens": "accepted",
        }
        out = dict.fromkeys(names.values(), 0)
        for metric in self.llm.get_metrics():
            if metric.name in names:
                out[names[metric.name]] += int(getattr(metric, "value", 0))
        return out

    def speculative_summary(self) -> str | None:
        """The draft's acceptance so far in words (None without a draft), from vLLM's counters."""
        stats = self.speculative_stats()
        if stats is None:
            return None
        per_step = stats["accepted"] / stats["steps"] if stats["steps"] else 0.0
        k = self.speculative["num_speculative_tokens"] if self.speculative else 0
        return (
            f"draft: {per_step:.2f} of {k} proposed tokens accepted per verification step ({stats['steps']} steps), "
            f"{per_step + 1:.2f} tokens per target forward"
        )

    # ------------------------------------------------------------------ media

    def _decide_media(self, serve_dir: Path) -> dict[str, str | None]:
        """:func:`media_refusals` for the media this checkpoint takes, from what the started vLLM serves."""
        modalities = self.media_modalities
        if not modalities:
            return {}
        architecture = ", ".join(_architectures(serve_dir) or ["?"])
        try:
            allowed = self._allowed_media()
        except Exception as exc:  # vLLM's internals moved: refuse media, saying why, rather than guess
            reason = f"cannot tell which media vLLM {self.vllm_version} serves for {architecture} ({exc})"
            return dict.fromkeys(modalities, reason)
        return media_refusals(modalities, allowed, architecture, self.vllm_version)

    def _allowed_media(self) -> dict[str, int]:
        """Media type -> items per prompt the started vLLM takes for this model (empty for a text-only model)."""
        model_config = self.llm.llm_engine.model_config
        if not model_config.is_multimodal_model:
            return {}
        from vllm.multimodal import MULTIMODAL_REGISTRY

        return dict(MULTIMODAL_REGISTRY.get_processing_info(model_config).allowed_mm_limits)

    def media_refusal_for(self, kind: str) -> str | None:
        """See :meth:`Engine.media_refusal_for`: decided per media type from what the started vLLM serves."""
        return self._media_refusals.get(kind, f"vLLM {self.vllm_version} serves no {PLURAL.get(kind, kind)} here")

    def _check_expansions(self, prompts: Sequence[Sequence[int]], outputs: Sequence[Any]) -> None:
        """Raise when vLLM's expansion of a media prompt is not training's (see :func:`expansion_mismatch`)."""
        for prompt, out in zip(prompts, outputs, strict=True):
            if getattr(prompt, "items", ()):
                problem = expansion_mismatch(prompt, out.prompt_token_ids)
                if problem is not None:
                    raise InferError(problem)

    # ------------------------------------------------------------------ adapters and weights

    def load_adapter(self, name: str, path: str | Path) -> None:
        """See :meth:`Engine.load_adapter`; refused, saying why, on a model this vLLM build runs without LoRA."""
        if self.lora_refusal is not None:
            raise UnsupportedError(
                f"{self.lora_refusal}: serve adapter {name!r} merged (--merge-lora) or with the transformers backend"
            )
        super().load_adapter(name, path)

    def _load_adapter(self, name: str, path: Path) -> None:
        from vllm.lora.request import LoRARequest

        extra = {"is_3d_lora_weight": True} if _has_parameter_level_lora(path) else {}
        request = LoRARequest(name, next(self._lora_ids), str(path), **extra)
        try:
            # Load now rather than on first use, so a bad adapter fails here with its own message.
            self.llm.llm_engine.add_lora(request)
        except Exception as exc:
            raise InvalidRequestError(f"vLLM cannot load adapter {name!r} from {path}: {exc}") from exc
        old = self._lora_requests.get(name)
        self._lora_requests[name] = request
        if old is not None:  # a new version of the adapter (update_adapter): the old one goes
            self.llm.llm_engine.remove_lora(old.lora_int_id)
        weights = path / "adapter_model.safetensors"
        if weights.is_file():
            # Kept for update_adapter: the directory may be gone by then (an RL trainer loads from a temporary one).
            from safetensors.torch import load_file

            config = (path / "adapter_config.json").read_text(encoding="utf-8")
            self._adapter_state[name] = (config, load_file(str(weights)))

    def _update_adapter(self, name: str, tensors: dict[str, Any]) -> None:
        """Replace adapter ``name``'s tensors (peft's names, as ``get_peft_model_state_dict`` gives them).

        vLLM reads an adapter from a directory when it is added, so the new version is written (the tensors given
        over the current ones) to a directory of this engine's and added under a new LoRA id; the old one is
        removed. This is the LoRA-only weight sync of online RL (``--rollout-engine vllm``).
        """
        from safetensors.torch import save_file

        if name not in self._adapter_state:
            raise UnsupportedError(
                f"update_adapter: adapter {name!r} was not loaded from adapter_model.safetensors; reload it instead"
            )
        config, current = self._adapter_state[name]
        unknown = sorted(set(tensors) - set(current))
        if unknown:
            raise InvalidRequestError(
                f"update_adapter: adapter {name!r} has no tensor {', '.join(unknown[:5])}"
                f"{' ...' if len(unknown) > 5 else ''} (names must be peft's, as get_peft_model_state_dict gives them)"
            )
        merged = dict(current)
        for key, tensor in tensors.items():
            if tuple(tensor.shape) != tuple(current[key].shape):
                shape, expected = tuple(tensor.shape), tuple(current[key].shape)
                raise InvalidRequestError(f"update_adapter: {key} has shape {shape}, the adapter's is {expected}")
            merged[key] = tensor.detach().to(device="cpu", dtype=current[key].dtype).contiguous()
        if self._adapters_tmp is None:
            self._adapters_tmp = tempfile.TemporaryDirectory(prefix="swiftcore-vllm-adapters-")
        target = Path(self._adapters_tmp.name) / f"{name}-{next(self._adapter_versions)}"
        target.mkdir()
        (target / "adapter_config.json").write_text(config, encoding="utf-8")
        save_file(merged, str(target / "adapter_model.safetensors"))
        previous = Path(self._lora_requests[name].lora_path)
        self._load_adapter(name, target)
        if previous.parent == target.parent:  # a version this engine wrote: no longer needed
            import shutil

            shutil.rmtree(previous, ignore_errors=True)

    def _lora(self, adapter: str | None) -> Any:
        return self._lora_requests[adapter] if adapter is not None else None

    def _update_weights(self, named: list[tuple[str, Any]]) -> None:
        instances = [llm for llm in (self.llm, self._pooler) if llm is not None]
        if self.on_cpu:
            for llm in instances:
                llm.collective_rpc(_mark_cpu_experts)
        if self.in_process:
            for llm in instances:
                llm.collective_rpc("reload_weights", kwargs={"weights_iterator": named})
        else:
            # Tensors cannot be pickled into the engine-core process: hand it a directory instead.
            from safetensors.torch import save_file

            with tempfile.TemporaryDirectory(prefix="swiftcore-vllm-weights-") as tmp:
                save_file({k: v.contiguous() for k, v in named}, str(Path(tmp) / "model.safetensors"))
                for llm in instances:
                    llm.collective_rpc("reload_weights", kwargs={"weights_path": tmp})
        if self.on_cpu:
            for llm in instances:
                llm.collective_rpc(_repack_cpu_experts)
        if self.on_cpu and self.runner == "generate":
            self.llm.collective_rpc(_repack_cpu_output_head)
        for llm in instances:
            llm.reset_prefix_cache()

    # ------------------------------------------------------------------ generation

    def generate_requests(self, requests: Any, *, batch_size: int = 8) -> Any:
        """See :meth:`Engine.generate_requests`; vLLM schedules its own batches, so it gets big ones."""
        return super().generate_requests(requests, batch_size=max(batch_size, 256))

    def _generate_ids(
        self, prompts: list[list[int]], params: list[SamplingParams], adapters: list[str | None]
    ) -> list[list[int]]:
        if self.runner != "generate":
            raise UnsupportedError("this vLLM engine was started with runner='pooling': it only embeds")
        outputs = self.llm.generate(
            [vllm_prompt(p) for p in prompts],
            [to_vllm_sampling(p, self.stop_token_ids) for p in params],
            lora_request=[self._lora(a) for a in adapters],
            use_tqdm=False,
        )
        self._check_expansions(prompts, outputs)
        return [list(out.outputs[0].token_ids) for out in outputs]

    def _generate_ids_with_logprobs(
        self, prompts: list[list[int]], params: list[SamplingParams], adapters: list[str | None]
    ) -> tuple[list[list[int]], list[list[float]]]:
        if self.runner != "generate":
            raise UnsupportedError("this vLLM engine was started with runner='pooling': it only embeds")
        # logprobs=0: the sampled token's own log-probability only. Which distribution it is taken from is the
        # engine's ``logprobs_mode`` (``processed_logprobs`` for RL rollout engines: see create_rollout_engine).
        outputs = self.llm.generate(
            [vllm_prompt(p) for p in prompts],
            [to_vllm_sampling(p, self.stop_token_ids, logprobs=0) for p in params],
            lora_request=[self._lora(a) for a in adapters],
            use_tqdm=False,
        )
        self._check_expansions(prompts, outputs)
        ids, logprobs = [], []
        for out in outputs:
            sample = out.outputs[0]
            ids.append(list(sample.token_ids))
            steps = sample.logprobs or []  # one {token id: Logprob} per generated token
            logprobs.append([float(step[t].logprob) for t, step in zip(sample.token_ids, steps, strict=False)])
        return ids, logprobs

    def _prompt_logprobs(
        self, prompts: list[list[int]], top_logprobs: int, adapters: list[str | None]
    ) -> list[list[tuple[float, list[tuple[int, float]]]]]:
        """vLLM's ``prompt_logprobs`` (raw log-probabilities of every prompt token after the first, and the
        ``top_logprobs`` most likely tokens at each position), one token generated and dropped."""
        from vllm import SamplingParams as VllmSamplingParams

        if self.runner != "generate":
            raise UnsupportedError("this vLLM engine was started with runner='pooling': it only embeds")
        params = VllmSamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=top_logprobs, detokenize=False)
        outputs = self.llm.generate(
            [vllm_prompt(p) for p in prompts],
            [params] * len(prompts),
            lora_request=[self._lora(a) for a in adapters],
            use_tqdm=False,
        )
        self._check_expansions(prompts, outputs)
        result, top_k = [], top_logprobs
        for prompt, out in zip(prompts, outputs, strict=True):
            steps = list(out.prompt_logprobs or [])[1:]  # the first prompt token has None
            rows = []
            for token, step in zip(list(prompt)[1:], steps, strict=True):
                # {token id: Logprob(logprob, rank)}: the prompt token's own entry and the top_logprobs ranked ones.
                ranked = sorted((lp.rank, t, lp.logprob) for t, lp in step.items() if 0 < (lp.rank or 0) <= top_k)
                rows.append((float(step[token].logprob), [(int(t), float(v)) for _, t, v in ranked]))
            result.append(rows)
        return result

    def _stream_many_ids(
        self, prompts: list[list[int]], params: list[SamplingParams], adapters: list[str | None]
    ) -> Iterator[tuple[int, list[int]] | tuple[int, list[int], list[TokenLogprob]]]:
        """Each step's new token ids per row (vLLM's delta outputs); a row whose ``logprobs`` is set gets their
        entries with them (vLLM's sample log-probs of those very tokens), when this engine's are raw."""
        from vllm.sampling_params import RequestOutputKind

        if self.runner != "generate":
            raise UnsupportedError("this vLLM engine was started with runner='pooling': it only embeds")
        engine = self.llm.llm_engine
        # vLLM's sample log-probs are the raw ones (what prompt_logprobs and the transformers engine report) only in
        # its default mode; an engine started with processed ones (RL rollouts) streams ids, scored when whole.
        raw = getattr(engine.model_config, "logprobs_mode", None) == "raw_logprobs"
        rows: dict[str, int] = {}
        tops: dict[str, int] = {}
        for row, (prompt, param, adapter) in enumerate(zip(prompts, params, adapters, strict=True)):
            request_id = f"swiftcore-stream-{next(self._request_ids)}"
            extra: dict[str, Any] = {"output_kind": RequestOutputKind.DELTA}
            if raw and param.logprobs is not None:
                extra["logprobs"] = tops[request_id] = param.logprobs
            sampling = to_vllm_sampling(param, self.stop_token_ids, **extra)
            engine.add_request(request_id, vllm_prompt(prompt), sampling, lora_request=self._lora(adapter))
            rows[request_id] = row
        unfinished = set(rows)
        unchecked = {request_id for request_id, row in rows.items() if getattr(prompts[row], "items", ())}
        try:
            # vLLM batches the streams itself (continuous batching); each step yields every row's new ids.
            while unfinished and engine.has_unfinished_requests():
                for out in engine.step():
                    if out.request_id not in unfinished:
                        continue
                    if out.request_id in unchecked:  # before any of its tokens is sent
                        unchecked.discard(out.request_id)
                        self._check_expansions([prompts[rows[out.request_id]]], [out])
                    if out.finished:
                        unfinished.discard(out.request_id)
                    sample = out.outputs[0]
                    tokens = list(sample.token_ids)
                    if not tokens:
                        continue
                    top = tops.get(out.request_id)
                    if top is None:
                        yield rows[out.request_id], tokens
                    else:  # DELTA: this step's tokens and their log-prob dicts only (vLLM slices both alike)
                        yield rows[out.request_id], tokens, token_logprobs(tokens, sample.logprobs or [], top)
        finally:
            if unfinished:  # the consumer went away: free those sequences' KV cache
                engine.abort_request(sorted(unfinished))

    def embed(self, inputs: Any, *, normalize: bool = True) -> list[list[float]]:
        """Embed texts or token ids (needs ``runner='pooling'`` or ``embeddings=True``); see :meth:`Engine.embed`."""
        if self.runner != "pooling" and not self._embeddings:
            raise UnsupportedError(
                "this vLLM engine generates; start one with runner='pooling' "
                "(--engine-option runner=pooling) to serve embeddings"
            )
        return super().embed(inputs, normalize=normalize)

    def _embed_ids(self, prompts: list[list[int]], normalize: bool) -> list[list[float]]:
        from vllm import PoolingParams
        from vllm.inputs import TokensPrompt

        # The embedding pooler L2-normalises by default; use_activation=False turns that off (and
        # use_activation=True is not the same as the default: leave it unset).
        if self._embeddings and self._pooler is None:
            from vllm import LLM

            logger.info("starting the pooling vLLM instance for embeddings")
            self._pooler = LLM(**self._pooler_options)
        pooler = self._pooler if self._embeddings else self.llm
        params = None if normalize else PoolingParams(use_activation=False)
        outputs = pooler.embed(
            [TokensPrompt(prompt_token_ids=p) for p in prompts], pooling_params=params, use_tqdm=False
        )
        return [[float(x) for x in out.outputs.embedding] for out in outputs]

    def close(self) -> None:
        """Shut vLLM down and free its memory.

        In-process engines (the default) share vLLM's process-wide state, its parallel groups among it: closing one
        while another engine of this process still serves tears that one down too ("pipeline model parallel group
        is not initialized"). Run a second, short-lived engine in a process of its own, or ``in_process=False``.
        """
        for attr in ("_pooler", "llm"):
            llm = getattr(self, attr, None)
            setattr(self, attr, None)
            if llm is not None:
                shutdown = getattr(llm.llm_engine, "shutdown", None) or getattr(llm, "shutdown", None)
                if callable(shutdown):
                    shutdown()
                del llm
        import gc

        gc.collect()
        for attr in ("_tmp", "_adapters_tmp"):
            tmp = getattr(self, attr, None)
            if tmp is not None:
                tmp.cleanup()
                setattr(self, attr, None)


def _architectures(model_dir: Path) -> list[str]:
    """The architectures ``config.json`` names (empty when it cannot be read)."""
    try:
        config = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [str(a) for a in config.get("architectures") or []]


def _has_parameter_level_lora(adapter_dir: Path) -> bool:
    """Whether a peft adapter adapts parameters (``target_parameters``: fused 3D expert weights), not only modules."""
    try:
        config = json.loads((Path(adapter_dir) / "adapter_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return bool(config.get("target_parameters"))


def _root_cause(exc: BaseException, architectures: list[str]) -> str:
    """The innermost error behind a failed ``vllm.LLM(...)``.

    When vLLM cannot import a model's module it inspects the architecture in a subprocess and raises only "failed
    to be inspected" (the reason goes to its log); importing that module here surfaces the reason itself (for
    example a missing ``torchvision``).
    """
    while exc.__cause__ is not None:
        exc = exc.__cause__
    full = str(exc).strip()
    text = full.splitlines()[0] if full else type(exc).__name__
    if "failed to be inspected" in full:
        from vllm.model_executor.models.registry import ModelRegistry

        for arch in architectures:
            module = getattr(ModelRegistry.models.get(arch), "module_name", None)
            if module is None:
                continue
            try:
                importlib.import_module(module)
            except Exception as inner:  # any import failure is the reason we are after
                while inner.__cause__ is not None:
                    inner = inner.__cause__
                return f"{type(inner).__name__}: {inner} (importing {module})"
    if "pydantic" in type(exc).__module__ or "Validation" in type(exc).__name__:
        # pydantic's own text names its docs page; the value error's line is what says what is wrong.
        lines = [ln.strip() for ln in full.splitlines() if ln.strip().startswith("Value error")]
        text = lines[0].removeprefix("Value error, ") if lines else text
    return text


def _cpu_expert_layers(worker: Any) -> Iterator[Any]:
    """The fused-MoE layers whose CPU kernel keeps its weights pre-packed (``process_weights_after_loading``)."""
    for module in worker.model_runner.get_model().modules():
        kernel = getattr(getattr(module, "quant_method", None), "moe_kernel", None)
        experts = getattr(kernel, "fused_experts", None)
        if experts is not None and hasattr(module, "w13_weight") and hasattr(experts, "process_weights_after_loading"):
            yield module, experts


def _fingerprint(module: Any) -> tuple[float, float]:
    """A checksum of a layer's expert weights that changes when they are rewritten, layout included.

    Up to 65,536 evenly spaced elements, weighted by position (a plain sum would not see a re-layout). Not the
    tensors' version counters: the reload copies through ``.data``, which leaves them unchanged.
    """
    import torch

    sums = []
    for weight in (module.w13_weight, module.w2_weight):
        flat = weight.detach().reshape(-1)
        picked = flat[torch.linspace(0, flat.numel() - 1, min(flat.numel(), 65536)).long()].double()
        sums.append(float((picked * torch.arange(1, picked.numel() + 1, dtype=torch.float64)).sum()))
    return sums[0], sums[1]


def _mark_cpu_experts(worker: Any) -> int:
    """Before a reload: fingerprint each CPU expert layer's (packed) weights, to tell afterwards which it rewrote."""
    layers = list(_cpu_expert_layers(worker))
    for module, _ in layers:
        module._swiftcore_fingerprint = _fingerprint(module)
    return len(layers)


def _repack_cpu_experts(worker: Any) -> int:
    """After a reload: pre-pack again the expert weights the reload rewrote; runs on each worker.

    vLLM 0.32's reload processes a reloaded MoE layer as a weight update, which skips the CPU kernel's pre-packing
    (done on the first load only): the layer's weights come back in checkpoint layout and the kernel reads them
    as packed, so generation after a weight sync silently differed (measured on OLMoE: 1 of 3 greedy replies).
    A layer the update did not touch keeps its packed weights (same fingerprint) and is left alone.
    """
    repacked = 0
    for module, experts in _cpu_expert_layers(worker):
        before = getattr(module, "_swiftcore_fingerprint", None)
        if before is not None and before != _fingerprint(module):
            experts.process_weights_after_loading(module)
            repacked += 1
    return repacked


def _repack_cpu_output_head(worker: Any) -> bool:
    """Re-pack the CPU output head from its (possibly tied, just reloaded) weight; runs on each worker."""
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

    model = worker.model_runner.get_model()
    head = getattr(model, "lm_head", None)
    if head is None or getattr(head, "weight", None) is None:
        return False
    dispatch_cpu_unquantized_gemm(head, remove_weight=False)
    return True
