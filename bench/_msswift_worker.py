"""ms-swift side of the side-by-side benchmarks; run ONLY with the peer interpreter (``.venv-peers/bin/python``).

A long-lived worker so ms-swift's ~5 s import is paid once while the parent alternates runs (swiftcore,
ms-swift, swiftcore, ...): the parent writes one JSON request per line on stdin and reads one reply line
starting with ``@@`` on stdout (ms-swift logs elsewhere on stdout/stderr are ignored). It never
imports swiftcore: the two systems live in different virtual environments.

Requests: ``{"op": "encode_load", "model": DIR, "template": NAME, "data": JSONL}``,
``{"op": "encode_run"}``, ``{"op": "encode_dump", "path": JSON}``,
``{"op": "infer_load", "model": DIR, "model_type": NAME, "template": NAME}``,
``{"op": "infer_run", "data": JSONL, "max_new_tokens": N, "batch_size": B}``, ``{"op": "quit"}``.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from typing import Any

STATE: dict[str, Any] = {}


def _rows(path: str) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def encode_load(model: str, template: str, data: str) -> dict[str, Any]:
    """Load the processor and template the way ``swift sft`` does (train mode) and read the rows."""
    from swift.model import get_processor
    from swift.template import get_template

    processor = get_processor(model, model_type=template)
    tpl = get_template(processor, template_type=template)
    tpl.set_mode("train")
    STATE.update(template=tpl, rows=_rows(data), ids=None)
    return {"rows": len(STATE["rows"]), "template_class": type(tpl).__name__, "processor": type(processor).__name__}


def encode_run() -> dict[str, Any]:
    """Encode every row once with ``Template.encode``; a row ms-swift rejects counts as an error."""
    tpl, rows = STATE["template"], STATE["rows"]
    ids: list[Any] = []
    errors: dict[str, int] = {}
    start = time.perf_counter()
    for row in rows:
        try:
            ids.append(tpl.encode(dict(row))["input_ids"])
        except Exception as exc:  # what ms-swift rejects is a result, not a crash
            ids.append(None)
            errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
    seconds = time.perf_counter() - start
    STATE["ids"] = ids
    return {"seconds": seconds, "samples": len(rows), "errors": errors}


def encode_dump(path: str) -> dict[str, Any]:
    """Write the token ids of the last ``encode_run`` (None where it failed) to ``path``."""
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(STATE["ids"], fh)
    return {"path": path}


def infer_load(model: str, model_type: str, template: str) -> dict[str, Any]:
    """Build ms-swift's transformers engine on ``model``."""
    import _msswift_plugin  # noqa: F401 - the image processor ms-swift's Qwen3.5 forward hook needs
    from swift.infer_engine import TransformersEngine

    STATE["engine"] = TransformersEngine(model, model_type=model_type, template_type=template, max_batch_size=0)
    return {"engine": type(STATE["engine"]).__name__}


def infer_run(data: str, max_new_tokens: int, batch_size: int) -> dict[str, Any]:
    """Greedy-generate for every prompt of ``data``; return seconds, completion tokens and the texts."""
    from swift.infer_engine import InferRequest, RequestConfig

    engine = STATE["engine"]
    engine.max_batch_size = batch_size
    requests = [InferRequest(messages=row["messages"]) for row in _rows(data)]
    config = RequestConfig(max_tokens=max_new_tokens, temperature=0)
    start = time.perf_counter()
    responses = engine.infer(requests, config, use_tqdm=False)
    seconds = time.perf_counter() - start
    tokens = sum(r.usage.completion_tokens for r in responses)
    texts = [r.choices[0].message.content for r in responses]
    return {"seconds": seconds, "completion_tokens": tokens, "texts": texts}


OPS = {"encode_load": encode_load, "encode_run": encode_run, "encode_dump": encode_dump,
       "infer_load": infer_load, "infer_run": infer_run}


def main() -> None:
    """Serve requests until ``quit`` or end of input."""
    out = sys.stdout
    for line in sys.stdin:
        request = json.loads(line)
        op = request.pop("op")
        if op == "quit":
            break
        try:
            reply = {"ok": True, **OPS[op](**request)}
        except Exception as exc:  # report to the parent, keep serving
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        out.write("@@" + json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
