"""The plugin's translation of kubectl habits into zombied's command line, without I/O."""

from __future__ import annotations

from typing import Any

import pytest
from zombied.config import load_config
from zombied.plugin import main, translate

NO_KUBECONFIG = {"KUBECONFIG": "/nonexistent/config"}


def resolved(*argv: str, environ: dict[str, str] | None = None) -> Any:
    """The configuration zombied resolves for ``kubectl zombies ARGV``."""
    command, *rest = translate(argv)
    return load_config(command, rest, environ or NO_KUBECONFIG)


# The rest of kubectl's flags pass through unchanged: test_plugin runs them with kubectl.
@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ((), ["scan", "--delete=false"]),
        (("-A", "-o", "wide"), ["scan", "--delete=false", "-A", "-o", "wide"]),
        (("scan", "-n", "shop"), ["scan", "--delete=false", "-n", "shop"]),
        (("explain", "web-0"), ["explain", "web-0"]),
        (("explain", "shop/web-0", "-o", "json"), ["explain", "shop/web-0", "-o", "json"]),
        (("version",), ["version"]),
        (("--version",), ["version"]),
    ],
)
def test_kubectl_flags_pass_through(argv: tuple[str, ...], expected: list[str]) -> None:
    assert translate(argv) == expected


@pytest.mark.parametrize(
    ("argv", "field", "expected"),
    [
        # -n is the namespace of what is listed or explained, in the plugin as in zombied.
        (("-n", "shop"), "namespace", "shop"),
        ((), "namespace", "default"),  # the context's, as kubectl's
        (("-A",), "namespace", None),
        (("explain", "web-0", "-n", "shop"), "target", ("shop", "web-0")),
        (("explain", "shop/web-0"), "target", ("shop", "web-0")),
        (("explain", "web-0"), "target", ("default", "web-0")),
        # ... and the scope zombied works in is --namespaces in both.
        (("-n", "shop", "--namespaces", "shop,ops"), "namespaces", ("shop", "ops")),
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
        (line,) = capsys.readouterr().err.splitlines()
        # The option refused, and the command that does delete.
        assert line.startswith("kubectl zombies: error: --delete: ")
        assert "'zombied scan --delete'" in line
    # An environment set up for `zombied scan --delete` does not make the plugin delete.
    environ = {**NO_KUBECONFIG, "ZOMBIED_DELETE": "true"}
    assert resolved(environ=environ).delete is False


def test_help_and_a_flag_without_its_value(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert capsys.readouterr().out.startswith("usage: kubectl zombies")
    assert main(["-n"]) == 2
    assert capsys.readouterr().err.startswith("zombied: error: --namespace: ")
