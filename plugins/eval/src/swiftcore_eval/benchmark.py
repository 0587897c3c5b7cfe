"""The EvalScope benchmark ``swiftcore_qa``: exact-match accuracy on a local JSONL of questions and answers.

Registered with EvalScope's own registry (``register_benchmark``), the way EvalScope's built-in benchmarks are,
so the run is EvalScope's from end to end: its data loader reads the file, its ``openai_api`` model asks the
endpoint with the ``openai`` client, its ``acc`` metric scores each reply, its report aggregates them.

The file is the one :func:`swiftcore_eval.dataset.write_benchmark_file` writes (records already checked):
``{"messages": [...], "answer": "...", "line": N}`` per line, with ``"tools"`` (OpenAI function tools) where the
question offers tools: they become the sample's EvalScope ``ToolInfo`` list, which its model sends as the request's
``tools``.

Importing this module imports EvalScope; only :mod:`swiftcore_eval.runner` does, when an evaluation runs.
"""

from __future__ import annotations

from typing import Any

from evalscope.api.benchmark import BenchmarkMeta, DefaultDataAdapter
from evalscope.api.dataset import Sample
from evalscope.api.messages import dict_to_chat_message
from evalscope.api.registry import BENCHMARK_REGISTRY, register_benchmark
from evalscope.api.tool import ToolInfo, ToolParams
from evalscope.constants import Tags

__all__ = ["BENCHMARK", "SwiftcoreQAAdapter"]

#: The benchmark's name in EvalScope's registry (and in its output folders and report).
BENCHMARK = "swiftcore_qa"


class SwiftcoreQAAdapter(DefaultDataAdapter):
    """Reads the checked JSONL with EvalScope's local loader; one sample per record."""

    def load_from_disk(self, **kwargs: Any) -> Any:
        """Always the local loader: the dataset is a file here, never a hub dataset."""
        return super().load_from_disk(use_local_loader=True)

    def record_to_sample(self, record: dict[str, Any]) -> Sample:
        """A record -> an EvalScope sample: its messages asked, its answer the target."""
        return Sample(
            input=[dict_to_chat_message(m) for m in record["messages"]],
            target=record["answer"],
            tools=[_tool_info(t) for t in record.get("tools") or []] or None,
            metadata={"line": record.get("line")},
        )


def _tool_info(tool: dict[str, Any]) -> ToolInfo:
    """An OpenAI function tool as EvalScope's ``ToolInfo`` (its OpenAI model sends it back as that tool; EvalScope
    adds ``"additionalProperties": false`` to the parameters)."""
    function = tool["function"]
    return ToolInfo(
        name=function["name"],
        description=function.get("description", ""),
        parameters=ToolParams(**function.get("parameters", {})),
    )


if not BENCHMARK_REGISTRY.is_materialized(BENCHMARK):  # a module re-import must not register it twice
    register_benchmark(
        BenchmarkMeta(
            name=BENCHMARK,
            pretty_name="swiftcore QA (exact match)",
            description="Questions from a local JSONL file (swiftcore's training format or question/answer); a "
            "reply is correct when it equals the reference answer, ignoring case and surrounding whitespace.",
            dataset_id=BENCHMARK,  # replaced by the file's path (dataset_args) on every run
            metric_list=["acc"],
            few_shot_num=0,
            train_split=None,
            eval_split="test",
            tags=[Tags.QA, Tags.CUSTOM],
        )
    )(SwiftcoreQAAdapter)
