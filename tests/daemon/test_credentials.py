"""Credentials that expire: exec plugins and token files are read again, a 401 is no 403.

Against the simulator over real HTTP, with a real exec plugin (a small program that
prints an ``ExecCredential``, as ``gke-gcloud-auth-plugin``, ``aws eks get-token`` and
kubelogin do) and a real token file, the server revoking tokens as they expire.
"""

from __future__ import annotations

import os
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from zombied.credentials import (
    TOKEN_FILE_PERIOD,
    CredentialError,
    Credentials,
    ExecPlugin,
    Token,
    TokenFile,
)
from zombied.daemon import Daemon
from zombied.kube import ApiError, Kind, Request, open_kube

from kubesim import Simulator
from kubesim.rbac import ALLOW_ALL
from tests.daemon.conftest import ConfigFactory, captured_logs
from tests.helpers import eventually

#: Prints the token in ``token`` beside it, with ``expiry`` (if any) as its
#: expirationTimestamp, and counts its runs in ``runs``; fails with the text of
#: ``failure`` on stderr when there is one, and waits while ``hold`` exists.
PLUGIN = """\
import json, os, pathlib, sys, time
here = pathlib.Path(__file__).parent
runs = here / "runs"
runs.write_text(str(int(runs.read_text()) + 1 if runs.exists() else 1))
(here / "pid").write_text(str(os.getpid()))
while (here / "hold").exists():
    time.sleep(0.02)
if (here / "failure").exists():
    sys.stderr.write((here / "failure").read_text())
    sys.exit(1)
status = {"token": (here / "token").read_text().strip()}
expiry = here / "expiry"
if expiry.exists():
    status["expirationTimestamp"] = expiry.read_text().strip()
print(json.dumps({
    "apiVersion": "client.authentication.k8s.io/v1beta1",
    "kind": "ExecCredential",
    "status": status,
}))
"""


class Plugin:
    """An exec credential plugin whose token the test rotates."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir()
        (directory / "plugin.py").write_text(PLUGIN, encoding="utf-8")

    def hand_out(self, token: str, *, expires_in: float | None = None) -> None:
        (self.directory / "token").write_text(token, encoding="utf-8")
        expiry = self.directory / "expiry"
        if expires_in is None:
            expiry.unlink(missing_ok=True)
        else:
            stamp = datetime.now(UTC) + timedelta(seconds=expires_in)
            expiry.write_text(stamp.strftime("%Y-%m-%dT%H:%M:%SZ"), encoding="utf-8")

    def fail(self, stderr: str | None) -> None:
        """Fail every run from now on with ``stderr`` (None: stop failing)."""
        failure = self.directory / "failure"
        if stderr is None:
            failure.unlink(missing_ok=True)
        else:
            failure.write_text(stderr, encoding="utf-8")

    def hold(self, held: bool) -> None:
        """Make runs wait (as a plugin stuck on its identity provider) until released."""
        gate = self.directory / "hold"
        gate.touch() if held else gate.unlink(missing_ok=True)

    @property
    def runs(self) -> int:
        runs = self.directory / "runs"
        return int(runs.read_text()) if runs.exists() else 0

    @property
    def pid(self) -> int:
        return int((self.directory / "pid").read_text())


def kubeconfig_with(sim: Simulator, path: Path, user: dict[str, Any]) -> Path:
    document = sim.kubeconfig()
    document["users"] = [{"name": "sim", "user": user}]
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return path


@pytest.fixture
def plugin(tmp_path: Path) -> Plugin:
    return Plugin(tmp_path / "plugin")


@pytest.fixture
def exec_kubeconfig(sim: Simulator, plugin: Plugin, tmp_path: Path) -> Path:
    user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": sys.executable,
            "args": [str(plugin.directory / "plugin.py")],
            "interactiveMode": "Never",
        }
    }
    return kubeconfig_with(sim, tmp_path / "kubeconfig-exec", user)


def unauthorized(sim: Simulator) -> int:
    return sum(1 for request in sim.requests if request.status == 401)


@pytest.mark.parametrize("source", ["exec", "exec-long-expiry", "token-file"])
async def test_a_rejected_token_is_replaced_by_reading_its_source_again(
    sim: Simulator, plugin: Plugin, exec_kubeconfig: Path, tmp_path: Path, source: str
) -> None:
    first, second = (sim.add_token("zombied", ALLOW_ALL) for _ in range(2))
    token_file = tmp_path / "token"
    expires_in = 3600.0 if source == "exec-long-expiry" else None
    if source == "token-file":
        token_file.write_text(first, encoding="utf-8")
        kubeconfig = kubeconfig_with(sim, tmp_path / "kubeconfig", {"tokenFile": str(token_file)})
    else:
        plugin.hand_out(first, expires_in=expires_in)
        kubeconfig = exec_kubeconfig
    request = Request("list", "pods", "team-a")
    with captured_logs() as logs:
        async with open_kube(str(kubeconfig)) as kube:
            await kube.request(request, timeout=10)
            # The token expires on the server before its holder expected it to; the
            # kubelet rotates a projected service-account token in its file.
            if source == "token-file":
                token_file.write_text(second, encoding="utf-8")
            else:
                plugin.hand_out(second, expires_in=expires_in)
            sim.authorizer.revoke(first)
            await kube.request(request, timeout=10)
    assert unauthorized(sim) == 1
    assert plugin.runs == (0 if source == "token-file" else 2)
    assert not [entry for entry in logs if entry["event"] in ("api.forbidden", "api.unauthorized")]


async def test_an_exec_token_is_replaced_before_it_expires(
    sim: Simulator, plugin: Plugin, exec_kubeconfig: Path
) -> None:
    first = sim.add_token("zombied", ALLOW_ALL)
    # A token this short-lived is replaced half-way through its life.
    plugin.hand_out(first, expires_in=4.0)
    request = Request("list", "pods", "team-a")
    async with open_kube(str(exec_kubeconfig)) as kube:
        await kube.request(request, timeout=10)
        second = sim.add_token("zombied", ALLOW_ALL)
        plugin.hand_out(second, expires_in=3600.0)

        async def renewed() -> bool:
            await kube.request(request, timeout=10)
            return await kube.credentials.header() == f"Bearer {second}"

        await eventually(renewed, timeout=10)
        sim.authorizer.revoke(first)
        await kube.request(request, timeout=10)
    assert unauthorized(sim) == 0


@pytest.mark.looptime
async def test_a_token_file_is_read_again_every_period_of_loop_time(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("one\n", encoding="utf-8")
    async with Credentials(TokenFile(token_file)) as credentials:
        token_file.write_text("two\n", encoding="utf-8")
        await anyio.sleep(TOKEN_FILE_PERIOD - 1)
        assert await credentials.header() == "Bearer one"
        await anyio.sleep(1)

        async def read_again() -> bool:
            return await credentials.header() == "Bearer two"

        await eventually(read_again)


async def test_rejected_credentials_are_reported_as_such_never_as_a_missing_rule(
    sim: Simulator, config: ConfigFactory, plugin: Plugin, exec_kubeconfig: Path
) -> None:
    plugin.hand_out("a-token-the-server-never-issued")
    with captured_logs() as logs:
        async with Daemon(config(kubeconfig=str(exec_kubeconfig))) as daemon:
            await eventually(lambda: "credentials rejected" in daemon.readiness()[1])
            ok, why = daemon.readiness()
    assert not ok
    assert "missing RBAC rule" not in why
    assert plugin.runs >= 2  # the 401 made it ask the plugin once more
    (rejected,) = [entry for entry in logs if entry["event"] == "api.unauthorized"]
    assert "missing_rule" not in rejected
    assert not [entry for entry in logs if entry["event"] == "api.forbidden"]


#: What gke-gcloud-auth-plugin says when the gcloud login has expired: what failed
#: first, what to do last.
GCLOUD_FAILURE = (
    "F0101 00:00:00.000000 1 cred.go:145] print credential failed with error: Failed to "
    "retrieve access token:: failure while executing gcloud, with args [config "
    "config-helper --format=json]: exit status 1 (err: ERROR: (gcloud.config.config-helper) "
    "There was a problem refreshing your current auth tokens: Reauthentication failed. "
    + "cannot prompt during non-interactive execution. " * 8
    + "\nPlease run:\n\n  $ gcloud auth login\n\nto obtain new credentials.\n)\n"
)


async def test_requests_rejected_together_share_one_plugin_run_and_one_clear_line(
    sim: Simulator,
    plugin: Plugin,
    exec_kubeconfig: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    first = sim.add_token("zombied", ALLOW_ALL)
    plugin.hand_out(first)
    request = Request("list", "pods", "team-a")
    failures: list[BaseException] = []

    async def rejected(kube: Any) -> None:
        try:
            await kube.request(request, timeout=30)
        except ApiError as exc:
            failures.append(exc)

    with captured_logs() as logs:
        async with open_kube(str(exec_kubeconfig)) as kube:
            plugin.fail(GCLOUD_FAILURE)
            sim.authorizer.revoke(first)
            async with anyio.create_task_group() as tg:
                for _ in range(5):
                    tg.start_soon(rejected, kube)
    assert [getattr(exc, "kind", None) for exc in failures] == [Kind.UNAUTHORIZED] * 5
    assert plugin.runs == 2  # at start, then once for all five
    (failed,) = [entry for entry in logs if entry["event"] == "api.exec_plugin_failed"]
    assert "\n" not in failed["error"]
    assert failed["error"].startswith("exec plugin python")
    assert "gcloud auth login to obtain new credentials" in failed["error"]
    assert not [record for record in caplog.records if record.name.startswith("kubernetes")]


async def test_a_request_waits_for_an_expired_token_no_longer_than_its_deadline(
    sim: Simulator, plugin: Plugin, exec_kubeconfig: Path
) -> None:
    plugin.hand_out(sim.add_token("zombied", ALLOW_ALL), expires_in=-60)
    async with open_kube(str(exec_kubeconfig)) as kube:
        plugin.hold(True)  # the refresh the expired token needs hangs
        # A lease renewal's deadline: the request fails in time, leadership ends on time.
        with anyio.fail_after(15), pytest.raises(ApiError) as failed:  # a bound for a hang
            await kube.request(Request("get", "leases", "zombied", "zombied"), timeout=0.5)
        assert failed.value.kind is Kind.TRANSIENT
        plugin.hold(False)


async def test_a_plugin_that_hangs_is_killed_at_its_deadline(plugin: Plugin) -> None:
    plugin.hand_out("token")
    plugin.hold(True)
    source = ExecPlugin(sys.executable, (str(plugin.directory / "plugin.py"),), timeout=0.5)
    with pytest.raises(CredentialError, match=r"did not answer within 0\.5s"):
        async with Credentials(source):
            pass
    with pytest.raises(ProcessLookupError):
        os.kill(plugin.pid, 0)


class SlowSource:
    """A token source whose second token comes when the test says so."""

    failure_event = "api.credentials_failed"
    refreshable = True

    def __init__(self) -> None:
        self.fetches = 0
        self.second = anyio.Event()

    async def fetch(self) -> Token:
        self.fetches += 1
        if self.fetches == 1:
            now = anyio.current_time()
            return Token("Bearer one", refresh_at=now + 10, expires_at=now + 20)
        await self.second.wait()
        return Token("Bearer two")


@pytest.mark.looptime
async def test_one_refresh_at_a_time_behind_a_token_still_valid() -> None:
    source = SlowSource()
    async with Credentials(source) as credentials:
        start = anyio.current_time()
        await anyio.sleep(15)  # due, still valid: the refresh runs behind the request
        assert await credentials.header() == "Bearer one"
        assert anyio.current_time() == start + 15
        await anyio.sleep(10)  # expired: every request waits for the one refresh
        results: list[str | None] = []

        async def wait_for_it() -> None:
            results.append(await credentials.header())

        async with anyio.create_task_group() as tg:
            for _ in range(5):
                tg.start_soon(wait_for_it)
            await anyio.wait_all_tasks_blocked()
            source.second.set()
    assert results == ["Bearer two"] * 5
    assert source.fetches == 2
