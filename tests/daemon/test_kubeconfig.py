"""Where the cluster and the credentials come from: kubeconfig files merged as kubectl
merges them, errors that name where to look, and the cluster settings read through
kubernetes_asyncio's public loader (a change in the library shows here)."""

from __future__ import annotations

import base64
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from zombied.access import load_access
from zombied.cli import main
from zombied.kube import Request, open_kube
from zombied.kubeconfig import merge

from kubesim import Simulator
from tests.daemon.test_credentials import GCLOUD_FAILURE, Plugin

LIST = Request("list", "pods", "team-a")


def write(path: Path, document: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return path


def test_the_first_file_wins_each_name_and_the_current_context() -> None:
    first = {
        "current-context": "a",
        "clusters": [{"name": "c", "cluster": {"server": "https://first"}}],
        "contexts": [{"name": "a", "context": {"cluster": "c", "user": "u"}}],
    }
    second = {
        "current-context": "b",
        "clusters": [
            {"name": "c", "cluster": {"server": "https://second"}},
            {"name": "d", "cluster": {"server": "https://d", "certificate-authority": "ca.crt"}},
        ],
        "users": [{"name": "u", "user": {"tokenFile": "token", "exec": {"command": "./bin/p"}}}],
    }
    merged = merge([(Path("/one/config"), first), (Path("/two/config"), second)])
    assert merged["current-context"] == "a"
    assert [c["cluster"]["server"] for c in merged["clusters"]] == ["https://first", "https://d"]
    assert merged["clusters"][1]["cluster"]["certificate-authority"] == "/two/ca.crt"
    (user,) = merged["users"]
    assert user["user"]["tokenFile"] == "/two/token"
    assert user["user"]["exec"]["command"] == "/two/bin/p"


async def test_kubeconfig_lists_files_that_merge(
    sim: Simulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole = sim.kubeconfig()
    # The context chosen in one file, the cluster and the user in another.
    chooser = write(tmp_path / "a" / "config", {"current-context": "sim"})
    rest = write(tmp_path / "b" / "config", {**whole, "current-context": "elsewhere"})
    listed = os.pathsep.join([str(tmp_path / "missing"), str(chooser), str(rest)])
    monkeypatch.setenv("KUBECONFIG", listed)
    async with open_kube() as kube:
        assert (await kube.request(LIST, timeout=10))["items"] == []


@pytest.mark.parametrize(
    ("argv", "environ", "expected"),
    [
        (
            ["--context", "nope"],
            {},
            "zombied: error: --context: no context named 'nope' in $KUBECONFIG; "
            "the contexts are: sim, other",
        ),
        ([], {"missing": True}, "zombied: error: $KUBECONFIG: none of its files exists"),
        ([], {"broken": True}, "zombied: error: $KUBECONFIG: "),
    ],
    ids=["unknown-context", "no-file", "broken-file"],
)
def test_errors_name_where_to_look_in_one_line(
    sim: Simulator,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    environ: dict[str, bool],
    expected: str,
) -> None:
    path = sim.write_kubeconfig(tmp_path / "config", contexts={"other": "token"})
    if environ.get("broken"):
        path.write_text("clusters: [unclosed", encoding="utf-8")
    if environ.get("missing"):
        path = tmp_path / "nowhere"
    monkeypatch.setenv("KUBECONFIG", str(path))
    assert main(["scan", *argv]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(expected)
    assert "--kubeconfig" not in line


def test_a_failing_exec_plugin_at_start_is_one_line_with_its_hint(
    sim: Simulator, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plugin = Plugin(tmp_path / "plugin")
    plugin.fail(GCLOUD_FAILURE)
    document = sim.kubeconfig()
    exec_user = {
        "apiVersion": "client.authentication.k8s.io/v1beta1",
        "command": sys.executable,
        "args": [str(plugin.directory / "plugin.py")],
    }
    document["users"] = [{"name": "sim", "user": {"exec": exec_user}}]
    kubeconfig = write(tmp_path / "config", document)
    assert main(["scan", "--kubeconfig", str(kubeconfig)]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()  # nothing else: no line of the library's own
    assert line.startswith("zombied: error: --kubeconfig: exec plugin python")
    assert "gcloud auth login to obtain new credentials" in line
    assert captured.out == ""


def test_an_auth_provider_is_refused_at_start(
    sim: Simulator, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = sim.kubeconfig()
    oidc = {"name": "oidc", "config": {"id-token": "a.b.c", "refresh-token": "r"}}
    document["users"] = [{"name": "sim", "user": {"auth-provider": oidc}}]
    kubeconfig = write(tmp_path / "config", document)
    assert main(["scan", "--kubeconfig", str(kubeconfig)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "auth-provider 'oidc'" in line
    assert "kubelogin" in line


async def test_the_cluster_settings_of_the_kubeconfig_are_the_ones_used(tmp_path: Path) -> None:
    async with Simulator(tls=True) as sim:
        assert sim.ca_pem is not None
        document = sim.kubeconfig()
        cluster = document["clusters"][0]["cluster"]
        # A CA file named relative to its kubeconfig, in the second of two files.
        (tmp_path / "b").mkdir()
        (tmp_path / "b" / "ca.crt").write_bytes(sim.ca_pem)
        del cluster["certificate-authority-data"]
        cluster |= {"certificate-authority": "ca.crt", "tls-server-name": "localhost"}
        cluster["proxy-url"] = "http://127.0.0.1:9"
        certificate = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
        document["users"][0]["user"]["client-certificate-data"] = base64.b64encode(
            certificate
        ).decode()
        first = write(tmp_path / "a" / "config", {"current-context": "sim"})
        second = write(tmp_path / "b" / "config", document)
        listed = os.pathsep.join([str(first), str(second)])
        access = await load_access(None, None, {"KUBECONFIG": listed})
        assert access.cluster.server == sim.url
        assert access.cluster.ca_file == str(tmp_path / "b" / "ca.crt")
        assert (access.cluster.server_name, access.cluster.verify) == ("localhost", True)
        assert access.cluster.proxy == "http://127.0.0.1:9"
        assert access.cluster.cert_file is not None
        assert await anyio.Path(access.cluster.cert_file).read_bytes() == certificate
        assert access.where == "$KUBECONFIG"
        # And the CA is the one a request trusts: no proxy, no client certificate.
        del cluster["proxy-url"], document["users"][0]["user"]["client-certificate-data"]
        write(tmp_path / "b" / "config", document)
        async with open_kube(str(second)) as kube:
            assert (await kube.request(LIST, timeout=10))["items"] == []


async def test_insecure_skip_tls_verify_trusts_any_certificate(tmp_path: Path) -> None:
    async with Simulator(tls=True) as sim:
        document = sim.kubeconfig()
        cluster = document["clusters"][0]["cluster"]
        del cluster["certificate-authority-data"]
        cluster["insecure-skip-tls-verify"] = True
        async with open_kube(str(write(tmp_path / "config", document))) as kube:
            assert (await kube.request(LIST, timeout=10))["items"] == []


def test_a_certificate_authority_that_is_no_certificate_is_one_line(
    sim: Simulator, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = sim.kubeconfig()
    cluster = document["clusters"][0]["cluster"]
    cluster["server"] = sim.url.replace("http://", "https://")
    cluster["certificate-authority-data"] = base64.b64encode(b"not a certificate").decode()
    assert main(["scan", "--kubeconfig", str(write(tmp_path / "config", document))]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("zombied: error: --kubeconfig: TLS settings: ")
