"""The README's two ways to try zombied work as written.

``make demo`` plays a preemption and judges zombied by what the API server saw. The
one-minute try is run verbatim: the commands of its ``sh`` block, then every ``$``
command of its transcripts, in one bash with job control on (as at a terminal: ``%1``
and Ctrl-C work), with the real kubectl on PATH against kubesim. The only change is
the port of ``zombied run --listen``, which another program may hold. What each
transcript shows must be what the command printed, less what differs from run to run
(ages, times, uids).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from bench.demo import MIN_AGE_S, run_demo

from tests.helpers import free_port

from .manifests import ROOT
from .markdown import code_blocks

README = ROOT / "README.md"
SECTION = "## Try it in a minute"
#: The line the script prints before each transcript command's output.
MARK = "@@ transcript"

pytestmark = [pytest.mark.subprocess, pytest.mark.kubectl]


def _try_it() -> tuple[str, list[tuple[str, list[str]]]]:
    """The section's setup commands, and each transcript command with its shown output."""
    section = README.read_text(encoding="utf-8").split(SECTION, 1)[1].split("\n## ", 1)[0]
    setup = code_blocks(section, "sh")[0]
    transcript: list[tuple[str, list[str]]] = []
    for block in code_blocks(section, ""):
        for line in block.splitlines():
            if line.startswith("$ "):
                transcript.append((line[2:], []))
            else:
                transcript[-1][1].append(line)
    return setup, transcript


def _script(setup: str, transcript: list[tuple[str, list[str]]]) -> str:
    lines = ["set -euo pipefail -m", "trap 'kill $(jobs -p) 2>/dev/null || true' EXIT", setup]
    for index, (command, _) in enumerate(transcript):
        lines.append(f"echo '{MARK} {index}'")
        if command.startswith("zombied run "):
            # Ctrl-C once the zombie is gone, as the README says it will be.
            lines += [
                command.replace("127.0.0.1:8080", f"127.0.0.1:{free_port()}") + " &",
                "until ! kubectl -n team-a get pod web-0 >/dev/null 2>&1; do sleep 1; done",
                "kill -INT %2",
                "wait %2",
            ]
        else:
            lines.append(command)
    lines += [f"echo '{MARK} end'", "kill %1", "wait %1"]  # "`kill %1` stops the simulator"
    return "\n".join(lines) + "\n"


def _rows(lines: list[str]) -> list[list[str]]:
    """A table's rows as columns, without an AGE column (it differs from run to run)."""
    header = lines[0].split()
    keep = [i for i, name in enumerate(header) if name != "AGE"]
    rows = [line.split(None, len(header) - 1) for line in lines if line.strip()]
    return [[row[i] for i in keep if i < len(row)] for row in rows]


def _comparable(command: str, lines: list[str]) -> object:
    """What of a command's output the README's transcript must show as it is."""
    lines = [line for line in lines if line.strip()]
    if command.startswith("zombied run "):
        return sorted({m for line in lines for m in re.findall(r"\b[a-z]+\.[a-z_]+\b", line)})
    if command.startswith("zombied explain "):
        return [" ".join(line.split()) for line in lines if line.startswith("Decision:")]
    if lines and lines[0].split()[0] in ("NAMESPACE", "REASON"):
        return _rows(lines)
    return lines


@pytest.mark.timeout(300)
def test_the_one_minute_try_runs_verbatim(tmp_path: Path) -> None:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not on PATH")
    setup, transcript = _try_it()
    assert transcript, "the section shows no transcript"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ZOMBIED_", "KUBE"))}
    env |= {"TMPDIR": str(tmp_path), "HOME": str(tmp_path)}
    result = subprocess.run(
        ["bash", "-c", _script(setup, transcript)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # as a terminal shows both
        text=True,
        check=False,
        timeout=240,
    )
    assert result.returncode == 0, result.stdout[-5000:]
    printed = re.split(rf"^{MARK} \S+\n", result.stdout, flags=re.MULTILINE)[1:-1]
    assert len(printed) == len(transcript)
    for (command, shown), output in zip(transcript, printed, strict=True):
        got, expected = _comparable(command, output.splitlines()), _comparable(command, shown)
        if command.startswith("zombied run "):
            assert set(expected) <= set(got), (command, output)
        else:
            assert got == expected, (command, output)


async def test_make_demo_reaps_every_zombie_once_due_and_nothing_else() -> None:
    summary = await run_demo()
    assert summary.problems == []
    assert summary.exit_code == 0
    assert summary.zombies
    assert len(summary.reaped) == len(summary.zombies)
    # Counted from the terminal time the kubelet wrote, as zombied's min age is.
    assert min(summary.delays) >= MIN_AGE_S
