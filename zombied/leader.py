"""Leader election on a ``coordination.k8s.io/v1`` Lease, with client-go's semantics.

This module owns the Lease loop that decides whether this replica may delete pods. A
candidate takes the lease when it is absent, released (empty holder), already ours, or
when the record has not changed for ``leaseDurationSeconds`` *as measured on our own
monotonic clock since we last saw it change* — the remote ``renewTime`` is written for
humans and never compared with our wall clock. Every write carries the lease's
``resourceVersion``, so of two racing candidates exactly one wins and the other gets a
``409`` and simply tries again a period later. The leader renews every retry period and
stops leading as soon as ``renew_deadline`` passes without a successful renewal, which
is strictly before any standby could see the lease expire (``renew_deadline <
lease_duration``): there is never a moment with two deleters. On shutdown the leader
clears the holder so a standby takes over at its next retry instead of after a full
lease duration.

It also owns `Leadership`, the one object that says whether this replica may act now,
wakes those waiting for it and cancels the deletes in flight when a term ends. The
elector is its only writer; a term ends by itself at the renew deadline, so a replica
whose renewals hang stops acting on time even before the elector's loop notices.

It must never decide what leadership is used for (the reaper asks `Leadership`), never
raise for API errors (they are logged once per kind and retried), and never use the
wall clock for local timing.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import secrets
import socket
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Final, Literal, Protocol

import anyio
import anyio.lowlevel
import structlog
from anyio.abc import TaskStatus
from kubernetes_asyncio.client import ApiClient, CoordinationV1Api
from kubernetes_asyncio.client.exceptions import ApiException

from zombied import metrics
from zombied.kube import API_FAILURES, TRANSPORT_ERROR, api_exception, rbac_rule, status_of

#: client-go's JitterFactor for the acquire loop: waits are uniform in [1, 2.2] times retry.
JITTER_FACTOR = 1.2

#: Fraction of the retry period each request of the release on shutdown may take (the
#: release as a whole takes twice that): a server that does not answer must not hold
#: up the exit.
REQUEST_TIMEOUT_FACTOR = 0.8

#: The four fields that identify a lease record; a change in any of them restarts the
#: expiry clock of everyone who observes it.
_RECORD_FIELDS = ("holderIdentity", "leaseDurationSeconds", "acquireTime", "renewTime")


def default_identity() -> str:
    """``$POD_NAME`` (or the host name) plus a random suffix, unique per process start.

    The suffix keeps a restarted replica with the same pod name from mistaking the
    lease of its previous life for its own.
    """
    base = os.environ.get("POD_NAME") or socket.gethostname() or "zombied"
    return f"{base}-{secrets.token_hex(4)}"


def micro_time(moment: datetime) -> str:
    """A ``MicroTime`` as the API server writes it: RFC 3339, microseconds, UTC, ``Z``."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Leases(Protocol):
    """The three requests on one Lease the elector makes; raw JSON in and out."""

    name: str
    namespace: str

    async def request(
        self,
        op: Literal["get", "create", "replace"],
        body: dict[str, Any] | None,
    ) -> dict[str, Any]:
        """Read, create or replace the Lease; raise what the API client raises."""
        ...


class ApiLeases:
    """`Leases` on the API server, through kubernetes_asyncio without its models.

    Raw JSON keeps fields this client does not model (a newer server's additions)
    intact across read-modify-write, and MicroTime strings exactly as written.
    """

    def __init__(self, api: ApiClient, *, name: str, namespace: str) -> None:
        # Untyped on purpose: the raw (_preload_content=False) answers are aiohttp
        # responses, not the V1Lease models the stubs promise.
        self._coordination: Any = CoordinationV1Api(api)
        self.name = name
        self.namespace = namespace

    async def request(
        self,
        op: Literal["get", "create", "replace"],
        body: dict[str, Any] | None,
    ) -> dict[str, Any]:
        # No request timeout here: the elector bounds every request with its own.
        options = {"_preload_content": False}
        api = self._coordination
        if op == "get":
            response = await api.read_namespaced_lease(self.name, self.namespace, **options)
        elif op == "create":
            response = await api.create_namespaced_lease(self.namespace, body, **options)
        else:
            response = await api.replace_namespaced_lease(
                self.name, self.namespace, body, **options
            )
        async with response:
            data = await response.read()
        if not 200 <= response.status <= 299:
            raise api_exception(response, data)
        try:
            obj = json.loads(data)
        except ValueError:
            obj = None
        if not isinstance(obj, dict):
            raise ApiException(status=0, reason=f"unexpected {op} answer: not a JSON object")
        return obj


class Leadership:
    """Whether this replica may act now, who waits for that, and what to stop on loss.

    ``Leadership()`` leads for good (no election). A `LeaseElector` given
    ``Leadership(False)`` is its only writer, through `begin_term`, `extend` and
    `end_term`; a term also ends by itself at its deadline (the renew deadline).
    """

    def __init__(self, leading: bool = True) -> None:
        self._in_term = leading
        self._until = math.inf
        self._changed: anyio.Event | None = None
        self._acting: set[anyio.CancelScope] = set()
        #: Loop times of the start of the last term and of the end of the last term.
        self.gained_at: float | None = None
        self.lost_at: float | None = None
        #: Terms begun so far.
        self.terms = 0
        metrics.leading(leading, changed=False)

    @property
    def leading(self) -> bool:
        """True while a term runs and its deadline has not passed."""
        if not self._in_term:
            return False
        try:
            # The loop's clock, which anyio.current_time() also reads, without its
            # backend lookup: this is asked several times for every delete.
            now = asyncio.get_running_loop().time()
        except RuntimeError:  # read outside the event loop: the flag is all we have
            return True
        return now < self._until

    @property
    def in_flight(self) -> int:
        """Actions (deletes) running under `acting` right now."""
        return len(self._acting)

    async def wait(self) -> None:
        """Return once leading (at once if leading now)."""
        while not self.leading:
            # A term past its deadline but not yet ended is followed by end_term at once;
            # every change wakes us to look again.
            if self._changed is None:
                self._changed = anyio.Event()
            await self._changed.wait()

    def acting(self) -> _Acting:
        """A cancel scope for one action, cancelled the moment the term ends.

        Check `leading` first: a request may leave before a cancelled scope is noticed.
        """
        return _Acting(self._acting, cancelled=not self.leading)

    # -- the elector's side -------------------------------------------------------------

    def begin_term(self, until: float) -> None:
        """A term starts now and lasts until loop time ``until`` unless extended."""
        self._until = until
        if not self._in_term:
            self._in_term = True
            self._changed_now()

    def extend(self, until: float) -> None:
        """A renewal moved the end of the running term to ``until``."""
        self._until = until

    def end_term(self) -> None:
        """The term is over: stop every action in flight, wake the waiters."""
        if not self._in_term:
            return
        self._in_term = False
        for scope in list(self._acting):
            scope.cancel()
        self._changed_now()

    @property
    def in_term(self) -> bool:
        """A term began and has not been ended (its deadline may have passed)."""
        return self._in_term

    def _changed_now(self) -> None:
        now = anyio.current_time()
        if self._in_term:
            self.terms += 1
            self.gained_at = now
        else:
            self.lost_at = now
        metrics.leading(self._in_term, changed=True)
        if self._changed is not None:
            self._changed.set()
            self._changed = None


class LeaseElector:
    """Campaign for, hold and release one Lease; its `Leadership` says when we may act.

    Run :meth:`run` in a task group; it returns only when cancelled, after releasing
    the lease if held.
    """

    def __init__(
        self,
        leases: Leases,
        *,
        identity: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        leadership: Leadership | None = None,
    ) -> None:
        if not lease_duration > renew_deadline > retry_period > 0:
            raise ValueError(
                "lease_duration > renew_deadline > retry_period > 0 is required, got "
                f"{lease_duration}, {renew_deadline}, {retry_period}"
            )
        self.leases = leases
        self.name = leases.name
        self.namespace = leases.namespace
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        # As kube-controller-manager's leader-election client: a request may take up to
        # the renew deadline, and a term's own deadline still ends leading on time. A
        # shorter bound (it was most of a retry period) lost the lease to a server that
        # was slow, not gone: in a storm every renewal timed out although each landed.
        self.request_timeout = renew_deadline
        self.leadership = leadership if leadership is not None else Leadership(False)
        self._log = structlog.get_logger(lease=f"{self.namespace}/{self.name}", identity=identity)
        self._rng = random.Random()
        # One write at a time: a release must not race a renewal of the same version.
        self._lock = anyio.Lock()
        self._released = False
        # Loop time of the start of the last successful write while leading.
        self._renewed_at = -math.inf
        # The last lease object the server returned, and the record it held.
        self._lease: dict[str, Any] | None = None
        self._observed: tuple[object, ...] | None = None
        self._observed_at = -math.inf
        self._observed_holder = ""
        self._previous_holder = ""
        self._observed_duration = lease_duration
        # A write whose answer never came, as (op, the lease it replaces or None for a
        # create). It may still land and make us the holder; only an answer clears it.
        self._unanswered: tuple[str, dict[str, Any] | None] | None = None
        self._logged_errors: set[tuple[str, int]] = set()
        # verb -> the RBAC rule a 401/403 said is missing; cleared when that verb works.
        self._forbidden: dict[str, str] = {}

    # -- public surface -------------------------------------------------------------

    @property
    def forbidden(self) -> list[str]:
        """The RBAC rules the server said are missing, until each verb works again."""
        return sorted(self._forbidden.values())

    @property
    def holder(self) -> str:
        """The holder identity we last observed on the lease ("" when free or unknown)."""
        return self._observed_holder

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Campaign and lead until cancelled; release the lease on the way out."""
        task_status.started()
        try:
            while True:
                await self._acquire()
                await self._lead()
        finally:
            if self.leadership.in_term or self._unanswered is not None:
                with anyio.CancelScope(shield=True):
                    await self._release(reason="shutdown")

    async def release(self) -> None:
        """Stop leading for good and clear the holder so a standby takes over at once.

        After this, :meth:`run` stays a follower until it is cancelled.
        """
        self._released = True
        with anyio.CancelScope(shield=True):
            await self._release(reason="released")

    # -- campaign and term ----------------------------------------------------------

    async def _acquire(self) -> None:
        """Try every retry period (jittered, as client-go) until we hold the lease."""
        while True:
            if not self._released and await self._try_acquire_or_renew():
                return
            jitter = self._rng.random() * JITTER_FACTOR * self.retry_period
            await anyio.sleep(self.retry_period + jitter)

    async def _lead(self) -> None:
        """Renew every retry period; return once leadership is lost."""
        while self.leadership.in_term:
            with anyio.CancelScope(deadline=self._renewed_at + self.renew_deadline) as term:
                await anyio.sleep(self.retry_period)
                while not await self._try_acquire_or_renew():
                    if self._observed_holder != self.identity:
                        return  # another holder took over; _observe said so and stopped us
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
                # Fast path: renew against the version we wrote last; a 409 means it
                # changed under us, so fall back to reading it.
                try:
                    written = await self._write(self._lease, self._record(self._lease))
                except ApiException as exc:
                    if self._failed(exc, "update") != 409:
                        return False
                else:
                    self._won(written, started)
                    return True

            try:
                lease = await self._request("get")
            except ApiException as exc:
                if status_of(exc).code != 404:
                    self._failed(exc, "get")
                    return False
                return await self._create(started)

            self._observe(lease)
            holder = _holder(_spec(lease))
            if holder and holder != self.identity and not self._expired():
                return False

            try:
                written = await self._write(lease, self._record(lease))
            except ApiException as exc:
                self._failed(exc, "update")
                return False
            self._won(written, started)
            return True

    async def _create(self, started: float) -> bool:
        body = self._new_lease(self._record(None))
        try:
            created = await self._send_write("create", body, against=None)
        except ApiException as exc:
            self._failed(exc, "create")
            return False
        self._won(created, started)
        return True

    def _new_lease(self, spec: dict[str, Any]) -> dict[str, Any]:
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": spec,
        }

    def _record(self, lease: dict[str, Any] | None) -> dict[str, Any]:
        """The spec we write: renewal keeps acquireTime and transitions, takeover bumps."""
        now = micro_time(datetime.now(UTC))
        old = _spec(lease)
        ours = lease is not None and old.get("holderIdentity") == self.identity
        transitions = old.get("leaseTransitions")
        transitions = transitions if isinstance(transitions, int) else 0
        return {
            **old,
            "holderIdentity": self.identity,
            "leaseDurationSeconds": math.ceil(self.lease_duration),
            "acquireTime": old.get("acquireTime") if ours else now,
            "renewTime": now,
            "leaseTransitions": transitions if ours or lease is None else transitions + 1,
        }

    async def _write(self, lease: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
        # The lease's metadata (with its resourceVersion) goes back unchanged: the
        # server rejects the write with 409 if anyone wrote in between.
        return await self._send_write("replace", {**lease, "spec": spec}, against=lease)

    async def _send_write(
        self,
        op: Literal["create", "replace"],
        body: dict[str, Any],
        *,
        against: dict[str, Any] | None,
    ) -> dict[str, Any]:
        """Send a write; remember it as unanswered until an HTTP answer arrives.

        A timeout, a dropped connection or a cancellation (shutdown) leaves it marked:
        the server may still apply it after we stopped listening.
        """
        self._unanswered = (op, against)
        try:
            written = await self._request(op, body)
        except ApiException as exc:
            if status_of(exc).code != TRANSPORT_ERROR:
                self._unanswered = None  # the server answered: nothing is left to land
            raise
        self._unanswered = None
        return written

    def _won(self, lease: dict[str, Any], started: float) -> None:
        self._logged_errors.clear()
        self._observe(lease, at=started)
        if self._released:
            return  # release() is waiting for the lock and clears the holder next
        self._renewed_at = started
        if self.leadership.in_term:
            self.leadership.extend(started + self.renew_deadline)
            self._log.debug("leader.renewed")
            return
        previous = self._previous_holder
        self.leadership.begin_term(started + self.renew_deadline)
        spec = _spec(lease)
        self._log.info(
            "leader.acquired",
            previous_holder=previous or None,
            transitions=spec.get("leaseTransitions"),
        )

    def _observe(self, lease: dict[str, Any], *, at: float | None = None) -> None:
        """Remember the record; restart its expiry clock whenever it changed."""
        self._lease = lease
        spec = _spec(lease)
        record = tuple(spec.get(field) for field in _RECORD_FIELDS)
        if record == self._observed:
            return
        self._observed = record
        # A change seen in an answer happened before we saw it: counting from now (after
        # the answer) can only make our idea of its expiry later, never earlier.
        self._observed_at = anyio.current_time() if at is None else at
        duration = spec.get("leaseDurationSeconds")
        self._observed_duration = (
            float(duration) if isinstance(duration, int) and duration > 0 else self.lease_duration
        )
        holder = _holder(spec)
        self._previous_holder = self._observed_holder
        if holder != self._observed_holder:
            self._observed_holder = holder
            if holder != self.identity:
                self._log.info("leader.observed", holder=holder or None)
        if self.leadership.in_term and holder != self.identity:
            reason = "lease taken by another holder" if holder else "lease cleared by someone"
            self._stop_leading(reason, holder=holder or None)

    def _expired(self) -> bool:
        return anyio.current_time() >= self._observed_at + self._observed_duration

    def _stop_leading(self, reason: str, **details: object) -> None:
        if not self.leadership.in_term:
            return
        self._log.warning("leader.lost", reason=reason, **details)
        self.leadership.end_term()

    async def _release(self, *, reason: str) -> None:
        """Clear the holder (client-go: empty holder, 1 s duration, renewTime kept).

        After an unanswered write the lease is overwritten at the version that write was
        sent against (or created, for a create), whoever holds it there: then either our
        release lands and the late write fails with 409, or the write had landed and the
        release meets a 409, re-reads and clears our own holder.
        """
        was_leading = self.leadership.in_term
        if was_leading:
            # Stop acting before the write: the lease is up for grabs the moment it lands.
            self.leadership.end_term()
        each = self.retry_period * REQUEST_TIMEOUT_FACTOR
        timeout = max(2 * each, 1.0)
        with anyio.move_on_after(timeout) as scope:
            async with self._lock:
                create = self._unanswered is not None and self._unanswered[0] == "create"
                if self._unanswered is not None:
                    target = self._unanswered[1]
                else:
                    target = self._lease if was_leading else None
                for _ in range(3):
                    # The request under way: a refusal names the RBAC verb refused.
                    sent: Literal["get", "create", "update"] = "create" if create else "get"
                    try:
                        if create:
                            body = self._new_lease(_released(self._record(None)))
                            self._lease = await self._request("create", body, limit=each)
                        else:
                            lease = target or await self._request("get", limit=each)
                            spec = _spec(lease)
                            if target is None and spec.get("holderIdentity") != self.identity:
                                return  # not ours (any more): nothing to give back
                            sent = "update"
                            self._lease = await self._request(
                                "replace", {**lease, "spec": _released(spec)}, limit=each
                            )
                    except ApiException as exc:
                        if self._failed(exc, "release", sent=sent) == 409:
                            create, target = False, None  # re-read the newer version, retry
                            continue
                        return
                    finally:
                        self._unanswered = None
                    self._log.info("leader.released", reason=reason)
                    return
        if scope.cancelled_caught:
            self._log.warning("leader.release_timeout", timeout_s=round(timeout, 3))

    # -- HTTP -----------------------------------------------------------------------

    async def _request(
        self,
        op: Literal["get", "create", "replace"],
        body: dict[str, Any] | None = None,
        *,
        limit: float | None = None,
    ) -> dict[str, Any]:
        """One lease request within ``limit`` seconds (by default the renew deadline).

        Failures are raised as ``ApiException``; timeouts and transport failures as
        ``ApiException(status=0)``.
        """
        try:
            with anyio.fail_after(self.request_timeout if limit is None else limit):
                answer = await self.leases.request(op, body)
        except ApiException:
            raise
        except API_FAILURES as exc:
            raise ApiException(status=TRANSPORT_ERROR, reason=type(exc).__name__) from exc
        self._forbidden.pop(_LEASE_VERBS.get(op, op), None)
        return answer

    def _failed(self, exc: ApiException, op: str, *, sent: str | None = None) -> int:
        """Log a failed request (each kind once until the next success); return its code.

        ``op`` is what the elector was doing, ``sent`` the request that failed when that
        differs (a release sends a get, a create or an update). A refusal is reported
        once per RBAC verb, whatever the elector was doing, since the same rule is
        missing; other failures once per ``op``.
        """
        status = status_of(exc)
        if status.code == 409:
            self._log.info("leader.conflict", op=op, message=status.message or None)
            return status.code
        forbidden = status.code in (401, 403)
        verb = _LEASE_VERBS.get(sent or op, sent or op)
        kind = (verb if forbidden else op, status.code)
        level = "debug" if kind in self._logged_errors else "warning"
        self._logged_errors.add(kind)
        if forbidden:
            missing = rbac_rule(verb, "leases", self.namespace, group="coordination.k8s.io")
            self._forbidden[verb] = missing
            getattr(self._log, "error" if level == "warning" else "debug")(
                "leader.forbidden",
                op=op,
                code=status.code,
                missing_rule=missing,
                message=status.message or None,
            )
            return status.code
        getattr(self._log, level)(
            "leader.error",
            op=op,
            code=status.code,
            reason=status.reason or None,
            message=status.message or None,
        )
        return status.code


#: The RBAC verb behind each lease request, where its name differs.
_LEASE_VERBS: Final = {"replace": "update"}


def _released(spec: dict[str, Any]) -> dict[str, Any]:
    """The record a release writes: no holder, and a 1 s duration for anyone reading it."""
    return {**spec, "holderIdentity": "", "leaseDurationSeconds": 1}


def _spec(lease: dict[str, Any] | None) -> dict[str, Any]:
    """A copy of the lease's spec; a missing or malformed one reads as empty."""
    spec = (lease or {}).get("spec")
    return dict(spec) if isinstance(spec, dict) else {}


def _holder(spec: dict[str, Any]) -> str:
    holder = spec.get("holderIdentity")
    return holder if isinstance(holder, str) else ""


class _Acting:
    """`Leadership.acting`: a cancel scope registered with the term while it is open.

    A class, not a generator-based context manager: it wraps every delete of a storm.
    """

    __slots__ = ("_registry", "_scope")

    def __init__(self, registry: set[anyio.CancelScope], *, cancelled: bool) -> None:
        self._registry = registry
        self._scope = anyio.CancelScope()
        if cancelled:
            self._scope.cancel()

    def __enter__(self) -> anyio.CancelScope:
        scope = self._scope.__enter__()
        self._registry.add(scope)
        return scope

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        self._registry.discard(self._scope)
        return bool(self._scope.__exit__(exc_type, exc, traceback))
