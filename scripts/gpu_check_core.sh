#!/usr/bin/env bash
# GPU check of swiftcore's own code on a CUDA machine that has torch but no network (see
# scripts/gpu_check_core.py for what it checks). Installs this repository's distributions, without
# dependencies, into a scratch site directory on top of the machine's Python; wheels for packages the
# machine lacks (transformers 5.19, peft, megatron-core) are taken from .whl/ when present:
#
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 -d .whl \
#       transformers==5.19.0 peft==0.21.2 megatron-core==0.16.1
#   # check 7 (RL rollouts) also needs TRL, datasets and the server's packages, at constraints.txt's versions:
#   #   trl datasets dill multiprocess fastapi starlette pydantic pydantic_core annotated-types typing-inspection uvicorn
#   scripts/gpu_check_core.sh [CHECK ...]      # e.g. `rl_rollouts` alone; all checks without arguments
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
SITE=${SITE:-/tmp/swiftcore-gpu-site}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
if [[ -d .whl ]]; then
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl
fi
dists=(./core ./template_plugins/* ./model_plugins/* ./megatron_bridges/gpt ./megatron_bridges/qwen3_5
       ./plugins/data ./plugins/media ./plugins/train ./plugins/infer ./plugins/tiny ./plugins/megatron
       ./plugins/train_megatron ./plugins/sequence_parallel ./plugins/recipe_rl)
"$PYTHON" -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target "$SITE" "${dists[@]}"
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}" PATH="$SITE/bin:$PATH"
"$PYTHON" -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
exec "$PYTHON" scripts/gpu_check_core.py "$@"
