"""Hostile configuration files: garbage, bombs and floods are a `ConfigError` naming
the file, never a crash or a hang. A file wrong in one key is the unit tests' business;
that a configuration error is one line and exit code 2, in a real process too,
tests/daemon/test_cli's.
"""

from __future__ import annotations

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


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_load_config_names_the_file(name: str, tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_bytes(BROKEN[name])
    with pytest.raises(ConfigError) as caught:
        load_config("run", ["--config", str(path)], {})
    assert (caught.value.source, caught.value.where) == (Source.FILE, str(path))
    assert "\n" not in str(caught.value)
