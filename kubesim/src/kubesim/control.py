"""The simulator's control API under ``/_sim/``: drive it from another process.

This module owns the HTTP endpoints a benchmark, demo or multi-process test uses
when the simulator runs elsewhere: build a scenario, preempt a node (gracefully, or
bring it back under its name), program faults, read the request log, deletions and
stats, and write objects straight into the store. Only
the admin token reaches it (a real apiserver answers these paths 404). It
translates HTTP to :class:`Simulator` calls and never holds state of its own.
"""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Any

from aiohttp import web

from kubesim.status import bad_request, method_not_allowed, path_not_found
from kubesim.store import RESOURCES, encode

if TYPE_CHECKING:
    from kubesim import Simulator

JSONDict = dict[str, Any]


def _ok(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=encode(_plain(body)), status=status, content_type="application/json")


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple) and hasattr(value, "_asdict"):
        return {k: _plain(v) for k, v in value._asdict().items()}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(v) for v in value]
    return value


class ControlApi:
    """Routes ``/_sim/<path>`` to the simulator."""

    def __init__(self, sim: Simulator) -> None:
        self._sim = sim

    async def _json(self, request: web.Request) -> JSONDict:
        raw = await request.read()
        if not raw.strip():
            return {}
        try:
            data = json.loads(raw)
        except ValueError as exc:
            raise bad_request(f"control body is not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise bad_request("control body must be a JSON object")
        return data

    async def handle(self, request: web.Request, path: str) -> web.StreamResponse:
        sim = self._sim
        method = request.method
        path = path.strip("/")
        if method == "GET":
            if path == "requests":
                summary = sim.requests.summary()
                if request.query.get("full") in ("1", "true"):
                    summary["records"] = [r.as_dict() for r in sim.requests]
                return _ok(summary)
            if path == "deleted":
                return _ok([dataclasses.asdict(r) for r in sim.deleted])
            if path == "stats":
                return _ok(self.stats())
            if path in (
                "preempt",
                "return-node",
                "scenario",
                "faults",
                "faults/clear",
            ):
                raise method_not_allowed()
            raise path_not_found()
        if method != "POST":
            raise method_not_allowed()
        body = await self._json(request)
        try:
            return await self._post(path, body)
        except (TypeError, ValueError, KeyError) as exc:
            raise bad_request(f"{path}: {exc}") from None

    async def _post(self, path: str, body: JSONDict) -> web.Response:
        sim = self._sim
        if path == "preempt":
            result = sim.cluster.preempt(**body)
            return _ok(result)
        if path == "return-node":
            if isinstance(body.get("reasons"), list):
                body["reasons"] = tuple(body["reasons"])
            return _ok(sim.cluster.return_node(**body))
        if path == "scenario":
            if "namespaces" in body and isinstance(body["namespaces"], list):
                body["namespaces"] = tuple(body["namespaces"])
            return _ok(sim.cluster.build(**body))
        if path == "faults":
            specs = body.get("specs") or ([body["spec"]] if "spec" in body else [])
            if not specs:
                raise bad_request('faults: give "spec" or "specs" in the fault spec syntax')
            for spec in specs:
                sim.faults.apply_spec(str(spec))
            return _ok({"rules": len(sim.faults.rules)})
        if path == "faults/clear":
            sim.faults.clear()
            return _ok({"rules": 0})
        if path.startswith("store/"):
            return self._store_op(path.partition("/")[2], body)
        raise path_not_found()

    def _store_op(self, op: str, body: JSONDict) -> web.Response:
        store = self._sim.store
        resource = str(body.get("resource", ""))
        if resource not in RESOURCES:
            raise bad_request(f"unknown resource {resource!r}")
        if op == "update":
            return _ok(store.update(resource, body["object"], check_rv=False))
        raise path_not_found()

    def stats(self) -> JSONDict:
        sim = self._sim
        return {
            "resourceVersion": sim.store.resource_version,
            "oldestResourceVersion": sim.store.oldest_resource_version,
            "objects": {name: sim.store.count(name) for name in RESOURCES},
            "watches": len(sim.server.streams),
            "requests": sim.requests.total,
            "deleted": len(sim.deleted),
        }
