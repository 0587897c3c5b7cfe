"""The README's distillation examples learn the vowel task from a teacher: their commands, run as written.

``gkd`` (issue 53): README's "A first run that learns" section shows three commands for ``gkd``: an SFT run that
makes the teacher (full weights on ``examples/vowel_words.jsonl``), the ``--recipe gkd`` run that distils the
untrained tiny model towards it on ``examples/vowel_prompts.jsonl``, and a ``swiftcore infer`` command that samples
one reply (temperature 1, seed 0) to each of the 32 held-out prompts of ``examples/vowel_heldout.jsonl``. This runs
the three as written (the session's tiny qwen3_5 as ``./tiny``), and the infer command again on the untrained model
and on the teacher (``--model`` swapped, as the README says), and asserts the share of replies that start with a
vowel: the untrained model's at most 0.3, the teacher's at least 0.9, the student's at least 0.8 and at least 0.5
above the untrained.

``opd``: README's "A first run that learns" section shows the SFT run that makes the vowel teacher, then a
``--recipe opd`` run that distils the untrained tiny model towards it on its own samples of
``examples/vowel_prompts.jsonl`` (no answers, no reward: each sampled token's advantage is ``log p_teacher - log
p_student``), and reuses the ``gkd`` example's held-out infer command with the student's checkpoint. This runs them
as written (the session's tiny qwen3_5 as ``./tiny``) and the infer command on the untrained model and the student,
and asserts the share of the 32 held-out replies that start with a vowel: the untrained model's at most 0.3, the
student's at least 0.8 and at least 0.5 above it; and that the teacher's mean log-prob of the student's sampled
tokens (``opd/teacher_logp``) rose.
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


def readme_commands(text: str, recipe: str) -> tuple[list[str], list[str], list[str]]:
    """The argv of README's teacher SFT command, its ``--recipe RECIPE`` command and its held-out infer command."""
    inline = [shlex.split(c) for c in re.findall(r"`(swiftcore (?:train|infer) [^`]+)`", text)]
    teacher = [a for a in inline if "plugins/recipe_rl/examples/vowel_words.jsonl" in a]
    run = [a for a in inline if a[1] == "train" and "--recipe" in a and a[a.index("--recipe") + 1] == recipe]
    infer = [a for a in inline if a[1] == "infer" and "plugins/recipe_rl/examples/vowel_heldout.jsonl" in a]
    assert len(teacher) == len(run) == len(infer) == 1, f"README should show one of each: {teacher}, {run}, {infer}"
    return teacher[0], run[0], infer[0]


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


def in_readme_layout(tmp_path: Path, tiny_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Work in ``tmp_path`` laid out as the README's commands expect: ``./tiny`` and the plugin's examples."""
    (tmp_path / "tiny").symlink_to(tiny_dir)
    (tmp_path / "plugins" / "recipe_rl").mkdir(parents=True)
    (tmp_path / "plugins" / "recipe_rl" / "examples").symlink_to(EXAMPLES)
    monkeypatch.chdir(tmp_path)


@pytest.mark.slow
def test_readme_gkd_example_learns(
    tiny_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, one_thread: None
) -> None:
    from swiftcore_testing import run_cli

    teacher, gkd, infer = readme_commands(README.read_text(encoding="utf-8"), "gkd")
    assert teacher[teacher.index("--model") + 1] == gkd[gkd.index("--model") + 1] == "./tiny"
    in_readme_layout(tmp_path, tiny_dir, monkeypatch)

    run_cli(*teacher[1:])
    teacher_dir = gkd[gkd.index("--teacher-model") + 1]
    assert Path(teacher_dir).is_dir(), f"the gkd command's --teacher-model {teacher_dir} is not what the SFT wrote"
    run_cli(*gkd[1:])
    student = infer[infer.index("--model") + 1]
    assert Path(student).is_dir(), f"the infer command's --model {student} is not what the gkd run wrote"

    untrained = vowel_share(infer, "./tiny", "untrained.jsonl")
    taught = vowel_share(infer, teacher_dir, "teacher.jsonl")
    distilled = vowel_share(infer, student, "student.jsonl")
    print(f"README gkd example: held-out vowel share {untrained:.2f} untrained, {taught:.2f} teacher, "
          f"{distilled:.2f} student")  # fmt: skip
    assert untrained <= 0.3 and taught >= 0.9, (untrained, taught)  # the task is the teacher's, not the model's
    assert distilled >= 0.8 and distilled - untrained >= 0.5, (untrained, taught, distilled)


@pytest.mark.slow
def test_readme_opd_example_learns(
    tiny_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, one_thread: None
) -> None:
    from swiftcore_testing import run_cli

    teacher, opd, infer = readme_commands(README.read_text(encoding="utf-8"), "opd")
    assert teacher[teacher.index("--model") + 1] == opd[opd.index("--model") + 1] == "./tiny"
    assert "--reward" not in opd  # pure distillation: the teacher is the only signal
    in_readme_layout(tmp_path, tiny_dir, monkeypatch)

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
