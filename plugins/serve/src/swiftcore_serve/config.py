"""How the server runs: :class:`ServerConfig` (plain data; importing it imports no FastAPI)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from swiftcore_infer import MediaPolicy

__all__ = ["DEFAULT_MAX_BODY_BYTES", "ServerConfig"]

#: The default request-body limit: far above any real chat request, far below what exhausts memory.
DEFAULT_MAX_BODY_BYTES = 32 * 2**20


@dataclass
class ServerConfig:
    """How the server runs.

    Attributes:
        model_name: the name clients pass as ``model`` for the default model (adapter or base).
        adapters: adapter name -> directory, loaded at start-up and served under their names.
        api_key: when set, every request but ``GET /health`` needs ``Authorization: Bearer <api_key>``;
            an empty string is refused (it would look like protection and be none).
        max_queue: requests that may wait for the engine before new ones get 429.
        max_batch: the most waiting requests served by one engine call (embeddings: inputs per call).
        default_max_tokens: ``max_tokens`` when a request gives none.
        max_body_bytes: the largest request body; a larger one is a 413, refused before it is read.
        docs: serve ``/docs``, ``/redoc`` and ``/openapi.json`` (they need the key like the API).
        allowed_hosts: ``Host`` names accepted on a loopback address besides localhost, 127.0.0.1 and
            [::1] (``"*"`` accepts any, switching the DNS-rebinding check off).
        max_prompt_chars: the longest prompt in characters (None: the most the model's context can hold,
            its length in tokens times the longest token in the vocabulary).
        media: what requests' images and audio may be (local files, remote URLs, limits): a
            :class:`~swiftcore_infer.media.MediaPolicy`.
        media_workers: threads that decode and encode requests with images or audio before they queue for
            the engine (:mod:`swiftcore_serve.media_pool`), so text requests do not wait for that work; 0 does it
            on the engine's thread (one thread fewer; a text request may then wait behind an image's decoding).
    """

    model_name: str
    adapters: Mapping[str, str] = field(default_factory=dict)
    api_key: str | None = None
    max_queue: int = 64
    max_batch: int = 16
    default_max_tokens: int = 256
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    docs: bool = False
    allowed_hosts: Sequence[str] = ()
    max_prompt_chars: int | None = None
    media: MediaPolicy = field(default_factory=MediaPolicy)
    media_workers: int = 2
