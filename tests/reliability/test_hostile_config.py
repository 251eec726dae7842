"""Hostile configuration files: one line saying what is wrong, exit code 2, no traceback.

Every broken file is tried twice: through `load_config` (a `ConfigError` with a
one-line message) and through a real ``python -m zombied run --config FILE`` process.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from zombied.config import load_config
from zombied.errors import ConfigError

BROKEN: dict[str, bytes] = {
    "empty": b"",
    "only-a-comment": b"# nothing here\n",
    "not-yaml": b"rules: [node-shutdown\n  qps: {{{\n",
    "tabs": b"rules:\n\t- name: node-shutdown\n",
    "binary": b"\x00\xff\xfe\x89PNG\r\n\x1a\n",
    "top-level-list": b"- rules\n- qps\n",
    "top-level-scalar": b"just a string\n",
    "unknown-key": b"qps: 5\nbogus_option: 1\n",
    "wrong-type-qps": b'qps: "fast"\n',
    "wrong-type-burst": b"burst: [1, 2]\n",
    "negative-qps": b"qps: -1\n",
    "wrong-type-rules": b"rules: 5\n",
    "unknown-rule": b"rules:\n  - name: everything\n",
    "rule-bad-age": b"rules:\n  - name: node-shutdown\n    minAge: soon\n",
    # now + min age would pass datetime.max: refused, not a crash at the first pod.
    "min-age-beyond-the-calendar": b"rules:\n  - name: node-shutdown\n    minAge: 99999999999h\n",
    "impossible-date": b"leaseName: 2024-13-01\n",
    "integer-too-long": b"burst: " + b"9" * 5000 + b"\n",
    "nested-too-deep": b"[" * 5000,
    "wrong-type-namespaces": b"namespaces: {a: 1}\n",
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


@pytest.mark.parametrize("content", [BROKEN[name] for name in sorted(BROKEN)], ids=sorted(BROKEN))
def test_load_config_rejects_with_one_line(
    content: bytes, tmp_path: Path, kubeconfig: Path
) -> None:
    path = tmp_path / "config.yaml"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as caught:
        load_config("run", ["--config", str(path), "--kubeconfig", str(kubeconfig)], {})
    message = str(caught.value)
    assert message.startswith("--")
    assert "\n" not in message.strip()


@pytest.mark.subprocess
@pytest.mark.parametrize(
    "name",
    ["empty", "not-yaml", "binary", "unknown-key", "wrong-type-qps", "min-age-beyond-the-calendar"],
)
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
