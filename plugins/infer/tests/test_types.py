"""Sampling parameters and requests validate themselves, naming the field at fault."""

from __future__ import annotations

import pytest
from swiftcore_infer.errors import InvalidRequestError
from swiftcore_infer.types import Generation, Request, SamplingParams


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"max_new_tokens": -1}, "max_tokens"),
        ({"max_new_tokens": 0}, "max_tokens"),
        ({"max_new_tokens": True}, "max_tokens"),
        ({"temperature": -0.5}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"top_k": -2}, "top_k"),
        ({"seed": "7"}, "seed"),
        ({"stop": ("",)}, "stop"),
        ({"repetition_penalty": 0}, "repetition_penalty"),
    ],
)
def test_bad_sampling_values_name_their_field(kwargs: dict, param: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        SamplingParams(**kwargs)
    assert info.value.param == param
    assert info.value.status == 400


def test_good_sampling_values_pass() -> None:
    params = SamplingParams(max_new_tokens=3, temperature=0.7, top_p=0.9, top_k=5, seed=1, stop=("x",))
    assert not params.greedy
    assert SamplingParams().greedy


def test_request_needs_exactly_one_of_record_and_prompt() -> None:
    with pytest.raises(InvalidRequestError):
        Request()
    with pytest.raises(InvalidRequestError):
        Request(record={"messages": []}, prompt="x")
    assert Request(prompt=[1, 2]).prompt == [1, 2]


def test_failed_generation_carries_status() -> None:
    failed = Generation.failed(InvalidRequestError("bad"))
    assert (failed.ok, failed.finish_reason, failed.error, failed.error_status) == (False, "error", "bad", 400)
    assert Generation.failed(RuntimeError("boom")).error_status == 500
