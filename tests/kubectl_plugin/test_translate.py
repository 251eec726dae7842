"""The plugin's translation of kubectl habits into zombied's command line, without I/O."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from zombied.config import load_config
from zombied.plugin import context_namespace, main, parse, translate

NO_KUBECONFIG = {"KUBECONFIG": "/nonexistent/config"}


def args(*argv: str, environ: dict[str, str] | None = None) -> list[str]:
    return translate(parse(argv), environ or NO_KUBECONFIG)


def resolved(*argv: str, environ: dict[str, str] | None = None) -> Any:
    """The configuration zombied resolves for ``kubectl zombies ARGV``."""
    command, *rest = args(*argv, environ=environ)
    return load_config(command, rest, environ or {})


def test_the_context_namespace_follows_kubectls_merge_rules() -> None:
    first = {"contexts": [{"name": "a", "context": {"namespace": "shop"}}]}
    second = {
        "current-context": "a",
        "contexts": [{"name": "a", "context": {"namespace": "ignored"}}, {"name": "b"}],
    }
    assert context_namespace([first, second], None) == "shop"
    assert context_namespace([first, second], "b") == "default"
    assert context_namespace([], None) == "default"


# The rest of kubectl's flags pass through unchanged: test_plugin runs them with kubectl.
@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ((), ["scan", "-n", "default", "--delete=false"]),
        (("-A", "-o", "wide"), ["scan", "-A", "-o", "wide", "--delete=false"]),
        (("explain", "web-0"), ["explain", "web-0", "-n", "default"]),
        (("explain", "shop/web-0", "-o", "json"), ["explain", "shop/web-0", "-o", "json"]),
        (("version",), ["version"]),
        (("--version",), ["version"]),
    ],
)
def test_kubectl_flags_pass_through_with_the_context_namespace(
    argv: tuple[str, ...], expected: list[str]
) -> None:
    assert args(*argv) == expected


@pytest.mark.parametrize(
    ("argv", "field", "expected"),
    [
        # -n is the namespace of what is listed or explained, in the plugin as in zombied.
        (("-n", "shop"), "namespace", "shop"),
        (("explain", "web-0", "-n", "shop"), "target", ("shop", "web-0")),
        (("explain", "shop/web-0"), "target", ("shop", "web-0")),
        # ... and the scope zombied works in is --namespaces in both.
        (("-n", "shop", "--namespaces", "shop,ops"), "namespaces", ("shop", "ops")),
        (("-A",), "namespace", None),
        (("--selector", "app=web"), "label_selector", "app=web"),
    ],
)
def test_the_plugin_and_zombied_mean_the_same(
    argv: tuple[str, ...], field: str, expected: object
) -> None:
    assert getattr(resolved(*argv), field) == expected


def test_the_plugin_only_reads(capsys: pytest.CaptureFixture[str]) -> None:
    for flag in ("--delete", "--delete=true", "--delete=false"):
        assert main([flag]) == 2
        assert capsys.readouterr().err == (
            "kubectl zombies: error: --delete: kubectl zombies only reads; "
            "'zombied scan --delete' takes the same options and deletes what it lists\n"
        )
    # An environment set up for `zombied scan --delete` does not make the plugin delete.
    environ = {**NO_KUBECONFIG, "ZOMBIED_DELETE": "true"}
    assert resolved(environ=environ).delete is False


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
    assert args(environ={"KUBECONFIG": listed})[:3] == ["scan", "-n", "shop"]
    flag = ["--kubeconfig", str(second), "--context", "team"]
    assert args(*flag, environ={"KUBECONFIG": str(broken)})[:3] == ["scan", "-n", "shop"]


def test_help_and_a_flag_without_its_value(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert capsys.readouterr().out.startswith("usage: kubectl zombies")
    assert main(["-n"]) == 2
    assert capsys.readouterr().err == "kubectl zombies: error: -n: expected a value\n"
