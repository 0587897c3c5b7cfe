"""Benchmark: generation throughput of the inference backends on the same prompts.

Measures completion tokens per second (greedy, the same encoded prompts everywhere) for:

1. the transformers backend, batched (``--batch-size``);
2. the transformers backend, one request at a time;
3. the vLLM backend (when ``swiftcore-backend-vllm`` and vLLM are installed), all prompts at once;
4. ``swiftcore deploy`` (transformers) under 20 concurrent streaming clients on loopback: tokens/s,
   and this process's RSS before and after (it hosts the server).

Usage: ``python bench/infer_throughput.py [--model DIR] [--n 64] [--max-new-tokens 32]``. Without
``--model`` a tiny random Qwen3 is built (the model the tests use). Figures go to stdout and to
``bench/raw/infer_throughput.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

RAW = Path(__file__).resolve().parent / "raw" / "infer_throughput.json"


def prompts(n: int) -> list[dict[str, Any]]:
    """``n`` short chat records of varied length."""
    return [{"messages": [{"role": "user", "content": f"Question {i}: " + "tell me more " * (1 + i % 7)}]}
            for i in range(n)]


def timed(engine: Any, records: list[dict], max_new_tokens: int, batch_size: int) -> dict[str, float]:
    """Run once to warm up, then time one pass; return tokens, seconds and tokens/s."""
    engine.generate(records[:2], max_new_tokens=4, batch_size=batch_size)
    start = time.perf_counter()
    out = engine.generate(records, max_new_tokens=max_new_tokens, batch_size=batch_size)
    seconds = time.perf_counter() - start
    failed = [g.error for g in out if not g.ok]
    if failed:
        raise RuntimeError(f"{len(failed)} requests failed: {failed[:3]}")
    tokens = sum(g.completion_tokens for g in out)
    return {"completion_tokens": tokens, "seconds": round(seconds, 3), "tokens_per_s": round(tokens / seconds, 1)}


def deploy_streams(engine: Any, clients: int, rounds: int, max_new_tokens: int) -> dict[str, Any]:
    """Concurrent streaming clients against an in-process ``swiftcore deploy`` app."""
    import openai
    import psutil
    from swiftcore_serve import ServerConfig, build_app
    from swiftcore_testing import ServerThread

    me = psutil.Process()

    def one(url: str, i: int) -> int:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=300)
        chunks = 0
        for chunk in client.chat.completions.create(
                model="bench", messages=[{"role": "user", "content": f"client {i}"}], max_tokens=max_new_tokens,
                temperature=0.8, stream=True, stream_options={"include_usage": True}):
            if chunk.usage is not None:
                chunks = chunk.usage.completion_tokens
        return chunks

    with ServerThread(build_app(engine, ServerConfig(model_name="bench", max_queue=4 * clients))) as url, \
            ThreadPoolExecutor(clients) as pool:
        list(pool.map(lambda i: one(url, i), range(clients)))  # warm-up round
        baseline = me.memory_info().rss / 2**20
        start = time.perf_counter()
        tokens = 0
        for _ in range(rounds):
            tokens += sum(pool.map(lambda i: one(url, i), range(clients)))
        seconds = time.perf_counter() - start
        final = me.memory_info().rss / 2**20
    return {"clients": clients, "rounds": rounds, "completion_tokens": tokens, "seconds": round(seconds, 2),
            "tokens_per_s": round(tokens / seconds, 1), "rss_baseline_mb": round(baseline),
            "rss_final_mb": round(final)}


def main() -> None:
    """Run the benchmark and print tokens/s for each backend."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="checkpoint directory (default: a tiny random Qwen3)")
    parser.add_argument("--n", type=int, default=64, help="prompts")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--clients", type=int, default=20, help="concurrent streaming clients for deploy")
    parser.add_argument("--skip-vllm", action="store_true")
    args = parser.parse_args()

    from swiftcore_infer import TransformersEngine
    from swiftcore_testing import make_tiny_qwen3, plugins_with_tiny_qwen3

    plugins = plugins_with_tiny_qwen3()
    tmp = tempfile.TemporaryDirectory(prefix="swiftcore-bench-")
    model = Path(args.model) if args.model else make_tiny_qwen3(Path(tmp.name) / "tiny-qwen3")
    records = prompts(args.n)
    results: dict[str, Any] = {"model": "tiny-qwen3 (random)" if not args.model else str(model), "n": args.n,
                               "max_new_tokens": args.max_new_tokens, "machine": platform.machine(),
                               "cpu_count": __import__("os").cpu_count()}

    engine = TransformersEngine(model, plugins)
    results["transformers_batched"] = timed(engine, records, args.max_new_tokens, args.batch_size)
    results["transformers_batched"]["batch_size"] = args.batch_size
    results["transformers_one_by_one"] = timed(engine, records, args.max_new_tokens, 1)
    results["deploy_streaming_transformers"] = deploy_streams(engine, args.clients, 1, min(args.max_new_tokens, 16))

    if not args.skip_vllm:
        from swiftcore_infer import backend_spec, probe_backend

        try:
            reason = probe_backend(backend_spec("vllm", plugins))
        except Exception as exc:  # no vLLM plugin installed
            reason = str(exc)
        if reason:
            results["vllm"] = {"skipped": reason}
        else:
            from swiftcore_infer import create_engine

            start = time.perf_counter()
            vllm = create_engine("vllm", model, plugins, max_model_len=1024)
            started = time.perf_counter() - start
            results["vllm"] = timed(vllm, records, args.max_new_tokens, len(records))
            results["vllm"]["engine_start_s"] = round(started, 1)
            vllm.close()

    print(json.dumps(results, indent=2))
    RAW.parent.mkdir(parents=True, exist_ok=True)
    RAW.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
