"""Hook implementations of swiftcore-plugin-qwen3-omni: the model spec and its commands, as plain data, the voice
``swiftcore deploy`` speaks with (``POST /v1/audio/speech``), and ``swiftcore train --train-part thinker|talker|all``
(swiftcore-train's hooks: the option, its refusals, and the talker's run)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from swiftcore.api import CommandSpec, ModelParts, ModelSpec, hookimpl

if TYPE_CHECKING:
    from swiftcore.api import PluginSet

SWIFTCORE_API = "1.5"  # swiftcore_addoption and swiftcore-train's hooks (swiftcore_addhooks came in 1.5)

_PKG = "swiftcore_plugin_qwen3_omni"


@hookimpl
def swiftcore_register_models() -> list[ModelSpec]:
    """Qwen3-Omni (``qwen3_omni_moe``): the thinker trains and answers in text; the talker speaks (see ``speech``)."""
    return [
        ModelSpec(
            name="qwen3_omni_moe",
            # A checkpoint of the whole model, or one of the thinker alone (what a fully fine-tuned thinker saves).
            model_types=("qwen3_omni_moe", "qwen3_omni_moe_thinker"),
            architectures=("Qwen3OmniMoeForConditionalGeneration", "Qwen3OmniMoeThinkerForConditionalGeneration"),
            # make-tiny builds the whole model (thinker, talker, Code2Wav) with this class ...
            model_class=f"{_PKG}.modeling:Qwen3OmniMoeForConditionalGeneration",
            # ... and training and inference load its thinker (the whole model has no forward of its own).
            loader=f"{_PKG}.modeling:load_thinker",
            # Qwen3's template (swiftcore-template-qwen): the checkpoint's own chat template, official/qwen3_omni.jinja,
            # renders text turns exactly as Qwen3's does (it adds media placeholders for list content).
            default_template="qwen3",
            # Full-match regexes on the thinker: the towers, their mergers and the MoE routers stay out of LoRA.
            lora_exclude_modules=(r"audio_tower(\..*)?", r"visual(\..*)?", r".*\.mlp\.gate"),
            parts=ModelParts(
                language_model=("model",),
                vision_tower=("visual",),
                audio_tower=("audio_tower",),
                lm_head=("lm_head",),
            ),
            requires=("transformers>=5.19",),
            tiny_config=f"{_PKG}.tiny:tiny_qwen3_omni_config",
            tiny_tokenizer=f"{_PKG}.tiny:tiny_qwen3_omni_tokenizer",
            tasks=("causal_lm",),
            modalities=("text",),
            description="Qwen3-Omni MoE: thinker (text) with LoRA, talker training and offline speech out",
        ),
    ]


@hookimpl
def swiftcore_register_commands() -> list[CommandSpec]:
    """``swiftcore omni-talker-train`` and ``swiftcore omni-speak``."""
    return [
        CommandSpec(
            name="omni-talker-train",
            target=f"{_PKG}.command:talker_train_command",
            short_help="Train Qwen3-Omni's talker on codec tokens, thinker frozen.",
        ),
        CommandSpec(
            name="omni-speak",
            target=f"{_PKG}.command:speak_command",
            short_help="Qwen3-Omni: text -> thinker -> talker -> Code2Wav -> WAV.",
        ),
    ]


# optionalhook: swiftcore-serve declares it; this plugin loads (and trains, and speaks offline) without it.
@hookimpl(optionalhook=True)
def swiftcore_speech_synthesizer(model_dir: str, model_type: str | None, plugins: PluginSet) -> Any | None:
    """A served Qwen3-Omni checkpoint with its talker speaks ``POST /v1/audio/speech`` (the same code as
    ``swiftcore omni-speak --text``); None for any other model, or a checkpoint without a talker."""
    if model_type != "qwen3_omni_moe":
        return None
    from swiftcore_plugin_qwen3_omni.speech import load_synthesizer

    return load_synthesizer(model_dir)


#: ``--train-part`` values (``train_part.PARTS``, not imported: this module stays light).
TRAIN_PARTS = ("thinker", "talker", "all")


@hookimpl
def swiftcore_addoption(parser: Any) -> None:
    """``--train-part thinker|talker|all`` on ``swiftcore train`` (recipe sft): which part of Qwen3-Omni trains."""
    import click  # the CLI's own dependency; only for the choice list

    group = parser.getgroup("qwen3-omni", "Qwen3-Omni: which part of the model trains", recipe="sft")
    group.addoption(
        "--train-part",
        type=click.Choice(TRAIN_PARTS),
        default=None,
        help="Qwen3-Omni checkpoints only. thinker: the text model with LoRA (the talker stays as it is); talker: "
        "the speech decoder on codec tokens, fully fine-tuned with the thinker frozen (rows {'text' or 'messages', "
        "'codes'}; needs --tuner full; one row per step, constant --learning-rate); all: the talker, then a LoRA "
        "adapter of the thinker on the checkpoint with the trained talker (OUTPUT_DIR/thinker). Without it: the "
        "thinker, as for any model.",
    )


# optionalhook: swiftcore-train declares it; this plugin loads (and speaks) without swiftcore-train installed.
@hookimpl(optionalhook=True)
def swiftcore_train_check(cfg: Any, options: Mapping[str, Any], model_dir: str, kind: str) -> None:
    """With ``--train-part``: refuse a non-Qwen3-Omni model, a tuner that would drop the talker, and options the
    talker trainer does not support, before anything heavy loads."""
    if options.get("train_part"):
        from swiftcore_plugin_qwen3_omni.train_part import check_train_part

        check_train_part(cfg, options, model_dir)


# optionalhook: swiftcore-train declares it.
@hookimpl(optionalhook=True)
def swiftcore_train_run(cfg: Any, options: Mapping[str, Any], model_dir: str, kind: str, plugins: PluginSet) -> Any:
    """``--train-part talker`` (and ``all``): train the talker here; None for every other run (the recipe trains)."""
    if options.get("train_part") not in ("talker", "all"):
        return None
    from swiftcore_plugin_qwen3_omni.train_part import run_train_part

    return run_train_part(cfg, options, plugins)
