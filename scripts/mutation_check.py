"""Break each user path on purpose, one line at a time, and check that the tests named for it catch the break.

    python scripts/mutation_check.py                      # every mutation; exit 1 when one survives
    python scripts/mutation_check.py --list               # the mutations, their files and tests
    python scripts/mutation_check.py --only dpo-beta,host-check
    python scripts/mutation_check.py --markdown           # also print the results table of docs/testing.md

Each entry of :data:`MUTATIONS` names a user path (as ``docs/testing.md`` does), a file, an exact text that occurs
once in that file, the text that replaces it (a one-line break: a dropped check, a flipped sign, a lost slice) and
the pytest node ids that must catch it. For each mutation, in order:

1. **Baseline**: its tests run on the unchanged tree and must pass (exit 0), so a "caught" is never a test that
   fails anyway. Mutations that share their tests share one baseline run.
2. **Mutant**: the file is changed, the same tests run, the file is restored. Exit 1 (a test failed) is *caught*;
   exit 0 is *survived* (a gap in the tests); anything else (collection error, timeout) is an *error*.

Every run is ``python -m pytest -x -q -p no:cacheprovider -m "slow or not slow" TESTS`` in a subprocess (its own
process group, killed whole on a timeout), with ``PYTHONDONTWRITEBYTECODE=1`` so no mutated bytecode is cached.

Safety: a file with uncommitted changes is never mutated (``git diff --quiet -- FILE``; the mutation is reported
as an error). The original bytes and modification time are put back in a ``finally``, and SIGINT / SIGTERM
restore it too before the script exits.

The exit status is 1 when any mutation survived or errored, 0 when every one was caught.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

ROOT = Path(__file__).resolve().parent.parent
#: Seconds one pytest run may take before it is killed (and the mutation reported as an error).
TIMEOUT = 600


@dataclass(frozen=True)
class Mutation:
    """One targeted break.

    Attributes:
        name: a short name (``--only`` takes it).
        path: the user path it breaks, as ``docs/testing.md`` names it.
        file: the file it changes, relative to the repository root.
        old: the exact text replaced; it must occur exactly once in ``file``.
        new: what replaces it.
        tests: the pytest node ids that must catch it.
    """

    name: str
    path: str
    file: str
    old: str
    new: str
    tests: tuple[str, ...]


MUTATIONS: tuple[Mutation, ...] = (
    Mutation(
        "template-stop-token",
        "templates: a Qwen3 reply ends with its stop token",
        "template_plugins/qwen/src/swiftcore_template_qwen/qwen3.py",
        'return text + "<|im_end|>"',
        "return text",
        ("template_plugins/qwen/tests/test_qwen_templates.py",),
    ),
    Mutation(
        "train-serve-prompt",
        "one sample path: the served prompt is the training sample's prompt (chat defaults applied)",
        "core/src/swiftcore/template/sample.py",
        "        record = self.prepare(record)\n        encoded = self.template.encode(self.tokenizer, record, "
        "add_generation_prompt=True)",
        "        encoded = self.template.encode(self.tokenizer, record, add_generation_prompt=True)",
        (
            "core/tests/template/test_sample_encoder.py::test_the_prompt_is_the_prompt_part_of_the_training_sample",
            "core/tests/template/test_sample_encoder.py::test_the_chat_defaults_reach_the_template",
        ),
    ),
    Mutation(
        "loss-masking",
        "templates: loss on exactly the reply tokens (prompt labels -100)",
        "core/src/swiftcore/template/encoding.py",
        "labels = [IGNORE_INDEX] * n",
        "labels = list(ids)",
        ("template_plugins/qwen/tests/test_qwen_templates.py",),
    ),
    Mutation(
        "packing-position-ids",
        "packing / padding-free: position ids restart at 0 for each packed sample",
        "plugins/data/src/swiftcore_data/collators.py",
        "position_ids += range(len(ids))",
        "position_ids += range(len(position_ids), len(position_ids) + len(ids))",
        ("plugins/data/tests/test_data_collators.py",),
    ),
    Mutation(
        "lora-targets-router",
        "LoRA on MoE families: all-linear never adapts a router",
        "plugins/train/src/swiftcore_train/tuners.py",
        "(plan.routers if is_router(name, module) else plan.modules).append(name)",
        "plan.modules.append(name)",
        ("plugins/train/tests/test_moe_lora_targets.py::test_gemma4_moe_all_linear_leaves_the_router_alone",),
    ),
    Mutation(
        "resume-checkpoint",
        "resume: a resumed run continues from its checkpoint",
        "plugins/train/src/swiftcore_train/run.py",
        "trainer.train(resume_from_checkpoint=str(resume) if resume else None)",
        "trainer.train(resume_from_checkpoint=None)",
        ("tests/test_resume_families.py::test_resume_continues_the_run_exactly[qwen3_5-lora]",),
    ),
    Mutation(
        "weight-sync-lora",
        "RL weight sync: a LoRA policy sends exactly its adapter's tensors",
        "plugins/recipe_rl/src/swiftcore_recipe_rl/sync.py",
        "state = get_peft_model_state_dict(model)",
        "state = {k: v for k, v in model.state_dict().items() if 'lora_' in k}",
        ("plugins/recipe_rl/tests/test_lora_sync.py::test_one_lora_sync_gives_the_engine_the_policys_adapter",),
    ),
    Mutation(
        "weight-sync-lora-skipped",
        "RL weight sync: the engine generates with the policy's current adapter after a sync",
        "plugins/recipe_rl/src/swiftcore_recipe_rl/sync.py",
        "self.engine.update_adapter(self.adapter, tensors)",
        "pass",
        ("plugins/recipe_rl/tests/test_lora_sync.py::test_one_lora_sync_gives_the_engine_the_policys_adapter",),
    ),
    Mutation(
        "weight-sync-full",
        "RL weight sync: a full sync sends every state-dict tensor (the last bucket too)",
        "plugins/recipe_rl/src/swiftcore_recipe_rl/sync.py",
        "        if bucket:\n            yield bucket\n",
        "",
        ("plugins/recipe_rl/tests/test_rollout_engine.py::test_full_fine_tuning_syncs_the_state_dict_in_buckets",),
    ),
    Mutation(
        "weight-sync-frozen",
        "RL weight sync: a later full sync leaves out only the blocks without a trainable parameter",
        "plugins/recipe_rl/src/swiftcore_recipe_rl/sync.py",
        "if trainable is not None and not any(",
        "if trainable is not None and any(",
        ("plugins/recipe_rl/tests/test_rollout_engine.py::test_full_fine_tuning_syncs_the_state_dict_in_buckets",),
    ),
    Mutation(
        "weight-sync-tied",
        "RL weight sync: a tied embedding/head crosses once (the engine ties it)",
        "plugins/recipe_rl/src/swiftcore_recipe_rl/sync.py",
        "            if key in seen:",
        "            if False:",
        ("plugins/recipe_rl/tests/test_full_sync_tied.py::test_a_tied_head_crosses_once_and_the_engine_follows",),
    ),
    Mutation(
        "rl-advantage-normalisation",
        "RL recipes: REINFORCE++ advantages are normalised over the batch",
        "plugins/recipe_rl/src/swiftcore_recipe_rl/trainer.py",
        "return (returns - mean) * var.clamp(min=1e-8).rsqrt() * mask",
        "return (returns - mean) * mask",
        ("plugins/recipe_rl/tests/test_reinforce_pp_math.py",),
    ),
    Mutation(
        "dpo-beta",
        "preference recipes: the DPO loss equals the formula (beta's sign)",
        "plugins/recipe_preference/src/swiftcore_recipe_preference/dpo.py",
        "beta=options.beta,",
        "beta=-options.beta,",
        ("plugins/recipe_preference/tests/test_dpo_loss.py::test_lora_loss_equals_the_formula",),
    ),
    Mutation(
        "media-placeholder",
        "media in training: an image placeholder expands to the vision tower's token count",
        "plugins/media/src/swiftcore_media/preparer.py",
        'span = [int(t) for t in expanded.pop("input_ids")]',
        'span = [int(t) for t in expanded.pop("input_ids")][:1]',
        ("plugins/media/tests/test_media.py::test_image_placeholders_expand_to_the_vision_towers_count",),
    ),
    Mutation(
        "server-api-key",
        "the server under hostile input: auth on every route",
        "plugins/serve/src/swiftcore_serve/guard.py",
        "if secrets.compare_digest(value[7:].strip(), expected):",
        "if value[7:].strip():",
        ("tests/test_server_hardening.py::test_every_route_but_health_needs_the_key",),
    ),
    Mutation(
        "host-check",
        "the server under hostile input: Host check (DNS rebinding)",
        "plugins/serve/src/swiftcore_serve/guard.py",
        "        problem = self._host_problem(scope, headers)\n",
        "        problem = None\n",
        ("tests/test_server_hardening.py::test_loopback_bind_checks_the_host_header",),
    ),
    Mutation(
        "body-limit",
        "the server under hostile input: a declared oversized body is a 413 before it is read",
        "plugins/serve/src/swiftcore_serve/guard.py",
        "if int(declared[0]) > self.max_body_bytes:",
        "if int(declared[0]) > 1000 * self.max_body_bytes:",
        ("tests/test_server_hardening.py::test_declared_oversized_body_is_413_before_it_is_read",),
    ),
    Mutation(
        "output-dir-foreign",
        "training outputs: --overwrite-output-dir refuses a folder swiftcore did not write",
        "plugins/train/src/swiftcore_train/output_dir.py",
        "    except FileNotFoundError:\n        raise SwiftcoreError(",
        "    except FileNotFoundError:\n        return OUTPUT_PATTERNS\n        raise SwiftcoreError(",
        ("tests/test_train_outputs_safe.py::test_overwrite_of_a_folder_swiftcore_did_not_write_is_refused",),
    ),
    Mutation(
        "output-dir-non-empty",
        "training outputs: a non-empty output dir is refused",
        "plugins/train/src/swiftcore_train/output_dir.py",
        "    if not overwrite:\n",
        "    if False:\n",
        ("tests/test_train_outputs_safe.py::test_a_non_empty_output_dir_is_refused",),
    ),
    Mutation(
        "export-merge-lora",
        "adapters: export --merge-lora merges the adapter into the base",
        "plugins/infer/src/swiftcore_infer/merge.py",
        "merged = PeftModel.from_pretrained(model, str(adapter_dir)).merge_and_unload()",
        "merged = PeftModel.from_pretrained(model, str(adapter_dir)).unload()",
        ("plugins/infer/tests/test_merge_lora.py::test_merged_model_matches_base_plus_adapter",),
    ),
    Mutation(
        "bridge-gated-qkv",
        "Megatron bridges: Qwen3.5's gated attention maps to megatron-core's layout",
        "megatron_bridges/qwen3_5/src/swiftcore_bridge_qwen3_5/mapping.py",
        "fused = torch.cat([query, gate, k.reshape(g, d, *rest), v.reshape(g, d, *rest)], dim=1)",
        "fused = torch.cat([gate, query, k.reshape(g, d, *rest), v.reshape(g, d, *rest)], dim=1)",
        ("megatron_bridges/qwen3_5/tests/test_qwen3_5_bridge_parity.py::test_logit_parity_tp1",),
    ),
    Mutation(
        "data-validation",
        "datasets: a bad row is named (a system message after the first)",
        "plugins/data/src/swiftcore_data/validate.py",
        'if role == "system" and not first:',
        'if role == "system" and False:',
        ("plugins/data/tests/test_data_validate.py::test_bad_row_error_names_file_line_and_field",),
    ),
    Mutation(
        "infer-stop-token",
        "response parsing: a reply is 'stop' only when a stop token ended it, 'length' when cut at the limit",
        "plugins/infer/src/swiftcore_infer/engine.py",
        'finish_reason = "length" if stop_at is None else "stop"',
        'finish_reason = "stop"',
        ("plugins/infer/tests/test_model_families.py::test_scripted_replies_parse_by_how_they_ended",),
    ),
    Mutation(
        "head-pooling",
        "heads: last-token pooling takes the last real token, left or right padded",
        "plugins/heads/src/swiftcore_heads/pooling.py",
        "return (positions * attention_mask.long()).argmax(dim=1)",
        "return positions.argmax(dim=1)",
        ("plugins/heads/tests/test_pooling.py",),
    ),
    Mutation(
        "eval-scoring",
        "swiftcore eval: each reply is scored against its record's answer",
        "plugins/eval/src/swiftcore_eval/benchmark.py",
        'target=record["answer"],',
        'target=record["answer"][::-1],',
        ("plugins/eval/tests/test_runner.py::test_accuracy_is_the_fraction_of_exact_matches_case_and_spaces_aside",),
    ),
    Mutation(
        "missing-weights",
        "nothing let in through the new doors: missing weights are a clear error",
        "core/src/swiftcore/models/loading.py",
        'if missing := sorted(info["missing_keys"]):',
        'if missing := sorted(info["missing_keys"])[:0]:',
        ("tests/test_missing_weights.py::test_loading_a_checkpoint_with_missing_weights_names_them",),
    ),
    Mutation(
        "media-header-limit",
        "nothing let in through the new doors: an oversized image is refused from its header",
        "plugins/media/src/swiftcore_media/items.py",
        "        _check_pixels(image.width, image.height, max_pixels, what)\n",
        "",
        ("plugins/media/tests/test_media_bounds.py::test_an_image_over_max_pixels_is_refused_before_it_is_decoded",),
    ),
)


@dataclass
class Result:
    """What one mutation's runs gave: ``status`` is caught, survived or error; ``detail`` says why (errors)."""

    mutation: Mutation
    status: str
    seconds: float = 0.0
    baseline_seconds: float = 0.0
    detail: str = ""


def run_tests(tests: tuple[str, ...], timeout: float) -> tuple[int | None, float, str]:
    """Run ``tests`` with pytest in a subprocess of its own process group; ``(exit code or None on a timeout,
    seconds, the output's tail)``."""
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-m", "slow or not slow", *tests]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        out, code = "", None
    finally:
        if proc.poll() is None:  # a timeout, or this script interrupted: the whole group goes
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return code, time.perf_counter() - start, "\n".join((out or "").splitlines()[-15:])


def check_mutation(m: Mutation) -> str | None:
    """Why ``m`` cannot be applied (the file is missing, changed in the work tree, or ``old`` not there once)."""
    path = ROOT / m.file
    if not path.is_file():
        return f"{m.file}: no such file"
    dirty = subprocess.run(["git", "diff", "--quiet", "--", m.file], cwd=ROOT).returncode
    if dirty:
        return f"{m.file} has uncommitted changes: commit or stash them first (it is never mutated so)"
    count = path.read_text(encoding="utf-8").count(m.old)
    if count != 1:
        return f"{m.file}: the text to replace occurs {count} times (expected exactly once): {m.old!r}"
    return None


class _Restore:
    """Keeps the one mutated file's original bytes; :meth:`restore` puts them (and the mtime) back."""

    def __init__(self) -> None:
        self.path: Path | None = None
        self.data = b""
        self.times = (0, 0)

    def apply(self, m: Mutation) -> None:
        path = ROOT / m.file
        self.data = path.read_bytes()
        stat = path.stat()
        self.times = (stat.st_atime_ns, stat.st_mtime_ns)
        self.path = path
        path.write_bytes(self.data.decode("utf-8").replace(m.old, m.new, 1).encode("utf-8"))

    def restore(self) -> None:
        if self.path is not None:
            self.path.write_bytes(self.data)
            os.utime(self.path, ns=self.times)
            self.path = None


RESTORE = _Restore()


def _on_signal(signum: int, frame: FrameType | None) -> None:
    RESTORE.restore()
    raise SystemExit(128 + signum)


def run(mutations: list[Mutation], timeout: float) -> list[Result]:
    """Baseline then mutant for each of ``mutations``; one :class:`Result` each, printed as it comes."""
    baselines: dict[tuple[str, ...], tuple[int | None, float, str]] = {}
    results = []
    for m in mutations:
        problem = check_mutation(m)
        if problem:
            results.append(Result(m, "error", detail=problem))
        else:
            if m.tests not in baselines:
                baselines[m.tests] = run_tests(m.tests, timeout)
            code, base_seconds, tail = baselines[m.tests]
            if code != 0:
                results.append(
                    Result(m, "error", 0.0, base_seconds, f"baseline exit {code}: tests fail unmutated\n{tail}")
                )
            else:
                try:
                    RESTORE.apply(m)
                    code, seconds, tail = run_tests(m.tests, timeout)
                finally:
                    RESTORE.restore()
                status = {0: "survived", 1: "caught"}.get(code, "error")  # type: ignore[arg-type]
                detail = "" if status == "caught" else f"mutant exit {code}\n{tail}"
                results.append(Result(m, status, seconds, base_seconds, detail))
        r = results[-1]
        print(f"{r.status:8} {m.name:28} {r.seconds:6.1f} s (baseline {r.baseline_seconds:.1f} s)", flush=True)
        if r.detail:
            print("    " + r.detail.replace("\n", "\n    "), flush=True)
    return results


def markdown(results: list[Result], wall: float) -> str:
    """The results table of ``docs/testing.md``."""
    lines = [
        "| mutation | user path | file | caught by | result | seconds |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        m = r.mutation
        tests = ", ".join(f"`{t}`" for t in m.tests)
        lines.append(f"| `{m.name}` | {m.path} | `{m.file}` | {tests} | {r.status} | {r.seconds:.0f} |")
    caught = sum(r.status == "caught" for r in results)
    lines.append("")
    lines.append(f"{caught} of {len(results)} mutations caught; the whole check took {wall / 60:.1f} min.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--only", default="", help="comma-separated mutation names to run (default: all)")
    parser.add_argument("--markdown", action="store_true", help="print the results as the table of docs/testing.md")
    parser.add_argument("--timeout", type=float, default=TIMEOUT, help=f"seconds per pytest run (default {TIMEOUT})")
    args = parser.parse_args(argv)

    chosen = list(MUTATIONS)
    if args.only:
        names = [n.strip() for n in args.only.split(",") if n.strip()]
        known = {m.name: m for m in MUTATIONS}
        unknown = [n for n in names if n not in known]
        if unknown:
            parser.error(f"unknown mutation(s) {', '.join(unknown)}; --list shows them")
        chosen = [known[n] for n in names]
    if args.list:
        for m in chosen:
            print(f"{m.name}: {m.path}\n    {m.file}\n    " + "\n    ".join(m.tests))
        return 0

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _on_signal)
    start = time.perf_counter()
    try:
        results = run(chosen, args.timeout)
    finally:
        RESTORE.restore()
    wall = time.perf_counter() - start
    caught = sum(r.status == "caught" for r in results)
    print(f"\n{caught} of {len(results)} mutations caught in {wall:.0f} s")
    if args.markdown:
        print("\n" + markdown(results, wall))
    return 0 if caught == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
