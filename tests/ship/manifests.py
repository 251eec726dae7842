"""Rendering the kustomize manifests with the real kubectl (the semantics of an
operator's ``kubectl apply -k``), for the shipping tests."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from zombied.config import Config, load_config

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = BASE = ROOT / "manifests"
NAMESPACED = MANIFESTS / "overlays" / "namespaced"
#: For servers before Kubernetes 1.27: the base without its PodDisruptionBudget.
NO_DISRUPTION_BUDGET = MANIFESTS / "components" / "no-disruption-budget"
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


def overlay(directory: Path, kustomization: str, files: dict[str, str] | None = None) -> Path:
    """A kustomization of one's own in ``directory``, as the docs show one: its
    ``path/to/zombied`` is this checkout; ``files`` (name: text) are written beside it."""
    directory.mkdir(parents=True, exist_ok=True)
    checkout = os.path.relpath(ROOT, directory)
    text = kustomization.replace("path/to/zombied", checkout)
    (directory / "kustomization.yaml").write_text(text, encoding="utf-8")
    for name, content in (files or {}).items():
        (directory / name).write_text(content, encoding="utf-8")
    return directory


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


def mounted_files(objects: list[Obj], deployment_name: str = "zombied") -> dict[str, str]:
    """The files the Deployment's container mounts from ConfigMaps: path -> text."""
    pod = one(objects, "Deployment", deployment_name)["spec"]["template"]["spec"]
    volumes = {volume["name"]: volume for volume in pod.get("volumes", [])}
    files = {}
    for mount in container(objects, deployment_name).get("volumeMounts", []):
        config_map = one(objects, "ConfigMap", volumes[mount["name"]]["configMap"]["name"])
        for key, text in config_map["data"].items():
            files[f"{mount['mountPath']}/{key}"] = text
    return files


def pod_config(
    objects: list[Obj], namespace: str, directory: Path, deployment_name: str = "zombied"
) -> Config:
    """The configuration zombied runs with in the Deployment's pod in ``namespace``: its
    arguments as the kubelet expands them, its environment, and the files it mounts
    (written under ``directory``, where the environment then points)."""
    main = container(objects, deployment_name)
    files = mounted_files(objects, deployment_name)
    for path, text in files.items():
        local = directory / path.lstrip("/")
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_text(text, encoding="utf-8")
    env = {
        item["name"]: str(directory / item["value"].lstrip("/"))
        if item["value"] in files
        else item["value"]
        for item in main["env"]
        if "value" in item
    }
    args = [arg.replace("$(POD_NAMESPACE)", namespace) for arg in main["args"]]
    return load_config(args[0], args[1:], env)
