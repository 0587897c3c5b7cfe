"""The engine contract every backend implements, and the code they all share.

:class:`Engine` owns everything that is not the forward pass, so that the transformers, vLLM and
SGLang backends cannot drift apart:

- prompts are encoded by the same swiftcore template as in training (``add_generation_prompt=True``),
  and a record's images and audio by the same sample path as training (:mod:`swiftcore_infer.media`):
  the prompt a backend gets is then a :class:`~swiftcore_infer.media.Prompt` carrying the media tensors (or, for a
  backend that runs the family's processor itself, ``media_as_items``: the items and the template's unexpanded ids),
  and a backend that cannot feed them (``accepts_media`` false, :meth:`Engine.media_refusal_for`) refuses the
  request, saying why;
- encoding runs ahead of the engine (:func:`~swiftcore_infer.prepare.prepare_ahead`), and a request
  that cannot be encoded, or that makes its batch fail, fails alone with its own error;
- generated ids are cut at the template's end-of-turn tokens and at the request's stop strings,
  decoded, and parsed back into ``content``, ``reasoning_content`` and ``tool_calls`` by the template;
- LoRA adapters are named, and each request picks one (or the base model).

A backend subclasses :class:`Engine` and implements the ``_``-prefixed primitives, which only ever see
token ids: :meth:`Engine._generate_ids`, and optionally :meth:`Engine._stream_ids`,
:meth:`Engine._embed_ids` and :meth:`Engine._load_adapter`.

The weight sync an online-RL trainer pushes its policy through (``update_weights``, ``update_adapter`` and their
primitives ``_update_weights``, ``_update_adapter``) is :class:`~swiftcore_infer.weight_sync.WeightSyncMixin`'s,
which :class:`Engine` inherits: this module is about generation.
"""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from swiftcore.api.models import resolve_checkpoint, warn_mismatches
from swiftcore_infer.errors import InvalidRequestError, UnsupportedError
from swiftcore_infer.prepare import prepare_ahead
from swiftcore_infer.types import MAX_TOP_LOGPROBS, Generation, Request, SamplingParams, StreamDelta, TokenLogprob
from swiftcore_infer.weight_sync import WeightSyncMixin

if TYPE_CHECKING:
    from swiftcore.api import PluginSet

__all__ = ["BASE_MODEL", "DEFAULT_ADAPTER", "Engine", "EncodingTools", "extend_prompt"]

logger = logging.getLogger("swiftcore.infer")

#: The adapter name that selects the base model even when a default adapter is loaded.
BASE_MODEL = "base"
#: The name given to the adapter passed to the engine's constructor.
DEFAULT_ADAPTER = "default"


@dataclass(frozen=True)
class EncodingTools:
    """A tokenizer and media preparer of one thread's own, for :meth:`Engine.encode` off the engine's thread.

    Rust tokenizers refuse to be used by two threads at once ("Already borrowed"), and a processor calls its
    tokenizer, so a thread that encodes while the engine thread decodes needs copies of both
    (:meth:`Engine.encoding_tools`).

    Attributes:
        tokenizer: a copy of the engine's tokenizer.
        preparer: a :class:`~swiftcore_media.MediaPreparer` over that copy (None for a text-only model).
    """

    tokenizer: Any
    preparer: Any = None


class Engine(WeightSyncMixin):
    """Base class of inference engines (see the module docstring); the weight sync is inherited
    (:class:`~swiftcore_infer.weight_sync.WeightSyncMixin`).

    Args:
        model_dir: a checkpoint directory, or a LoRA adapter directory (its base model is found from it).
        plugins: the loaded plugin set (for the model spec and the template).
        adapter: a peft adapter directory, loaded as :data:`DEFAULT_ADAPTER` and used by requests
            that name no adapter.
        template: the template name (default: the one the checkpoint's manifest records, an adapter's before
            its base's; else the model spec's ``default_template``). One that differs from the manifest's, or a
            plugin version other than the one the checkpoint was trained with, is logged as a warning.
        model_type: force the model spec (``--model-type``).

    Attributes:
        backend: the backend's name.
        capabilities: what it can do (a subset of :data:`swiftcore.api.BACKEND_CAPABILITIES`).
        spec: the resolved :class:`~swiftcore.api.ModelSpec`.
        manifest: the :class:`~swiftcore.api.models.CheckpointManifest` of the adapter (else of the base),
            None for a checkpoint not trained by swiftcore.
        template: the :class:`~swiftcore.api.template.Template`.
        tokenizer: the Hugging Face tokenizer.
        base_dir: the base model directory.
        adapters: adapter name -> directory.
        default_adapter: the adapter used when a request names none (None = base model).
        max_model_len: the longest prompt plus completion the engine accepts.
    """

    backend: ClassVar[str] = "?"
    capabilities: ClassVar[frozenset[str]] = frozenset({"generate"})
    #: Whether the engine feeds a :class:`~swiftcore_infer.media.Prompt`'s media to the model. A backend that decides
    #: per model (vLLM: what its build serves for the architecture) sets it on the instance.
    accepts_media: bool = False
    #: Why the engine refuses media (None: the generic "does not take images or audio yet"); see
    #: :meth:`media_refusal_for`.
    media_refusal: str | None = None
    #: Whether the backend runs the family's processor itself: its prompts then carry the media items and the
    #: template's unexpanded ids (:attr:`Prompt.items <swiftcore_infer.media.Prompt.items>`,
    #: ``Prompt.placeholder_ids``) rather than the processor's tensors.
    media_as_items: ClassVar[bool] = False
    #: Whether the backend feeds videos to the model (the processor's video tensors). Off by default: a backend
    #: that runs the processor itself gets no videos from swiftcore (``MediaPreparer.item_inputs`` refuses them),
    #: and one handed tensors may not know the video keys (SGLang's media keys are the image's and audio's).
    takes_video: ClassVar[bool] = False

    def __init__(
        self,
        model_dir: str | Path,
        plugins: PluginSet,
        *,
        adapter: str | Path | None = None,
        template: str | None = None,
        model_type: str | None = None,
    ) -> None:
        from swiftcore.api.models import load_tokenizer, read_hf_config, resolve_model_spec
        from swiftcore.api.template import get_template

        base, adapter_dir = resolve_checkpoint(model_dir, adapter)
        _refuse_scoring_model(base, read_hf_config(base) or {})
        self.base_dir = base
        self.spec = resolve_model_spec(str(base), plugins, model_type)
        self.manifest = _manifest(adapter_dir, base)
        self.template = get_template(self._template_name(template, plugins), plugins)
        warn_mismatches(self.manifest, plugins, spec=self.spec, template=template)
        # A trained adapter may ship its own tokenizer (added tokens); prefer it when present.
        tokenizer_dir = adapter_dir if adapter_dir and (adapter_dir / "tokenizer_config.json").exists() else base
        self.tokenizer = load_tokenizer(str(tokenizer_dir))
        self.stop_token_ids = self._stop_token_ids()
        self.hidden_token_ids = self._hidden_token_ids()
        # How each set of weights was trained to be prompted (e.g. thinking off), by adapter name (None: the
        # base weights); a request's own chat_template_kwargs win. A merged adapter's apply to the base.
        self._chat_defaults: dict[str | None, dict[str, Any]] = {None: _chat_defaults(base)}
        self._adapter_dir = adapter_dir
        self.pad_token_id = (
            self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.stop_token_ids[0]
        )
        self.max_model_len = _max_model_len(read_hf_config(base) or {}, self.tokenizer)
        self.adapters: dict[str, Path] = {}
        self.default_adapter: str | None = None
        self._initial_adapter = adapter_dir
        self._media: Any = None
        self._media_lock = threading.Lock()

    def _template_name(self, template: str | None, plugins: PluginSet) -> str:
        """``--template``, else the manifest's template, else the model spec's default."""
        from swiftcore.api.models import manifest_template

        name = template or manifest_template(self.manifest, plugins) or self.spec.default_template
        if not name:
            raise InvalidRequestError(f"model {self.spec.name!r} names no default template; pass --template")
        return name

    # ------------------------------------------------------------------ set-up helpers for subclasses

    def _after_load(self) -> None:
        """Load the constructor's adapter; subclasses call this once their model is ready."""
        if self._initial_adapter is not None:
            self.load_adapter(DEFAULT_ADAPTER, self._initial_adapter)
            self.default_adapter = DEFAULT_ADAPTER
        elif self._adapter_dir is not None:  # merged into the base weights by the subclass
            self._chat_defaults[None] = _chat_defaults(self._adapter_dir, self.base_dir)

    def chat_template_kwargs_defaults(self, adapter: str | None = None) -> dict[str, Any]:
        """The ``chat_template_kwargs`` a request to ``adapter`` (None: the default one) gets unless it sets
        its own: what the checkpoint was trained with (``generation_defaults`` in ``swiftcore_args.json``)."""
        name = self.default_adapter if adapter is None else (None if adapter == BASE_MODEL else adapter)
        return dict(self._chat_defaults.get(name) or {})

    def _stop_token_ids(self) -> list[int]:
        vocab = self.tokenizer.get_vocab()
        ids = {vocab[w] for w in self.template.stop_words if w in vocab}
        if self.tokenizer.eos_token_id is not None:
            ids.add(self.tokenizer.eos_token_id)
        if not ids:
            raise InvalidRequestError(
                f"template {self.template.name!r} has no stop word in the tokenizer's vocabulary and the tokenizer "
                "has no eos token: generation would never stop; fix the tokenizer or pick another --template"
            )
        return sorted(ids)

    def _hidden_token_ids(self) -> frozenset[int]:
        """Special tokens left out of decoded replies: all but those the template's parser reads
        (reasoning and tool-call markers); ``<|fim_middle|>`` or ``<|vision_start|>`` are never text."""
        markers = (*self.template.reasoning_markers, *self.template.response_markers)
        special = set(getattr(self.tokenizer, "all_special_ids", None) or ())
        for token_id, added in (getattr(self.tokenizer, "added_tokens_decoder", None) or {}).items():
            if getattr(added, "special", False):
                special.add(int(token_id))
        keep = {t for t in special if any(self.tokenizer.convert_ids_to_tokens(t) in m for m in markers)}
        return frozenset(special - keep)

    def decode(self, tokens: Sequence[int]) -> str:
        """The text of generated ids, without the special tokens a reply never shows (see
        :attr:`hidden_token_ids`)."""
        hidden = self.hidden_token_ids
        return self.tokenizer.decode([t for t in tokens if t not in hidden], skip_special_tokens=False)

    # ------------------------------------------------------------------ encoding

    @property
    def media_modalities(self) -> tuple[str, ...]:
        """The media types prompts may carry: those the model spec declares (``image``, ``audio``) when the
        checkpoint has its processor files, as training decides (:func:`~swiftcore_media.prepare_media`)."""
        from swiftcore_media import media_modalities

        return media_modalities(self.spec, self.base_dir)

    def media_preparer(self) -> Any:
        """The :class:`~swiftcore_media.MediaPreparer` training uses for this model (built on first use;
        None for a text-only model)."""
        with self._media_lock:
            if self._media is None and self.media_modalities:
                from swiftcore_media import MediaError, prepare_media

                try:
                    self._media = prepare_media(self.spec, self.base_dir, self.tokenizer)
                except MediaError as exc:
                    raise InvalidRequestError(f"this model's processor cannot be built: {exc}") from exc
            return self._media

    def encoding_tools(self) -> EncodingTools:
        """Copies of the tokenizer and media preparer for a thread that encodes requests beside the engine's
        thread (a server's media pool: :meth:`encode` with ``tools``), so neither waits for the other's
        tokenizer. Encoding with them gives the same prompt as the engine's own."""
        tokenizer = copy.deepcopy(self.tokenizer)
        preparer = None
        if self.media_modalities and self.accepts_media:
            from swiftcore_media import MediaError, prepare_media

            try:
                preparer = prepare_media(self.spec, self.base_dir, tokenizer)
            except MediaError as exc:
                raise InvalidRequestError(f"this model's processor cannot be built: {exc}") from exc
        return EncodingTools(tokenizer, preparer)

    def _with_media(self, record: Any, policy: Any = None, tools: EncodingTools | None = None) -> tuple[Any, Any]:
        """``(record, preparer)``: a record with its media decoded and the preparer that expands them (its tags
        become parts in :meth:`SampleEncoder.prepare`, as in training), or ``(record, None)`` when it has no
        media. Refuses media the model or the backend cannot take."""
        from swiftcore_infer.media import PLURAL, decode_media, media_kinds

        if not isinstance(record, Mapping):
            return record, None
        kinds = media_kinds(record)
        if not kinds:
            return record, None
        accepted = self.media_modalities
        for where, kind in kinds:
            if kind not in accepted:
                takes = f"it takes {', '.join(accepted)} only" if accepted else "it is a text-only model"
                raise InvalidRequestError(
                    f"{where}: model {self.spec.name!r} does not accept {PLURAL[kind]} ({takes})", param="messages"
                )
        for where, kind in kinds:
            refusal = self.media_refusal_for(kind)
            if refusal is None and kind == "video" and not self.takes_video:
                # Named as the client sent it (video_url): the preparer's own refusal would name "video 0".
                where = _labelled(record, where)
                refusal = f"the {self.backend} backend does not take videos yet"
            if refusal is not None:
                raise InvalidRequestError(
                    f"{where}: {refusal}; serve this model with --backend transformers", param="messages"
                )
        preparer = tools.preparer if tools is not None else self.media_preparer()
        where = f"record {record['id']!r}: " if record.get("id") is not None else ""
        video_processor = getattr(preparer.processor, "video_processor", None)
        return decode_media(record, preparer.sampling_rate, where, policy, video_processor), preparer

    def media_refusal_for(self, kind: str) -> str | None:
        """Why this engine cannot feed ``kind`` media (``image``, ``audio``) to its model; None when it can.

        The default follows :attr:`accepts_media` and :attr:`media_refusal`; a backend that serves some of a
        model's media types and not others overrides it.
        """
        if self.accepts_media:
            return None
        return self.media_refusal or f"the {self.backend} backend does not take images or audio yet"

    def encode(self, request: Request, *, tools: EncodingTools | None = None) -> list[int]:
        """The prompt token ids of ``request`` (template-encoded for a chat record); for a record with
        images or audio a :class:`~swiftcore_infer.media.Prompt` (ids and media tensors, or items for an engine with
        :attr:`media_as_items`), encoded by training's sample path. The result is also kept in ``request.encoded``,
        and the engine's generation calls use it rather than encoding the request again.

        Args:
            request: the request.
            tools: this thread's own tokenizer and preparer (:meth:`encoding_tools`), when the calling thread
                is not the engine's; None: the engine's own.

        Raises:
            InvalidRequestError: the record cannot be rendered, its media cannot be read or is of a type the
                model or backend does not take, the adapter is unknown, or the prompt leaves no room for
                ``max_new_tokens`` within :attr:`max_model_len`.
        """
        from swiftcore_media import MediaError

        from swiftcore.api.template import SampleEncoder, TemplateError

        self._adapter_for(request)
        tokenizer = tools.tokenizer if tools is not None else self.tokenizer
        if request.record is not None:
            record, preparer = self._with_media(request.record, request.media_policy, tools)
            # Training's sample path (SampleEncoder): the same record preparation and template, with the chat
            # defaults the checkpoint (or the adapter) was trained with.
            defaults = self._chat_defaults.get(self._adapter_for(request)) or {}
            encoder = SampleEncoder(self.template, tokenizer, media=preparer, chat_defaults=defaults)
            try:
                ids, media = encoder.prompt(record, lazy=self.media_as_items)
                if media is not None:
                    ids = _media_prompt(ids, media, preparer)
            except (TemplateError, MediaError) as exc:
                raise InvalidRequestError(str(exc), param="messages") from exc
        elif isinstance(request.prompt, str):
            ids = list(tokenizer(request.prompt, add_special_tokens=False)["input_ids"])
        else:
            ids = list(request.prompt or [])
            vocab = len(self.tokenizer)
            if any(not isinstance(t, int) or not 0 <= t < vocab for t in ids):
                raise InvalidRequestError(f"prompt token ids must be integers in [0, {vocab})", param="prompt")
        if not ids:
            raise InvalidRequestError("the prompt is empty", param="prompt")
        room = self.max_model_len - len(ids)
        if room < request.sampling.max_new_tokens:
            raise InvalidRequestError(
                f"the prompt has {len(ids)} tokens; with max_tokens={request.sampling.max_new_tokens} that exceeds "
                f"the model's context of {self.max_model_len} tokens: shorten the conversation or lower max_tokens",
                param="max_tokens" if room > 0 else "messages",
            )
        request.encoded = ids
        return ids

    def _prompt(self, request: Request) -> list[int]:
        """The request's prompt: the one it was encoded into already (a server's media pool encodes ahead of the
        engine thread), else :meth:`encode`'s."""
        return request.encoded if request.encoded is not None else self.encode(request)

    def _adapter_for(self, request: Request) -> str | None:
        """The adapter a request runs with (None = base model)."""
        name = request.adapter
        if name is None:
            return self.default_adapter
        if name == BASE_MODEL:
            return None
        if name not in self.adapters:
            known = ", ".join([BASE_MODEL, *self.adapters]) or BASE_MODEL
            raise InvalidRequestError(f"unknown adapter {name!r}; loaded: {known}", param="model")
        return name

    # ------------------------------------------------------------------ public API

    def generate(
        self,
        records: Sequence[Mapping[str, Any]],
        *,
        max_new_tokens: int = 64,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int | None = None,
        batch_size: int = 8,
        stop: Sequence[str] = (),
        adapter: str | None = None,
    ) -> list[Generation]:
        """Reply to each chat record (``{"messages": [...], ...}``) with the same sampling parameters.

        A record that cannot be served comes back as a :class:`Generation` with ``error`` set; the
        others are answered.
        """
        sampling = SamplingParams(
            max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, seed=seed, stop=tuple(stop)
        )
        requests = [
            Request(record=dict(r) if isinstance(r, Mapping) else r, sampling=sampling, adapter=adapter)
            for r in records
        ]
        return self.generate_requests(requests, batch_size=batch_size)

    def generate_requests(self, requests: Sequence[Request], *, batch_size: int = 8) -> list[Generation]:
        """Serve requests with their own sampling parameters and adapters, ``batch_size`` at a time.

        Returns:
            One :class:`Generation` per request, in order; failed requests have ``error`` set.
        """
        if "generate" not in self.capabilities:
            raise UnsupportedError(f"backend {self.backend!r} does not generate text (an embedding or pooling runner)")
        results: list[Generation | None] = [None] * len(requests)
        for batch in prepare_ahead(requests, self._prompt, batch_size):
            ready: list[tuple[int, list[int]]] = []
            for index, encoded in batch:
                if isinstance(encoded, Exception):
                    results[index] = Generation.failed(encoded)
                else:
                    ready.append((index, encoded))
            for index, generation in self._run_batch(requests, ready):
                results[index] = generation
        return [r for r in results if r is not None]

    def _run_batch(
        self, requests: Sequence[Request], ready: list[tuple[int, list[int]]]
    ) -> list[tuple[int, Generation]]:
        if not ready:
            return []
        prompts = [ids for _, ids in ready]
        params = [requests[i].sampling for i, _ in ready]
        adapters = [self._adapter_for(requests[i]) for i, _ in ready]
        try:
            raw = self._generate_ids(prompts, params, adapters)
        except Exception as exc:
            if len(ready) == 1:
                logger.warning("request %s failed: %s", requests[ready[0][0]].request_id or ready[0][0], exc)
                return [(ready[0][0], Generation.failed(exc, len(ready[0][1])))]
            # One bad request must not fail the others: retry them one by one.
            logger.warning("a batch of %d failed (%s); retrying its requests one by one", len(ready), exc)
            return [pair for item in ready for pair in self._run_batch(requests, [item])]
        return [
            (index, self.finish(requests[index], prompt, ids)) for (index, prompt), ids in zip(ready, raw, strict=True)
        ]

    def finish(self, request: Request, prompt: list[int], generated: Sequence[int]) -> Generation:
        """Turn raw generated ids into a :class:`Generation` (cut at stops, decode, parse).

        Args:
            request: the request (its stop strings; chat records are parsed by the template).
            prompt: the prompt ids.
            generated: the ids the backend produced (may run past a stop token).
        """
        generated = list(generated)
        stop_at = next((i for i, t in enumerate(generated) if t in self.stop_token_ids), None)
        tokens = generated if stop_at is None else generated[:stop_at]
        finish_reason = "length" if stop_at is None else "stop"
        text = self.decode(tokens)
        cut = _cut_at_stop(text, request.sampling.stop)
        if cut is not None:
            text, finish_reason = cut, "stop"
        return self._parsed(
            request,
            text,
            tokens,
            len(prompt),
            len(tokens) + (stop_at is not None),
            finish_reason,
            opens_thinking=self.prompt_opens_thinking(prompt),
        )

    def prompt_opens_thinking(self, prompt: Sequence[int]) -> bool:
        """Whether ``prompt`` (ids) ends inside an open thinking block, so the reply starts with reasoning.

        A generation prompt with thinking on may open the block (``<think>``): a reply cut before its
        closing marker (max tokens) is all reasoning; one that ended normally without closing it is content.
        """
        start, _ = self.template.reasoning_markers
        return self.tokenizer.decode(list(prompt[-8:]), skip_special_tokens=False).rstrip().endswith(start)

    def _parsed(
        self,
        request: Request,
        text: str,
        tokens: list[int],
        prompt_tokens: int,
        completion_tokens: int,
        finish_reason: str,
        *,
        opens_thinking: bool = False,
    ) -> Generation:
        if request.record is not None:
            _, end = self.template.reasoning_markers
            # Only a reply cut (max tokens) inside the thinking block the prompt opened is all reasoning:
            # close the block for the parser. A reply that ended normally without closing it is content,
            # and one that closed it has its content after the marker.
            cut_thinking = opens_thinking and finish_reason == "length" and end not in text
            parsed = self.template.parse_response(text + end if cut_thinking else text)
        else:
            parsed = {"content": text, "reasoning_content": None, "tool_calls": None}
        return Generation(
            text=text,
            content=parsed.get("content") or "",
            reasoning_content=parsed.get("reasoning_content"),
            tool_calls=parsed.get("tool_calls"),
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            finish_reason=finish_reason,
            token_ids=tokens,
        )

    def stream(self, request: Request) -> Iterator[StreamDelta]:
        """Generate one request piece by piece; the last :class:`StreamDelta` carries the full generation.

        Raises:
            InvalidRequestError: the request is invalid (raised before anything is yielded).
            UnsupportedError: the backend cannot stream.
        """
        if "stream" not in self.capabilities:
            raise UnsupportedError(f"backend {self.backend!r} cannot stream")
        self._prompt(request)  # raise now, before the caller starts a stream
        return self._stream_one(request)

    def _stream_one(self, request: Request) -> Iterator[StreamDelta]:
        pieces = self.stream_many([request])
        try:
            for _, piece in pieces:
                if isinstance(piece, Exception):
                    raise piece
                yield piece
        finally:
            pieces.close()  # a consumer that stops early stops the backend too

    def stream_many(self, requests: Sequence[Request]) -> Generator[tuple[int, StreamDelta | Exception], None, None]:
        """Stream several requests together (one batch where the backend can); yield ``(index, piece)``.

        An invalid request yields its exception once, before any of its text; each valid one yields
        :class:`StreamDelta` pieces, the last carrying its full generation. Closing the iterator stops
        the backend's generation.

        Raises:
            UnsupportedError: the backend cannot stream.
        """
        if "stream" not in self.capabilities:
            raise UnsupportedError(f"backend {self.backend!r} cannot stream")
        states: list[_StreamState] = []
        for index, request in enumerate(requests):
            try:
                prompt = self._prompt(request)
                adapter = self._adapter_for(request)
            except Exception as exc:
                yield index, exc
                continue
            states.append(_StreamState(self, index, request, prompt, adapter))
        if not states:
            return
        rows = self._stream_many_ids(
            [s.prompt for s in states], [s.request.sampling for s in states], [s.adapter for s in states]
        )
        try:
            for row, tokens, *entries in rows:  # a backend may add each token's TokenLogprob (sampling.logprobs)
                state = states[row]
                for delta in state.feed(tokens, entries[0] if entries else None):
                    yield state.index, delta
                if all(s.done for s in states):
                    break
        finally:
            close = getattr(rows, "close", None)
            if callable(close):
                close()
        for state in states:
            if not state.done:
                yield state.index, state.finish()

    def embed(self, inputs: Sequence[str | list[int]], *, normalize: bool = True) -> list[list[float]]:
        """Embed texts (or token ids): the last token's final hidden state, L2-normalised by default.

        Raises:
            UnsupportedError: the backend cannot embed.
            InvalidRequestError: an input is empty or too long.
        """
        if "embed" not in self.capabilities:
            raise UnsupportedError(f"backend {self.backend!r} does not serve embeddings")
        prompts = []
        for i, item in enumerate(inputs):
            ids = self.tokenizer(item, add_special_tokens=False)["input_ids"] if isinstance(item, str) else list(item)
            if not ids:
                raise InvalidRequestError(f"input {i} is empty", param="input")
            if len(ids) > self.max_model_len:
                raise InvalidRequestError(
                    f"input {i} has {len(ids)} tokens, more than the model's {self.max_model_len}", param="input"
                )
            prompts.append(ids)
        return self._embed_ids(prompts, normalize)

    def load_adapter(self, name: str, path: str | Path) -> None:
        """Load a peft LoRA adapter under ``name`` so requests can select it.

        Raises:
            UnsupportedError: the backend has no LoRA support.
            InvalidRequestError: the name is taken or reserved, or the directory is not a peft adapter.
        """
        if "lora" not in self.capabilities:
            raise UnsupportedError(
                f"backend {self.backend!r} does not support LoRA adapters; merge it first "
                "(swiftcore infer --merge-lora)"
            )
        path = Path(path)
        if name == BASE_MODEL or name in self.adapters:
            raise InvalidRequestError(f"adapter name {name!r} is {'reserved' if name == BASE_MODEL else 'taken'}")
        if not (path / "adapter_config.json").is_file():
            raise InvalidRequestError(f"{path}: no adapter_config.json; is it a peft LoRA adapter directory?")
        self._warn_other_template(name, path)
        self._load_adapter(name, path)
        self.adapters[name] = path
        self._chat_defaults[name] = _chat_defaults(path)

    def _warn_other_template(self, name: str, path: Path) -> None:
        """Warn when an adapter loaded next to the engine's was trained with another template: every request
        is encoded with the engine's one."""
        from swiftcore.api.models import read_manifest

        if path == self._adapter_dir:  # the constructor's: the engine's template is already its (or --template)
            return
        manifest = read_manifest(path)
        trained = manifest.template.name if manifest is not None and manifest.template is not None else None
        if trained and trained != self.template.name:
            logger.warning(
                "checkpoint manifest: adapter %r (%s) was trained with template %r, but this engine encodes every "
                "request with %r; serve it on its own (--model %s) to use its template",
                name,
                path,
                trained,
                self.template.name,
                path,
            )

    def generate_rollouts(
        self, requests: Sequence[Request], *, logprobs: bool = False
    ) -> list[tuple[Generation, list[int]]]:
        """Serve ``requests`` in one batch as :meth:`generate_requests` does, and also return each one's generated
        ids up to and including the stop token that ended it (the ids a trainer scores: RL rollouts).

        Unlike :meth:`generate_requests`, nothing is isolated: a request that cannot be encoded, or a failing
        batch, raises, since a rollout that silently lost a sample would bias the step.

        Args:
            requests: the rollout requests.
            logprobs: also return each generated token's log-probability under the distribution it was sampled
                from (after temperature, top-k and top-p: vLLM's ``processed_logprobs``), as
                ``Generation.logprobs``: what a trainer's importance-sampling correction compares with its own.

        Returns:
            ``(generation, ids)`` per request, in order: the parsed reply (cut, decoded and parsed by the template
            as served) and the raw ids (the stop token kept; at most ``max_new_tokens``).

        Raises:
            UnsupportedError: the backend cannot generate, or (``logprobs``) cannot report sampling log-probs.
        """
        if "generate" not in self.capabilities:
            raise UnsupportedError(f"backend {self.backend!r} does not generate text (an embedding or pooling runner)")
        if not requests:
            return []
        prompts = [self._prompt(request) for request in requests]
        adapters = [self._adapter_for(request) for request in requests]
        params = [r.sampling for r in requests]
        if logprobs:
            raw, raw_logprobs = self._generate_ids_with_logprobs(prompts, params, adapters)
        else:
            raw, raw_logprobs = self._generate_ids(prompts, params, adapters), None
        out = []
        for row, (request, prompt, generated) in enumerate(zip(requests, prompts, raw, strict=True)):
            generated = list(generated)
            stop_at = next((i for i, t in enumerate(generated) if t in self.stop_token_ids), None)
            kept = generated[: stop_at + 1] if stop_at is not None else generated[: request.sampling.max_new_tokens]
            generation = self.finish(request, prompt, generated)
            if raw_logprobs is not None:
                generation.logprobs = [float(x) for x in raw_logprobs[row][: len(kept)]]
            out.append((generation, kept))
        return out

    def prompt_logprobs(
        self, prompts: Sequence[Sequence[int]], *, top_logprobs: int = 0, adapters: Sequence[str | None] | None = None
    ) -> list[list[TokenLogprob | None]]:
        """Score whole sequences: each token's log-probability given the tokens before it (one forward pass, the
        model's raw logits: temperature 1, as vLLM's ``prompt_logprobs`` and OpenAI's ``echo`` report them).

        Args:
            prompts: token ids (a :class:`~swiftcore_infer.media.Prompt` keeps its media), e.g. a prompt followed by
                a completion to score.
            top_logprobs: also report the this many most likely tokens at each position (0 to
                :data:`~swiftcore_infer.types.MAX_TOP_LOGPROBS`).
            adapters: the adapter each sequence is scored with (None: the base model for all).

        Returns:
            One list per sequence, one entry per token: None for the first (nothing precedes it), then a
            :class:`~swiftcore_infer.types.TokenLogprob`.

        Raises:
            InvalidRequestError: ``top_logprobs`` out of range, or an empty sequence.
            UnsupportedError: the backend cannot score sequences.
        """
        if isinstance(top_logprobs, bool) or not isinstance(top_logprobs, int):
            raise InvalidRequestError(f"top_logprobs must be an integer, got {top_logprobs!r}", param="logprobs")
        if not 0 <= top_logprobs <= MAX_TOP_LOGPROBS:
            raise InvalidRequestError(
                f"top_logprobs must be in [0, {MAX_TOP_LOGPROBS}], got {top_logprobs}", param="logprobs"
            )
        if any(len(p) == 0 for p in prompts):
            raise InvalidRequestError("cannot score an empty sequence", param="prompt")
        if not prompts:
            return []
        names: list[str | None] = list(adapters) if adapters is not None else [None] * len(prompts)
        # a media Prompt goes as it is (its media scored with it); a plain sequence as a list
        sequences: list[list[int]] = [p if hasattr(p, "media") else list(p) for p in prompts]  # type: ignore[misc]
        raw = self._prompt_logprobs(sequences, top_logprobs, names)
        out: list[list[TokenLogprob | None]] = []
        for prompt, rows in zip(prompts, raw, strict=True):
            scored: list[TokenLogprob | None] = [None]
            for token, (logprob, top) in zip(list(prompt)[1:], rows, strict=True):
                scored.append(TokenLogprob(int(token), float(logprob), tuple((int(t), float(v)) for t, v in top)))
            out.append(scored)
        return out

    def completion_logprobs(
        self, request: Request, generated: Sequence[int], *, top_logprobs: int = 0, echo: bool = False
    ) -> tuple[list[int], list[TokenLogprob | None]]:
        """The log-probabilities of ``generated`` (a finished request's tokens) after the request's encoded prompt:
        :meth:`prompt_logprobs` of the prompt followed by them.

        Args:
            request: the request (encoded already, or encoded now).
            generated: the tokens to score after its prompt (may be empty with ``echo``).
            top_logprobs: how many alternatives to report per token.
            echo: also return the prompt's tokens (the first with None), as OpenAI's ``echo``.

        Returns:
            The token ids and their entries: the prompt's and the generated ones with ``echo``, else the generated.
        """
        prompt = self._prompt(request)
        ids = [*prompt, *generated]
        scored = self.prompt_logprobs(
            [extend_prompt(prompt, generated)], top_logprobs=top_logprobs, adapters=[self._adapter_for(request)]
        )[0]
        return (ids, scored) if echo else (ids[len(prompt) :], scored[len(prompt) :])

    def close(self) -> None:
        """Free the engine's resources (default: nothing)."""

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ backend primitives

    def _generate_ids(
        self, prompts: list[list[int]], params: list[SamplingParams], adapters: list[str | None]
    ) -> list[list[int]]:
        """Generate for a batch of prompts; return each one's new token ids (may include a stop token)."""
        raise NotImplementedError

    def _generate_ids_with_logprobs(
        self, prompts: list[list[int]], params: list[SamplingParams], adapters: list[str | None]
    ) -> tuple[list[list[int]], list[list[float]]]:
        """As :meth:`_generate_ids`, plus each new token's log-probability under the distribution it was sampled
        from (after temperature, top-k and top-p). Optional: the default refuses."""
        raise UnsupportedError(
            f"backend {self.backend!r} does not report the log-probabilities of the tokens it samples "
            "(needed for the importance-sampling correction of RL rollouts)"
        )

    def _prompt_logprobs(
        self, prompts: list[list[int]], top_logprobs: int, adapters: list[str | None]
    ) -> list[list[tuple[float, list[tuple[int, float]]]]]:
        """Per sequence, per token after the first: its raw log-probability and the ``top_logprobs`` most likely
        ``(token id, log-probability)`` at its position. Optional: the default refuses."""
        raise UnsupportedError(f"backend {self.backend!r} does not report log-probabilities of given tokens")

    def _stream_ids(self, prompt: list[int], params: SamplingParams, adapter: str | None) -> Iterator[list[int]]:
        """Yield new token ids of one prompt as they are generated (default: all at once at the end)."""
        yield from self._generate_ids([prompt], [params], [adapter])

    def _stream_many_ids(
        self, prompts: list[list[int]], params: list[SamplingParams], adapters: list[str | None]
    ) -> Iterator[tuple[int, list[int]] | tuple[int, list[int], list[TokenLogprob] | None]]:
        """Yield ``(row, new token ids)`` for several prompts as they are generated.

        The default streams them one after the other with :meth:`_stream_ids`; backends that batch
        (transformers, vLLM) interleave the rows. Rows may run past their stop token or their
        ``max_new_tokens``; the caller ignores what follows. A backend that reports log-probs as it generates
        yields ``(row, ids, entries)`` for a row whose ``params.logprobs`` is set: one
        :class:`~swiftcore_infer.TokenLogprob` per id (raw log-probs, ``params.logprobs`` alternatives each).
        """
        for row, (prompt, param, adapter) in enumerate(zip(prompts, params, adapters, strict=True)):
            for tokens in self._stream_ids(prompt, param, adapter):
                yield row, tokens

    def _embed_ids(self, prompts: list[list[int]], normalize: bool) -> list[list[float]]:
        raise UnsupportedError(f"backend {self.backend!r} does not serve embeddings")

    def _load_adapter(self, name: str, path: Path) -> None:
        raise UnsupportedError(f"backend {self.backend!r} does not support LoRA adapters")


class _StreamState:
    """One streamed request: its tokens so far, the text already sent, and whether it has finished."""

    def __init__(self, engine: Engine, index: int, request: Request, prompt: list[int], adapter: str | None) -> None:
        self.engine, self.index, self.request, self.prompt, self.adapter = engine, index, request, prompt, adapter
        stops = request.sampling.stop
        # Hold back text that could be the start of a stop string, so it is never sent and then retracted.
        self.hold = max((len(s) for s in stops), default=1) - 1
        self.tokens: list[int] = []
        self.text = ""
        self.sent = 0
        # Tokens (and their log-prob entries, while the backend sends them) not carried by a piece yet: a step
        # that sends no text (a character not whole yet, text held for a stop string) passes its tokens on.
        self.unsent: list[int] = []
        self.unsent_entries: list[TokenLogprob] | None = None
        self.finish_reason = "length"
        self.stop_token_hit = False
        self.done = False

    def feed(self, chunk: Sequence[int], entries: Sequence[TokenLogprob] | None = None) -> list[StreamDelta]:
        """Take new token ids (and, from a backend that reports them, their log-prob entries); return the pieces
        to send (the final one when this request ends)."""
        if self.done:
            return []
        engine, sampling = self.engine, self.request.sampling
        new: list[int] = []
        stopped = False
        for token in chunk:
            if token in engine.stop_token_ids:
                self.finish_reason, stopped, self.stop_token_hit = "stop", True, True
                break
            if len(self.tokens) + len(new) >= sampling.max_new_tokens:
                stopped = True
                break
            new.append(token)
        self.tokens.extend(new)
        self.unsent.extend(new)
        if entries is not None and sampling.logprobs is not None:
            if self.unsent_entries is None:
                self.unsent_entries = []
            self.unsent_entries.extend(entries[: len(new)])
        self.text = engine.decode(self.tokens)
        cut = _cut_at_stop(self.text, sampling.stop)
        if cut is not None:
            self.text, self.finish_reason = cut, "stop"
            return [self.finish()]
        if stopped or len(self.tokens) >= sampling.max_new_tokens:
            return [self.finish()]
        # A token that ends inside a multi-byte character decodes to U+FFFD: wait for the rest.
        text = self.text
        safe = len(text) - self.hold if not text.endswith("\ufffd") else text.rfind("\ufffd") - self.hold
        if safe > self.sent:
            piece = self._piece(text[self.sent : safe])
            self.sent = safe
            return [piece]
        return []

    def _piece(self, text: str, final: Generation | None = None) -> StreamDelta:
        """A piece carrying ``text`` and every token not sent yet (with their entries, when the backend sent them)."""
        piece = StreamDelta(text=text, token_ids=self.unsent, final=final, logprobs=self.unsent_entries)
        self.unsent = []
        self.unsent_entries = None if self.unsent_entries is None else []
        return piece

    def finish(self) -> StreamDelta:
        """The last piece: the unsent text and the full :class:`Generation`."""
        self.done = True
        completion = len(self.tokens) + self.stop_token_hit  # the stop token counts, as in generate()
        final = self.engine._parsed(
            self.request,
            self.text,
            self.tokens,
            len(self.prompt),
            completion,
            self.finish_reason,
            opens_thinking=self.engine.prompt_opens_thinking(self.prompt),
        )
        return self._piece(self.text[self.sent :], final)


def _labelled(record: Mapping[str, Any], where: str) -> str:
    """``where`` (``messages[0].content[1]``) with the part's type as the client sent it (``(video_url)``)."""
    if not where.startswith("messages["):
        return where
    i, j = (int(n) for n in where.removeprefix("messages[").removesuffix("]").split("].content["))
    part = record["messages"][i]["content"][j]
    return f"{where} ({part.get('_from') or part.get('type')})"


#: Architectures that score text rather than generate it: loaded as a causal LM, their output layer would be
#: an untrained one and every answer noise.
_SCORING_ARCHITECTURES = ("ForSequenceClassification", "ForTokenClassification", "ForQuestionAnswering")


def _media_prompt(ids: list[int], media: dict[str, Any], preparer: Any) -> Any:
    """A :class:`~swiftcore_infer.media.Prompt` of the expanded ``ids``: with the processor's tensors, or (a sample
    expanded lazily, for an engine that runs the processor itself) with the items and the template's ids."""
    from swiftcore_infer.media import Prompt

    items = media.pop("media_items", None)
    placeholder_ids = media.pop("placeholder_ids", None)
    if items is None:
        return Prompt(ids, media)
    return Prompt(ids, media, items=preparer.item_inputs(items), placeholder_ids=placeholder_ids)


def extend_prompt(prompt: Sequence[int], tokens: Sequence[int]) -> Any:
    """``prompt`` followed by ``tokens``: a plain list, or for a :class:`~swiftcore_infer.media.Prompt` one that
    keeps its media (``mm_token_type_ids`` and the placeholder ids extended with the new text tokens)."""
    if not hasattr(prompt, "media"):
        return [*prompt, *tokens]
    from swiftcore_infer.media import Prompt

    assert isinstance(prompt, Prompt)  # for mypy: only a media Prompt has .media
    media = dict(prompt.media)
    types = media.get("mm_token_type_ids")
    if types is not None:
        listed = types.tolist() if hasattr(types, "tolist") else list(types)
        if listed and isinstance(listed[0], list):  # (1, T)
            listed = [[*listed[0], *[0] * len(tokens)]]
        else:
            listed = [*listed, *[0] * len(tokens)]
        media["mm_token_type_ids"] = listed
    placeholder_ids = prompt.placeholder_ids
    return Prompt(
        [*prompt, *tokens],
        media,
        items=prompt.items,
        placeholder_ids=None if placeholder_ids is None else [*placeholder_ids, *tokens],
    )


def _refuse_scoring_model(model_dir: Path, hf_config: Mapping[str, Any]) -> None:
    """Refuse a checkpoint whose ``config.json`` names only scoring architectures (a reward model, a classifier)."""
    architectures = hf_config.get("architectures") or []
    if architectures and all(str(a).endswith(_SCORING_ARCHITECTURES) for a in architectures):
        raise UnsupportedError(
            f"{model_dir}: config.json's architectures {architectures} score text, they do not generate it (a reward "
            "model or a classifier); this engine would load it as a causal LM with an untrained output layer. "
            "Score with it through transformers' AutoModelForSequenceClassification, or serve a head checkpoint "
            "trained with the heads plugin (`swiftcore infer`/`deploy` load those by their swiftcore_head.json)"
        )


def _manifest(adapter_dir: Path | None, base: Path) -> Any:
    """The manifest that describes the served weights: the adapter's, else the base checkpoint's."""
    from swiftcore.api.models import read_manifest

    return (read_manifest(adapter_dir) if adapter_dir is not None else None) or read_manifest(base)


def _chat_defaults(*dirs: Path | None) -> dict[str, Any]:
    """The ``chat_template_kwargs`` of the first checkpoint in ``dirs`` that records generation defaults."""
    from swiftcore.api.models import read_generation_defaults

    kwargs = read_generation_defaults(*dirs).get("chat_template_kwargs")
    return dict(kwargs) if isinstance(kwargs, Mapping) else {}


def _cut_at_stop(text: str, stops: Sequence[str]) -> str | None:
    """``text`` up to its first stop string, or None when none occurs."""
    hits = [text.find(s) for s in stops if s in text]
    return text[: min(hits)] if hits else None


def _max_model_len(hf_config: Mapping[str, Any], tokenizer: Any) -> int:
    text: Mapping[str, Any] = (
        hf_config["text_config"] if isinstance(hf_config.get("text_config"), Mapping) else hf_config
    )
    value = text.get("max_position_embeddings") or hf_config.get("max_position_embeddings")
    if not value:
        value = getattr(tokenizer, "model_max_length", None)
        value = value if isinstance(value, int) and value < 10**7 else 4096
    return int(value)
