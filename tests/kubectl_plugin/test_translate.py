"""The plugin's translation of kubectl habits, and scan's output formats, without I/O."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from zombied.config import Config, load_config
from zombied.plugin import context_namespace, main, parse, translate
from zombied.pod import PodSnapshot
from zombied.scan import Zombie, render

NO_KUBECONFIG = {"KUBECONFIG": "/nonexistent/config"}


def test_the_context_namespace_follows_kubectls_merge_rules() -> None:
    first = {"contexts": [{"name": "a", "context": {"namespace": "shop"}}]}
    second = {
        "current-context": "a",
        "contexts": [{"name": "a", "context": {"namespace": "ignored"}}, {"name": "b"}],
    }
    assert context_namespace([first, second], None) == "shop"
    assert context_namespace([first, second], "b") == "default"
    assert context_namespace([], None) == "default"


def test_flags_map_onto_zombied_scan() -> None:
    def args(*argv: str) -> list[str]:
        return translate(parse(argv), NO_KUBECONFIG)

    assert args() == ["scan", "--namespaces=default"]
    assert args("-A", "-o", "wide") == ["scan", "--all-namespaces", "-o", "wide"]
    assert args("-o", "json", "--no-headers", "-A") == [
        "scan",
        "--all-namespaces",
        "-o",
        "json",
        "--no-headers",
    ]
    assert args("-nshop", "-l", "app=web") == [
        "scan",
        "--namespaces=shop",
        "--label-selector=app=web",
    ]
    assert args("--context=c", "--kubeconfig", "/k", "--rules", "failed") == [
        "scan",
        "--kubeconfig=/k",
        "--context=c",
        "--namespaces=default",
        "--rules",
        "failed",
    ]
    assert args("explain", "web-0", "-n", "shop") == ["explain", "shop/web-0"]
    assert args("explain", "shop/web-0", "-o", "json") == ["explain", "shop/web-0", "-o", "json"]
    assert args("version") == ["version"]


def _zombies() -> tuple[list[Zombie], datetime]:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    pod = PodSnapshot(
        namespace="shop",
        name="web-0",
        uid="u1",
        phase="Failed",
        reason="Terminated",
        message="Pod was terminated in response to imminent node shutdown. " * 3,
        node="node-1",
        terminated_at=now - timedelta(minutes=5),
    )
    return [Zombie(pod, "node-shutdown", pod.terminated_at)], now


def scan_config(*argv: str) -> Config:
    return load_config("scan", argv, {})


def test_output_formats() -> None:
    zombies, now = _zombies()
    assert render(zombies, now, scan_config("-o", "name")) == "pod/web-0\n"
    (record,) = yaml.safe_load(render(zombies, now, scan_config("-o", "yaml")))
    assert (record["namespace"], record["pod"], record["age_s"]) == ("shop", "web-0", 300.0)
    assert render([], now, scan_config("-o", "yaml")) == "[]\n"
    assert render([], now, scan_config("-o", "name")) == ""
    wide = render(zombies, now, scan_config("-o", "wide", "--no-headers"))
    (line,) = wide.splitlines()
    assert line.split()[:2] == ["shop", "web-0"]
    assert "2025-12-31T23:55:00Z" in line
    assert line.endswith("…")
    assert len(line.split("   ")[-1]) == 80
    one = render(zombies, now, scan_config("-n", "shop"))
    assert one.splitlines()[0].split()[0] == "POD"


def test_the_namespace_comes_from_the_kubeconfig_files(tmp_path: Path) -> None:
    first = tmp_path / "a"
    first.write_text("current-context: team\n")
    second = tmp_path / "b"
    second.write_text(
        yaml.safe_dump({"contexts": [{"name": "team", "context": {"namespace": "shop"}}]})
    )
    broken = tmp_path / "broken"
    broken.write_text("{not yaml")
    listed = os.pathsep.join(str(p) for p in (broken, tmp_path / "missing", first, second))
    assert translate(parse([]), {"KUBECONFIG": listed}) == ["scan", "--namespaces=shop"]
    flag = ["--kubeconfig", str(second), "--context", "team"]
    assert translate(parse(flag), {"KUBECONFIG": str(broken)})[-1] == "--namespaces=shop"


def test_help_and_a_flag_without_its_value(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert capsys.readouterr().out.startswith("usage: kubectl zombies")
    assert main(["-n"]) == 2
    assert capsys.readouterr().err == "kubectl zombies: error: -n: expected a value\n"
    assert main(["-A", "-n", "x"]) == 2
    assert "--all-namespaces: cannot be combined" in capsys.readouterr().err
