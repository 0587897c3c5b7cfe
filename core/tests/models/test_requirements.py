"""Checking a spec's ``requires`` against the installed distributions."""

from __future__ import annotations

import pytest

from swiftcore import ModelSpec
from swiftcore.models import RequirementsError, check_requirements, unmet_requirements


def _spec(*requires: str) -> ModelSpec:
    return ModelSpec(name="needy", model_types=("needy",), model_class="transformers:AutoModel", requires=requires)


def test_met_requirements_pass() -> None:
    check_requirements(_spec("pluggy>=1.0", "click"))


def test_unmet_requirements_are_listed_with_the_pip_command() -> None:
    with pytest.raises(RequirementsError) as err:
        check_requirements(_spec("pluggy>=999", "surely-not-installed-dist>=1", "click"))
    message = str(err.value)
    assert "model 'needy'" in message
    assert "pluggy>=999 (found pluggy " in message
    assert "surely-not-installed-dist>=1 (not installed)" in message
    assert "pip install 'pluggy>=999' 'surely-not-installed-dist>=1'" in message
    assert "click" not in message.split("Install with:")[1]


def test_requirements_for_other_platforms_are_ignored() -> None:
    assert unmet_requirements(['surely-not-installed-dist>=1; python_version < "3"']) == []
