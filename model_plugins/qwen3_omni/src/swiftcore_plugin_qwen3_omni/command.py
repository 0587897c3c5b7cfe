"""``swiftcore omni-talker-train`` and ``swiftcore omni-speak``: Qwen3-Omni's speech out from the command line."""

from __future__ import annotations

import json
from pathlib import Path

import click

__all__ = ["speak_command", "talker_train_command"]


@click.command("omni-talker-train")
@click.option(
    "--model",
    "model_dir",
    required=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="A Qwen3-Omni checkpoint with its talker.",
)
@click.option(
    "--dataset",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help='JSONL of {"text": ..., "codes": [[c0, c1, ...], ...]} or {"messages": [...], "codes": ...}.',
)
@click.option(
    "--output-dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Where the whole model (thinker untouched, talker trained) and the tokenizer are saved.",
)
@click.option("--max-steps", type=int, default=60, show_default=True, help="Optimizer steps (one row each).")
@click.option("--learning-rate", type=float, default=3e-3, show_default=True, help="AdamW learning rate.")
@click.option("--seed", type=int, default=0, show_default=True, help="torch's seed.")
def talker_train_command(
    model_dir: Path, dataset: Path, output_dir: Path, max_steps: int, learning_rate: float, seed: int
) -> None:
    """Train Qwen3-Omni's talker on codec-token targets with the thinker frozen.

    The talker (decoder, codec head, text/hidden projections, code predictor) is fully fine-tuned on every codebook
    of each frame, teacher-forced with the inputs upstream's generate builds; the thinker and Code2Wav stay as they
    are. Rows with "audio" instead of "codes" are refused (no codec encoder in transformers). `swiftcore train
    --train-part talker --tuner full` runs the same trainer inside a training run (OUTPUT_DIR/checkpoint-N, logs.jsonl).

    \b
    Example:
      swiftcore omni-talker-train --model ./tiny-omni --dataset voice.jsonl --output-dir ./omni-voice
    """
    from swiftcore_plugin_qwen3_omni.talker import read_talker_rows, train_talker

    rows = read_talker_rows(dataset)
    result = train_talker(model_dir, rows, output_dir, steps=max_steps, learning_rate=learning_rate, seed=seed)
    (output_dir / "talker_losses.json").write_text(json.dumps(result.losses), encoding="utf-8")
    click.echo(
        f"trained the talker {max_steps} steps on {len(rows)} rows; loss {result.losses[0]:.3f} -> "
        f"{result.losses[-1]:.3f}; saved to {output_dir}"
    )


@click.command("omni-speak")
@click.option(
    "--model",
    "model_dir",
    required=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="A Qwen3-Omni checkpoint with its talker.",
)
@click.option("--prompt", help="The user's message; the reply is generated, then spoken.")
@click.option(
    "--text",
    help="Say this text verbatim instead (text to speech: the thinker's reply is forced to it); what "
    "`swiftcore deploy` answers POST /v1/audio/speech with.",
)
@click.option("--output", required=True, type=click.Path(dir_okay=False, path_type=Path), help="The WAV file to write.")
@click.option("--speaker", default=None, help="A voice of talker_config.speaker_id (default: the first).")
@click.option("--max-new-tokens", type=int, default=64, show_default=True, help="The reply budget (--prompt).")
@click.option(
    "--max-frames",
    type=int,
    default=300,
    show_default=True,
    help="The talker's codec-frame budget (1..300: one Code2Wav chunk; bounds the duration).",
)
def speak_command(
    model_dir: Path,
    prompt: str | None,
    text: str | None,
    output: Path,
    speaker: str | None,
    max_new_tokens: int,
    max_frames: int,
) -> None:
    """Answer --prompt in text and speech, or say --text verbatim (greedy): thinker -> talker codes -> Code2Wav ->
    a 24 kHz WAV.

    Prints one JSON line: the reply text, the codes ([groups][frames]), the file, sample rate and seconds.

    \b
    Example:
      swiftcore omni-speak --model ./omni-voice --prompt "red sun" --output reply.wav --max-frames 16
      swiftcore omni-speak --model ./omni-voice --text "red sun" --output said.wav
    """
    if (prompt is None) == (text is None):
        raise click.UsageError("give one of --prompt (answer it, then speak) or --text (say it verbatim)")
    import transformers

    from swiftcore_plugin_qwen3_omni.speech import say, speak

    model = transformers.Qwen3OmniMoeForConditionalGeneration.from_pretrained(str(model_dir)).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(model_dir))
    if text is not None:
        speech = say(model, tokenizer, text, output, speaker=speaker, max_frames=max_frames)
    else:
        speech = speak(
            model,
            tokenizer,
            [{"role": "user", "content": prompt}],
            output,
            speaker=speaker,
            max_new_tokens=max_new_tokens,
            max_frames=max_frames,
        )
    click.echo(
        json.dumps(
            {
                "text": speech.text,
                "codes": speech.codes,
                "path": str(speech.path),
                "sample_rate": speech.sample_rate,
                "seconds": speech.seconds,
            }
        )
    )
