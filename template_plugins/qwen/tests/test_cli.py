"""``swiftcore template list|render|encode`` with the qwen plugin."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from swiftcore_testing import generation_record, user_env

from swiftcore.template import get_template

SWIFTCORE = str(Path(sys.executable).parent / "swiftcore")
DATA = Path(__file__).parent / "data"


def _run(*args: str) -> subprocess.CompletedProcess:
    # A user's shell's environment: a plugin set an earlier test of this process exported (SWIFTCORE_PLUGINS) would
    # be added to --plugin's (seen under pytest-xdist, where another module ran first in the same worker).
    return subprocess.run([SWIFTCORE, *args], capture_output=True, text=True, timeout=120, env=user_env())


def test_list_names_the_templates() -> None:
    proc = _run("template", "list", "--plugin", "swiftcore-template-qwen")
    assert proc.returncode == 0, proc.stderr
    names = [line.split()[0] for line in proc.stdout.splitlines()]
    assert names == ["jinja", "qwen3", "qwen3_5", "qwen3_asr"]
    # What each template supports (TemplateSpec.supports) is shown, so a user can pick one for tools or images.
    qwen3_5 = next(line for line in proc.stdout.splitlines() if line.startswith("qwen3_5 "))
    assert qwen3_5.endswith("(supports: system, thinking, tools, image, video)")


def test_render_writes_one_line_per_record(plugins: Any, records: list[dict]) -> None:
    proc = _run("template", "render", "--plugin", "swiftcore-template-qwen", "--template", "qwen3",
                "--input", str(DATA / "conversations.jsonl"), "--generation-prompt")
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [row["id"] for row in rows] == [r["id"] for r in records]
    tpl = get_template("qwen3", plugins)
    for row, record in zip(rows, records, strict=True):
        if "error" in row:
            assert "string content only" in row["error"]
        else:
            assert row["text"] == tpl.render(generation_record(record), add_generation_prompt=True)
    assert sum("error" in row for row in rows) == 9  # the image, audio and ASR records


def test_encode_shows_ids_and_labels(tokenizers: dict, tmp_path: Path) -> None:
    tokenizers["qwen3_5"].save_pretrained(tmp_path / "tok")
    (tmp_path / "in.jsonl").write_text(json.dumps(
        {"id": "a", "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Katze"}]}) + "\n")
    proc = _run("template", "encode", "--plugin", "swiftcore-template-qwen", "--template", "qwen3_5",
                "--tokenizer", str(tmp_path / "tok"), "--input", str(tmp_path / "in.jsonl"), "--json")
    assert proc.returncode == 0, proc.stderr
    row = json.loads(proc.stdout)
    ids, labels = row["input_ids"], row["labels"]
    trained = [i for i, label in zip(ids, labels, strict=True) if label != -100]
    assert tokenizers["qwen3_5"].decode(trained) == "Katze<|im_end|>"  # no reasoning: trained with thinking off
    # the human view colours loss tokens green (checked in-process: one subprocess is enough)
    from swiftcore.cli.template_cmd import _colour_view

    view = _colour_view(tokenizers["qwen3_5"], ids, labels)
    green = "".join(part.split("\x1b[0m")[0] for part in view.split("\x1b[32m\x1b[1m")[1:])
    assert green == "Katze<|im_end|>"
