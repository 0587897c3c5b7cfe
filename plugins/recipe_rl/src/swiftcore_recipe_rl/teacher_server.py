"""``--teacher-server URL``: the ``opd`` teacher's log-probs from an OpenAI-compatible server instead of a local model.

The teacher scores the student's sampled completion token by token. Any server that answers OpenAI's legacy
``/v1/completions`` with ``echo: true``, ``max_tokens: 0`` and ``logprobs`` for a prompt given as token ids does it
in one request per batch: ``swiftcore deploy`` and ``vllm serve`` both do. Each row is sent as its prompt ids followed
by its completion ids (the tokens the student sampled, up to its mask); the reply's ``token_logprobs`` after the
prompt are the teacher's ``log p(y_t | x, y_<t)``, from the server's raw logits (temperature 1), the same values
``--teacher-model`` computes locally (checked to 1e-4 by ``tests/test_teacher_server.py``).

A prompt with images or audio cannot travel as token ids (the ids hold the placeholders, not the pixels). Such a row
goes to ``/v1/chat/completions`` as its conversation, each image an ``image_url`` part with a ``data:`` URL and each
clip an ``input_audio`` part (base64), as ``swiftcore deploy`` takes media, with the student's sampled ids in
:data:`SCORE_FIELD`, ``max_tokens: 0`` and ``logprobs: true``: the server renders and encodes the prompt with the
model's template and processor, scores the given ids after it, and answers their log-probs in
``choices[0].logprobs.content`` (and, with ``return_token_ids``, the ``prompt_token_ids`` it encoded and the
choice's ``token_ids``, which are checked against the student's). OpenAI's API has no way to score a given reply
after a chat prompt, so this is a swiftcore extension: a server without it refuses ``max_tokens: 0`` (or answers
tokens it generated itself), and either is one error naming ``--teacher-server``.

The server's key, when it has one, is read from ``$SWIFTCORE_TEACHER_KEY``. Importing this module imports neither
torch nor httpx.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

from swiftcore.api import SwiftcoreError
from swiftcore_recipe_rl.inline_media import has_media, inline_media

__all__ = ["KEY_ENV", "SCORE_FIELD", "TeacherServer", "attach_teacher_server", "chat_request"]

log = logging.getLogger(__name__)

#: The environment variable holding the teacher server's API key (none: requests carry no key).
KEY_ENV = "SWIFTCORE_TEACHER_KEY"
#: The media inputs a multimodal batch carries next to the ids (TRL's and the processors' names).
_MEDIA_KEYS = ("pixel_values", "image_grid_thw", "pixel_attention_mask", "image_sizes", "input_features")
#: The field of a ``/v1/chat/completions`` request (a swiftcore extension) that gives the token ids to score as the
#: assistant's reply, with ``max_tokens: 0`` and ``logprobs: true``, instead of generating one.
SCORE_FIELD = "completion_token_ids"


class _HTTPFailure(SwiftcoreError):
    """A non-200 answer (its ``status`` and the server's ``message``), so a caller can add what it was asking."""

    def __init__(self, text: str, status: int, message: str) -> None:
        super().__init__(text)
        self.status, self.message = status, message


def chat_request(record: Mapping[str, Any]) -> dict[str, Any]:
    """The ``/v1/chat/completions`` fields of a prompt record, its media inlined
    (:func:`~swiftcore_recipe_rl.inline_media.inline_media`; errors name ``--teacher-server``)."""
    return inline_media(record, "--teacher-server", "the teacher", "use --teacher-model for rows with video")


class TeacherServer:
    """An OpenAI-compatible server that scores token sequences (``--teacher-server``).

    Args:
        url: the server's address, with or without ``/v1``.
        model: the served model to ask; None: the first one ``/v1/models`` lists.
        timeout: seconds one request may take.
        batch_size: rows per request (token-id prompts), or chat requests in flight at once (multimodal prompts).
        api_key: the server's key; None: ``$SWIFTCORE_TEACHER_KEY`` (unset: no key).
    """

    def __init__(
        self,
        url: str,
        *,
        model: str | None = None,
        timeout: float = 600.0,
        batch_size: int = 16,
        api_key: str | None = None,
    ) -> None:
        import httpx

        base = url.rstrip("/")
        self.url = base.removesuffix("/v1")
        key = api_key if api_key is not None else os.environ.get(KEY_ENV)
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._client = httpx.Client(base_url=self.url, timeout=timeout, headers=headers)
        self.batch_size = batch_size
        self.model = model or self._first_model()

    def _fail(self, what: str) -> SwiftcoreError:
        return SwiftcoreError(f"--teacher-server {self.url}: {what}")

    def _post(self, path: str, body: dict[str, Any] | None = None) -> Any:
        import httpx

        try:
            reply = self._client.post(path, json=body) if body is not None else self._client.get(path)
        except httpx.HTTPError as exc:
            raise self._fail(
                f"cannot reach the server ({type(exc).__name__}: {exc}); start it (e.g. `swiftcore deploy --model "
                "TEACHER`) or fix the URL"
            ) from exc
        if reply.status_code != 200:
            try:
                message = reply.json()["error"]["message"]
            except Exception:
                message = reply.text[:300]
            hint = f" (set ${KEY_ENV} to the server's key)" if reply.status_code in (401, 403) else ""
            raise _HTTPFailure(
                f"--teacher-server {self.url}: {path} answered {reply.status_code}: {message}{hint}",
                reply.status_code,
                str(message),
            )
        try:
            return reply.json()
        except ValueError as exc:
            raise self._fail(f"{path} did not answer JSON: {reply.text[:200]!r}") from exc

    def _first_model(self) -> str:
        models = self._post("/v1/models").get("data") or []
        if not models or not isinstance(models[0].get("id"), str):
            raise self._fail("/v1/models lists no model")
        return models[0]["id"]

    def check(self) -> None:
        """Ask for the log-probs of a two-token sequence: fails before training, naming ``--teacher-server``, when
        the server is unreachable or returns no log-probs for token-id prompts."""
        self.sequence_logps([[0, 0]], [1])

    def check_chat(self) -> None:
        """Ask for the log-probs of one given token after a one-word text conversation over ``/v1/chat/completions``
        (what prompts with images or audio need): fails before training, naming ``--teacher-server``, when the server
        cannot score a given reply after a chat prompt."""
        self._score_chat(-1, {"messages": [{"role": "user", "content": "Hi"}]}, [0], None)

    def sequence_logps(self, rows: Sequence[Sequence[int]], scored: Sequence[int]) -> list[list[float]]:
        """The teacher's log-probs of each row's last ``scored[i]`` tokens, each given the tokens before it.

        Args:
            rows: token ids (a prompt followed by the tokens to score).
            scored: how many tokens at the end of each row to score (at most ``len(row) - 1``).

        Raises:
            SwiftcoreError: the server failed, or answered without ``logprobs`` (naming ``--teacher-server``).
        """
        out: list[list[float]] = []
        for start in range(0, len(rows), self.batch_size):
            chunk = [list(map(int, r)) for r in rows[start : start + self.batch_size]]
            body = {"model": self.model, "prompt": chunk, "echo": True, "max_tokens": 0, "logprobs": 1}
            choices = sorted(self._post("/v1/completions", body).get("choices") or [], key=lambda c: c.get("index", 0))
            if len(choices) != len(chunk):
                raise self._fail(f"asked to score {len(chunk)} sequences, got {len(choices)} answers")
            for row, n, choice in zip(chunk, scored[start : start + self.batch_size], choices, strict=True):
                values = (choice.get("logprobs") or {}).get("token_logprobs")
                if not isinstance(values, list) or len(values) != len(row):
                    raise self._fail(
                        "the server returned no per-token log-probs of the prompt (OpenAI's echo with logprobs, "
                        f"{len(row)} expected, got {None if values is None else len(values)}); use a server that "
                        "scores token-id prompts (`swiftcore deploy`, `vllm serve`), or a local --teacher-model"
                    )
                tail = values[len(row) - n :] if n else []
                if any(v is None for v in tail):
                    raise self._fail("the server returned null log-probs for completion tokens")
                out.append([float(v) for v in tail])
        return out

    def record_logps(
        self,
        records: Sequence[Mapping[str, Any]],
        completions: Sequence[Sequence[int]],
        prompts: Sequence[Sequence[int] | None] | None = None,
    ) -> list[list[float]]:
        """The teacher's log-probs of each ``completions[i]`` (token ids) as the assistant's reply to the
        conversation ``records[i]`` (a prompt record, with images or audio), over ``/v1/chat/completions``: the
        server encodes the prompt (template and processor) and the media, and scores the given ids after it.

        Args:
            records: prompt records (``messages`` with media parts or tags, media columns, ``chat_template_kwargs``).
            completions: the ids to score after each prompt (the student's sampled tokens).
            prompts: the student's prompt ids of each row (None: not checked); when the server returns the
                prompt it encoded (``prompt_token_ids``), a different one is refused, as the teacher would then
                score the reply after another context than the student's.

        Raises:
            SwiftcoreError: a media item that cannot be sent (:func:`chat_request`); a server that cannot take the
                row's media or cannot score a given reply after a chat prompt, or answers other tokens than those
                asked, or another prompt than the student's (each naming ``--teacher-server`` and the row).
        """
        from concurrent.futures import ThreadPoolExecutor

        bodies = [chat_request(record) for record in records]  # every item read (or refused) before any request
        want = [None] * len(records) if prompts is None else list(prompts)

        def one(i: int) -> list[float]:
            return self._score_chat(i, bodies[i], [int(t) for t in completions[i]], want[i])

        if len(bodies) <= 1:
            return [one(i) for i in range(len(bodies))]
        with ThreadPoolExecutor(max_workers=max(1, min(self.batch_size, len(bodies)))) as pool:
            return list(pool.map(one, range(len(bodies))))

    def _score_chat(self, row: int, body: dict[str, Any], ids: list[int], prompt: Sequence[int] | None) -> list[float]:
        """One row of :meth:`record_logps`."""
        if not ids:
            return []
        request = {
            "model": self.model,
            **body,
            SCORE_FIELD: ids,
            "max_tokens": 0,
            "logprobs": True,
            "return_token_ids": True,
        }
        where = f"row {row} (a prompt with images or audio, sent to /v1/chat/completions)" if row >= 0 else "the check"
        try:
            reply = self._post("/v1/chat/completions", request)
        except _HTTPFailure as exc:
            text = str(exc).removeprefix(f"--teacher-server {self.url}: ")
            if exc.status in (400, 422) and any(
                k in exc.message for k in ("max_tokens", "max_completion", SCORE_FIELD)
            ):
                raise self._fail(
                    f"{where}: {text}; this server cannot score a given reply after a chat prompt (swiftcore deploy's "
                    f"{SCORE_FIELD!r} extension of /v1/chat/completions, with max_tokens: 0 and logprobs: true), "
                    "which a prompt with images or audio needs; serve the teacher with a `swiftcore deploy` that has "
                    "it, or use --teacher-model"
                ) from exc
            raise self._fail(f"{where}: {text}") from exc
        choices = reply.get("choices") or []
        choice = choices[0] if choices and isinstance(choices[0], Mapping) else {}
        content = (choice.get("logprobs") or {}).get("content")
        echoed = choice.get("token_ids")
        if not isinstance(content, list) or len(content) != len(ids) or (echoed is not None and echoed != ids):
            got = "no log-probs" if not isinstance(content, list) else f"{len(content)} tokens' log-probs"
            raise self._fail(
                f"{where}: asked to score the {len(ids)} given tokens, got {got}"
                f"{'' if echoed is None or echoed == ids else ' of other tokens'}: the server generated a reply of "
                f"its own instead of scoring the given one (it lacks the {SCORE_FIELD!r} extension of "
                "/v1/chat/completions); serve the teacher with `swiftcore deploy`, or use --teacher-model"
            )
        served = reply.get("prompt_token_ids")
        if prompt is not None and served is not None and list(served) != [int(t) for t in prompt]:
            first = next((k for k, (a, b) in enumerate(zip(served, prompt)) if a != b), min(len(served), len(prompt)))
            raise self._fail(
                f"{where}: the server encoded the prompt as {len(served)} tokens, the student's has {len(prompt)} "
                f"(first difference at token {first}): the teacher would score the reply after another context; "
                "serve a teacher with the student's chat template and processor (or the same chat_template_kwargs)"
            )
        values = [entry.get("logprob") if isinstance(entry, Mapping) else None for entry in content]
        if any(not isinstance(v, int | float) for v in values):
            raise self._fail(f"{where}: the server returned null log-probs for completion tokens")
        return [float(v) for v in values]

    def completion_logps(self, out: dict[str, Any], records: Sequence[Mapping[str, Any] | None] | None = None) -> Any:
        """The teacher's log-probs ``(B, T)`` (float32) of a generation batch's completions (``prompt_ids`` left-padded
        by ``prompt_mask``, ``completion_ids`` right-padded by ``completion_mask``): what the ``opd`` trainer's
        ``teacher_logps`` computes with a local teacher, 0 past each completion's mask.

        Args:
            out: the generation batch.
            records: each row's prompt record (None: none known). Rows whose record carries images or audio are
                scored over ``/v1/chat/completions`` (:meth:`record_logps`), the others as token ids.

        Raises:
            SwiftcoreError: the batch carries images or audio but no records to send them from (token ids cannot
                carry them), or the server failed.
        """
        import torch

        media = [k for k in _MEDIA_KEYS if out.get(k) is not None]
        multimodal = [i for i, record in enumerate(records or ()) if has_media(record)]
        if media and not multimodal:
            raise SwiftcoreError(
                f"--teacher-server: the prompts carry media ({', '.join(media)}), which a token-id prompt cannot "
                "send, and the batch's prompt records (which the media would be sent from as chat content parts) are "
                "not known here: use --teacher-model"
            )
        prompt_ids, prompt_mask = out["prompt_ids"], out["prompt_mask"]
        completion_ids, completion_mask = out["completion_ids"], out["completion_mask"]
        if records is not None and len(records) != len(completion_ids):
            raise SwiftcoreError(
                f"--teacher-server: {len(records)} prompt records for a batch of {len(completion_ids)} completions"
            )
        prompts, completions = [], []
        for ids, mask, completion, cmask in zip(
            prompt_ids.tolist(), prompt_mask.tolist(), completion_ids.tolist(), completion_mask.tolist(), strict=True
        ):
            prompts.append([t for t, m in zip(ids, mask, strict=True) if m])
            completions.append(completion[: int(sum(cmask))])
        chat = set(multimodal)
        text = [i for i in range(len(prompts)) if i not in chat]
        scored: dict[int, list[float]] = {}
        if text:
            values = self.sequence_logps(
                [prompts[i] + completions[i] for i in text], [len(completions[i]) for i in text]
            )
            scored.update(zip(text, values, strict=True))
        if multimodal:
            values = self.record_logps(
                [records[i] for i in multimodal], [completions[i] for i in multimodal], [prompts[i] for i in multimodal]
            )
            scored.update(zip(multimodal, values, strict=True))
        result = torch.zeros(completion_ids.shape, dtype=torch.float32)
        for i, values in scored.items():
            result[i, : len(values)] = torch.tensor(values, dtype=torch.float32)
        return result.to(completion_ids.device)

    def close(self) -> None:
        """Close the HTTP connections."""
        self._client.close()


def attach_teacher_server(
    trainer: Any,
    url: str,
    records: Mapping[str, Mapping[str, Any]] | None = None,
    media: Sequence[Mapping[str, Any]] | None = None,
) -> TeacherServer:
    """Make the ``opd`` ``trainer`` score its completions on the teacher server at ``url`` (checked first): its
    ``teacher_logps`` becomes :meth:`TeacherServer.completion_logps`; the rest of the trainer is unchanged.

    Args:
        trainer: the ``opd`` trainer.
        url: the server.
        records: prompt text (a TRL row's ``prompt``) -> its prompt record (``EncodedPrompts.records``). With it,
            each generation batch's records are kept (its rows are TRL's ``inputs``, in order), and rows whose
            record has images or audio are sent with them (:meth:`TeacherServer.record_logps`).
        media: a run with image prompts: ``EncodedPrompts.media`` (one entry per dataset row): a row with a
            :data:`~swiftcore_recipe_rl.prompts.MEDIA_COLUMN` is sent its own entry's ``prompt_record`` (two rows
            that differ only in their image have the same prompt text).

    Raises:
        SwiftcoreError: the server is unreachable or returns no log-probs, or (when a record has images or audio)
            cannot score a given reply after a chat prompt (naming ``--teacher-server``).
    """
    server = TeacherServer(url)
    server.check()
    if (records is not None and any(has_media(record) for record in records.values())) or media:
        server.check_chat()  # before training: the rows with images or audio go by chat
    log.info("teacher: %s at %s (log-probs over HTTP)", server.model, server.url)
    batch: dict[str, Any] = {}
    if records is not None or media:
        from swiftcore_recipe_rl.prompts import MEDIA_COLUMN

        generate = trainer._generate_and_score_completions

        def record_of(row: Any) -> Mapping[str, Any] | None:
            if not isinstance(row, Mapping):
                return None
            if media and MEDIA_COLUMN in row:  # an image prompt run: the row's own record, found by its index
                return media[int(row[MEDIA_COLUMN])]["prompt_record"]
            return (records or {}).get(row.get("prompt"))

        def generate_and_score(inputs: Any) -> Any:
            batch["records"] = [record_of(row) for row in inputs]
            try:
                return generate(inputs)
            finally:
                batch.pop("records", None)

        trainer._generate_and_score_completions = generate_and_score
    trainer.teacher_logps = lambda out: server.completion_logps(out, batch.get("records"))
    trainer.teacher_server = server
    return server
