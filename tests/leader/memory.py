"""An in-memory API server holding one Lease, at `Kube.request`'s boundary, for
election tests on fake loop time.

`LeaseServer` keeps the Lease under the rules the elector depends on (a new
resourceVersion per write, 409 on a stale update or a second create, 404 on a missing
Lease) and every write with its loop time. Each candidate talks to it through its own
`MemoryKube`, which fails as `Kube` does (an `ApiError` of the answer's code, code 0 on
a timeout or without a connection), with faults per verb.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
from zombied.kube import ApiError, Request

_REASONS = {404: "NotFound", 409: "Conflict", 500: "InternalError", 503: "ServiceUnavailable"}


@dataclass(frozen=True)
class Write:
    """A Lease as stored by one successful write, and the loop time of the write."""

    at: float
    lease: dict[str, Any]

    @property
    def spec(self) -> dict[str, Any]:
        return dict(self.lease["spec"])


class LeaseServer:
    """The one Lease (``lease`` is None until created), as the API server stores it."""

    def __init__(self, name: str = "zombied", namespace: str = "default") -> None:
        self.name = name
        self.namespace = namespace
        self.lease: dict[str, Any] | None = None
        self.writes: list[Write] = []
        self._versions = itertools.count(1)

    def spec(self) -> dict[str, Any]:
        return dict(self.lease["spec"]) if self.lease is not None else {}

    def apply(self, request: Request, body: Any) -> Any:
        """Serve one request; raise the `ApiError` the server's answer would make."""
        if self.lease is None and request.verb != "create":
            raise _error(request, 404, f'leases "{self.name}" not found')
        if request.verb == "get":
            return copy.deepcopy(self.lease)
        if self.lease is not None and request.verb == "create":
            raise _error(request, 409, f'leases "{self.name}" already exists', "AlreadyExists")
        current = (self.lease or {}).get("metadata", {}).get("resourceVersion")
        if request.verb == "update" and body["metadata"].get("resourceVersion") != current:
            raise _error(request, 409, "the object has been modified; please apply your changes")
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
        self.writes.append(Write(anyio.current_time(), copy.deepcopy(stored)))
        return copy.deepcopy(stored)


@dataclass(eq=False)
class MemoryKube:
    """One candidate's connection to a `LeaseServer`, with faults of its own."""

    server: LeaseServer
    #: Seconds every request of a verb takes before it reaches the server.
    latency: dict[str, float] = field(default_factory=dict)
    #: The HTTP status every request of a verb fails with.
    errors: dict[str, int] = field(default_factory=dict)
    #: Verbs whose writes are applied but never answered (the client times out).
    lost: set[str] = field(default_factory=set)
    #: Verbs answered with JSON that is no object.
    garbled: set[str] = field(default_factory=set)
    #: No connection: every request fails before reaching the server.
    partitioned: bool = False
    #: (verb, body) of every request sent, answered or not.
    sent: list[tuple[str, Any]] = field(default_factory=list)

    async def request(
        self,
        request: Request,
        *,
        query: Mapping[str, str | int] | None = None,
        body: object = None,
        timeout: float,  # noqa: ASYNC109 - the signature of Kube.request
    ) -> Any:
        self.sent.append((request.verb, copy.deepcopy(body)))
        if self.partitioned:
            raise ApiError(request, 0, "ClientConnectorError", "Cannot connect to host")
        try:
            with anyio.fail_after(timeout):
                await anyio.sleep(self.latency.get(request.verb, 0.0))
                if request.verb in self.errors:
                    raise _error(request, self.errors[request.verb], "injected")
                answer = self.server.apply(request, body)
                if request.verb in self.lost:
                    await anyio.sleep_forever()
        except TimeoutError:
            raise ApiError(request, 0, "TimeoutError", "") from None
        return ["not", "a", "lease"] if request.verb in self.garbled else answer

    def bodies(self, verb: str) -> list[Any]:
        """The bodies of the requests of ``verb`` sent so far."""
        return [body for sent, body in self.sent if sent == verb]


def _error(request: Request, code: int, message: str, reason: str | None = None) -> ApiError:
    return ApiError(request, code, reason or _REASONS.get(code, "Error"), message)
