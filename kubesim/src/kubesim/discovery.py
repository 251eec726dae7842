"""What the simulated API server says about itself: discovery documents and tables.

This module owns the answers to ``/version``, ``/api``, ``/api/v1``, ``/apis`` and
the group documents (what kubectl reads to map ``pods`` and ``po`` to a path), and
the ``meta.k8s.io/v1`` ``Table`` rendering that ``kubectl get`` asks for, and the
OpenAPI v2 (JSON or protobuf) and v3 documents kubectl reads before ``apply``. It builds
documents from :data:`kubesim.store.RESOURCES`; it never touches the store's
objects beyond reading the ones it is given.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import yaml

from kubesim.store import RESOURCES, ResourceType

JSONDict = dict[str, Any]


def groups() -> dict[str, str]:
    """API group name to its (only) version, for the named groups."""
    return {rt.group: rt.version for rt in RESOURCES.values() if rt.group}


def api_versions(server_address: str) -> JSONDict:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ],
    }


def _group_doc(group: str, version: str) -> JSONDict:
    gv = {"groupVersion": f"{group}/{version}", "version": version}
    return {"name": group, "versions": [gv], "preferredVersion": gv}


def api_group_list() -> JSONDict:
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [_group_doc(g, v) for g, v in sorted(groups().items())],
    }


def api_group(group: str) -> JSONDict | None:
    version = groups().get(group)
    if version is None:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group_doc(group, version)}


def _resource_entry(rt: ResourceType) -> JSONDict:
    entry: JSONDict = {
        "name": rt.name,
        "singularName": rt.singular,
        "namespaced": rt.namespaced,
        "kind": rt.kind,
        "verbs": list(rt.verbs),
    }
    if rt.short_names:
        entry["shortNames"] = list(rt.short_names)
    if rt.categories:
        entry["categories"] = list(rt.categories)
    return entry


def resource_list(group: str, version: str) -> JSONDict | None:
    served = [rt for rt in RESOURCES.values() if rt.group == group and rt.version == version]
    if not served:
        return None
    entries: list[JSONDict] = []
    for rt in sorted(served, key=lambda r: r.name):
        entries.append(_resource_entry(rt))
        entries.extend(
            {
                "name": f"{rt.name}/{sub}",
                "singularName": "",
                "namespaced": rt.namespaced,
                "kind": rt.kind,
                "verbs": ["get", "patch", "update"],
            }
            for sub in rt.subresources
        )
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": entries,
    }


# --------------------------------------------------------------------- tables


def wants_table(accept: str) -> bool:
    """True when the client asked for ``meta.k8s.io`` ``Table`` output (kubectl get)."""
    return any("as=Table" in part for part in accept.split(","))


def _age(created: str | None, now: float) -> str:
    if not created:
        return "<unknown>"
    try:
        then = datetime.strptime(created, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return "<unknown>"
    seconds = max(0, int(now - then))
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 10:
        return f"{minutes}m{seconds % 60}s" if seconds % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 48:
        return f"{hours}h"
    return f"{hours // 24}d"


def _pod_status(obj: JSONDict) -> str:
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    if meta.get("deletionTimestamp"):
        return "Terminating"
    reason = status.get("reason") or status.get("phase") or "Unknown"
    for cs in status.get("containerStatuses") or []:
        state = (cs or {}).get("state") or {}
        waiting = state.get("waiting") or {}
        if waiting.get("reason"):
            reason = waiting["reason"]
    return str(reason)


def _pod_cells(obj: JSONDict, now: float) -> list[Any]:
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    statuses = status.get("containerStatuses") or []
    total = len(spec.get("containers") or []) or len(statuses)
    ready = sum(1 for cs in statuses if isinstance(cs, dict) and cs.get("ready"))
    restarts = sum(int((cs or {}).get("restartCount") or 0) for cs in statuses)
    return [
        obj["metadata"].get("name", ""),
        f"{ready}/{total}",
        _pod_status(obj),
        restarts,
        _age(obj["metadata"].get("creationTimestamp"), now),
        status.get("podIP") or "<none>",
        spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        "<none>",
    ]


_POD_COLUMNS = [
    ("Name", "string", "name", 0),
    ("Ready", "string", "", 0),
    ("Status", "string", "", 0),
    ("Restarts", "string", "", 0),
    ("Age", "string", "", 0),
    ("IP", "string", "", 1),
    ("Node", "string", "", 1),
    ("Nominated Node", "string", "", 1),
    ("Readiness Gates", "string", "", 1),
]
_GENERIC_COLUMNS = [("Name", "string", "name", 0), ("Created At", "date", "", 0)]


def table(
    rt: ResourceType, objects: list[JSONDict], metadata: JSONDict, include: str = "Metadata"
) -> JSONDict:
    """The ``Table`` kubectl prints for ``objects``."""
    now = time.time()
    columns = _POD_COLUMNS if rt.name == "pods" else _GENERIC_COLUMNS
    rows: list[JSONDict] = []
    for obj in objects:
        if rt.name == "pods":
            cells = _pod_cells(obj, now)
        else:
            meta = obj.get("metadata") or {}
            cells = [meta.get("name", ""), meta.get("creationTimestamp", "")]
        row: JSONDict = {"cells": cells}
        if include == "Object":
            row["object"] = obj
        elif include != "None":
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj.get("metadata") or {},
            }
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": [
            {
                "name": name,
                "type": type_,
                "format": fmt,
                "description": name,
                "priority": priority,
            }
            for name, type_, fmt, priority in columns
        ],
        "rows": rows,
    }


# -------------------------------------------------------------------- openapi


def _gv_path(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def openapi_v3_index() -> JSONDict:
    """``/openapi/v3``: where each group-version's document lives."""
    gvs = sorted({(rt.group, rt.version) for rt in RESOURCES.values()})
    return {
        "paths": {
            _gv_path(g, v): {"serverRelativeURL": f"/openapi/v3/{_gv_path(g, v)}?hash=sim"}
            for g, v in gvs
        }
    }


_QUERY_PARAMS = ("dryRun", "fieldManager", "fieldValidation")
_PATCH_TYPES = (
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/apply-patch+yaml",
)


def _operation(rt: ResourceType, action: str, body_types: tuple[str, ...], *, v2: bool) -> JSONDict:
    """One operation of either document; the two differ only in how types are spelt."""
    op: JSONDict = {
        "operationId": f"{action}{rt.kind}",
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {
            "group": rt.group,
            "version": rt.version,
            "kind": rt.kind,
        },
        "responses": {"200": {"description": "OK"}},
    }
    if v2:
        op["produces"] = ["application/json", "application/yaml"]
        op["parameters"] = [
            {"name": name, "in": "query", "type": "string", "uniqueItems": True}
            for name in _QUERY_PARAMS
        ]
        if body_types:
            op["consumes"] = list(body_types)
        return op
    op["parameters"] = [
        {"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": True}}
        for name in _QUERY_PARAMS
    ]
    if body_types:
        op["requestBody"] = {
            "content": {t: {"schema": {"type": "object"}} for t in body_types},
            "required": True,
        }
    return op


def _paths(served: list[ResourceType], *, v2: bool) -> JSONDict:
    """The collection and object paths of ``served``, with their operations."""
    create = ("*/*",) if v2 else ("application/json",)
    paths: JSONDict = {}
    for rt in served:
        prefix = "/" + _gv_path(rt.group, rt.version)
        base = (
            f"{prefix}/namespaces/{{namespace}}/{rt.name}"
            if rt.namespaced
            else f"{prefix}/{rt.name}"
        )
        paths[base] = {
            "get": _operation(rt, "list", (), v2=v2),
            "post": _operation(rt, "post", create, v2=v2),
        }
        paths[base + "/{name}"] = {
            "get": _operation(rt, "get", (), v2=v2),
            "put": _operation(rt, "put", create, v2=v2),
            "patch": _operation(rt, "patch", _PATCH_TYPES, v2=v2),
            "delete": _operation(rt, "delete", (), v2=v2),
        }
    return paths


def openapi_v3_document(group: str, version: str, git_version: str) -> JSONDict | None:
    """A minimal OpenAPI v3 document: enough for kubectl to use server-side validation.

    Strategic merge is deliberately not advertised in PATCH bodies, so kubectl
    builds apply patches from its compiled-in types, which know every merge key.
    """
    served = [rt for rt in RESOURCES.values() if rt.group == group and rt.version == version]
    if not served:
        return None
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": git_version},
        "paths": _paths(served, v2=False),
        "components": {"schemas": {}},
    }


# ---------------------------------------------------------------- openapi v2

OPENAPI_V2_PROTOBUF = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"


def openapi_v2_document(git_version: str) -> JSONDict:
    """``/openapi/v2``: paths and operations only, no definitions.

    kubectl before 1.29 downloads this before every ``apply`` and fails without it;
    it reads the PATCH operations' ``fieldValidation`` parameter to choose
    server-side validation. Without definitions it builds apply patches from its
    compiled-in types, as with the v3 document.
    """
    served = sorted(RESOURCES.values(), key=lambda r: (r.group, r.name))
    return {
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": git_version},
        "paths": _paths(served, v2=True),
    }


# The protobuf form is gnostic's openapi_v2.Document (google/gnostic,
# openapiv2/OpenAPIv2.proto); only the fields the document above uses are encoded.


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, payload: bytes | str) -> bytes:
    data = payload.encode() if isinstance(payload, str) else payload
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _bool(number: int, value: bool) -> bytes:
    return _varint(number << 3) + _varint(int(value)) if value else b""


def _pb_extension(name: str, value: Any) -> bytes:
    any_ = _field(2, yaml.safe_dump(value, default_flow_style=False))
    return _field(1, name) + _field(2, any_)


def _pb_operation(op: JSONDict) -> bytes:
    out = _field(5, op["operationId"])
    out += b"".join(_field(6, t) for t in op.get("produces", ()))
    out += b"".join(_field(7, t) for t in op.get("consumes", ()))
    for param in op["parameters"]:
        query = (
            _field(2, param["in"])
            + _field(4, param["name"])
            + _field(6, param["type"])
            + _bool(20, param["uniqueItems"])
        )
        # ParametersItem.parameter -> Parameter.non_body_parameter -> query sub-schema
        out += _field(8, _field(1, _field(2, _field(3, query))))
    responses = b"".join(
        _field(1, _field(1, code) + _field(2, _field(1, _field(1, resp["description"]))))
        for code, resp in op["responses"].items()
    )
    out += _field(9, responses)
    out += b"".join(
        _field(13, _pb_extension(key, value)) for key, value in op.items() if key.startswith("x-")
    )
    return out


_PATH_ITEM_FIELDS = {"get": 2, "put": 3, "post": 4, "delete": 5, "patch": 8}


def openapi_v2_protobuf(doc: JSONDict) -> bytes:
    """``doc`` (from :func:`openapi_v2_document`) as the protobuf kubectl asks for."""
    info = _field(1, doc["info"]["title"]) + _field(2, doc["info"]["version"])
    paths = b""
    for path, item in doc["paths"].items():
        encoded = b"".join(
            _field(_PATH_ITEM_FIELDS[method], _pb_operation(op)) for method, op in item.items()
        )
        paths += _field(2, _field(1, path) + _field(2, encoded))
    return _field(1, doc["swagger"]) + _field(2, info) + _field(8, paths)
