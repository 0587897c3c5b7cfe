"""Figure 2: template encoding samples/s, swiftcore ``encode`` vs ms-swift ``Template.encode``, and the floor.

For each template (qwen3_5, gemma4) on the same tiny checkpoint's tokenizer (``swiftcore make-tiny``) and
the same N conversations (:func:`conversations.chat_corpus`), alternating run by run:

- swiftcore: ``Template.encode_batch`` (render + tokenize + labels), in this process;
- ms-swift: ``Template.encode`` in train mode, per sample (its API), in the peer worker;
- floor: the bare tokenizer on swiftcore's rendered texts, batched exactly as swiftcore batches
  (:data:`FLOOR_METHOD`: the Rust tokenizer's ``encode_batch`` over all texts, which uses every core, and
  the ids as lists); ``tokenizer(texts)`` (the transformers call a user would write, same Rust call
  underneath plus a ``BatchEncoding``) is recorded too, as ``floor_wrapper``.

Each timed call starts from a collected heap and keeps no other system's results alive, so no system
pays for another's garbage-collector traversals.

Then counts the samples whose token ids differ between the two systems and, for each, which side
equals the official chat template (the checkpoint's ``chat_template.jinja`` through transformers'
``apply_chat_template``, then tokenized).
"""

from __future__ import annotations

import gc
import json
import time
from pathlib import Path
from typing import Any

from common import RAW, alternate, pair_ratio, summarize
from conversations import chat_corpus, write_jsonl
from peer_worker import PeerWorker

__all__ = ["FLOOR_METHOD", "encode_figure"]

FLOOR_METHOD = ("Rust tokenizers.Tokenizer.encode_batch(all rendered texts, add_special_tokens=False) + .ids: "
                "the batching swiftcore encode_batch uses (all cores)")


def _official_ids(tok: Any, record: dict) -> list[int] | None:
    """Token ids of the official chat template (the checkpoint's own, via transformers) for ``record``."""
    try:
        text = tok.apply_chat_template(record["messages"], tools=record.get("tools"), tokenize=False,
                                       **(record.get("chat_template_kwargs") or {}))
    except Exception:  # the official template raising is an answer too
        return None
    return tok(text, add_special_tokens=False)["input_ids"]


def _where_differs(tok: Any, official: list[int] | None, mine: list[int], other: list[int]) -> dict[str, str]:
    """Text around the first character where each system's decoded sample departs from the official one."""
    ref = tok.decode(official) if official is not None else ""
    out = {}
    for name, ids in (("swiftcore", mine), ("msswift", other)):
        text = tok.decode(ids)
        at = next((k for k, (a, b) in enumerate(zip(ref, text, strict=False)) if a != b), min(len(ref), len(text)))
        out[f"{name}_first_difference_at"] = at
        out[f"{name}_text"] = text[max(0, at - 60):at + 60]
        out[f"official_text_at_{name}_difference"] = ref[max(0, at - 60):at + 60]
    return out


def _one_template(peer: PeerWorker, name: str, model_dir: Path, peer_model_dir: Path, plugins: Any,
                  records: list[dict], data: Path, runs: int, work: Path) -> dict[str, Any]:
    """Figure 2 for one template: alternate the three encoders, then compare token ids."""
    from swiftcore.models import load_tokenizer
    from swiftcore.template import get_template

    n = len(records)
    tok = load_tokenizer(model_dir)
    tpl = get_template(name, plugins)
    info = peer.request("encode_load", model=str(peer_model_dir), template=name, data=str(data))
    # Rendered once, outside the timings: the floor tokenizes exactly the texts swiftcore tokenizes.
    rendered = [tpl.render(r) for r in records]
    backend = tok.backend_tokenizer

    def timed(fn: Any) -> float:
        """Samples/s of ``fn()``; its result is freed after the clock stops (no one pays for freeing)."""
        gc.collect()
        start = time.perf_counter()
        result = fn()
        seconds = time.perf_counter() - start
        del result
        return n / seconds

    def run_ours(tpl: Any = tpl, tok: Any = tok) -> float:
        return timed(lambda: tpl.encode_batch(tok, records))

    def run_floor(backend: Any = backend) -> float:
        return timed(lambda: [e.ids for e in backend.encode_batch(rendered, add_special_tokens=False)])

    def run_floor_wrapper(tok: Any = tok) -> float:
        return timed(lambda: tok(rendered, add_special_tokens=False))

    peer_errors: dict[str, int] = {}

    def run_peer() -> float:
        reply = peer.request("encode_run")
        peer_errors.update(reply["errors"])
        return reply["samples"] / reply["seconds"]

    samples = alternate(runs, {"swiftcore": run_ours, "msswift": run_peer, "floor": run_floor,
                               "floor_wrapper": run_floor_wrapper})
    ours = tpl.encode_batch(tok, records)  # once more, untimed, for the token-id comparison
    ids_path = work / f"msswift_ids_{name}.json"
    peer.request("encode_dump", path=str(ids_path))
    theirs = json.loads(ids_path.read_text())
    diffs = {"differ": 0, "swiftcore_matches_official": 0, "msswift_matches_official": 0, "neither": 0,
             "msswift_failed": 0, "examples": []}
    for i, (mine, other) in enumerate(zip(ours, theirs, strict=True)):
        if other is None:
            diffs["msswift_failed"] += 1
            continue
        if list(mine.input_ids) == other:
            continue
        diffs["differ"] += 1
        official = _official_ids(tok, records[i])
        mine_ok, other_ok = official == list(mine.input_ids), official == other
        diffs["swiftcore_matches_official"] += mine_ok
        diffs["msswift_matches_official"] += other_ok
        diffs["neither"] += not (mine_ok or other_ok)
        # Keep a few examples of each outcome, cut around the first difference from the official text.
        kind = "swiftcore" if mine_ok else "msswift" if other_ok else "neither"
        if sum(e["matches_official"] == kind for e in diffs["examples"]) < 2:
            diffs["examples"].append({"index": i, "matches_official": kind,
                                      **_where_differs(tok, official, list(mine.input_ids), other)})
    return {
        "samples_per_s": {k: summarize(v) for k, v in samples.items()},
        "raw_samples_per_s": samples,
        "ratio_swiftcore_over_msswift": pair_ratio(samples["swiftcore"], samples["msswift"]),
        "ratio_floor_over_swiftcore": pair_ratio(samples["floor"], samples["swiftcore"]),
        "ratio_floor_wrapper_over_swiftcore": pair_ratio(samples["floor_wrapper"], samples["swiftcore"]),
        "floor_method": FLOOR_METHOD,
        "msswift_worker": info, "msswift_errors": peer_errors, "token_id_differences": diffs,
        "tokens_per_sample": sum(len(e.input_ids) for e in ours) / n,
    }


def encode_figure(peer: PeerWorker, model_dirs: dict[str, Path], peer_model_dirs: dict[str, Path], n: int,
                  runs: int, work: Path) -> dict[str, Any]:
    """Run figure 2 for each template in ``model_dirs``; returns the raw result (also the table rows)."""
    import swiftcore

    plugins = swiftcore.load_plugins()
    records = chat_corpus(n, seed=0)
    data = write_jsonl(records, work / f"chat{n}.jsonl")
    result: dict[str, Any] = {"n": n, "runs": runs, "templates": {}}
    for name, model_dir in model_dirs.items():
        result["templates"][name] = _one_template(peer, name, model_dir, peer_model_dirs[name], plugins, records,
                                                  data, runs, work)
    (RAW / "encode_compare.json").write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    return result
