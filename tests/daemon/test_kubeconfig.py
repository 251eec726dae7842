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


def exec_plugin(document: dict[str, Any]) -> None:
    failure = "import sys; sys.exit('token expired\\nrun login-again to obtain new credentials')"
    exec_user = {"command": sys.executable, "args": ["-c", failure]}
    exec_user["apiVersion"] = "client.authentication.k8s.io/v1beta1"
    document["users"] = [{"name": "sim", "user": {"exec": exec_user}}]


def auth_provider(document: dict[str, Any]) -> None:
    oidc = {"name": "oidc", "config": {"id-token": "a.b.c", "refresh-token": "r"}}
    document["users"] = [{"name": "sim", "user": {"auth-provider": oidc}}]


def no_certificate(document: dict[str, Any]) -> None:
    cluster = document["clusters"][0]["cluster"]
    cluster["server"] = cluster["server"].replace("http://", "https://")
    cluster["certificate-authority-data"] = base64.b64encode(b"not a certificate").decode()


@pytest.mark.parametrize(
    ("argv", "change", "expected"),
    [
        # The option or variable to fix, and what in it is wrong.
        (["--context", "nope"], None, ["--context: ", "'nope'", "$KUBECONFIG"]),
        ([], "missing", ["$KUBECONFIG: ", "nowhere"]),
        ([], "broken", ["$KUBECONFIG: "]),
        # A failing exec plugin at start: its own hint, and no line of the library's.
        ([], exec_plugin, ["$KUBECONFIG: exec plugin python", "run login-again to obtain"]),
        ([], auth_provider, ["auth-provider 'oidc'", "kubelogin"]),  # nothing would refresh it
        ([], no_certificate, ["$KUBECONFIG: TLS settings: "]),
    ],
    ids=["unknown-context", "no-file", "broken-file", "exec-plugin", "auth-provider", "no-ca"],
)
def test_errors_name_where_to_look_in_one_line(
    sim: Simulator,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    change: Any,
    expected: list[str],
) -> None:
    document = sim.kubeconfig(contexts={"other": "token"})
    if callable(change):
        change(document)
    path = write(tmp_path / "config", document)
    if change == "broken":
        path.write_text("clusters: [unclosed", encoding="utf-8")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "nowhere" if change == "missing" else path))
    assert main(["scan", *argv]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert line.startswith("zombied: error: ")
    assert all(part in line for part in expected), line
    assert "--kubeconfig" not in line  # $KUBECONFIG named it
    assert captured.out == ""


async def test_the_cluster_settings_of_the_kubeconfig_are_the_ones_used(tmp_path: Path) -> None:
    async with Simulator(tls=True) as sim:
        assert sim.ca_pem is not None
        document = sim.kubeconfig()
        cluster = document["clusters"][0]["cluster"]
        # A CA file named relative to its kubeconfig, in the second of two files, the
        # context chosen in the first.
        (tmp_path / "b").mkdir()
        (tmp_path / "b" / "ca.crt").write_bytes(sim.ca_pem)
        del cluster["certificate-authority-data"]
        cluster |= {"certificate-authority": "ca.crt", "tls-server-name": "localhost"}
        cluster["proxy-url"] = "http://127.0.0.1:9"
        certificate = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
        user = document["users"][0]["user"]
        user["client-certificate-data"] = base64.b64encode(certificate).decode()
        first = write(tmp_path / "a" / "config", {"current-context": "sim"})
        second = write(tmp_path / "b" / "config", {**document, "current-context": "elsewhere"})
        listed = os.pathsep.join([str(tmp_path / "missing"), str(first), str(second)])
        access = await load_access(None, None, {"KUBECONFIG": listed})
        assert access.cluster.server == sim.url
        assert access.cluster.ca_file == str(tmp_path / "b" / "ca.crt")
        assert (access.cluster.server_name, access.cluster.verify) == ("localhost", True)
        assert access.cluster.proxy == "http://127.0.0.1:9"
        assert access.cluster.cert_file is not None
        assert await anyio.Path(access.cluster.cert_file).read_bytes() == certificate
        assert access.where == "$KUBECONFIG"
        # And the CA is the one a request trusts: no proxy, no client certificate.
        del cluster["proxy-url"], user["client-certificate-data"]
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
