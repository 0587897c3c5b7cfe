"""swiftcore-eval: ``swiftcore eval``, a benchmark's accuracy measured through an OpenAI-compatible endpoint.

EvalScope runs the evaluation (its ``openai_api`` model asks the endpoint with the ``openai`` client; the
``swiftcore_qa`` benchmark of :mod:`swiftcore_eval.benchmark` scores replies by exact match). From Python::

    from swiftcore_eval import read_dataset, resolve_dataset, run_eval

    records = read_dataset(resolve_dataset("parity"))
    result = run_eval(records, api_url="http://127.0.0.1:8000/v1", model_name="tuned")
    print(result.accuracy, result.output_dir)

Importing this package imports neither EvalScope nor torch; :func:`run_eval` imports EvalScope when it runs.
"""

from __future__ import annotations

from swiftcore.api import lazy_exports

__all__ = [
    "BUILTIN_DATASETS",
    "DatasetError",
    "EvalRecord",
    "EvalResult",
    "GenerationSettings",
    "SampleResult",
    "builtin_dataset_path",
    "read_dataset",
    "resolve_dataset",
    "run_eval",
    "serve_in_process",
]

_WHERE = {
    "BUILTIN_DATASETS": "dataset",
    "DatasetError": "dataset",
    "EvalRecord": "dataset",
    "builtin_dataset_path": "dataset",
    "read_dataset": "dataset",
    "resolve_dataset": "dataset",
    "EvalResult": "runner",
    "GenerationSettings": "runner",
    "SampleResult": "runner",
    "run_eval": "runner",
    "serve_in_process": "server",
}

__getattr__ = lazy_exports(__name__, _WHERE)
