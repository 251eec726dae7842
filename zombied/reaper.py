"""Deleting zombies: one careful DELETE per due key, and what each answer means.

This module owns the only code path that deletes pods. `Reaper.delete` is that path,
shared by the daemon's workers and ``zombied scan --delete``: it waits for a token of
the global bucket and a free in-flight slot, checks leadership last, sends DELETE with
``preconditions.uid`` (so a StatefulSet pod recreated under the same name is never hit)
and optionally ``dryRun=All``, then maps the answer through the pure `outcome_for`,
counts, logs one decision line and records a ``Reaped`` Event. The workers re-evaluate
the newest snapshot before every delete: the pod may be gone, replaced or no longer a
zombie since it was queued. It must never delete without a uid precondition, and never
while this replica is not the leader.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Final

import aiohttp
import anyio
import structlog
from kubernetes_asyncio import client

from zombied import metrics
from zombied.backoff import Backoff
from zombied.kube import (
    API_FAILURES,
    TRANSPORT_ERROR,
    ApiStatus,
    raise_for_status,
    rbac_rule,
    status_of,
)
from zombied.log import get_logger
from zombied.pod import PodSnapshot
from zombied.queue import QueueClosed, WorkQueue
from zombied.ratelimit import TokenBucket
from zombied.rules import classify
from zombied.watch import PodCache

__all__ = [
    "Action",
    "Leadership",
    "Outcome",
    "Reaper",
    "outcome_for",
]

log = get_logger(__name__)

EVENT_REASON: Final = "Reaped"
COMPONENT: Final = "zombied"
_DELETE_TIMEOUT: Final = 10.0
_EVENT_TIMEOUT: Final = 10.0


class Action(StrEnum):
    """What the worker does with the key after an answer."""

    DONE = "done"  # finished: deleted, gone, replaced, or a dry run
    RETRY_AFTER = "retry-after"  # throttled: requeue after Retry-After (else backoff)
    BACKOFF = "backoff"  # transient failure: requeue with per-key backoff
    FORBIDDEN = "forbidden"  # not allowed: report the RBAC rule, requeue with backoff
    DROP = "drop"  # a request the server will never accept: give up on this key
    ABANDONED = "abandoned"  # leadership lost before an answer: requeue, do not count


@dataclass(frozen=True, slots=True)
class Outcome:
    """The meaning of one answer to DELETE."""

    outcome: str  # the ``outcome`` label of zombied_pods_reaped_total ("" = not counted)
    action: Action
    event: str  # the log event of the decision
    code: int = 200
    retry_after: float | None = None
    message: str = ""

    @property
    def failed(self) -> bool:
        """The pod may still be there because of this answer."""
        return self.action is not Action.DONE


DELETED: Final = Outcome("deleted", Action.DONE, "pod.reaped")
DRY_RUN: Final = Outcome("dry_run", Action.DONE, "pod.dry_run")
ABANDONED: Final = Outcome("", Action.ABANDONED, "pod.abandoned", code=TRANSPORT_ERROR)


def outcome_for(status: ApiStatus | None) -> Outcome:
    """Map the answer to a DELETE (None: 200/202) to what it means and what to do."""
    if status is None:
        return DELETED
    code, message = status.code, status.message
    if code == 404:
        return Outcome("gone", Action.DONE, "pod.gone", code, message=message)
    if code == 409:
        return Outcome("conflict", Action.DONE, "pod.conflict", code, message=message)
    if code == 429:
        return Outcome(
            "error", Action.RETRY_AFTER, "pod.delete_failed", code, status.retry_after, message
        )
    if code in (401, 403):
        return Outcome("error", Action.FORBIDDEN, "pod.delete_failed", code, message=message)
    if status.transient or code == 408:
        return Outcome("error", Action.BACKOFF, "pod.delete_failed", code, message=message)
    return Outcome("error", Action.DROP, "pod.delete_failed", code, message=message)


def delete_options(pod: PodSnapshot, *, dry_run: bool) -> dict[str, Any]:
    """The DeleteOptions body of a reap: preconditions, and ``dryRun`` when asked.

    The body is the only place for options: the server ignores query options whenever
    a body is sent, silently.
    """
    preconditions: dict[str, str] = {"uid": pod.uid}
    if pod.resource_version:
        preconditions["resourceVersion"] = pod.resource_version
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "DeleteOptions",
        "preconditions": preconditions,
    }
    if dry_run:
        body["dryRun"] = ["All"]
    return body


class Leadership:
    """Whether this replica may delete, and the in-flight deletes to stop on loss.

    ``check`` is an extra predicate read before every delete (the elector's own
    renew-deadline view), so leadership that lapses between two callbacks still stops
    deleting.
    """

    def __init__(self, leading: bool = True, check: Callable[[], bool] | None = None) -> None:
        self._leading = leading
        self.check = check
        self._changed = anyio.Event()
        self._in_flight: set[anyio.CancelScope] = set()
        metrics.leader.set(1 if leading else 0)

    @property
    def leading(self) -> bool:
        """True when deletes are allowed right now."""
        return self._leading and (self.check is None or self.check())

    def set(self, leading: bool) -> None:
        """Record a gain or loss; a loss cancels every delete in flight at once."""
        if leading == self._leading:
            return
        self._leading = leading
        metrics.leader.set(1 if leading else 0)
        metrics.leader_transitions.inc()
        if not leading:
            for scope in list(self._in_flight):
                scope.cancel()
        self._changed.set()
        self._changed = anyio.Event()

    async def wait(self) -> None:
        """Return once leading."""
        while not self.leading:
            if self._leading:
                # The elector's view lapsed but no callback came yet: poll briefly.
                await anyio.sleep(0.1)
                continue
            await self._changed.wait()

    @property
    def in_flight(self) -> int:
        """Deletes sent and not yet answered."""
        return len(self._in_flight)

    def track(self, scope: anyio.CancelScope) -> None:
        """Cancel ``scope`` if leadership is lost while it runs."""
        self._in_flight.add(scope)

    def untrack(self, scope: anyio.CancelScope) -> None:
        """Stop tracking a finished delete."""
        self._in_flight.discard(scope)


class Reaper:
    """Rate-limited, precondition-guarded deletes, and the workers that drive them."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        qps: float = 5.0,
        burst: int = 10,
        max_in_flight: int = 4,
        dry_run: str = "off",
        leadership: Leadership | None = None,
        identity: str = COMPONENT,
        now: Callable[[], datetime] | None = None,
        delete_timeout: float = _DELETE_TIMEOUT,
    ) -> None:
        # Typed as Any: with _preload_content=False the generated stubs' return types lie.
        self._core: Any = client.CoreV1Api(api)
        self.bucket = TokenBucket(qps, burst)
        self._slots = anyio.Semaphore(max(1, max_in_flight))
        self.dry_run = str(dry_run)
        self.leadership = leadership if leadership is not None else Leadership()
        self.identity = identity
        self.delete_timeout = delete_timeout
        self._now = now if now is not None else (lambda: datetime.now(UTC))
        #: namespace -> missing RBAC rule, while deletes there answer 401/403.
        self.forbidden: dict[str, str] = {}
        self._events_forbidden: set[str] = set()
        self._backoffs: dict[str, Backoff] = {}

    # -- the one delete path ----------------------------------------------------------

    async def delete(
        self, pod: PodSnapshot, rule: str, *, since: datetime | None = None
    ) -> Outcome:
        """Delete ``pod`` (matched by ``rule``) once and report what happened."""
        since = since or pod.terminated_at
        age = (self._now() - since).total_seconds() if since is not None else None
        fields: dict[str, Any] = {
            "namespace": pod.namespace,
            "pod": pod.name,
            "uid": pod.uid,
            "rule": rule,
            "node": pod.node,
        }
        if age is not None:
            fields["age_s"] = round(age, 3)
        with structlog.contextvars.bound_contextvars(**fields):
            if self.dry_run == "client":
                metrics.pods_reaped.labels(rule=rule, outcome=DRY_RUN.outcome).inc()
                log.info(DRY_RUN.event, mode="client", reason=pod.reason)
                return DRY_RUN
            outcome = await self._send(pod)
            self._record(pod, rule, outcome)
            if outcome is DELETED:
                await self._emit_event(pod, rule)
            return outcome

    async def _send(self, pod: PodSnapshot) -> Outcome:
        async with self._slots:
            await self.bucket.acquire()
            if not self.leadership.leading:
                return ABANDONED
            with anyio.CancelScope() as cancel:
                self.leadership.track(cancel)
                try:
                    return await self._request(pod)
                finally:
                    self.leadership.untrack(cancel)
            return ABANDONED

    async def _request(self, pod: PodSnapshot) -> Outcome:
        # Every option goes in the body: kube-apiserver reads DeleteOptions from the body
        # alone when there is one, so a `?dryRun=All` beside it would delete for real.
        # The uid guards against a pod recreated under the same name; the resourceVersion
        # against one changed since it was judged (annotated keep, relabelled): the server
        # answers 409 and the watch brings the new state to judge again.
        body = delete_options(pod, dry_run=self.dry_run == "server")
        started = time.monotonic()
        try:
            response = await self._core.delete_namespaced_pod(
                pod.name,
                pod.namespace,
                body=body,
                _preload_content=False,
                _request_timeout=aiohttp.ClientTimeout(total=self.delete_timeout),
            )
            async with response:
                await raise_for_status(response)
        except API_FAILURES as exc:
            return outcome_for(status_of(exc))
        finally:
            metrics.delete_duration.observe(time.monotonic() - started)
        return DRY_RUN if self.dry_run == "server" else DELETED

    def _record(self, pod: PodSnapshot, rule: str, outcome: Outcome) -> None:
        if outcome.action is Action.ABANDONED:
            log.info(outcome.event, why="leadership lost")
            return
        metrics.pods_reaped.labels(rule=rule, outcome=outcome.outcome).inc()
        if outcome.code not in (200, 404, 409):
            metrics.api_errors.labels(verb="delete", code=str(outcome.code)).inc()
        if outcome.action is Action.FORBIDDEN:
            missing = rbac_rule("delete", "pods", pod.namespace)
            if pod.namespace not in self.forbidden:
                log.error(
                    "reaper.forbidden",
                    verb="delete",
                    resource="pods",
                    missing_rule=missing,
                    message=outcome.message,
                )
            self.forbidden[pod.namespace] = missing
        elif outcome.action is Action.DONE and pod.namespace in self.forbidden:
            del self.forbidden[pod.namespace]
            log.info("reaper.permitted", rule=rbac_rule("delete", "pods", pod.namespace))
        if outcome is DELETED:
            log.info(outcome.event, reason=pod.reason, owner=pod.owner)
        elif outcome is DRY_RUN:
            log.info(outcome.event, mode="server", reason=pod.reason)
        elif outcome.action is Action.DONE:
            log.info(outcome.event, code=outcome.code)
        else:
            log.warning(
                outcome.event,
                code=outcome.code,
                action=str(outcome.action),
                message=outcome.message[:200],
            )

    async def _emit_event(self, pod: PodSnapshot, rule: str) -> None:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        detail = f": {pod.message}" if pod.message else ""
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{pod.name}.{time.time_ns():x}", "namespace": pod.namespace},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": pod.namespace,
                "name": pod.name,
                "uid": pod.uid,
                "resourceVersion": pod.resource_version,
            },
            "reason": EVENT_REASON,
            "message": (
                f"Deleted zombie pod (rule {rule}) left {pod.phase or 'terminal'} "
                f"on node {pod.node or 'unknown'} by reason {pod.reason or 'unknown'}{detail}"
            )[:1024],
            "type": "Normal",
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": self.identity,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            response = await self._core.create_namespaced_event(
                pod.namespace,
                body,
                _preload_content=False,
                _request_timeout=aiohttp.ClientTimeout(total=_EVENT_TIMEOUT),
            )
            async with response:
                await raise_for_status(response)
        except API_FAILURES as exc:  # an audit Event is best effort, a bug is not
            status = status_of(exc)
            metrics.api_errors.labels(verb="create", code=str(status.code)).inc()
            if status.code in (401, 403):
                if pod.namespace in self._events_forbidden:
                    return
                self._events_forbidden.add(pod.namespace)
                log.warning(
                    "event.forbidden",
                    missing_rule=rbac_rule("create", "events", pod.namespace),
                    message=status.message,
                )
                return
            log.warning("event.failed", code=status.code, message=status.message[:200])

    # -- the workers ------------------------------------------------------------------

    async def work(self, cache: PodCache, queue: WorkQueue[str]) -> None:
        """One worker: take due keys until the queue is shut down and drained."""
        while True:
            if not self.leadership.leading:
                if queue.closed:
                    return  # a standby has nothing to drain
                await self.leadership.wait()
            try:
                key = await queue.get()
            except QueueClosed:
                return
            try:
                await self.process(key, cache, queue)
            finally:
                queue.done(key)

    async def process(self, key: str, cache: PodCache, queue: WorkQueue[str]) -> Outcome | None:
        """Re-evaluate the newest snapshot of ``key`` and delete it if still due."""
        entry = cache.get(key)
        if entry is None:
            self._backoffs.pop(key, None)
            return None  # deleted or no longer terminal since it was queued
        pod = entry.snapshot
        verdict = classify(pod, cache.rules, first_seen=entry.first_seen)
        if not verdict.zombie or verdict.rule is None:
            self._backoffs.pop(key, None)
            log.info(
                "pod.skipped",
                namespace=pod.namespace,
                pod=pod.name,
                uid=pod.uid,
                why=verdict.skip,
            )
            return None
        delay = cache.delay_until(verdict.due)
        if delay > 0:
            queue.add(key, delay)
            return None
        if not self.leadership.leading:
            queue.add(key)
            return None
        outcome = await self.delete(pod, verdict.rule, since=pod.terminated_at or entry.first_seen)
        if outcome.action in (Action.DONE, Action.DROP):
            self._backoffs.pop(key, None)
        elif outcome.action is Action.ABANDONED:
            queue.add(key)
        elif outcome.action is Action.RETRY_AFTER and outcome.retry_after is not None:
            queue.add(key, outcome.retry_after)
        else:
            backoff = self._backoffs.get(key)
            if backoff is None:
                # A key whose pod vanished while it waited never comes back to a worker:
                # drop such state whenever new state is made, so it stays bounded.
                for stale in [k for k in self._backoffs if cache.get(k) is None]:
                    del self._backoffs[stale]
                backoff = self._backoffs[key] = Backoff()
            queue.add(key, backoff.next())
        return outcome
