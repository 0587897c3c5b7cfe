"""Talker training with the thinker frozen: the teacher-forced input is upstream's, the loss is a plain
cross-entropy, and training on a synthetic voice makes held-out sentences come out right."""

from __future__ import annotations

import itertools
import json
import random
import subprocess
import wave
from pathlib import Path

import pytest

WORDS = ["red", "blue", "green", "sun", "moon", "star", "cat", "dog", "fish", "tree", "rock", "wind"]


def _cli(*args: str) -> subprocess.CompletedProcess:
    from swiftcore_testing import run_swiftcore, user_env

    proc = run_swiftcore(*args, timeout=900, env=user_env())
    assert proc.returncode == 0, f"swiftcore {args[0]} failed:\n{proc.stderr[-3000:]}"
    return proc


def _allowed(model, logits):
    """Upstream's generate suppresses every id of the last 1024 but codec EOS: the same mask, for an argmax."""
    import torch

    tconfig = model.config.talker_config
    mask = torch.zeros(logits.shape[-1])
    mask[max(0, logits.shape[-1] - 1024) :] = float("-inf")
    mask[tconfig.codec_eos_token_id] = 0.0
    return logits + mask


def test_teacher_forced_input_is_what_generate_feeds_the_talker(omni) -> None:
    """Greedy upstream generate speaks a reply; teacher-forcing that reply and those codes through
    talker_batch, the talker's argmax at every frame is the code generate chose."""
    import torch
    from swiftcore_plugin_qwen3_omni.talker import residual_logits, talker_batch

    model, tokenizer = omni
    seen = []
    hook = model.code2wav.register_forward_pre_hook(lambda _m, args: seen.append(args[0].clone()))
    prompt = [{"role": "user", "content": "the dog"}]
    ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    try:
        sequences, _ = model.generate(
            ids["input_ids"],
            speaker="tiny",
            thinker_max_new_tokens=5,
            thinker_do_sample=False,
            thinker_eos_token_id=model.config.im_end_token_id,
            talker_max_new_tokens=8,
            talker_do_sample=False,
            talker_repetition_penalty=1.0,
        )
    finally:
        hook.remove()
    reply_ids = sequences[0, ids["input_ids"].shape[1] :].tolist()
    reply_ids = reply_ids[:-1] if reply_ids[-1] == model.config.im_end_token_id else reply_ids
    codes = seen[0][0].T.tolist()  # [frames, groups]
    assert len(codes) >= 4
    row = {"messages": [*prompt, {"role": "assistant", "content": tokenizer.decode(reply_ids)}], "codes": codes}
    batch = talker_batch(model, tokenizer, row)
    with torch.no_grad():
        logits = model.talker(**batch).logits[0, :-1]
    targets = batch["labels"][0, 1:]
    scored = targets != -100
    predicted = _allowed(model, logits[scored]).argmax(-1).tolist()
    # Every frame generate produced (it stopped at its frame budget, so the final EOS target is not one of them).
    assert predicted[: len(codes)] == [frame[0] for frame in codes]
    # And the code predictor, fed as generate feeds it, picks the same residual codes.
    with torch.no_grad():
        hidden = model.talker(**batch, output_hidden_states=True).hidden_states[0][-1]
        residual = residual_logits(model, batch, torch.tensor(codes), hidden)
    assert residual.argmax(-1).tolist() == [frame[1:] for frame in codes]


def test_talker_losses_are_cross_entropy_on_each_codebook(omni) -> None:
    import torch
    from swiftcore_plugin_qwen3_omni.talker import codec_accuracy, residual_logits, talker_batch

    model, tokenizer = omni
    row = {"text": "red sun", "codes": [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]]}
    batch = talker_batch(model, tokenizer, row)
    with torch.no_grad():
        out = model.talker(**batch)
    logits, labels = out.logits[0, :-1], batch["labels"][0, 1:]
    scored = labels != -100
    reference = -torch.log_softmax(logits[scored].double(), -1).gather(1, labels[scored, None]).mean()
    assert labels[scored].tolist() == [1, 5, 9, model.config.talker_config.codec_eos_token_id]
    assert float(out.loss) == pytest.approx(float(reference), rel=1e-5)
    # The training loss adds the code predictor's cross-entropy on codebooks 1..3, the same hand computation.
    codes = torch.tensor(row["codes"])
    with torch.no_grad():
        hidden = model.talker(**batch, output_hidden_states=True).hidden_states[0][-1]
        residual = residual_logits(model, batch, codes, hidden).double()
    by_hand = -torch.log_softmax(residual, -1).gather(2, codes[:, 1:, None]).mean()
    score = codec_accuracy(model, tokenizer, [row])
    assert score.first_loss == pytest.approx(float(reference), rel=1e-5)
    assert score.residual_loss == pytest.approx(float(by_hand), rel=1e-5)


def test_rows_with_audio_and_no_codes_are_refused(tmp_path: Path) -> None:
    from swiftcore_plugin_qwen3_omni.talker import read_talker_rows

    from swiftcore.api import SwiftcoreError

    data = tmp_path / "voice.jsonl"
    data.write_text('{"messages": [{"role": "user", "content": "hi"}], "audio": "hi.wav"}\n')
    with pytest.raises(SwiftcoreError, match=r"voice.jsonl:1: .*codec encoder"):
        read_talker_rows(data)


def test_codes_outside_the_codebook_are_refused(omni) -> None:
    from swiftcore_plugin_qwen3_omni.talker import talker_batch

    from swiftcore.api import SwiftcoreError

    model, tokenizer = omni
    with pytest.raises(SwiftcoreError, match=r"codes must lie in \[0, 32\)"):
        talker_batch(model, tokenizer, {"text": "red", "codes": [[1, 2, 3, 32]]})
    with pytest.raises(SwiftcoreError, match="frames have 2 codes, the checkpoint's talker 4"):
        talker_batch(model, tokenizer, {"text": "red", "codes": [[1, 2]]})


@pytest.mark.slow
def test_talker_learns_a_synthetic_voice_with_the_thinker_frozen(omni, tiny_dir: Path, tmp_path: Path) -> None:
    """``swiftcore omni-talker-train`` on 32 sentences of a synthetic voice (the text decides the codes); held-out
    sentences of the same words come out closer to their codes; ``swiftcore omni-speak`` then speaks a WAV."""
    import torch
    import transformers
    from swiftcore_plugin_qwen3_omni.talker import codec_accuracy, synthetic_voice_rows

    model, tokenizer = omni
    sentences = [" ".join(pair) for pair in itertools.permutations(WORDS[:8], 2)]
    random.Random(0).shuffle(sentences)
    groups = model.config.talker_config.num_code_groups
    codebook = model.config.code2wav_config.codebook_size
    train = synthetic_voice_rows(tokenizer, sentences[:32], groups, codebook)
    held_out = synthetic_voice_rows(tokenizer, sentences[32:40], groups, codebook)
    (tmp_path / "voice.jsonl").write_text("".join(json.dumps(row) + "\n" for row in train), encoding="utf-8")
    before = codec_accuracy(model, tokenizer, held_out)

    out = tmp_path / "voice"
    voice = str(tmp_path / "voice.jsonl")
    _cli("omni-talker-train", "--model", str(tiny_dir), "--dataset", voice, "--output-dir", str(out),
         "--max-steps", "40", "--learning-rate", "1e-2")  # fmt: skip
    trained = transformers.Qwen3OmniMoeForConditionalGeneration.from_pretrained(str(out)).eval()
    after = codec_accuracy(trained, tokenizer, held_out)
    print(f"held-out codec scores before {before}\nafter {after}")
    assert after.first_loss < before.first_loss - 2.0 and after.first_accuracy >= before.first_accuracy + 0.1
    assert after.residual_loss < before.residual_loss - 0.5 and after.residual_accuracy > before.residual_accuracy
    # The thinker and Code2Wav are untouched; the talker moved.
    for part in ("thinker", "code2wav", "talker"):
        pairs = zip(getattr(model, part).state_dict().values(), getattr(trained, part).state_dict().values())
        assert all(torch.equal(a, b) for a, b in pairs) is (part != "talker"), part

    wav = str(tmp_path / "r.wav")
    proc = _cli("omni-speak", "--model", str(out), "--prompt", held_out[0]["text"], "--output", wav,
                "--max-new-tokens", "6", "--max-frames", "16")  # fmt: skip
    spoken = json.loads(proc.stdout.strip().splitlines()[-1])
    with wave.open(spoken["path"], "rb") as handle:
        assert (handle.getframerate(), handle.getnchannels()) == (24_000, 1)
        assert 0 < handle.getnframes() <= 16 * int(trained.code2wav.total_upsample)
