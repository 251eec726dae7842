"""An in-memory Lease server, for election-logic tests on fake loop time.

It keeps one Lease under the API server's rules the elector depends on: every write
gives a new resourceVersion, a replace carrying another one is ``409 Conflict``, a
create of an existing Lease ``409 AlreadyExists``, a read of a missing one ``404``.
Each candidate talks to it through its own `MemoryLeases`, whose faults a test sets:
latency, HTTP errors, no connection at all, or a write applied whose answer never comes
(what a real server does with a request whose client gave up).
"""

from __future__ import annotations

import copy
import itertools
import json
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
from kubernetes_asyncio.client.exceptions import ApiException

Op = Literal["get", "create", "replace"]


def _error(code: int, reason: str, message: str) -> ApiException:
    exc = ApiException(status=code, reason=reason)
    exc.body = json.dumps({"kind": "Status", "code": code, "reason": reason, "message": message})
    return exc


class LeaseServer:
    """The one Lease (``lease`` is None until created), as the API server stores it."""

    def __init__(self, name: str = "zombied", namespace: str = "default") -> None:
        self.name = name
        self.namespace = namespace
        self.lease: dict[str, Any] | None = None
        self._versions = itertools.count(1)

    def client(self) -> MemoryLeases:
        """A connection of one candidate, with faults of its own."""
        return MemoryLeases(self)

    def apply(self, op: Op, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """Serve one request; raise the ApiException the server would answer."""
        if op == "get":
            if self.lease is None:
                raise _error(404, "NotFound", f'leases "{self.name}" not found')
            return copy.deepcopy(self.lease)
        assert body is not None
        if op == "create":
            if self.lease is not None:
                raise _error(409, "AlreadyExists", f'leases "{self.name}" already exists')
        elif self.lease is None:
            raise _error(404, "NotFound", f'leases "{self.name}" not found')
        elif body["metadata"].get("resourceVersion") != self.lease["metadata"]["resourceVersion"]:
            raise _error(409, "Conflict", "the object has been modified")
        return self.write(body)

    def write(self, lease: dict[str, Any]) -> dict[str, Any]:
        """Store ``lease`` as the server would after a successful write (no checks)."""
        stored = copy.deepcopy(lease)
        stored["metadata"] = {
            **stored.get("metadata", {}),
            "name": self.name,
            "namespace": self.namespace,
            "resourceVersion": str(next(self._versions)),
        }
        self.lease = stored
        return copy.deepcopy(stored)


@dataclass
class MemoryLeases:
    """The elector's `Leases` on a `LeaseServer`, with programmable faults."""

    server: LeaseServer
    #: Seconds each request of an op waits before it is served.
    latency: dict[str, float] = field(default_factory=dict)
    #: HTTP status every request of an op fails with.
    errors: dict[str, int] = field(default_factory=dict)
    #: Ops whose writes are applied but never answered.
    lost: set[str] = field(default_factory=set)
    #: No connection: every request fails before reaching the server.
    partitioned: bool = False
    #: (op, status) of every request served; 0 for no answer.
    requests: list[tuple[str, int]] = field(default_factory=list)
    #: The op of every request sent, answered or not yet.
    sent: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.server.name

    @property
    def namespace(self) -> str:
        return self.server.namespace

    async def request(self, op: Op, body: dict[str, Any] | None) -> dict[str, Any]:
        self.sent.append(op)
        if self.partitioned:
            self.requests.append((op, 0))
            raise ConnectionRefusedError("partitioned")
        await anyio.sleep(self.latency.get(op, 0.0))
        if op in self.errors:
            self.requests.append((op, self.errors[op]))
            raise _error(self.errors[op], "InternalError", "injected")
        try:
            answer = self.server.apply(op, body)
        except ApiException as exc:
            self.requests.append((op, int(exc.status)))
            raise
        if op in self.lost:
            self.requests.append((op, 0))
            await anyio.sleep_forever()
        self.requests.append((op, 200))
        return answer
