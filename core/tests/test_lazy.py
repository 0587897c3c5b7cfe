"""Lazy "module:attr" references."""

from __future__ import annotations

import pytest

from swiftcore import SwiftcoreError
from swiftcore._lazy import is_reference, resolve, unresolved_references


def test_resolve_walks_attributes() -> None:
    assert resolve("os.path:join.__name__") == "join"


@pytest.mark.parametrize("ref", ["os.path", "os:path:join", "1os:x", ""])
def test_malformed_references_are_rejected(ref: str) -> None:
    assert not is_reference(ref)
    with pytest.raises(SwiftcoreError, match="not a 'package.module:attribute'"):
        resolve(ref)


def test_missing_module_and_attribute_are_named() -> None:
    with pytest.raises(SwiftcoreError, match="cannot import 'no_such_module_xyz'"):
        resolve("no_such_module_xyz:f", what="loader of model 'x'")
    with pytest.raises(SwiftcoreError, match="loader of model 'x': 'os' has no attribute 'nope'"):
        resolve("os:nope", what="loader of model 'x'")


def test_unresolved_references_name_kind_spec_and_field() -> None:
    from swiftcore.specs import HeadSpec

    good = HeadSpec(name="ok", task="embedding", factory="json:dumps", recipe="json:loads")
    bad = HeadSpec(name="broken", task="embedding", factory="json:dumps", predictor="json:no_such_attr")
    problems = unresolved_references({"head": [good, bad]})
    assert len(problems) == 1
    assert "head 'broken' field 'predictor'" in problems[0] and "no_such_attr" in problems[0]
