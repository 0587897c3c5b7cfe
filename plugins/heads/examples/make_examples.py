"""Write the README's example data sets (run from anywhere: ``python plugins/heads/examples/make_examples.py``).

- ``cls.jsonl`` / ``cls_heldout.jsonl``: 3 classes (0 animal, 1 vehicle, 2 colour) named by one word in a short
  sentence; the held-out rows put the same words in sentence frames no training row uses.
- ``pairs.jsonl`` (embedding, 1 hard negative) and ``rr.jsonl`` (reranker, 3 hard negatives): the bundled
  synthetic retrieval task (:mod:`swiftcore_heads.retrieval`), 80 training queries;
  ``retrieval_heldout.jsonl``: its 20 held-out queries, each with the one document that answers it
  (``{"query", "positive"}``; disjoint word pairs from the training rows).

The files are committed; this script says how they were made (deterministic: fixed seeds).
"""

from __future__ import annotations

import json
from pathlib import Path

from swiftcore_heads.retrieval import make_retrieval_task

HERE = Path(__file__).resolve().parent
CLASSES = (
    ("cat", "dog", "cow", "owl", "fox", "hen"),
    ("car", "bus", "van", "train", "truck", "boat"),
    ("red", "blue", "green", "pink", "grey", "gold"),
)
TRAIN_FRAMES = ("i saw a {}", "look at the {}", "there is a {} here", "my {} is new", "a {} again", "the {} today")
HELDOUT_FRAMES = ("we like the {}", "where is my {}")


def write(name: str, rows: list[dict]) -> None:
    """Write ``rows`` as JSON lines to ``HERE / name``."""
    (HERE / name).write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def classification(frames: tuple[str, ...]) -> list[dict]:
    """Every word of every class in every frame, as ``{"text", "label"}`` rows."""
    return [{"text": f.format(w), "label": c} for f in frames for c, words in enumerate(CLASSES) for w in words]


def main() -> None:
    """Write the five files."""
    write("cls.jsonl", classification(TRAIN_FRAMES))
    write("cls_heldout.jsonl", classification(HELDOUT_FRAMES))
    write("pairs.jsonl", make_retrieval_task(n_train=80, n_eval=20, n_negatives=1, seed=0).train)
    rr = make_retrieval_task(n_train=80, n_eval=20, n_negatives=3, seed=0)
    write("rr.jsonl", rr.train)
    write("retrieval_heldout.jsonl", [{"query": q, "positive": d} for q, d in zip(rr.queries, rr.documents)])


if __name__ == "__main__":
    main()
