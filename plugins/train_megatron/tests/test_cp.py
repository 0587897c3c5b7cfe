"""Context parallelism (``--cp``): what runs on a CPU around megatron-core's context-parallel attention.

- Two gloo ranks with megatron's context-parallel group of 2 (``init_model_parallel(cp=2)``): each rank's
  ``model_inputs`` holds chunks ``r`` and ``3 - r`` of 4 (megatron's load-balanced split), and the ranks' shares
  gathered and put back in order are the unsplit batch (ids, positions, shifted labels, loss mask), padding to a
  multiple of 4 included. A per-token model's summed loss over each rank's share, reduced over the data- and
  context-parallel group as the loop reduces it, equals the whole batch's loss to 1e-6, and so do its gradients.
- ``--cp 2`` is refused before any process group: without a GPU and Transformer Engine naming the GPU script and
  ``--cp 1``; with them naming the float32 training that Transformer Engine's context-parallel attention lacks.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from swiftcore_testing import free_port, user_env

from swiftcore.api import SwiftcoreError

BIN = Path(sys.executable).parent
RANKS = """
import json, sys
import torch
import torch.distributed as dist
import torch.nn.functional as F
from megatron.core import parallel_state
from swiftcore_megatron import init_model_parallel
from swiftcore_train_megatron.cp import reduce_loss_sum
from swiftcore_train_megatron.engine import model_inputs

# Two samples of 7 and 5 tokens: padded to 8 = a multiple of 2 * cp; the prompt (first 2 tokens) carries no loss.
samples = [
    {"input_ids": [5, 9, 2, 7, 3, 8, 1], "labels": [-100, -100, 2, 7, 3, 8, 1]},
    {"input_ids": [4, 6, 1, 2, 9], "labels": [-100, -100, 1, 2, 9]},
]
whole = model_inputs(samples, pad_token_id=0, length=8)  # no model-parallel state yet: the unsplit batch
init_model_parallel(cp=2, seed=0)
cp_group = parallel_state.get_context_parallel_group()
mine = model_inputs(samples, pad_token_id=0)

def gathered(tensor):
    parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size(cp_group))]
    dist.all_gather(parts, tensor.contiguous(), group=cp_group)
    cp, chunk = len(parts), tensor.shape[1] // 2
    pieces = [None] * (2 * cp)
    for rank, part in enumerate(parts):  # rank r holds chunks r and 2cp-1-r
        pieces[rank], pieces[2 * cp - 1 - rank] = part[:, :chunk], part[:, chunk:]
    return torch.cat(pieces, dim=1)

names = ("input_ids", "positions", "labels", "mask")
split_ok = {name: bool(torch.equal(gathered(getattr(mine, name)), getattr(whole, name))) for name in names}

# A per-token model (an embedding to logits): its loss over each rank's share, reduced as the loop reduces it.
torch.manual_seed(0)
table = torch.randn(10, 10, dtype=torch.float64, requires_grad=True)
def summed(inputs):
    per_token = F.cross_entropy(table[inputs.input_ids].transpose(1, 2), inputs.labels.clamp(min=0), reduction="none")
    return (per_token * inputs.mask).sum()
tokens = int(whole.mask.sum())
reference = summed(whole) / tokens
(reference_grad,) = torch.autograd.grad(reference, table)
local = summed(mine)
(local_grad,) = torch.autograd.grad(local / tokens, table)
dp_cp = parallel_state.get_data_parallel_group(with_context_parallel=True)
loss = float(reduce_loss_sum(local.detach().clone(), dp_cp)) / tokens
dist.all_reduce(local_grad, group=dp_cp)  # reduce_gradients' sum over the same group
result = {
    "rank": dist.get_rank(), "cp": dist.get_world_size(cp_group), "split_ok": split_ok,
    "own_length": mine.input_ids.shape[1], "own_positions": mine.positions[0].tolist(),
    "loss": loss, "reference": float(reference), "grad_diff": float((local_grad - reference_grad).abs().max()),
}
with open(sys.argv[1] + f".{dist.get_rank()}", "w") as fh:
    json.dump(result, fh)
"""


@pytest.mark.slow
def test_the_sequence_split_reassembles_and_the_loss_reduces_to_the_whole_batch(tmp_path) -> None:
    script = tmp_path / "ranks.py"
    script.write_text(RANKS)
    out = tmp_path / "result"
    launch = [str(BIN / "torchrun"), "--nproc-per-node", "2", "--master-port", str(free_port())]
    done = subprocess.run(
        [*launch, str(script), str(out)],
        env=user_env(OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES=""),  # gloo ranks, also on a GPU machine
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    results = [json.loads(Path(f"{out}.{rank}").read_text()) for rank in (0, 1)]
    for rank, result in enumerate(results):
        assert result["cp"] == 2
        assert result["split_ok"] == dict.fromkeys(("input_ids", "positions", "labels", "mask"), True), result
        assert result["own_length"] == 4  # 8 positions in 4 chunks of 2: two chunks each
        assert result["own_positions"] == [[0, 1, 6, 7], [2, 3, 4, 5]][rank]  # chunks r and 3 - r
        assert result["loss"] == pytest.approx(result["reference"], abs=1e-6)
        assert result["grad_diff"] <= 1e-6
    assert results[0]["reference"] > 0


@pytest.fixture
def _no_process_group_after():
    import torch.distributed as dist

    before = dist.is_initialized()
    yield
    if not before:
        assert not dist.is_initialized(), "a process group was created before the error"


@pytest.mark.usefixtures("_no_process_group_after")
def test_cp_is_refused_first_naming_what_would_work(tiny_model_dir, dataset, tmp_path, monkeypatch) -> None:
    import importlib.util

    import torch
    from swiftcore_train import TrainConfig, run_training

    from swiftcore._plugins import load_plugins

    monkeypatch.setenv("WORLD_SIZE", "2")
    cfg = TrainConfig(
        model=str(tiny_model_dir("qwen3_5")),
        dataset=(str(dataset),),
        output_dir=str(tmp_path / "out"),
        tuner="full",
        engine="megatron",
        recipe_options={"cp": 2},
        max_steps=1,
    )
    with pytest.raises(SwiftcoreError) as info:
        run_training(cfg, load_plugins(env={}))
    message = str(info.value)
    if torch.cuda.is_available() and importlib.util.find_spec("transformer_engine") is not None:
        assert "only on its flash and fused backends (fp16/bf16)" in message and "float32" in message, message
    else:
        assert "--cp 2: megatron-core's context-parallel attention is Transformer Engine's" in message
        assert "scripts/gpu_check.sh" in message
    assert "use --cp 1" in message
    assert not (tmp_path / "out").exists()
