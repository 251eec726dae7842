"""The alert rules: valid for the real promtool, unit-tested with it (rules_test.yaml),
and each one with a summary, a description and a runbook section that exists."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPONENT = ROOT / "manifests" / "components" / "monitoring"
RULE_FILE = COMPONENT / "zombied-rules.yaml"
UNIT_TESTS = Path(__file__).with_name("rules_test.yaml")
RUNBOOK = ROOT / "docs" / "monitoring.md"


def alerts() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULE_FILE.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def run(*argv: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(arg) for arg in argv], capture_output=True, text=True, check=False, timeout=60
    )


def test_promtool_accepts_the_rule_file(promtool: Path) -> None:
    result = run(promtool, "check", "rules", RULE_FILE)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in result.stdout


def test_promtool_unit_tests_pass(promtool: Path) -> None:
    result = run(promtool, "test", "rules", UNIT_TESTS)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def _anchors(markdown: str) -> set[str]:
    """GitHub's anchors for the headings of ``markdown``."""
    anchors = set()
    for heading in re.findall(r"^#+ +(.+)$", markdown, flags=re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        anchors.add(slug)
    return anchors


@pytest.mark.parametrize("alert", alerts(), ids=lambda rule: rule["alert"])
def test_each_alert_says_what_to_do(alert: dict[str, Any]) -> None:
    annotations = alert["annotations"]
    assert annotations["summary"].strip()
    assert len(annotations["description"]) > 80, "the description must name what to check"
    assert alert["labels"]["severity"] in ("critical", "warning", "info")
    assert 'job="zombied"' in alert["expr"]
    url = annotations["runbook_url"]
    page, _, anchor = url.partition("#")
    assert page.endswith("/docs/monitoring.md")
    assert anchor == alert["alert"].lower()
    assert anchor in _anchors(RUNBOOK.read_text()), f"docs/monitoring.md has no section #{anchor}"
