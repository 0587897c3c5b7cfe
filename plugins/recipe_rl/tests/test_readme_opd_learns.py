"""The README's ``opd`` example learns the vowel task from a teacher's per-token scores: its commands, run as written.

README's "A first run that learns" section shows the SFT run that makes the vowel teacher, then a ``--recipe opd``
run that distils the untrained tiny model towards it on its own samples of ``examples/vowel_prompts.jsonl`` (no
answers, no reward: each sampled token's advantage is ``log p_teacher - log p_student``), and reuses the ``gkd``
example's held-out infer command with the student's checkpoint. This runs them as written (the session's tiny
qwen3_5 as ``./tiny``) and the infer command on the untrained model and the student, and asserts the share of the 32
held-out replies that start with a vowel: the untrained model's at most 0.3, the student's at least 0.8 and at least
0.5 above it; and that the teacher's mean log-prob of the student's sampled tokens (``opd/teacher_logp``) rose.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

PLUGIN = Path(__file__).resolve().parents[1]
README = PLUGIN / "README.md"
EXAMPLES = PLUGIN / "examples"
VOWEL = re.compile(r"^\s*[aeiouAEIOU]")


def readme_commands(text: str) -> tuple[list[str], list[str], list[str]]:
    """The argv of README's teacher SFT command, its ``--recipe opd`` command and its held-out infer command."""
    inline = [shlex.split(c) for c in re.findall(r"`(swiftcore (?:train|infer) [^`]+)`", text)]
    teacher = [a for a in inline if "plugins/recipe_rl/examples/vowel_words.jsonl" in a]
    opd = [a for a in inline if a[1] == "train" and "--recipe" in a and a[a.index("--recipe") + 1] == "opd"]
    infer = [a for a in inline if a[1] == "infer" and "plugins/recipe_rl/examples/vowel_heldout.jsonl" in a]
    assert len(teacher) == len(opd) == len(infer) == 1, f"README should show one of each: {teacher}, {opd}, {infer}"
    return teacher[0], opd[0], infer[0]


def vowel_share(infer: list[str], model: str, output: str) -> float:
    """Run the README's infer command on ``model`` into ``output``; the share of replies starting with a vowel."""
    from swiftcore_testing import run_cli

    argv = list(infer)
    argv[argv.index("--model") + 1] = model
    argv[argv.index("--output") + 1] = output
    run_cli(*argv[1:])
    replies = [json.loads(line)["response"] or "" for line in Path(output).read_text().splitlines()]
    assert len(replies) == 32, replies
    print(f"{model}: {replies}")
    return sum(bool(VOWEL.match(r)) for r in replies) / len(replies)


@pytest.mark.slow
def test_readme_opd_example_learns(
    tiny_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, one_thread: None
) -> None:
    from swiftcore_testing import run_cli

    teacher, opd, infer = readme_commands(README.read_text(encoding="utf-8"))
    assert teacher[teacher.index("--model") + 1] == opd[opd.index("--model") + 1] == "./tiny"
    assert "--reward" not in opd  # pure distillation: the teacher is the only signal
    (tmp_path / "tiny").symlink_to(tiny_dir)
    (tmp_path / "plugins" / "recipe_rl").mkdir(parents=True)
    (tmp_path / "plugins" / "recipe_rl" / "examples").symlink_to(EXAMPLES)
    monkeypatch.chdir(tmp_path)

    run_cli(*teacher[1:])
    teacher_dir = opd[opd.index("--teacher-model") + 1]
    assert Path(teacher_dir).is_dir(), f"the opd command's --teacher-model {teacher_dir} is not what the SFT wrote"
    run_cli(*opd[1:])
    out = Path(opd[opd.index("--output-dir") + 1])
    steps = opd[opd.index("--max-steps") + 1]
    student = out / f"checkpoint-{steps}"
    assert student.is_dir(), f"the opd run wrote no {student}"

    logs = [json.loads(line) for line in (out / "logs.jsonl").read_text().splitlines()]
    teacher_logp = [row["opd/teacher_logp"] for row in logs if "opd/teacher_logp" in row]
    untrained = vowel_share(infer, "./tiny", "untrained.jsonl")
    distilled = vowel_share(infer, str(student), "student.jsonl")
    print(
        f"README opd example: held-out vowel share {untrained:.2f} untrained, {distilled:.2f} student; teacher "
        f"log-prob of the student's tokens {teacher_logp[0]:.2f} at step 1, {teacher_logp[-1]:.2f} at the end"
    )
    assert untrained <= 0.3, untrained
    assert distilled >= 0.8 and distilled - untrained >= 0.5, (untrained, distilled)
    assert sum(teacher_logp[-3:]) / 3 > teacher_logp[0] + 2.0, teacher_logp  # the teacher likes the samples more
