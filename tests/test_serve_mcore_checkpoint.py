"""``swiftcore infer`` / ``deploy`` / ``eval`` on a Megatron checkpoint, with no conversion step by the user.

A tiny Qwen3.5 is trained 4 steps by ``swiftcore train --engine megatron`` (loss falls, and its greedy answers are no
longer the base model's). Its ``checkpoint-4/mcore`` (the Megatron shards) is then served directly:

- ``infer`` gives the greedy answers of the run's own Hugging Face export (``checkpoint-4``), from an export in the
  cache whose tensors equal that export's; a second call reuses it (its log line says so, the weights' mtime is
  unchanged) and a ``deploy`` in another process does too;
- ``deploy`` answers a chat through the real ``openai`` client as ``infer`` did, and ``eval``'s accuracy is the share
  of those offline answers that match the references;
- a TP2 Megatron checkpoint (``swiftcore export --to-mcore --tp 2``) answers the same;
- a truncated or missing rank file, damaged metadata, a Megatron-LM checkpoint swiftcore did not write, and a
  megatron LoRA checkpoint's shards are one-line errors naming the directory (no traceback), leaving nothing half
  written in the cache; without swiftcore-megatron the error says to install it.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from swiftcore_testing import deploy_process, run_cli, run_swiftcore, user_env

openai = pytest.importorskip("openai")

pytestmark = pytest.mark.slow

QA = [
    ("Which colour is the sky?", "blue"),
    ("Name a fruit.", "apple"),
    ("What do cats say?", "meow"),
    ("What is the opposite of up?", "down"),
]
STEPS = 4
API_KEY = "mcore-serve-key"


@pytest.fixture(scope="module", autouse=True)
def _one_thread() -> Iterator[None]:
    """Torch on one thread: the tiny model gains nothing from two on a busy machine (tests/test_served_trained.py)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The test's own swiftcore cache directory (``SWIFTCORE_CACHE_DIR``), for the module's in-process commands."""
    path = tmp_path_factory.mktemp("swiftcore-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SWIFTCORE_CACHE_DIR", str(path))
        yield path


@pytest.fixture(scope="module")
def trained(tiny_model_dir, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The tiny Qwen3.5 trained 4 steps by the megatron engine on the four questions; the questions' file."""
    work = tmp_path_factory.mktemp("mcore-serve")
    data = work / "train.jsonl"
    rows = [{"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]} for q, a in QA]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    questions = work / "questions.jsonl"
    questions.write_text("".join(json.dumps({"messages": [{"role": "user", "content": q}]}) + "\n" for q, _ in QA))
    run = work / "run"
    command = [
        "train", "--model", str(tiny_model_dir("qwen3_5")), "--dataset", str(data),
        "--output-dir", str(run), "--engine", "megatron", "--tuner", "full", "--max-steps", str(STEPS),
        "--save-steps", str(STEPS), "--batch-size", str(len(QA)), "--learning-rate", "1e-3", "--logging-steps", "1",
        "--seed", "0", "--no-plot",
    ]  # fmt: skip
    done = run_swiftcore(*command, env=user_env(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1"), timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    losses = [json.loads(line).get("loss") for line in (run / "logs.jsonl").read_text().splitlines()]
    losses = [x for x in losses if x is not None]
    assert len(losses) == STEPS and losses[-1] < losses[0] / 2, f"the run did not learn: {losses}"
    checkpoint = run / f"checkpoint-{STEPS}"
    assert (checkpoint / "mcore" / "swiftcore_mcore.json").is_file()
    return {"base": tiny_model_dir("qwen3_5"), "hf": checkpoint, "mcore": checkpoint / "mcore", "data": data,
            "questions": questions}  # fmt: skip


def _infer(model: Path, questions: Path, out: Path) -> tuple[list[str], str]:
    """Greedy answers of ``swiftcore infer --model MODEL`` to the questions, and the command's output."""
    output = run_cli("infer", "--model", str(model), "--input", str(questions), "--output", str(out),
                     "--max-new-tokens", "16")  # fmt: skip
    return [json.loads(line)["response"] for line in out.read_text().splitlines()], output


def _exports(cache: Path) -> list[Path]:
    root = cache / "megatron-hf"
    return sorted(root.iterdir()) if root.is_dir() else []


@pytest.fixture(scope="module")
def served(trained: dict[str, Path], cache: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """``infer`` on the base model, on the run's HF export and on its Megatron shards (the first export)."""
    out = tmp_path_factory.mktemp("answers")
    base, _ = _infer(trained["base"], trained["questions"], out / "base.jsonl")
    hf, _ = _infer(trained["hf"], trained["questions"], out / "hf.jsonl")
    mcore, log = _infer(trained["mcore"], trained["questions"], out / "mcore.jsonl")
    (export,) = [p for p in _exports(cache) if p.name.startswith(f"checkpoint-{STEPS}-")]
    return {"base": base, "hf": hf, "mcore": mcore, "log": log, "export": export,
            "mtime": (export / "model.safetensors").stat().st_mtime_ns}  # fmt: skip


def test_infer_on_the_megatron_shards_answers_as_the_hf_export(
    served: dict[str, Any], trained: dict[str, Path]
) -> None:
    from safetensors.torch import load_file

    assert served["hf"] != served["base"], "training changed no answer: equal answers would prove little"
    assert served["mcore"] == served["hf"]
    assert "exporting to HF at" in served["log"] and str(served["export"]) in served["log"]
    exported, reference = (
        load_file(served["export"] / "model.safetensors"),
        load_file(trained["hf"] / "model.safetensors"),
    )
    assert exported.keys() == reference.keys()
    assert all(exported[k].equal(reference[k]) for k in reference)


def test_a_second_call_reuses_the_export(served: dict[str, Any], trained: dict[str, Path], tmp_path: Path) -> None:
    answers, log = _infer(trained["mcore"], trained["questions"], tmp_path / "again.jsonl")
    assert answers == served["hf"]
    assert "reusing its HF export" in log and "exporting" not in log
    assert (served["export"] / "model.safetensors").stat().st_mtime_ns == served["mtime"]


def test_deploy_answers_a_chat_as_infer_did(served: dict[str, Any], trained: dict[str, Path], cache: Path) -> None:
    env = user_env(SWIFTCORE_API_KEY=API_KEY, SWIFTCORE_CACHE_DIR=str(cache), OMP_NUM_THREADS="1")
    with deploy_process("--model", str(trained["mcore"]), env=env, served_model_name=None) as (base_url, _):
        client = openai.OpenAI(base_url=f"{base_url}/v1", api_key=API_KEY, max_retries=0, timeout=120)
        # Served under its checkpoint's name, as the HF checkpoint beside it would be, not as "mcore".
        assert [m.id for m in client.models.list()] == [f"checkpoint-{STEPS}"]
        reply = client.chat.completions.create(
            model=f"checkpoint-{STEPS}", messages=[{"role": "user", "content": QA[0][0]}], max_tokens=16, temperature=0
        )
    assert reply.choices[0].message.content == served["hf"][0]
    # The server process reused the export: no second one of this checkpoint, no rewrite.
    assert [p for p in _exports(cache) if p.name.startswith(f"checkpoint-{STEPS}-")] == [served["export"]]
    assert (served["export"] / "model.safetensors").stat().st_mtime_ns == served["mtime"]


def test_eval_scores_the_offline_answers(served: dict[str, Any], trained: dict[str, Path], tmp_path: Path) -> None:
    pytest.importorskip("evalscope")
    output = run_cli("eval", "--model", str(trained["mcore"]), "--dataset", str(trained["data"]), "--max-tokens", "16",
                     "--output", str(tmp_path / "eval"), "--json")  # fmt: skip
    summary = json.loads(output.strip().splitlines()[-1])
    matches = sum(got.strip().lower() == want for got, (_, want) in zip(served["hf"], QA, strict=True))
    assert (summary["correct"], summary["total"]) == (matches, len(QA))


def test_a_tp2_megatron_checkpoint_answers_the_same(
    served: dict[str, Any], trained: dict[str, Path], tmp_path: Path
) -> None:
    tp2 = tmp_path / "tp2"
    run_cli("export", "--model", str(trained["hf"]), "--to-mcore", str(tp2), "--tp", "2")
    assert (tp2 / "release" / "mp_rank_01" / "model_optim_rng.pt").is_file()
    answers, log = _infer(tp2, trained["questions"], tmp_path / "tp2.jsonl")
    assert "tp=2" in log
    assert answers == served["hf"]


@pytest.fixture(scope="module")
def plugins() -> Any:
    """The installed plugin set, as the CLI loads it."""
    from swiftcore._plugins import load_plugins

    return load_plugins(env={})


def test_a_changed_checkpoint_is_exported_anew_replacing_its_old_export(
    plugins: Any, trained: dict[str, Path], cache: Path, tmp_path: Path
) -> None:
    from swiftcore_infer.checkpoints import prepare_model_dir

    copy = tmp_path / "copy"
    shutil.copytree(trained["mcore"], copy)
    lines: list[str] = []
    first = Path(prepare_model_dir(plugins, str(copy), echo=lines.append))
    weights = first / "model.safetensors"
    made = weights.stat().st_mtime_ns
    rank = copy / "release" / "mp_rank_00" / "model_optim_rng.pt"
    os.utime(rank, ns=(rank.stat().st_atime_ns, rank.stat().st_mtime_ns + 10**9))  # as a save would leave it
    again = Path(prepare_model_dir(plugins, str(copy), echo=lines.append))
    assert again == first and weights.stat().st_mtime_ns != made
    assert ["exporting" in line for line in lines] == [True, True], lines
    assert [p for p in _exports(cache) if p.name.startswith("copy-")] == [first]  # the stale one replaced, not kept


def test_a_cache_path_swiftcore_did_not_write_is_left_alone(
    plugins: Any, trained: dict[str, Path], cache: Path, tmp_path: Path
) -> None:
    from swiftcore_infer.checkpoints import prepare_model_dir
    from swiftcore_megatron.serving import export_cache_dir

    from swiftcore.api import SwiftcoreError

    copy = tmp_path / "mine"
    shutil.copytree(trained["mcore"], copy)
    squatter = export_cache_dir(copy)
    assert squatter.is_relative_to(cache)
    squatter.mkdir(parents=True)
    (squatter / "notes.txt").write_text("the user's")
    with pytest.raises(SwiftcoreError, match="swiftcore did not write it"):
        prepare_model_dir(plugins, str(copy), echo=lambda line: None)
    assert [p.name for p in squatter.iterdir()] == ["notes.txt"]


def _truncate_rank(root: Path) -> None:
    rank = root / "release" / "mp_rank_00" / "model_optim_rng.pt"
    rank.write_bytes(rank.read_bytes()[: rank.stat().st_size // 3])


def _remove_rank(root: Path) -> None:
    (root / "release" / "mp_rank_00" / "model_optim_rng.pt").unlink()


def _damage_metadata(root: Path) -> None:
    (root / "swiftcore_mcore.json").write_text('{"tp": ')


def _megatron_lm_checkpoint(root: Path) -> None:  # Megatron-LM's own layout: no swiftcore metadata
    (root / "swiftcore_mcore.json").unlink()


def _lora_record(root: Path) -> None:
    (root / "swiftcore_lora.json").write_text("{}")


DAMAGE = {
    "truncated-rank": (_truncate_rank, "not a torch.save zip file"),
    "missing-rank": (_remove_rank, "is missing: the checkpoint was written for tp=1"),
    "damaged-metadata": (_damage_metadata, "swiftcore_mcore.json is damaged"),
    "megatron-lm-checkpoint": (_megatron_lm_checkpoint, "without swiftcore_mcore.json, so not one swiftcore wrote"),
    "lora-shards": (_lora_record, "holds a LoRA adapter trained by --engine megatron"),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_or_foreign_checkpoint_is_a_clear_error(
    damage: str, trained: dict[str, Path], cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from swiftcore.api.cli import main

    broken = tmp_path / "broken"
    shutil.copytree(trained["mcore"], broken)
    spoil, expected = DAMAGE[damage]
    spoil(broken)
    before = _exports(cache)
    # main() is the `swiftcore` entry point: a SwiftcoreError is one "Error: ..." line; anything else would raise here.
    code = main(
        ["infer", "--model", str(broken), "--input", str(trained["questions"]), "--output", str(tmp_path / "o")]
    )
    out, err = capsys.readouterr()
    assert code != 0
    (line,) = [x for x in err.splitlines() if x.startswith("Error: ")]
    assert f"--model {str(broken)!r}" in line and expected in line, err
    assert "Traceback" not in out + err
    assert _exports(cache) == before  # nothing half written (no partial directory) in the cache


def test_without_swiftcore_megatron_the_error_says_to_install_it(swiftcore_plugins, tmp_path: Path) -> None:
    """The infer plugin alone: a Megatron checkpoint is named with what to install; an HF directory passes as is.
    swiftcore-megatron's hook is optional: the plugin loads where swiftcore-infer is not."""
    import swiftcore_infer.plugin
    import swiftcore_megatron.plugin
    from swiftcore_infer.checkpoints import prepare_model_dir

    from swiftcore.api import SwiftcoreError

    megatron = tmp_path / "megatron"
    (megatron / "release").mkdir(parents=True)
    (megatron / "latest_checkpointed_iteration.txt").write_text("release")
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text("{}")
    swiftcore_plugins.add(swiftcore_megatron.plugin, "megatron_driver")  # no declaration of the hook: still loads
    swiftcore_plugins.remove("megatron_driver")
    swiftcore_plugins.add(swiftcore_infer.plugin, "infer")
    with pytest.raises(SwiftcoreError, match=r"is a Megatron checkpoint .* install swiftcore-megatron") as info:
        prepare_model_dir(swiftcore_plugins, str(megatron))
    assert str(megatron) in str(info.value)
    assert prepare_model_dir(swiftcore_plugins, str(hf)) == str(hf)
    assert prepare_model_dir(swiftcore_plugins, str(tmp_path)) == str(tmp_path)  # unknown: the loader's own error
