"""The shipped RBAC, case by case: what each install of ``manifests/`` gives zombied.

Each (rule, verb) of the rendered Roles and ClusterRoles is a `Removal`: without it the
daemon must run into a 403 for exactly that verb and resource, and with all of them
into none. ``tests/realserver/test_rbac_real.py`` runs every case against a real
kube-apiserver, with the Deployment's own arguments.
"""

from __future__ import annotations

import copy
import shutil
from dataclasses import dataclass
from pathlib import Path

from .manifests import BASE, NAMESPACED, OVERLAY_NAMESPACES, Obj, container, render

OWN_NAMESPACE = "zombied"
RBAC_KINDS = ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")


@dataclass(frozen=True)
class Variant:
    """What one install of the manifests gives zombied: its RBAC and its arguments."""

    rbac: list[Obj]
    args: list[str]
    namespaces: tuple[str, ...]


def _variant(directory: Path, namespaces: tuple[str, ...]) -> Variant:
    objects = render(directory)
    rbac = [obj for obj in objects if obj["kind"] in RBAC_KINDS]
    # The kubelet expands $(VAR) in args from the container's env.
    args = [a.replace("$(POD_NAMESPACE)", OWN_NAMESPACE) for a in container(objects)["args"]]
    return Variant(rbac, args, namespaces)


def _without(rbac: list[Obj], role: tuple[str, str, str], index: int, verb: str) -> list[Obj]:
    """``rbac`` with ``verb`` removed from rule ``index`` of ``role`` (kind, ns, name)."""
    result = copy.deepcopy(rbac)
    for obj in result:
        meta = obj["metadata"]
        if (obj["kind"], meta.get("namespace", ""), meta["name"]) == role:
            rule = obj["rules"][index]
            rule["verbs"] = [v for v in rule["verbs"] if v != verb]
            if not rule["verbs"]:
                del obj["rules"][index]
    return result


@dataclass(frozen=True)
class Removal:
    role: tuple[str, str, str]
    index: int
    verb: str
    resource: str

    @property
    def id(self) -> str:
        kind, namespace, name = self.role
        where = f"{kind}/{namespace}/{name}" if namespace else f"{kind}/{name}"
        return f"{where}:{self.resource}:{self.verb}"


def _removals(rbac: list[Obj]) -> list[Removal]:
    removals = []
    for obj in rbac:
        if obj["kind"] not in ("Role", "ClusterRole"):
            continue
        meta = obj["metadata"]
        role = (obj["kind"], meta.get("namespace", ""), meta["name"])
        for index, rule in enumerate(obj["rules"]):
            for resource in rule["resources"]:
                removals.extend(Removal(role, index, verb, resource) for verb in rule["verbs"])
    return removals


def _collect() -> tuple[dict[str, Variant], list[tuple[str, Removal]]]:
    if shutil.which("kubectl") is None:
        return {}, []
    variants = {
        "base": _variant(BASE, ()),
        "namespaced": _variant(NAMESPACED, OVERLAY_NAMESPACES),
    }
    cases = [("base", removal) for removal in _removals(variants["base"].rbac)]
    # The overlay's own Roles; its leader-election Role is the base's, covered above.
    cases.extend(
        ("namespaced", removal)
        for removal in _removals(variants["namespaced"].rbac)
        if removal.role[1] in OVERLAY_NAMESPACES
    )
    return variants, cases


VARIANTS, REMOVALS = _collect()
