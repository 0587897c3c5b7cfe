"""How the page is served: gradio's app mounted on FastAPI, behind swiftcore's request guard, on swiftcore's uvicorn
settings (:class:`swiftcore_serve.RequestGuard`, :class:`swiftcore_serve.Listener`: the ones ``swiftcore deploy`` and
``swiftcore rollout`` use, not a copy).

Why not ``Blocks.launch``: gradio's own server answers any ``Host`` and any ``Origin``, so a page on another site the
user opens (its name re-pointed at 127.0.0.1: DNS rebinding) could drive the page's handlers (start a training run,
write a checkpoint). Behind the guard every route, gradio's API and queue included, refuses a foreign ``Host`` (421)
on a loopback address and a foreign ``Origin`` (403) on any address.

This module imports gradio and FastAPI: only :mod:`swiftcore_webui.command` imports it, when the page starts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gradio as gr
from fastapi import FastAPI
from swiftcore_serve import RequestGuard

__all__ = ["MAX_UPLOAD_BYTES", "guarded_app"]

#: The largest request body (an upload: a dataset, an image, a clip).
MAX_UPLOAD_BYTES = 2**30


def guarded_app(demo: gr.Blocks, *, css: str, allowed_hosts: Sequence[str] = ()) -> Any:
    """The ASGI app serving ``demo`` at ``/`` behind the request guard (no key: the page has no login; see
    ``docs/webui.md`` for exposing it).

    Args:
        demo: the page (queued already).
        css: the page's CSS.
        allowed_hosts: more ``Host`` names (and origins' host names) accepted besides the loopback ones: the name a
            reverse proxy or a tunnel forwards (``swiftcore web-ui --allowed-host``).
    """
    app = gr.mount_gradio_app(
        FastAPI(docs_url=None, redoc_url=None, openapi_url=None),
        demo,
        path="/",
        show_error=True,
        allowed_paths=[],
        ssr_mode=False,
        mcp_server=False,
        pwa=False,
        enable_monitoring=False,
        footer_links=[],
        css=css,
    )
    return RequestGuard(
        app,
        api_key=None,
        max_body_bytes=MAX_UPLOAD_BYTES,
        allowed_hosts=allowed_hosts,
        check_origin=True,
        public_paths=(),
        command="swiftcore web-ui",
        key_sources="none: the page takes no key",
    )
