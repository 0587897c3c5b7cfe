"""The contract kit fails, naming the broken rule, on deliberately broken plugins (tests/fixtures/contract)."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures" / "contract"

#: fixture file -> (the test that must fail, the rule its message must name)
BROKEN = {
    "imports_torch.py": ("test_import_is_light", "import-is-light"),
    "wrong_api.py": ("test_api_compatible", "api-compatible"),
    "bad_reference.py": ("test_references_resolve", "references-resolve"),
    "template_mismatch.py": ("test_template_official[contract_mismatch]", "template-official"),
}


@pytest.fixture(scope="module")
def contract_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, str | None]]:
    """Run the kit on every broken fixture in one pytest subprocess: fixture -> test -> failure text (None: passed)."""
    work = tmp_path_factory.mktemp("contract-kit")
    for fixture in BROKEN:
        stem = Path(fixture).stem
        (work / f"test_{stem}.py").write_text(
            "from swiftcore.testing import PluginContract\n\n\n"
            f"class TestBroken(PluginContract):\n    plugin = {str(FIXTURES / fixture)!r}\n",
            encoding="utf-8",
        )
    report = work / "report.xml"
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(work),
         f"--junitxml={report}", str(work)],
        capture_output=True, text=True, timeout=600, cwd=work,
    )
    results: dict[str, dict[str, str | None]] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        module = case.get("classname", "").split(".")[0].removeprefix("test_") + ".py"
        failure = case.find("failure")
        results.setdefault(module, {})[case.get("name", "")] = (
            None if failure is None else (failure.get("message", "") + (failure.text or ""))
        )
    return results


@pytest.mark.parametrize("fixture", sorted(BROKEN))
def test_kit_fails_naming_the_broken_rule(fixture: str, contract_results: dict[str, dict[str, str | None]]) -> None:
    test, rule = BROKEN[fixture]
    failure = contract_results[fixture][test]
    assert failure is not None, f"{test} passed on the broken plugin {fixture}"
    assert f"contract rule '{rule}' broken" in failure


@pytest.mark.parametrize("fixture", sorted(BROKEN))
def test_kit_passes_the_rules_the_fixture_keeps(fixture: str, contract_results: dict[str, dict[str, str | None]]) -> None:
    """Each fixture breaks one rule; the kit must not blame the rules it keeps (no false alarms)."""
    keeps = {"test_entry_point_loads", "test_specs_validate", "test_no_core_clash"}
    if fixture == "wrong_api.py":
        keeps = {"test_entry_point_loads"}  # the core refuses to load it, so only the bare import is checked
    results = contract_results[fixture]
    assert {t for t in keeps if results.get(t) is not None} == set(), results
