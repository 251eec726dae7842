"""The alert rules: valid for the real promtool, their conditions unit-tested with it
(rules_test.yaml), and each one with a summary, a description and a runbook section that
exists."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.ship.markdown import anchors

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


def test_each_alert_fires_when_it_should_and_only_then(promtool: Path, tmp_path: Path) -> None:
    # promtool compares annotations word for word when a case names none, so the cases
    # run on the rules without them: what an alert says is the next test's business.
    groups = yaml.safe_load(RULE_FILE.read_text())["groups"]
    for group in groups:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    (tmp_path / RULE_FILE.name).write_text(yaml.safe_dump({"groups": groups}))
    (tmp_path / UNIT_TESTS.name).write_text(UNIT_TESTS.read_text())
    result = run(promtool, "test", "rules", tmp_path / UNIT_TESTS.name)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("alert", alerts(), ids=lambda rule: rule["alert"])
def test_each_alert_says_what_to_do(alert: dict[str, Any]) -> None:
    annotations = alert["annotations"]
    assert annotations["summary"].strip()
    assert annotations["description"].strip()
    assert alert["labels"]["severity"] in ("critical", "warning", "info")
    assert 'job="zombied"' in alert["expr"]
    url = annotations["runbook_url"]
    page, _, anchor = url.partition("#")
    assert page.endswith("/docs/monitoring.md")
    assert anchor == alert["alert"].lower()
    assert anchor in anchors(RUNBOOK.read_text()), f"docs/monitoring.md has no section #{anchor}"
