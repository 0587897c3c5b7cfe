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
    "bad_protocol.py": ("test_references_conform", "references-conform"),
    "template_mismatch.py": ("test_template_official[contract_mismatch]", "template-official"),
    "slow_import.py": ("test_import_time_budget", "import-time-budget"),
    "core_clash.py": ("test_no_core_clash", "no-core-clash"),
    "bad_spec.py": ("test_specs_validate", "specs-validate"),
    "stateful.py": ("test_load_twice_harmless", "load-twice-harmless"),
}
#: fixture file -> test name -> failure text (None when the test passed)
Results = dict[str, dict[str, "str | None"]]


@pytest.fixture(scope="module")
def contract_results(tmp_path_factory: pytest.TempPathFactory) -> Results:
    """Run the kit on every broken fixture in one pytest subprocess: fixture -> test -> failure text (None: passed)."""
    work = tmp_path_factory.mktemp("contract-kit")
    for fixture in BROKEN:
        stem = Path(fixture).stem
        (work / f"test_{stem}.py").write_text(
            "from swiftcore_testing import PluginContract\n\n\n"
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
def test_kit_fails_naming_the_broken_rule(fixture: str, contract_results: Results) -> None:
    test, rule = BROKEN[fixture]
    failure = contract_results[fixture][test]
    assert failure is not None, f"{test} passed on the broken plugin {fixture}"
    assert f"contract rule '{rule}' broken" in failure


@pytest.mark.parametrize("fixture", sorted(BROKEN))
def test_kit_passes_the_rules_the_fixture_keeps(fixture: str, contract_results: Results) -> None:
    """Each fixture breaks one rule; the kit must not blame the rules it keeps (no false alarms)."""
    results = contract_results[fixture]
    broken = BROKEN[fixture][0]
    keeps = {"test_entry_point_loads", "test_api_compatible", "test_specs_validate", "test_no_core_clash",
             "test_references_resolve", "test_import_is_light"} - {broken}
    if fixture == "wrong_api.py":
        keeps = {"test_entry_point_loads", "test_import_is_light"}  # the core refuses to load it further
    if fixture == "bad_spec.py":
        keeps -= {"test_references_resolve", "test_no_core_clash"}  # both need the specs, which do not validate
    assert keeps <= set(results), f"tests missing from the run: {keeps - set(results)}"
    assert {t for t in keeps if results[t] is not None} == set(), results


def _hook_names() -> list[str]:
    from swiftcore import hookspecs

    return sorted(n for n in dir(hookspecs) if n.startswith("swiftcore_") and callable(getattr(hookspecs, n)))


def test_every_hook_has_a_test() -> None:
    """The test-per-hook rule. Naming convention, in core/tests/test_hookspecs.py: a hook ``swiftcore_X`` is
    tested by a test named ``test_X...``; a collector hook may instead be a ``test_collector_hook[KIND]`` case
    (KIND as in ``swiftcore.registry.HOOK_FOR_KIND``)."""
    from swiftcore.registry import HOOK_FOR_KIND

    root = Path(__file__).parents[1]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         str(root / "core" / "tests" / "test_hookspecs.py")],
        capture_output=True, text=True, timeout=120, cwd=root,
    )
    tests = [line.split("::")[-1] for line in done.stdout.splitlines() if "::" in line]
    covered = {HOOK_FOR_KIND[t[len("test_collector_hook["):-1]] for t in tests if t.startswith("test_collector_hook[")}
    untested = [h for h in _hook_names() if h not in covered and not any(
        t.startswith("test_" + h.removeprefix("swiftcore_")) for t in tests)]
    assert len(tests) > 5, done.stdout + done.stderr
    assert untested == [], f"hooks without a test in core/tests/test_hookspecs.py: {untested}"


def test_guide_documents_every_rule_hook_and_spec_field() -> None:
    """docs/writing-a-plugin.md names every contract rule, hook and spec field (so none is added undocumented)."""
    from dataclasses import fields

    from swiftcore_testing import RULES

    from swiftcore.specs import SPEC_KINDS, ModelParts

    guide = (Path(__file__).parents[1] / "docs" / "writing-a-plugin.md").read_text(encoding="utf-8")
    missing = [f"rule {r}" for r in RULES if f"| `{r}` |" not in guide]
    missing += [f"hook {h}" for h in _hook_names() if f"`{h}(" not in guide]
    for cls in (*SPEC_KINDS.values(), ModelParts):
        missing += [f"{cls.__name__}.{f.name}" for f in fields(cls) if f"`{f.name}`" not in guide]
    assert missing == []
