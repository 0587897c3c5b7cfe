"""One torchrun world, several ``swiftcore train`` runs: each rank runs this script (not a test module).

``torchrun --standalone --nproc-per-node N rank_runs.py STEPS.json`` runs the steps in order in the same rank
processes, so a sharded run and its resume share one world (the ranks import torch, transformers and the plugins
once, not once per run). STEPS.json is a list of steps:

- ``{"train": [ARGS...]}``: ``swiftcore train ARGS`` through the CLI's ``main``; a non-zero exit ends the script.
- ``{"copy": [SRC, DST], "drop": NAME}``: rank 0 copies the directory SRC to DST and deletes DST/NAME; every rank
  waits for it (a barrier), so no rank reads DST before it is complete.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path


def main(steps_file: str) -> int:
    """Run the steps of ``steps_file``; return the first failing run's exit code, else 0."""
    import torch.distributed as dist

    from swiftcore.api.cli import main as swiftcore

    for step in json.loads(Path(steps_file).read_text()):
        if "train" in step:
            code = swiftcore(["train", *step["train"]])
            if code:
                return code
        else:
            # The first run left its process group up (accelerate keeps it for the next Trainer): barrier on it.
            if dist.get_rank() == 0:
                source, target = (Path(p) for p in step["copy"])
                shutil.copytree(source, target)
                shutil.rmtree(target / step["drop"])
            dist.barrier()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
