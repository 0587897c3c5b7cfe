"""One rank of a multi-process run of a converted GLM-5 checkpoint, run as a script by
test_glm5_bridge_parity: ``python mcore_rank.py RANK TP EP PORT HF_DIR MCORE_DIR TOKENS OUT [train|mtp]``.

The world is ``TP * EP`` processes. Each rank loads its own rank file, exactly as Megatron training would,
builds the model at that TP / EP, and rank 0 saves the full-vocabulary logits to ``OUT`` (with ``mtp``, a dict of
the main and the MTP layers' logits). With ``train``
(one process), it instead runs four Adam steps of the language-model loss and saves the losses and which
parameters got a gradient.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def main(argv: list[str]) -> None:
    """Run the rank described by ``argv`` (see the module docstring)."""
    rank, tp, ep, port = int(argv[0]), int(argv[1]), int(argv[2]), argv[3]
    hf_dir, mcore_dir, tokens_file, out = Path(argv[4]), Path(argv[5]), argv[6], argv[7]
    world = tp * ep
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=str(rank), WORLD_SIZE=str(world))
    import torch
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
    bridge = resolve_bridge(read_hf_config(hf_dir), load_plugins(["bridge_glm5"]))[1]
    state = torch.load(rank_file(mcore_dir, rank % tp, rank // tp, ep), map_location="cpu", weights_only=True)
    model = bridge.build_model(tp=tp, ep=ep, params_dtype=torch.float32)
    load_into_model(model, {k: v.float() if v.is_floating_point() else v for k, v in state["model"].items()})
    tokens = torch.load(tokens_file)["tokens"]
    if argv[8:] == ["train"]:
        model.train()
        positions = torch.arange(tokens.shape[1]).unsqueeze(0).expand_as(tokens)
        optimizer, losses = torch.optim.Adam(model.parameters(), lr=1e-3), []
        for _ in range(4):
            loss = model(input_ids=tokens, position_ids=positions, attention_mask=None, labels=tokens).float().mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(float(loss))
        grads = {n: p.grad is not None and bool(p.grad.abs().sum() > 0) for n, p in model.named_parameters()}
        torch.save({"losses": losses, "grads": grads}, out)
        torch.distributed.destroy_process_group()
        return
    if argv[8:] == ["mtp"]:
        from swiftcore_megatron import mtp_logits

        main, depths = mtp_logits(model, tokens)
        result: object = {"main": main, "mtp": depths}
    else:
        result = mcore_logits(model, tokens)
    if rank == 0:
        torch.save(result, out)
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
