"""The container image, checked without a Docker engine.

hadolint lints the Dockerfile (``.hadolint.yaml``: every finding fails, the OCI labels
are required; it also rejects a floating tag, a shell-form ENTRYPOINT/CMD and a root
USER). BuildKit's own parser (the ``dockerfile`` package) reads the instructions this
test holds to what the deployment relies on: a pinned slim base, a builder stage, a
runtime stage that installs nothing but the built wheel, a numeric non-root user,
exec-form ENTRYPOINT/CMD (so SIGTERM reaches zombied), no writes at run time. Then the
wheel is built as the builder stage builds it, installed on its own, and its console
script is run the way the image runs it.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import dockerfile
import pytest

from .manifests import ROOT

DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
HADOLINT = Path(sysconfig.get_path("scripts")) / "hadolint"

# One process builds the wheel once for all of these tests.
pytestmark = pytest.mark.xdist_group("wheel")


def project_version() -> str:
    with (ROOT / "pyproject.toml").open("rb") as file:
        version: str = tomllib.load(file)["project"]["version"]
    return version


@dataclass
class Stage:
    """One build stage: its FROM and the instructions after it."""

    base: str
    name: str | None
    commands: list[dockerfile.Command] = field(default_factory=list)

    def all(self, keyword: str) -> list[dockerfile.Command]:
        return [c for c in self.commands if c.cmd == keyword]

    def values(self, keyword: str) -> list[str]:
        """The arguments of every ``keyword`` instruction, joined as one string each."""
        return [" ".join(c.value) for c in self.all(keyword)]

    def pairs(self, keyword: str) -> dict[str, str]:
        """The key=value pairs of every ENV or LABEL instruction (quotes removed)."""
        found: dict[str, str] = {}
        for command in self.all(keyword):
            values = command.value
            for key, value in zip(values[::2], values[1::2], strict=True):
                found[key] = value.removeprefix('"').removesuffix('"')
        return found


def stages_of(path: Path) -> list[Stage]:
    stages: list[Stage] = []
    for command in dockerfile.parse_file(str(path)):
        if command.cmd == "FROM":
            base, *rest = command.value
            name = rest[1] if len(rest) == 2 and rest[0].upper() == "AS" else None
            stages.append(Stage(base, name))
        elif stages:
            stages[-1].commands.append(command)
        else:
            assert command.cmd == "ARG", f"{command.cmd} before the first FROM"
    return stages


def pip_install_targets(shell: str) -> list[str]:
    """What each ``pip install`` of a RUN's shell command installs (not option values)."""
    takes_value = {"-c", "--constraint", "-r", "--requirement", "--target", "-t", "--prefix"}
    commands: list[list[str]] = [[]]
    for word in shlex.split(shell):
        if word in ("&&", ";", "||"):
            commands.append([])
        else:
            commands[-1].append(word)
    targets: list[str] = []
    for command in commands:
        if "pip" not in " ".join(command) or "install" not in command:
            continue
        skip = False
        for word in command[command.index("install") + 1 :]:
            if skip:
                skip = False
            elif word in takes_value:
                skip = True
            elif not word.startswith("-"):
                targets.append(word)
    return targets


@pytest.fixture(scope="module")
def stages() -> list[Stage]:
    return stages_of(DOCKERFILE)


def hadolint(path: Path) -> list[dict[str, object]]:
    result = subprocess.run(
        [str(HADOLINT), "--config", str(ROOT / ".hadolint.yaml"), "--format", "json", str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode in (0, 1), result.stderr
    findings: list[dict[str, object]] = json.loads(result.stdout or "[]")
    return findings


def test_hadolint_finds_nothing() -> None:
    assert hadolint(DOCKERFILE) == []


@pytest.mark.parametrize(
    ("change", "code"),
    [
        (("python:3.11.11-slim-bookworm AS runtime", "python:latest AS runtime"), "DL3007"),
        (('ENTRYPOINT ["zombied"]', "ENTRYPOINT zombied"), "DL3025"),
        (("USER 65532:65532", "USER root"), "DL3002"),
        (('org.opencontainers.image.licenses="Apache-2.0" \\', "\\"), "DL3049"),
    ],
    ids=["floating-tag", "shell-form", "root-user", "missing-label"],
)
def test_hadolint_rejects_what_the_image_must_not_do(
    tmp_path: Path, change: tuple[str, str], code: str
) -> None:
    old, new = change
    text = DOCKERFILE.read_text(encoding="utf-8")
    assert old in text
    broken = tmp_path / "Dockerfile"
    broken.write_text(text.replace(old, new), encoding="utf-8")
    assert code in {finding["code"] for finding in hadolint(broken)}


def test_pip_install_targets_skip_option_values() -> None:
    shell = "pip install -c c.txt /w/z.whl && python -m pip install --target t q"
    assert pip_install_targets(shell) == ["/w/z.whl", "q"]


def test_multi_stage_on_a_pinned_slim_python(stages: list[Stage]) -> None:
    assert len(stages) >= 2
    for stage in stages:
        image, _, tag = stage.base.partition(":")
        assert image in ("python", "docker.io/library/python"), stage.base
        # A full patch version and the slim variant, never a floating tag.
        assert tag.split("-")[0].count(".") == 2, f"pin the base image: {stage.base}"
        assert "-slim" in tag, f"use the slim variant: {stage.base}"
        assert tag.split(".")[:2] >= ["3", "11"]


def test_builder_builds_the_wheel(stages: list[Stage]) -> None:
    builder = stages[0]
    assert any("-m build --wheel" in run for run in builder.values("RUN"))


def test_runtime_installs_only_the_wheel(stages: list[Stage]) -> None:
    runtime = stages[-1]
    runs = runtime.values("RUN")
    targets = [t for run in runs for t in pip_install_targets(run)]
    assert targets, "the runtime stage must install the wheel"
    assert all(t.endswith(".whl") for t in targets), targets
    installs = [run for run in runs if pip_install_targets(run)]
    # Dependencies resolve to the same pins as the tested environment.
    assert all({"-c", "--constraint"} & set(shlex.split(run)) for run in installs)
    assert not runtime.all("ADD")
    copies = runtime.all("COPY")
    assert all("--from=builder" in copy.flags for copy in copies), copies


def test_runtime_runs_as_numeric_non_root(stages: list[Stage]) -> None:
    users = stages[-1].values("USER")
    assert users, "the runtime stage must set USER"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit()
    assert int(uid) == 65532
    assert not gid or int(gid) != 0


def test_entrypoint_and_cmd_are_exec_form(stages: list[Stage]) -> None:
    runtime = stages[-1]
    # JSON arrays: zombied is PID 1 and gets SIGTERM itself, no shell in between.
    (entrypoint,) = runtime.all("ENTRYPOINT")
    (cmd,) = runtime.all("CMD")
    assert entrypoint.json
    assert cmd.json
    assert entrypoint.value == ("zombied",)
    assert cmd.value == ("run",)
    assert runtime.values("EXPOSE") == ["8080"]


def test_runtime_writes_nothing(stages: list[Stage]) -> None:
    env = stages[-1].pairs("ENV")
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert env["PIP_NO_CACHE_DIR"] == "1"
    assert not stages[-1].all("VOLUME")


def test_oci_labels(stages: list[Stage]) -> None:
    # hadolint requires the labels (.hadolint.yaml); their values are checked here.
    labels = stages[-1].pairs("LABEL")
    assert labels["org.opencontainers.image.title"] == "zombied"
    assert labels["org.opencontainers.image.version"] == "${VERSION}"
    assert labels["org.opencontainers.image.base.name"].endswith(stages[-1].base)
    # `make image` passes the version; the default must not go stale either.
    assert f"VERSION={project_version()}" in stages[-1].values("ARG")


def test_dockerignore_admits_exactly_what_the_build_copies(stages: list[Stage]) -> None:
    lines = [
        line.strip()
        for line in DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*", "start from an empty context and admit files one by one"
    admitted = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    copied = {
        source.rstrip("/")
        for stage in stages
        for copy in stage.all("COPY")
        if not any(flag.startswith("--from=") for flag in copy.flags)
        for source in copy.value[:-1]
    }
    mounted = {
        part.split("=", 1)[1]
        for stage in stages
        for run in stage.all("RUN")
        for flag in run.flags
        if flag.startswith("--mount=") and "from=" not in flag
        for part in flag.removeprefix("--mount=").split(",")
        if part.startswith("source=")
    }
    assert copied | mounted <= admitted
    # pyproject.toml names README.md as the long description: the build needs it.
    assert {"pyproject.toml", "README.md", "zombied", "constraints.txt"} <= admitted


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built the way the builder stage builds it."""
    out = tmp_path_factory.mktemp("dist")
    result = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (built,) = out.glob("zombied-*.whl")
    return built


@pytest.mark.subprocess
def test_wheel_contains_the_package_and_its_console_script(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        scripts = archive.read(entry_points).decode()
    assert "zombied/py.typed" in names
    assert "zombied/cli.py" in names
    assert not [n for n in names if n.startswith(("tests/", "bench/"))]
    assert "zombied = zombied.cli:main" in scripts


@pytest.mark.subprocess
def test_wheel_ships_no_simulator(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA")))
    assert not [n for n in names if "kubesim" in n or "/sim/" in n]
    requires = [line for line in metadata.decode().splitlines() if line.startswith("Requires-Dist")]
    assert requires
    assert not [line for line in requires if "kubesim" in line]


@pytest.mark.subprocess
def test_console_script_runs_as_in_the_image(wheel: Path, tmp_path: Path) -> None:
    # Install only the wheel, as the runtime stage does; dependencies come from this
    # environment (already pinned by constraints.txt) so the test needs no network.
    target = tmp_path / "site"
    install = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            "--target",
            str(target),
            str(wheel),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert install.returncode == 0, install.stderr
    script = target / "bin" / "zombied"
    assert script.is_file()
    before = sorted(p.relative_to(target) for p in target.rglob("*"))
    env = {
        key: value for key, value in os.environ.items() if not key.startswith(("ZOMBIED_", "KUBE"))
    }
    env |= {"PYTHONPATH": str(target), "PYTHONDONTWRITEBYTECODE": "1", "HOME": str(tmp_path)}
    for argv in (["version"], ["--help"], ["run", "--help"]):
        result = subprocess.run(
            [str(script), *argv],
            capture_output=True,
            text=True,
            check=False,
            cwd=tmp_path,
            env=env,
            timeout=60,
        )
        assert result.returncode == 0, f"zombied {' '.join(argv)}: {result.stderr}"
        assert result.stdout.strip()
    version = subprocess.run(
        [str(script), "version"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
        env=env,
        timeout=60,
    )
    assert project_version() in version.stdout
    # The code that ran is the wheel's, not the source tree's.
    origin = subprocess.run(
        [sys.executable, "-c", "import zombied.cli; print(zombied.cli.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
        env=env,
        timeout=60,
    )
    assert Path(origin.stdout.strip()).is_relative_to(target)
    # Nothing was written next to the installed code (read-only root filesystem).
    assert sorted(p.relative_to(target) for p in target.rglob("*")) == before
