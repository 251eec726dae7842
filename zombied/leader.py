"""Leader election on a ``coordination.k8s.io/v1`` Lease, with client-go's semantics.

A candidate takes the lease when it is absent, released, ours, or unchanged for
``leaseDurationSeconds`` measured on our own monotonic clock since we last saw it
change (the remote ``renewTime`` is never compared with our wall clock). Every write
carries the lease's resourceVersion, so of two racing candidates one gets a 409. The
leader stops leading once ``renew_deadline`` passes without a renewal, before any
standby can see the lease expire, and clears the holder on shutdown. `Leadership` says
whether this replica may act now and cancels the deletes in flight when a term ends.
API errors are logged and retried, never raised.
"""

from __future__ import annotations

import math
import os
import random
import secrets
import socket
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, Final, Protocol

import anyio
from anyio.abc import TaskStatus

from zombied.config import LEASE_JITTER, lease_timing_fault
from zombied.kube import ApiError, Kind, Request
from zombied.log import get_logger

log = get_logger(__name__)

#: A change in any of these fields restarts the expiry clock of everyone observing it.
_RECORD_FIELDS: Final = ("holderIdentity", "leaseDurationSeconds", "acquireTime", "renewTime")
_GROUP: Final = "coordination.k8s.io"


class LeaseApi(Protocol):
    """What the elector needs of the API server: `zombied.kube.Kube.request`."""

    async def request(
        self,
        request: Request,
        *,
        query: Mapping[str, str | int] | None = None,
        body: object = None,
        timeout: float,  # noqa: ASYNC109 - every request carries its own deadline
    ) -> Any: ...


def default_identity() -> str:
    """``$POD_NAME`` (or the host name) plus a random suffix, so that a restarted replica
    never takes the lease of its previous life for its own."""
    base = os.environ.get("POD_NAME") or socket.gethostname() or "zombied"
    return f"{base}-{secrets.token_hex(4)}"


def micro_time(moment: datetime) -> str:
    """A ``MicroTime`` as the API server writes it: RFC 3339, microseconds, UTC, ``Z``."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _spec(lease: object) -> dict[str, Any]:
    """The spec of a lease as the server answered it; empty when missing or no object."""
    spec = lease.get("spec") if isinstance(lease, dict) else None
    return spec if isinstance(spec, dict) else {}


class Leadership:
    """Whether this replica may act now, who waits for that, and what to stop on loss.

    ``Leadership()`` leads for good (no election); a `LeaseElector` is the only writer
    of ``Leadership(False)``. A term also ends by itself at its deadline.
    """

    def __init__(
        self, leading: bool = True, *, on_change: Callable[[bool], None] | None = None
    ) -> None:
        self._in_term = leading
        self._until = math.inf
        self._changed = anyio.Event()
        self._acting: set[anyio.CancelScope] = set()
        self._on_change = on_change if on_change is not None else (lambda _leading: None)

    @property
    def leading(self) -> bool:
        """True while a term runs and its deadline has not passed."""
        if not self._in_term:
            return False
        return self._until == math.inf or anyio.current_time() < self._until

    @property
    def in_term(self) -> bool:
        """A term began and has not been ended (its deadline may have passed)."""
        return self._in_term

    @property
    def in_flight(self) -> int:
        return len(self._acting)

    async def wait(self) -> None:
        """Return once leading."""
        while not self.leading:
            await self._changed.wait()

    @contextmanager
    def acting(self) -> Iterator[anyio.CancelScope]:
        """A cancel scope for one action, cancelled the moment the term ends (check
        `leading` first: a request may leave before a cancelled scope is noticed)."""
        with anyio.CancelScope() as scope:
            if not self.leading:
                scope.cancel()
            self._acting.add(scope)
            try:
                yield scope
            finally:
                self._acting.discard(scope)

    def begin_term(self, until: float) -> None:
        """A term starts (or goes on) and lasts until loop time ``until``."""
        self._until = until
        if not self._in_term:
            self._in_term = True
            self._changed_now()

    def end_term(self) -> None:
        """The term is over: stop every action in flight, wake the waiters."""
        if not self._in_term:
            return
        self._in_term = False
        for scope in list(self._acting):
            scope.cancel()
        self._changed_now()

    def _changed_now(self) -> None:
        self._on_change(self._in_term)
        self._changed.set()
        self._changed = anyio.Event()


class LeaseElector:
    """Campaign for, hold and release one Lease; its `Leadership` says when we may act."""

    def __init__(
        self,
        kube: LeaseApi,
        *,
        name: str,
        namespace: str,
        identity: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        leadership: Leadership | None = None,
    ) -> None:
        if fault := lease_timing_fault(lease_duration, renew_deadline, retry_period):
            raise ValueError(": ".join(fault))
        self._kube = kube
        self.name = name
        self.namespace = namespace
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.leadership = leadership if leadership is not None else Leadership(False)
        self._log = log.bind(lease=f"{namespace}/{name}", identity=identity)
        self._rng = random.Random()
        # One write at a time: a release must not race a renewal of the same version.
        self._lock = anyio.Lock()
        self._released = False
        # The campaign of `run`; `release` cancels it, and with it any request on its way.
        self._campaign: anyio.CancelScope | None = None
        # Loop time of the start of the last successful write while leading.
        self._renewed_at = -math.inf
        # The last lease the server returned, the record it held and when it changed.
        self._lease: dict[str, Any] | None = None
        self._observed: tuple[object, ...] | None = None
        self._observed_at = -math.inf
        self._observed_duration = lease_duration
        #: The holder we last observed ("" when free or unknown).
        self.holder = ""
        self._logged: set[tuple[str, Kind]] = set()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Campaign and lead until cancelled; release the lease on the way out."""
        task_status.started()
        try:
            with anyio.CancelScope() as self._campaign:
                while True:
                    await self._acquire()
                    await self._lead()
            await anyio.sleep_forever()  # released: a follower until cancelled
        finally:
            if self.leadership.in_term:
                with anyio.CancelScope(shield=True):
                    await self._release(reason="shutdown")

    async def release(self) -> None:
        """Stop leading for good and clear the holder so a standby takes over at once; a
        lease request still on its way is abandoned (the release reads the lease first)."""
        self._released = True
        if self._campaign is not None:
            self._campaign.cancel()
        with anyio.CancelScope(shield=True):
            await self._release(reason="released")

    async def _acquire(self) -> None:
        """Try every retry period (jittered, as client-go) until we hold the lease."""
        while True:
            if await self._try_acquire_or_renew():
                return
            jitter = self._rng.random() * LEASE_JITTER * self.retry_period
            await anyio.sleep(self.retry_period + jitter)

    async def _lead(self) -> None:
        """Renew every retry period; return once leadership is lost."""
        while self.leadership.in_term:
            with anyio.CancelScope(deadline=self._renewed_at + self.renew_deadline) as term:
                await anyio.sleep(self.retry_period)
                while not await self._try_acquire_or_renew():
                    if self.holder != self.identity:
                        return  # another holder took over; _observe stopped us
                    await anyio.sleep(self.retry_period)
            if term.cancelled_caught:
                self._stop_leading(
                    "renew deadline exceeded",
                    since_renew_s=round(anyio.current_time() - self._renewed_at, 3),
                )
                return

    async def _try_acquire_or_renew(self) -> bool:
        """One round of client-go's tryAcquireOrRenew; True when we hold the lease now."""
        async with self._lock:
            if self._released:
                return False
            started = anyio.current_time()
            if self.leadership.in_term and self._lease is not None:
                # Renew against the version we wrote last; a 409 means it changed under
                # us, so fall back to reading it.
                try:
                    self._won(await self._write(self._lease), started)
                except ApiError as exc:
                    if exc.kind is not Kind.CONFLICT:
                        self._failed(exc)
                        return False
                else:
                    return True
            try:
                lease = await self._request("get")
                self._observe(lease)  # an answer that is no Lease fails like any request
            except ApiError as exc:
                if exc.kind is not Kind.NOT_FOUND:
                    self._failed(exc)
                    return False
                lease = None
            taken = lease is not None and self.holder not in ("", self.identity)
            if taken and not self._expired():
                return False
            try:
                self._won(await self._write(lease), started)
            except ApiError as exc:
                self._failed(exc)
                return False
            return True

    async def _write(self, lease: dict[str, Any] | None, *, release: bool = False) -> Any:
        """Create the lease (``lease`` None) or replace it at its resourceVersion."""
        now = micro_time(datetime.now(UTC))
        spec = dict(_spec(lease))
        ours = spec.get("holderIdentity") == self.identity
        transitions = spec.get("leaseTransitions")
        transitions = transitions if isinstance(transitions, int) else 0
        if release:  # client-go: no holder, a 1 s duration for anyone reading it
            spec |= {"holderIdentity": "", "leaseDurationSeconds": 1}
        else:
            spec |= {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": math.ceil(self.lease_duration),
                "acquireTime": spec.get("acquireTime") if ours else now,
                "renewTime": now,
                "leaseTransitions": transitions if ours or lease is None else transitions + 1,
            }
        if lease is None:
            metadata = {"name": self.name, "namespace": self.namespace}
            body = {"apiVersion": f"{_GROUP}/v1", "kind": "Lease", "metadata": metadata}
            return await self._request("create", {**body, "spec": spec})
        # The metadata (with its resourceVersion) goes back unchanged: the server
        # rejects the write with 409 if anyone wrote in between.
        return await self._request("update", {**lease, "spec": spec})

    def _won(self, lease: Any, started: float) -> None:
        self._logged.clear()
        self._observe(lease, at=started)
        if self._released:
            return  # release() is waiting for the lock and clears the holder next
        self._renewed_at = started
        renewed = self.leadership.in_term
        self.leadership.begin_term(started + self.renew_deadline)
        if not renewed:
            self._log.info("leader.acquired", transitions=_spec(lease).get("leaseTransitions"))

    def _observe(self, lease: Any, *, at: float | None = None) -> None:
        """Remember the lease; restart its expiry clock whenever its record changed."""
        if not isinstance(lease, dict):
            raise ApiError(self._lease_request("get"), 0, "MalformedAnswer", "not a Lease")
        self._lease = lease
        spec = _spec(lease)
        record = tuple(spec.get(field) for field in _RECORD_FIELDS)
        if record == self._observed:
            return
        self._observed = record
        # Counting from when we saw the change can only make its expiry later, never earlier.
        self._observed_at = anyio.current_time() if at is None else at
        duration = spec.get("leaseDurationSeconds")
        self._observed_duration = (
            float(duration) if isinstance(duration, int) and duration > 0 else self.lease_duration
        )
        holder = spec.get("holderIdentity")
        holder = holder if isinstance(holder, str) else ""
        if holder != self.holder:
            self.holder = holder
            if holder != self.identity:
                self._log.info("leader.observed", holder=holder or None)
        if self.leadership.in_term and holder != self.identity:
            reason = "lease taken by another holder" if holder else "lease cleared by someone"
            self._stop_leading(reason, holder=holder or None)

    def _expired(self) -> bool:
        return anyio.current_time() >= self._observed_at + self._observed_duration

    def _stop_leading(self, reason: str, **details: object) -> None:
        if self.leadership.in_term:
            self._log.warning("leader.lost", reason=reason, **details)
            self.leadership.end_term()

    async def _release(self, *, reason: str) -> None:
        """Clear the holder if it is still us (client-go: empty holder, 1 s duration). The
        lease is read first, so a renewal of ours that landed late is cleared too."""
        self.leadership.end_term()  # stop acting first: the lease is up for grabs next
        timeout = max(self.retry_period, 1.0)
        with anyio.move_on_after(timeout) as scope:
            async with self._lock:
                for _ in range(3):
                    try:
                        lease = await self._request("get", limit=timeout)
                        if _spec(lease).get("holderIdentity") != self.identity:
                            return  # not ours (any more): nothing to give back
                        self._lease = await self._write(lease, release=True)
                    except ApiError as exc:
                        if exc.kind is Kind.CONFLICT:
                            continue  # written in between: read the newer version
                        if exc.kind is not Kind.NOT_FOUND:  # no lease: nothing to give back
                            self._failed(exc)
                        return
                    self._log.info("leader.released", reason=reason)
                    return
        if scope.cancelled_caught:
            self._log.warning("leader.release_timeout", timeout_s=round(timeout, 3))

    def _lease_request(self, verb: str) -> Request:
        name = None if verb == "create" else self.name
        return Request(verb, "leases", self.namespace, name, group=_GROUP)

    async def _request(self, verb: str, body: object = None, *, limit: float | None = None) -> Any:
        """One lease request within ``limit`` seconds (by default the renew deadline, as
        kube-controller-manager: the term's own deadline still ends leading on time)."""
        timeout = self.renew_deadline if limit is None else limit
        return await self._kube.request(self._lease_request(verb), body=body, timeout=timeout)

    def _failed(self, exc: ApiError) -> None:
        """Log a failed request, each (verb, kind) once until the next success."""
        if exc.kind is Kind.CONFLICT:
            self._log.info("leader.conflict", verb=exc.request.verb, message=exc.message or None)
            return
        key = (exc.request.verb, exc.kind)
        if key in self._logged or exc.refused:
            return
        self._logged.add(key)
        self._log.warning("leader.error", **exc.log_fields)
