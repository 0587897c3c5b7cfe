"""SGLang's offline ``Engine`` behind swiftcore's engine contract.

As with every backend, swiftcore encodes the prompts with its own template and hands SGLang token ids
(``input_ids``), with ``skip_tokenizer_init=True`` so SGLang never re-tokenizes or detokenizes. LoRA
adapters are loaded with ``load_lora_adapter`` and picked per request through ``lora_path``; weight
updates use ``update_weights_from_tensor`` (names as in the Hugging Face checkpoint) or
``update_weights_from_disk``.

SGLang's PyPI wheel needs a CUDA GPU; ``scripts/gpu_check.sh`` runs this backend for real there, and
the CPU tests run everything around the engine calls against a stand-in with SGLang's signatures.

Images and audio go through ``Engine.generate(input_ids=, image_data=, audio_data=)`` as the processor's output:
the prompt's ids exactly as training expanded them, and per media type one ``{"format": "processor_output", ...}``
mapping of training's processor tensors (:func:`sglang_media`). Why not the raw images with the token ids: SGLang's
multimodal processor would then decode the ids back to text and run the Hugging Face processor on that text again
(``load_mm_data`` / ``process_and_combine_mm_data`` in ``sglang/srt/multimodal/processors/base_processor.py``), so the
prompt would be re-tokenized (a decode-encode round trip is not always the same ids) and Qwen-VL images resized by
SGLang's own rule first (``qwen_vl.py``); the model could see a prompt and pixels it was never trained on. With
``processor_output`` SGLang keeps the ids as given and locates each item by its placeholder tokens in them. A prompt
with media goes to SGLang alone (a batch of one), as in the transformers engine; the engine then checks that SGLang
counted the prompt's tokens as given (``meta_info.prompt_tokens``). The model takes media only when SGLang started it
with a multimodal processor (``tokenizer_manager.mm_processor``; it does even with ``skip_tokenizer_init``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swiftcore_infer import Engine, InferError, InvalidRequestError, SamplingParams, UnsupportedError

if TYPE_CHECKING:
    from swiftcore.api import PluginSet

__all__ = ["SglangEngine", "new_token_ids", "sglang_media", "to_sglang_sampling"]

logger = logging.getLogger("swiftcore.infer.sglang")

#: SGLang's ``top_k`` for "the whole vocabulary".
_TOP_K_ALL = -1


def to_sglang_sampling(params: SamplingParams, stop_token_ids: list[int]) -> dict[str, Any]:
    """SGLang's ``sampling_params`` dict for swiftcore's parameters (stop strings are cut by swiftcore)."""
    out: dict[str, Any] = {
        "max_new_tokens": params.max_new_tokens,
        "temperature": params.temperature,
        "top_p": params.top_p,
        "top_k": params.top_k if params.top_k > 0 else _TOP_K_ALL,
        "repetition_penalty": params.repetition_penalty,
        "stop_token_ids": list(stop_token_ids),
    }
    if params.seed is not None:
        out["sampling_seed"] = params.seed
    return out


def new_token_ids(chunk: dict[str, Any], seen: list[int]) -> list[int]:
    """The ids a streamed chunk adds to ``seen`` (SGLang streams cumulative or incremental ids by setting)."""
    ids = list(chunk.get("output_ids") or [])
    if len(ids) >= len(seen) and ids[: len(seen)] == seen:
        return ids[len(seen) :]
    return ids  # incremental streaming output


#: Which media type each of training's processor tensors belongs to, by key prefix (Qwen3.5: ``pixel_values``,
#: ``image_grid_thw``; Gemma 4: also ``image_position_ids``, ``input_features``, ``input_features_mask``; Qwen3-ASR:
#: ``input_features``, ``input_features_mask``).
_MEDIA_KEYS = {"image": ("pixel_values", "image_"), "audio": ("input_features", "audio_", "feature_attention_mask")}
#: Processor outputs SGLang works out itself from the ids (M-RoPE and attention types): not sent.
_NOT_SENT = frozenset({"mm_token_type_ids"})


class _ProcessorOutput(dict):
    """One media type's ``processor_output`` for SGLang: a dict (SGLang recognises the format only on a ``dict``)
    whose keys also read as attributes, as on transformers' ``BatchFeature``: SGLang's processors read the processor
    output both ways (``getattr(ret, "image_grid_thw", None)`` for Qwen-VL's M-RoPE positions), and a plain dict
    would answer None to the second."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def sglang_media(prompt: Sequence[int]) -> dict[str, Any]:
    """The ``image_data`` / ``audio_data`` arguments of SGLang's ``Engine.generate`` for one prompt (empty for a prompt
    without media): per media type a one-item list of ``{"format": "processor_output", "modality": ..., tensors}``,
    the tensors training's processor made for the prompt's items of that type.

    The prompt's ids go to SGLang as they are (expanded as in training); see the module docstring for why.

    Raises:
        InferError: a processor tensor of no known media type (it would otherwise be dropped silently).
    """
    grouped: dict[str, _ProcessorOutput] = {}
    for key, value in (getattr(prompt, "media", None) or {}).items():
        if key in _NOT_SENT:
            continue
        kind = next((k for k, prefixes in _MEDIA_KEYS.items() if key.startswith(prefixes)), None)
        if kind is None:
            raise InferError(f"SGLang: the processor's {key!r} belongs to no media type swiftcore knows how to send")
        grouped.setdefault(kind, _ProcessorOutput(format="processor_output", modality=kind))[key] = value
    return {f"{kind}_data": [output] for kind, output in grouped.items()}


def _check_prompt_tokens(prompt: Sequence[int], output: dict[str, Any]) -> None:
    """Raise when SGLang ran a media prompt of another length than the ids it was given."""
    counted = (output.get("meta_info") or {}).get("prompt_tokens")
    if counted is not None and int(counted) != len(prompt):
        raise InferError(
            f"SGLang ran this prompt with {counted} tokens, not the {len(prompt)} of training's expanded prompt: it "
            "changed the media placeholders; serve it with --backend transformers"
        )


def _check(result: Any, what: str) -> None:
    """Raise when an SGLang control call reports failure (it answers ``(success, message)`` or an object)."""
    if isinstance(result, tuple) and result and result[0] is False:
        raise InferError(f"SGLang {what} failed: {result[1] if len(result) > 1 else ''}")
    if getattr(result, "success", True) is False:
        raise InferError(f"SGLang {what} failed: {getattr(result, 'error_message', '') or result}")


class SglangEngine(Engine):
    """SGLang behind the swiftcore engine contract.

    Args:
        model_dir: a checkpoint directory, or a LoRA adapter directory (its base model is found from it).
        plugins: the loaded plugins.
        adapter: a peft LoRA adapter served by default (as ``default``).
        template: the template name (default: the model spec's).
        dtype: ``auto``, ``float32``, ``bfloat16`` or ``float16``.
        model_type: force the model spec.
        merge_lora: merge ``adapter`` into the weights before serving (no LoRA at run time).
        max_model_len: SGLang's ``context_length``.
        runner: ``generate`` or ``pooling`` (``is_embedding=True``: embeddings only).
        enable_lora: reserve LoRA slots so adapters can be loaded after start.
        max_lora_rank: the largest adapter rank accepted.
        max_loras: adapters active in one batch (``max_loras_per_batch``).
        seed: SGLang's ``random_seed``.
        **engine_kwargs: passed to ``sglang.Engine`` (``mem_fraction_static``, ``tp_size`` ...).
    """

    backend = "sglang"

    def __init__(
        self,
        model_dir: str | Path,
        plugins: PluginSet,
        *,
        adapter: str | Path | None = None,
        template: str | None = None,
        dtype: str = "auto",
        model_type: str | None = None,
        merge_lora: bool = False,
        max_model_len: int | None = None,
        runner: str = "generate",
        enable_lora: bool = True,
        max_lora_rank: int = 16,
        max_loras: int = 4,
        seed: int = 0,
        **engine_kwargs: Any,
    ) -> None:
        super().__init__(model_dir, plugins, adapter=adapter, template=template, model_type=model_type)
        if runner not in ("generate", "pooling"):
            raise InvalidRequestError(f"runner must be 'generate' or 'pooling', got {runner!r}")
        self.runner = runner
        caps = {"generate", "stream", "update_weights"} if runner == "generate" else {"embed"}
        if enable_lora and runner == "generate":
            caps.add("lora")
        self.capabilities = frozenset(caps)

        serve_dir = self.base_dir
        self._tmp: Any = None
        if merge_lora and self._initial_adapter is not None:
            import tempfile

            from swiftcore_infer import merge_lora as merge_into

            self._tmp = tempfile.TemporaryDirectory(prefix="swiftcore-sglang-merged-")
            serve_dir = merge_into(
                self.base_dir, self._tmp.name, plugins, adapter=self._initial_adapter, dtype="float32"
            )
            self._initial_adapter = None

        import sglang

        if max_model_len:
            self.max_model_len = min(self.max_model_len, max_model_len)
        options: dict[str, Any] = {
            "model_path": str(serve_dir),
            "dtype": dtype,
            "random_seed": seed,
            "context_length": self.max_model_len,
            # swiftcore tokenizes (its template) and decodes: SGLang works on ids only.
            "skip_tokenizer_init": True,
            "is_embedding": runner == "pooling",
            "log_level": "error",
        }
        if enable_lora and runner == "generate":
            options.update(
                enable_lora=True, max_lora_rank=max_lora_rank, max_loras_per_batch=max_loras, lora_target_modules="all"
            )
        options.update(engine_kwargs)
        logger.info("starting SGLang: %s", options)
        self.sgl = sglang.Engine(**options)
        self._decide_media()
        self._after_load()

    def _decide_media(self) -> None:
        """Take media when SGLang started the model with a multimodal processor (see the module docstring)."""
        if not self.media_modalities:
            return
        manager = getattr(self.sgl, "tokenizer_manager", None)
        self.accepts_media = getattr(manager, "mm_processor", None) is not None
        if not self.accepts_media:
            self.media_refusal = (
                "SGLang started this model without a multimodal processor (an architecture SGLang serves as text "
                "only, or language-model-only mode), so it would ignore the images and audio"
            )

    # ------------------------------------------------------------------ adapters and weights

    def _load_adapter(self, name: str, path: Path) -> None:
        _check(self.sgl.load_lora_adapter(lora_name=name, lora_path=str(path)), f"load_lora_adapter({name!r})")

    def _update_weights(self, named: list[tuple[str, Any]]) -> None:
        _check(self.sgl.update_weights_from_tensor(named_tensors=named, flush_cache=True), "update_weights_from_tensor")

    def update_weights(self, weights: Any) -> int:
        """Replace weights in place; a directory goes through ``update_weights_from_disk`` (no tensor copy)."""
        if isinstance(weights, (str, Path)) and Path(weights, "config.json").is_file():
            if "update_weights" not in self.capabilities:
                raise UnsupportedError("this SGLang engine cannot update weights (runner='pooling')")
            _check(self.sgl.update_weights_from_disk(model_path=str(weights)), "update_weights_from_disk")
            return len(list(Path(weights).glob("*.safetensors")))
        return super().update_weights(weights)

    # ------------------------------------------------------------------ generation

    def _generate_ids(
        self, prompts: list[list[int]], params: list[SamplingParams], adapters: list[str | None]
    ) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in prompts]
        with_media = [i for i, p in enumerate(prompts) if getattr(p, "media", None)]
        text = sorted(set(range(len(prompts))) - set(with_media))
        if text:
            outputs = self.sgl.generate(
                input_ids=[prompts[i] for i in text],
                sampling_params=[to_sglang_sampling(params[i], self.stop_token_ids) for i in text],
                lora_path=[adapters[i] for i in text] if any(adapters[i] for i in text) else None,
            )
            if isinstance(outputs, dict):  # a batch of one may come back unwrapped
                outputs = [outputs]
            for i, output in zip(text, outputs, strict=True):
                out[i] = list(output["output_ids"])
        for i in with_media:  # SGLang's single-request form: the media lists are this prompt's own
            out[i] = self._generate_media(prompts[i], params[i], adapters[i])
        return out

    def _generate_media(self, prompt: list[int], params: SamplingParams, adapter: str | None) -> list[int]:
        """Generate for one prompt with images or audio (see :func:`sglang_media`)."""
        output = self.sgl.generate(
            input_ids=list(prompt),
            sampling_params=to_sglang_sampling(params, self.stop_token_ids),
            lora_path=adapter,
            **sglang_media(prompt),
        )
        if isinstance(output, list):
            (output,) = output
        _check_prompt_tokens(prompt, output)
        return list(output["output_ids"])

    def _stream_ids(self, prompt: list[int], params: SamplingParams, adapter: str | None) -> Iterator[list[int]]:
        media = sglang_media(prompt)
        chunks = self.sgl.generate(
            input_ids=list(prompt),
            sampling_params=to_sglang_sampling(params, self.stop_token_ids),
            lora_path=adapter,
            stream=True,
            **media,
        )
        seen: list[int] = []
        try:
            for chunk in chunks:
                if media and not seen:
                    _check_prompt_tokens(prompt, chunk)
                new = new_token_ids(chunk, seen)
                seen.extend(new)
                if new:
                    yield new
        finally:
            close = getattr(chunks, "close", None)
            if callable(close):
                close()  # stops the request when the consumer went away

    def _embed_ids(self, prompts: list[list[int]], normalize: bool) -> list[list[float]]:
        from sglang.srt.managers.io_struct import EmbeddingReqInput

        # Engine.encode takes text only; the request object it builds also takes ids, which keeps the
        # template's tokenization.
        request = EmbeddingReqInput(input_ids=prompts)
        generator = self.sgl.tokenizer_manager.generate_request(request, None)
        outputs = self.sgl.loop.run_until_complete(generator.__anext__())
        if isinstance(outputs, dict):
            outputs = [outputs]
        vectors = [[float(x) for x in out["embedding"]] for out in outputs]
        if normalize:
            vectors = [[x / (sum(y * y for y in v) ** 0.5 or 1.0) for x in v] for v in vectors]
        return vectors

    def close(self) -> None:
        """Shut SGLang's processes down."""
        engine = getattr(self, "sgl", None)
        self.sgl = None
        if engine is not None:
            engine.shutdown()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
