"""README's typical run learns (issue 53, point 2): its commands, as written, answer every training question.

``tests/test_docs_commands.py`` runs every documented command for two steps, which shows that it runs; this file
runs README's "typical run" in full, on the eight conversations README shows for ``data.jsonl``, with every
default the commands leave alone (LoRA's rank, alpha and targets, batch 1, the cosine schedule, gradient
clipping at 1.0), and asserts what the run is for: ``swiftcore infer`` on ``questions.jsonl`` (the same
conversations without their answers) replies with each training answer.

The make-tiny line is the session's ``tiny_model_dir("qwen3_5")`` (``make-tiny`` is deterministic for its seed,
and this builds the family once per session); the train and infer lines run through the console script's function
in this process, in a fresh working directory. ``swiftcore deploy`` serves what infer answered from, and
``tests/test_docs_commands.py`` starts it.

README's old run (``--learning-rate 1e-3 --max-steps 50``: about six passes over eight rows, one row a step)
ended at loss ~1.2 and answered 2 of the 8 (most questions got the same one or two answers).
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def typical_run(readme: str) -> tuple[list[dict], list[list[str]]]:
    """The rows of README's ``data.jsonl`` block and the argv of every command of the typical run's shell block."""
    section = readme.split("A typical run", 1)[1]
    data = re.search(r"^```jsonl\n(.*?)^```", section, flags=re.S | re.M)
    shell = re.search(r"^```bash\n(.*?)^```", section, flags=re.S | re.M)
    assert data, "README's typical run shows no ```jsonl block of data.jsonl rows"
    assert shell, "README's typical run has no ```bash block"
    rows = [json.loads(line) for line in data.group(1).splitlines() if line.strip()]
    commands = [shlex.split(line, comments=True) for line in shell.group(1).splitlines() if line.strip()]
    return rows, [argv for argv in commands if argv]


def run_typical_run(readme: str, tiny: Path, work: Path) -> tuple[list[str], list[str]]:
    """Run README's typical run in ``work`` (``tiny``: the make-tiny checkpoint); return (answers, targets)."""
    import os

    from swiftcore_testing import run_cli

    rows, commands = typical_run(readme)
    (work / "data.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    questions = [{"messages": row["messages"][:-1]} for row in rows]
    (work / "questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions), encoding="utf-8")
    ran = []
    saved = Path.cwd()
    os.chdir(work)
    try:
        for argv in commands:
            assert argv[0] == "swiftcore", argv
            if argv[1] == "make-tiny":
                assert argv[2:] == ["qwen3_5", "./tiny"], f"the session's tiny checkpoint is not {argv}"
                shutil.copytree(tiny, work / "tiny")
            elif argv[1] in ("train", "infer"):
                run_cli(*argv[1:])
            else:
                assert argv[1] == "deploy", f"README's typical run has a command this test does not know: {argv}"
                continue
            ran.append(argv[1])
    finally:
        os.chdir(saved)
    assert ran == ["make-tiny", "train", "infer"], ran
    answers = [json.loads(line)["response"] for line in (work / "answers.jsonl").read_text().splitlines()]
    return answers, [row["messages"][-1]["content"] for row in rows]


@pytest.mark.slow
def test_readme_typical_run_answers_its_training_questions(tiny_model_dir, one_thread, tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    answers, targets = run_typical_run(readme, tiny_model_dir("qwen3_5"), tmp_path)
    right = sum(a.strip() == t for a, t in zip(answers, targets, strict=True))
    print(f"README typical run: {right}/{len(targets)} training answers; replies {answers}")
    assert len(targets) >= 8, f"README shows only {len(targets)} data.jsonl rows"
    assert right == len(targets), f"the trained model answered {right}/{len(targets)}: {answers} (wanted {targets})"
