"""swiftcore-bridge-qwen3-asr: Qwen3-ASR's language model <-> Megatron-core; the audio tower is carried through."""

__version__ = "0.1.0"
