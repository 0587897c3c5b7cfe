"""``--teacher-server URL``: the ``opd`` teacher's log-probs from an OpenAI-compatible server instead of a local model.

The teacher scores the student's sampled completion token by token. Any server that answers OpenAI's legacy
``/v1/completions`` with ``echo: true``, ``max_tokens: 0`` and ``logprobs`` for a prompt given as token ids does it
in one request per batch: ``swiftcore deploy`` and ``vllm serve`` both do. Each row is sent as its prompt ids followed
by its completion ids (the tokens the student sampled, up to its mask); the reply's ``token_logprobs`` after the
prompt are the teacher's ``log p(y_t | x, y_<t)``, from the server's raw logits (temperature 1), the same values
``--teacher-model`` computes locally (checked to 1e-4 by ``tests/test_teacher_server.py``).

The server's key, when it has one, is read from ``$SWIFTCORE_TEACHER_KEY``. Importing this module imports neither
torch nor httpx.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

from swiftcore.api import SwiftcoreError

__all__ = ["KEY_ENV", "TeacherServer", "attach_teacher_server"]

log = logging.getLogger(__name__)

#: The environment variable holding the teacher server's API key (none: requests carry no key).
KEY_ENV = "SWIFTCORE_TEACHER_KEY"
#: The media inputs a multimodal batch carries next to the ids (TRL's and the processors' names).
_MEDIA_KEYS = ("pixel_values", "image_grid_thw", "pixel_attention_mask", "image_sizes", "input_features")


class TeacherServer:
    """An OpenAI-compatible server that scores token sequences (``--teacher-server``).

    Args:
        url: the server's address, with or without ``/v1``.
        model: the served model to ask; None: the first one ``/v1/models`` lists.
        timeout: seconds one request may take.
        batch_size: rows per request.
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
            raise self._fail(f"{path} answered {reply.status_code}: {message}{hint}")
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

    def completion_logps(self, out: dict[str, Any]) -> Any:
        """The teacher's log-probs ``(B, T)`` (float32) of a generation batch's completions (``prompt_ids`` left-padded
        by ``prompt_mask``, ``completion_ids`` right-padded by ``completion_mask``): what the ``opd`` trainer's
        ``teacher_logps`` computes with a local teacher, 0 past each completion's mask.

        Raises:
            SwiftcoreError: the batch carries images or audio (token ids cannot carry them: use --teacher-model),
                or the server failed.
        """
        import torch

        media = [k for k in _MEDIA_KEYS if out.get(k) is not None]
        if media:
            raise SwiftcoreError(
                f"--teacher-server: the prompts carry media ({', '.join(media)}), which a token-id prompt cannot "
                "send; multimodal prompts are not supported with a teacher server yet: use --teacher-model"
            )
        prompt_ids, prompt_mask = out["prompt_ids"], out["prompt_mask"]
        completion_ids, completion_mask = out["completion_ids"], out["completion_mask"]
        rows, lengths = [], []
        for ids, mask, completion, cmask in zip(
            prompt_ids.tolist(), prompt_mask.tolist(), completion_ids.tolist(), completion_mask.tolist(), strict=True
        ):
            prompt = [t for t, m in zip(ids, mask, strict=True) if m]
            n = int(sum(cmask))
            rows.append(prompt + completion[:n])
            lengths.append(n)
        scored = self.sequence_logps(rows, lengths)
        result = torch.zeros(completion_ids.shape, dtype=torch.float32)
        for i, values in enumerate(scored):
            result[i, : len(values)] = torch.tensor(values, dtype=torch.float32)
        return result.to(completion_ids.device)

    def close(self) -> None:
        """Close the HTTP connections."""
        self._client.close()


def attach_teacher_server(trainer: Any, url: str) -> TeacherServer:
    """Make the ``opd`` ``trainer`` score its completions on the teacher server at ``url`` (checked first): its
    ``teacher_logps`` becomes :meth:`TeacherServer.completion_logps`; the rest of the trainer is unchanged.

    Raises:
        SwiftcoreError: the server is unreachable or returns no log-probs (naming ``--teacher-server``).
    """
    server = TeacherServer(url)
    server.check()
    log.info("teacher: %s at %s (log-probs over HTTP)", server.model, server.url)
    trainer.teacher_logps = server.completion_logps
    trainer.teacher_server = server
    return server
