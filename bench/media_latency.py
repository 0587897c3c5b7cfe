"""Figure 8: text-request latency with and without image requests in flight, and image requests/s.

One ``swiftcore deploy`` (transformers engine, float32) on a tiny Qwen3.5 checkpoint (``swiftcore make-tiny qwen3_5``:
random weights, the real processor), asked through the real ``openai`` client:

- **text alone**: ``--text-n`` chat requests one after another (8 new tokens, greedy), each timed end to end;
- **text beside images**: the same text requests while ``--image-streams`` clients each keep one image request in
  flight (a random ``--image-size`` x ``--image-size`` PNG as a data URL, 8 new tokens), as many as they can;
- **images alone**: the image clients alone, for as long as the previous phase took.

The text and mixed phases alternate (``--rounds`` times, A B A B ...) and their latencies are pooled per phase:
p50 and p99 of each, and the mixed/alone ratio of the p50s. Image requests/s count the image requests finished
inside each phase's window. Two servers, one with the media pool off (``--media-workers 0``: media decoded on the
engine's thread) and one with it on (``--media-workers 2``, the default), their rounds alternating. What it shows:
how much image requests in flight hold back a text request, what the pool changes, and what an image request
costs.

Usage: ``python bench/media_latency.py [--text-n 24] [--image-streams 8] [--rounds 2]``; raw JSON goes to
``bench/raw/media_latency.json`` and the figure replaces the ``media-latency`` section of RESULTS.md.
"""

from __future__ import annotations

import argparse
import base64
import io
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from common import machine, machine_text, replace_section, write_raw

BEGIN, END = "<!-- media-latency:begin -->", "<!-- media-latency:end -->"
SWIFTCORE = Path(sys.executable).with_name("swiftcore")
MAX_TOKENS = 8
#: Text requests pause uniform(0, TEXT_GAP) s before each: a closed loop (the next request right after the reply)
#: phase-locks with the engine's calls, always arriving just after an image batch started.
TEXT_GAP = 0.5


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _png(size: int, seed: int) -> str:
    """A random ``size`` x ``size`` RGB PNG as a data URL (noise: PNG cannot compress it away)."""
    from PIL import Image

    rng = random.Random(seed)
    image = Image.frombytes("RGB", (size, size), bytes(rng.getrandbits(8) for _ in range(size * size * 3)))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


class _Server:
    """``swiftcore deploy`` in a child process, until :meth:`stop`."""

    def __init__(self, model: Path, log: Path, media_workers: int) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
        argv = [str(SWIFTCORE), "deploy", "--model", str(model), "--port", str(self.port), "--no-api-key",
                "--served-model-name", "tiny", "--log-level", "warning",
                "--media-workers", str(media_workers)]  # fmt: skip
        self._log = log.open("w")
        self.process = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 300
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2):
                    return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"swiftcore deploy did not start:\n{log.read_text()[-3000:]}") from None
                time.sleep(0.5)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(30)
        self._log.close()


def _ask(client: Any, content: Any) -> float:
    start = time.perf_counter()
    reply = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": content}], max_tokens=MAX_TOKENS, temperature=0.0
    )
    assert reply.choices[0].message is not None
    return time.perf_counter() - start


def _image_content(url: str) -> list[dict[str, Any]]:
    return [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "What is in this picture?"}]


def _text_phase(client: Any, n: int, gap: float = 0.0) -> list[float]:
    """``n`` text requests one after another, each timed; with ``gap``, a pause of uniform(0, gap) seconds (seeded:
    the same pauses every phase) before each, so requests arrive at random points of the engine's work instead of
    right behind the previous reply."""
    pauses = random.Random(0)
    latencies = []
    for i in range(n):
        time.sleep(pauses.uniform(0, gap))
        latencies.append(_ask(client, f"Is {7 + i} even or odd?"))
    return latencies


def _with_images(url: str, images: list[str], streams: int, body: Any) -> tuple[Any, int, float]:
    """Run ``body()`` while ``streams`` clients keep one image request each in flight; returns its result, the image
    requests finished inside the window and the window's length."""
    from openai import OpenAI

    stop = threading.Event()
    finished: list[float] = []  # completion times
    lock = threading.Lock()

    def stream(index: int) -> None:
        client = OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=600)
        k = index
        while not stop.is_set():
            _ask(client, _image_content(images[k % len(images)]))
            k += streams
            with lock:
                finished.append(time.perf_counter())

    threads = [threading.Thread(target=stream, args=(i,), daemon=True) for i in range(streams)]
    for thread in threads:
        thread.start()
    time.sleep(1.0)  # every stream has a request in flight before the window opens
    start = time.perf_counter()
    result = body()
    end = time.perf_counter()
    stop.set()
    for thread in threads:
        thread.join()
    return result, sum(start <= t <= end for t in finished), end - start


def _measure(server: _Server, images: list[str], text_n: int, image_streams: int) -> dict[str, Any]:
    """One round against ``server``: text alone, text beside images, images alone (as long as the mixed window)."""
    from openai import OpenAI

    client = OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=600)
    alone = _text_phase(client, text_n, TEXT_GAP)
    texts = lambda: _text_phase(client, text_n, TEXT_GAP)  # noqa: E731 - the body run beside the images
    mixed, mixed_done, mixed_seconds = _with_images(server.url, images, image_streams, texts)
    _, done, seconds = _with_images(server.url, images, image_streams, lambda: time.sleep(mixed_seconds))
    return {"text_alone_s": alone, "text_with_images_s": mixed,
            "images_with_text": {"finished": mixed_done, "seconds": mixed_seconds},
            "images_alone": {"finished": done, "seconds": seconds}}  # fmt: skip


def run(text_n: int, image_streams: int, image_size: int, rounds: int, workers: tuple[int, ...] = (0, 2)) -> dict:
    """Every phase against one server per ``--media-workers`` value (0: media decoded on the engine's thread),
    the servers' rounds alternating; raw latencies and counts per setting."""
    from openai import OpenAI

    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "tiny-qwen3_5"
        subprocess.run([str(SWIFTCORE), "make-tiny", "qwen3_5", str(model)], check=True, capture_output=True)
        servers: dict[int, _Server] = {}
        try:
            images = [_png(image_size, seed) for seed in range(16)]
            for n in workers:
                servers[n] = _Server(model, Path(tmp) / f"server-{n}.log", n)
                client = OpenAI(base_url=f"{servers[n].url}/v1", api_key="unused", max_retries=0, timeout=600)
                _text_phase(client, 2)  # warm-up: the first requests pay one-off costs
                _ask(client, _image_content(images[0]))
            pooled: dict[int, dict[str, Any]] = {}
            for _ in range(rounds):
                for n in workers:  # A B A B ...: both settings see the same machine load
                    got = _measure(servers[n], images, text_n, image_streams)
                    into = pooled.setdefault(n, {"text_alone_s": [], "text_with_images_s": [],
                                                 "images_with_text": {"finished": 0, "seconds": 0.0},
                                                 "images_alone": {"finished": 0, "seconds": 0.0}})  # fmt: skip
                    for key in ("text_alone_s", "text_with_images_s"):
                        into[key] += got[key]
                    for key in ("images_with_text", "images_alone"):
                        into[key]["finished"] += got[key]["finished"]
                        into[key]["seconds"] += got[key]["seconds"]
        finally:
            for server in servers.values():
                server.stop()
    return {"machine": machine(), "seconds": round(time.perf_counter() - began, 1), "text_n": text_n,
            "image_streams": image_streams, "image_size": image_size, "rounds": rounds, "max_tokens": MAX_TOKENS,
            "text_gap": TEXT_GAP, "by_media_workers": {str(n): pooled[n] for n in workers}}  # fmt: skip


def _label(workers: str) -> str:
    return "media on the engine's thread (`--media-workers 0`)" if workers == "0" else f"`--media-workers {workers}`"


def render(raw: dict[str, Any]) -> str:
    """The Markdown section of figure 8."""
    streams, n = raw["image_streams"], raw["text_n"] * raw["rounds"]
    lines = [BEGIN, "", "## 8. Serving: text latency beside image requests, and image requests/s", "",
             f"`bench/media_latency.py`, {raw['machine']['date']}, {machine_text(raw['machine'])}, "
             f"{raw['seconds']:.0f} s: "
             "`swiftcore deploy` "
             "(transformers engine, float32, default `--max-batch 16`) on `swiftcore make-tiny qwen3_5`, once with "
             "the media pool off (`--media-workers 0`: images decoded and processed on the engine's thread) and "
             "once with it on (the default, 2 threads), asked through the `openai` client; "
             f"{MAX_TOKENS} new tokens per request, greedy. Text: {n} requests one after another, each after a "
             f"pause of uniform(0, {raw.get('text_gap', 0)}) s (seeded), so they arrive at random points of the "
             "engine's work. Images: "
             f"{streams} clients each keeping one request in flight, a random {raw['image_size']} x "
             f"{raw['image_size']} PNG as a data URL. Each round runs text alone, text beside images and images "
             f"alone on one server, then the same on the other ({raw['rounds']} rounds, alternating); latencies "
             "pooled per phase.", "",
             "| server | text alone p50 / p99 (s) | text beside images p50 / p99 (s) | beside / alone (p50) "
             "| image requests/s beside text | image requests/s alone |",
             "| --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    ratios = {}
    # A raw file from before the pool existed measured the engine's thread alone (what --media-workers 0 is now).
    for workers, got in (raw.get("by_media_workers") or {"0": raw}).items():
        alone, mixed = got["text_alone_s"], got["text_with_images_s"]
        p50a, p99a = _percentile(alone, 0.5), _percentile(alone, 0.99)
        p50m, p99m = _percentile(mixed, 0.5), _percentile(mixed, 0.99)
        rate_mixed = got["images_with_text"]["finished"] / got["images_with_text"]["seconds"]
        rate_alone = got["images_alone"]["finished"] / got["images_alone"]["seconds"]
        ratios[workers] = p50m / p50a
        lines.append(f"| {_label(workers)} | {p50a:.3f} / {p99a:.3f} | {p50m:.3f} / {p99m:.3f} | "
                     f"{p50m / p50a:.2f}x | {rate_mixed:.2f} | {rate_alone:.2f} |")  # fmt: skip
    lines += ["", "What bounds it (read from the server's code, not profiled): one thread owns the engine "
              "(`swiftcore_serve.worker`) and runs one engine call at a time. Media and text requests get calls "
              "of their own, and after a call that served media a waiting text request goes first, so a text "
              "request waits for at most the call in progress: the image batch's vision tower, its prefill of "
              "hundreds of image tokens and its decoding steps. With the pool off the engine's thread also "
              "decodes every image and runs the processor (`Engine.encode`) inside that call; with the pool on "
              "(`swiftcore_serve.media_pool`) the pool's threads do it before a request queues, though on two "
              "cores they compete with the engine's thread for the CPU. Cutting the wait further needs an engine "
              "that admits a request into a running batch (continuous batching, as vLLM does). The issue sets no "
              "target.", "", END]  # fmt: skip
    return "\n".join(lines)


def write_section(raw: dict[str, Any]) -> Path:
    """Replace (or append) figure 8's section of RESULTS.md."""
    return replace_section(render(raw), BEGIN, END)


def main() -> None:
    """Run figure 8 and write its raw JSON and RESULTS.md section."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--text-n", type=int, default=24)
    parser.add_argument("--image-streams", type=int, default=8)
    parser.add_argument("--image-size", type=int, default=448)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    raw = run(args.text_n, args.image_streams, args.image_size, args.rounds)
    write_raw("media_latency", raw)
    print(write_section(raw))
    for workers, got in raw["by_media_workers"].items():
        print(f"--media-workers {workers}: text p50 alone {statistics.median(got['text_alone_s']):.3f} s", flush=True)


if __name__ == "__main__":
    main()
