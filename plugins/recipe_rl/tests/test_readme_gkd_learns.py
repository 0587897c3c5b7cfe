"""The README's ``gkd`` example learns the vowel task from a teacher (issue 53): its commands, run as written.

README's "A first run that learns" section shows three commands for ``gkd``: an SFT run that makes the teacher (full
weights on ``examples/vowel_words.jsonl``), the ``--recipe gkd`` run that distils the untrained tiny model towards
it on ``examples/vowel_prompts.jsonl``, and a ``swiftcore infer`` command that samples one reply (temperature 1,
seed 0) to each of the 32 held-out prompts of ``examples/vowel_heldout.jsonl``. This runs the three as written (the
session's tiny qwen3_5 as ``./tiny``), and the infer command again on the untrained model and on the teacher
(``--model`` swapped, as the README says), and asserts the share of replies that start with a vowel: the untrained
model's at most 0.3, the teacher's at least 0.9, the student's at least 0.8 and at least 0.5 above the untrained.
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


def gkd_commands(text: str) -> tuple[list[str], list[str], list[str]]:
    """The argv of README's teacher SFT command, its ``--recipe gkd`` command and its held-out infer command."""
    inline = [shlex.split(c) for c in re.findall(r"`(swiftcore (?:train|infer) [^`]+)`", text)]
    teacher = [a for a in inline if "plugins/recipe_rl/examples/vowel_words.jsonl" in a]
    gkd = [a for a in inline if a[1] == "train" and "--recipe" in a and a[a.index("--recipe") + 1] == "gkd"]
    infer = [a for a in inline if a[1] == "infer" and "plugins/recipe_rl/examples/vowel_heldout.jsonl" in a]
    assert len(teacher) == len(gkd) == len(infer) == 1, f"README should show one of each: {teacher}, {gkd}, {infer}"
    return teacher[0], gkd[0], infer[0]


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
def test_readme_gkd_example_learns(
    tiny_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, one_thread: None
) -> None:
    from swiftcore_testing import run_cli

    teacher, gkd, infer = gkd_commands(README.read_text(encoding="utf-8"))
    assert teacher[teacher.index("--model") + 1] == gkd[gkd.index("--model") + 1] == "./tiny"
    (tmp_path / "tiny").symlink_to(tiny_dir)
    (tmp_path / "plugins" / "recipe_rl").mkdir(parents=True)
    (tmp_path / "plugins" / "recipe_rl" / "examples").symlink_to(EXAMPLES)
    monkeypatch.chdir(tmp_path)

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
