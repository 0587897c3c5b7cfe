"""One rank of a multi-process run of a converted OLMoE checkpoint, run as a script by
test_olmoe_bridge_parity: ``python mcore_rank.py MODE RANK TP EP PORT HF_DIR MCORE_DIR TOKENS OUT``.

The world is ``TP * EP`` processes (one of the two is 1). Each rank loads its own rank file, exactly as
Megatron training would, and builds the model at that TP / EP. ``MODE`` ``logits``: rank 0 saves the
full-vocabulary logits to ``OUT``. ``grads``: every rank runs a backward pass of ``sum(logits * w)`` (``w``
saved beside the tokens) and saves the gradients of its q/k norm weights to ``OUT.RANK``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def main(argv: list[str]) -> None:
    """Run the rank described by ``argv`` (see the module docstring)."""
    mode, rank, tp, ep, port = argv[0], int(argv[1]), int(argv[2]), int(argv[3]), argv[4]
    hf_dir, mcore_dir, tokens_file, out = Path(argv[5]), Path(argv[6]), argv[7], argv[8]
    world = tp * ep
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=str(rank), WORLD_SIZE=str(world))
    import torch
    from megatron.core.tensor_parallel import gather_from_tensor_model_parallel_region
    from swiftcore_megatron import (
        init_model_parallel,
        load_into_model,
        mcore_logits,
        rank_file,
        read_hf_config,
        resolve_bridge,
    )

    from swiftcore.api import load_plugins

    torch.set_num_threads(1)
    init_model_parallel(tp, ep, rank=rank, world_size=world)
    bridge = resolve_bridge(read_hf_config(hf_dir), load_plugins(["bridge_olmoe"]))[1]
    path = rank_file(mcore_dir, rank % tp, rank // tp, ep)
    state = torch.load(path, map_location="cpu", weights_only=True)["model"]
    model = bridge.build_model(tp=tp, ep=ep, params_dtype=torch.float32)
    load_into_model(model, {k: v.float() if v.is_floating_point() else v for k, v in state.items()})
    inputs = torch.load(tokens_file)
    if mode == "logits":
        logits = mcore_logits(model, inputs["tokens"])
        if rank == 0:
            torch.save(logits, out)
    else:
        tokens = inputs["tokens"]
        # Eval mode with autograd on: megatron refuses MoE + TP *training* without sequence parallelism (a
        # performance guard; the bridge's config leaves SP to the trainer), and dropout is 0 either way.
        model.eval()
        positions = torch.arange(tokens.shape[1]).unsqueeze(0).expand_as(tokens)
        logits = model(input_ids=tokens, position_ids=positions, attention_mask=None)
        if tp > 1:
            logits = gather_from_tensor_model_parallel_region(logits)
        (logits.float() * inputs["weights"]).sum().backward()
        grads = {name: p.grad.clone() for name, p in model.named_parameters() if "_layernorm.weight" in name
                 and "self_attention" in name}
        torch.save(grads, f"{out}.{rank}")
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
