"""Hostile configuration files: one line saying what is wrong, exit code 2, no traceback.

Every broken file is tried through `load_config` (a `ConfigError` naming the file) and
through a real ``python -m zombied run --config FILE`` process. A file wrong in one key
is the unit tests' business; these are garbage, bombs and floods.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from zombied.config import load_config
from zombied.errors import ConfigError, Source

BROKEN: dict[str, bytes] = {
    "not-yaml": b"rules: [node-shutdown\n  qps: {{{\n",
    "tabs": b"rules:\n\t- name: node-shutdown\n",
    "binary": b"\x00\xff\xfe\x89PNG\r\n\x1a\n",
    "huge-garbage": b"qps: " + b"9" * 100_000 + b"x\n",
    "anchors-bomb": (
        b'a: &a ["x","x","x","x","x","x","x","x","x"]\n'
        b"b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
        b"c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
        b"d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"
        b"e: [*d,*d,*d,*d,*d,*d,*d,*d,*d]\n"
    ),
}


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Path:
    """A valid kubeconfig for a server nobody runs: only the config file can be wrong."""
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: s, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: s, user: u}}]\n"
    )
    return path


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_load_config_names_the_file(name: str, tmp_path: Path, kubeconfig: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_bytes(BROKEN[name])
    with pytest.raises(ConfigError) as caught:
        load_config("run", ["--config", str(path), "--kubeconfig", str(kubeconfig)], {})
    assert (caught.value.source, caught.value.where) == (Source.FILE, str(path))


@pytest.mark.subprocess
@pytest.mark.parametrize("name", ["not-yaml", "binary", "huge-garbage"])
def test_zombied_run_exits_2_with_one_line(name: str, tmp_path: Path, kubeconfig: Path) -> None:
    path = tmp_path / f"{name}.yaml"
    path.write_bytes(BROKEN[name])
    done = subprocess.run(
        [sys.executable, "-m", "zombied", "run", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"KUBECONFIG": str(kubeconfig), "PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
