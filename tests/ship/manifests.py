"""Rendering the kustomize manifests with the real kubectl (the semantics of an
operator's ``kubectl apply -k``), for the shipping tests."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = BASE = ROOT / "manifests"
NAMESPACED = MANIFESTS / "overlays" / "namespaced"
#: The namespaces the namespaced overlay watches.
OVERLAY_NAMESPACES = ("team-a", "team-b")

Obj = dict[str, Any]


def kubectl() -> str:
    path = shutil.which("kubectl")
    if path is None:
        pytest.skip("kubectl is not on PATH: cannot render the kustomize manifests")
    return path


def render(directory: Path) -> list[Obj]:
    """Every object ``kubectl apply -k directory`` would send, in kustomize's order."""
    result = subprocess.run(
        [kubectl(), "kustomize", str(directory)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, f"kubectl kustomize {directory} failed:\n{result.stderr}"
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def find(objects: list[Obj], kind: str, name: str | None = None) -> list[Obj]:
    return [
        obj
        for obj in objects
        if obj["kind"] == kind and (name is None or obj["metadata"]["name"] == name)
    ]


def one(objects: list[Obj], kind: str, name: str | None = None) -> Obj:
    found = find(objects, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def container(objects: list[Obj], deployment_name: str = "zombied") -> Obj:
    deployment = one(objects, "Deployment", deployment_name)
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    result: Obj = containers[0]
    return result


def flag_value(args: list[str], flag: str) -> str | None:
    """The value of ``--flag=value`` or ``--flag value`` in a container's args."""
    for index, arg in enumerate(args):
        if arg.startswith(f"{flag}="):
            return arg.split("=", 1)[1]
        if arg == flag and index + 1 < len(args):
            return args[index + 1]
    return None
