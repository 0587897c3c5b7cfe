"""``--recipe opsd`` on prompts with images (#51): the teacher (the policy itself) scores the student's completion after
the privileged prompt *with the row's image*, so its advantages are ``log p(o_t | q+ with image) - log p(o_t | q with
image)``.

Before, ``--recipe opsd`` refused image prompts (``privileged_record`` took text messages only, and the plan refused
the recipe). Now, on the tiny Qwen3.5 (it has a vision tower):

- ``privileged_record`` writes the context into the last text part of a message of content parts, keeping its image
  parts (a message with no text part gets one appended), and refuses content it cannot write into, naming the row;
- on a round the trainer really generates (rows red, red, blue, blue), each token's advantage equals the teacher's
  minus the student's log-prob from plain forwards of the model, each row alone, the teacher on its own prompt ids
  (the privileged record encoded by the template, the image expanded) and both given the row's pixels (5e-5); a
  teacher blind to the pixels, or shown the other row's image, would give other advantages, and so would a teacher
  shown the student's prompt (the advantages would be 0);
- a teacher prompt keyed by its row (two rows may share text and context and differ in their image), with its own
  ``mm_token_type_ids``; a context that would add an image (an ``<image>`` tag) is refused, naming the row and the
  column; the options that still drop the pixels stay refused with opsd, naming the row and the option.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from swiftcore_testing import colour_turns, plain_completion_logits, write_jsonl

torch = pytest.importorskip("torch")
Image = pytest.importorskip("PIL.Image")

QUESTION = "What colour is this?"
FORMAT = "{prompt}\n\nReference answer: {context}"


def _plan(tiny_dir: Path, plugins: Any, work: Path, data: Path, **options: Any) -> Any:
    from swiftcore_recipe_rl.options import OPSDOptions
    from swiftcore_recipe_rl.plan import plan_run
    from swiftcore_train import TrainConfig

    cfg = TrainConfig(
        model=str(tiny_dir), dataset=(str(data),), output_dir=str(work / "out"), tuner="lora", batch_size=2,
        max_steps=1, seed=0, plot=False,
    )  # fmt: skip
    return plan_run("opsd", cfg, plugins, OPSDOptions(num_generations=2, max_completion_length=6, **options))


def test_privileged_record_writes_into_the_text_part_and_keeps_the_images() -> None:
    from swiftcore_recipe_rl.opsd import privileged_record

    from swiftcore.api import SwiftcoreError

    image = {"type": "image", "image": "/data/red.png"}
    record = {"messages": [{"role": "user", "content": [image, {"type": "text", "text": "What colour?"}]}],
              "_source": "data.jsonl:3"}  # fmt: skip
    out = privileged_record(record, "red", FORMAT)
    assert out["messages"][0]["content"] == [image, {"type": "text", "text": "What colour?\n\nReference answer: red"}]
    assert record["messages"][0]["content"][1]["text"] == "What colour?"  # the student's record is left as it was

    # several text parts: the last one (after the images) takes the context; the others stay
    two = [{"type": "text", "text": "Compare"}, image, {"type": "text", "text": "and"}, image]
    out = privileged_record({"messages": [{"role": "user", "content": two}]}, "same", FORMAT)
    assert out["messages"][0]["content"] == [two[0], image, {"type": "text", "text": "and\n\nReference answer: same"},
                                             image]  # fmt: skip

    # an image alone: the context becomes the message's text, after the image
    out = privileged_record({"messages": [{"role": "user", "content": [image]}]}, "red", FORMAT)
    assert out["messages"][0]["content"] == [image, {"type": "text", "text": "Reference answer: red"}]

    # a text message as before
    out = privileged_record({"messages": [{"role": "user", "content": "Q"}]}, 5, FORMAT)
    assert out["messages"][0]["content"] == "Q\n\nReference answer: 5"

    bad = {"messages": [{"role": "user", "content": {"text": "Q"}}], "_source": "data.jsonl:7"}
    with pytest.raises(SwiftcoreError, match=r"data.jsonl:7: --recipe opsd .*content of type dict"):
        privileged_record(bad, "red", FORMAT)


def _logps(model: Any, prompt: list[int], completion: list[int], pixels: Any, temperature: float) -> list[float]:
    """Log-probs of ``completion`` after ``prompt`` by a plain forward of ``model``, the row alone (unpadded), with
    ``pixels`` (the processor's tensors of one image) or without."""
    one = {
        "prompt_ids": torch.tensor([prompt]), "prompt_mask": torch.ones(1, len(prompt), dtype=torch.long),
        "completion_ids": torch.tensor([completion]), "completion_mask": torch.ones_like(torch.tensor([completion])),
    }  # fmt: skip
    logps = torch.log_softmax(plain_completion_logits(model, one, pixels, temperature), dim=-1)[0]
    return [logps[t, c].item() for t, c in enumerate(completion)]


def test_opsd_advantages_are_the_teacher_with_the_image_minus_the_student(
    tiny_dir: Path, plugins: Any, image_data: Path, tmp_path: Path
) -> None:
    import transformers
    from swiftcore_media import load_media_processor
    from swiftcore_recipe_rl.execute import _build_trainer
    from swiftcore_recipe_rl.opsd import privileged_record

    plan = _plan(tiny_dir, plugins, tmp_path, image_data)  # refused before #51
    codec = plan.local.codec
    assert len(plan.prompts.media) == 4
    trainer = _build_trainer(plan, plugins, codec, plan.rewards)
    trainer.model.train()
    rows = (0, 0, 1, 1)  # red, red, blue, blue
    out = trainer._generate_and_score_completions([dict(trainer.train_dataset[i]) for i in rows])
    assert out["num_images"] == [1, 1, 1, 1]

    processor = load_media_processor(plan.spec, str(tiny_dir), codec.tokenizer)
    files = [json.loads(line)["prompt"][0]["content"][0]["image"] for line in image_data.read_text().splitlines()]
    pixels = [dict(processor.image_processor(images=[Image.open(f).convert("RGB")], return_tensors="pt"))
              for f in files[:2]]  # fmt: skip
    # the policy at the start (LoRA's B is 0), loaded anew
    plain = transformers.Qwen3_5ForConditionalGeneration.from_pretrained(str(tiny_dir), dtype=torch.float32).eval()
    pad = plain.config.image_token_id
    temperature = float(trainer.temperature)
    got_all, want_all, blind_all, other_all = [], [], [], []
    for i, r in enumerate(rows):
        entry, answer = plan.prompts.media[r], plan.prompts.dataset[r]["answer"]
        record = privileged_record(entry["prompt_record"], answer, FORMAT)
        teacher_prompt = codec.encode_prompt(record)[1]
        student_prompt = list(entry["ids"])
        # the teacher's prompt: the student's image (its placeholder expanded the same), the context in its text
        assert teacher_prompt.count(pad) == student_prompt.count(pad) > 1
        assert f"Reference answer: {answer}" in codec.tokenizer.decode(teacher_prompt)
        n = int(out["completion_mask"][i].sum())
        completion = out["completion_ids"][i, :n].tolist()
        student = _logps(plain, student_prompt, completion, pixels[r], temperature)
        teacher = _logps(plain, teacher_prompt, completion, pixels[r], temperature)
        blind = _logps(plain, teacher_prompt, completion, None, temperature)
        other = _logps(plain, teacher_prompt, completion, pixels[1 - r], temperature)
        got = out["advantages"][i, :n].double().tolist()
        assert not out["advantages"][i, n:].any()  # padding carries no advantage
        got_all += got
        want_all += [t - s for t, s in zip(teacher, student, strict=True)]
        blind_all += [t - s for t, s in zip(blind, student, strict=True)]
        other_all += [t - s for t, s in zip(other, student, strict=True)]

    def gap(a: list[float], b: list[float]) -> float:
        return max(abs(x - y) for x, y in zip(a, b, strict=True))

    print(f"opsd on image prompts ({len(got_all)} tokens): advantages vs the reference with the image "
          f"{gap(got_all, want_all):.1e}; a blind teacher's differ by {gap(want_all, blind_all):.3f}, one shown the "
          f"other image by {gap(want_all, other_all):.3f}, one shown the student's prompt by "
          f"{max(map(abs, want_all)):.3f}")  # fmt: skip
    assert gap(got_all, want_all) < 5e-5
    assert gap(got_all, blind_all) > 1e-2  # a teacher without the pixels fails
    assert gap(got_all, other_all) > 1e-3  # a teacher given the round's pixels in another order fails
    assert max(map(abs, got_all)) > 0.05  # the teacher saw the context (the student's prompt would give 0)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"rollout_engine": "vllm"}, "--rollout-engine vllm"),
        ({"ray": True}, "--ray"),
        ({"rollout_server": "http://127.0.0.1:9"}, "--rollout-server"),
    ],
)
def test_options_that_would_drop_the_pixels_stay_refused_with_opsd(
    tiny_dir: Path, plugins: Any, image_data: Path, tmp_path: Path, options: dict, named: str
) -> None:
    from swiftcore.api import SwiftcoreError

    with pytest.raises(SwiftcoreError) as info:
        _plan(tiny_dir, plugins, tmp_path, image_data, **options)
    message = str(info.value)
    assert f"{image_data}:1" in message and named in message and "image" in message
    assert not (tmp_path / "out").exists()


def test_a_context_that_would_add_an_image_is_refused_naming_the_row(
    tiny_dir: Path, plugins: Any, tmp_path: Path
) -> None:
    """The teacher scores with the student's pixels, so its prompt must carry the student's images and no more: an
    ``<image>`` tag in the context column (ms-swift tags, the ``images`` column) is refused, naming the row and the
    column, before any training."""
    from swiftcore_recipe_rl.opsd import teacher_prompt_ids
    from swiftcore_recipe_rl.prompts import MEDIA_COLUMN

    from swiftcore.api import SwiftcoreError

    turns = colour_turns(tmp_path / "images", range(2), QUESTION)
    rows = [{"prompt": f"<image>{QUESTION}", "images": [user["content"][0]["image"]], "answer": f"<image>{colour}"}
            for user, colour in turns]  # fmt: skip
    data = write_jsonl(tmp_path / "tags.jsonl", rows)
    plan = _plan(tiny_dir, plugins, tmp_path, data)
    with pytest.raises(SwiftcoreError, match=rf"{data}:1: the teacher's prompt \(the 'answer' column written in by "
                                             r"--opsd-context-format\) cannot be encoded"):  # fmt: skip
        teacher_prompt_ids(plan.prompts, plan.local.codec, plan.options)
    # the same rows with one plain context: the teacher's prompt is the student's image and the context
    for row in rows:
        row["answer"] = "a colour"
    plan = _plan(tiny_dir, plugins, tmp_path, write_jsonl(tmp_path / "plain.jsonl", rows))
    teacher = teacher_prompt_ids(plan.prompts, plan.local.codec, plan.options)
    assert len(teacher) == 2  # one per row: the rows share their text and context, and differ in their image
    pad = plan.local.codec.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    for row, entry in zip(plan.prompts.dataset, plan.prompts.media, strict=True):
        prompt = teacher[(row["prompt"], row["answer"], row[MEDIA_COLUMN])]
        assert prompt["ids"].count(pad) == entry["ids"].count(pad) > 1
        assert [i for i, t in enumerate(prompt["types"]) if t] == [i for i, t in enumerate(prompt["ids"]) if t == pad]
