"""Deleting zombies: the only code path that deletes pods, and what each answer means.

`Reaper.delete`, shared by the daemon's workers and ``zombied scan --delete``, waits for
a token of the adaptive global bucket, checks leadership last and sends DELETE with
uid and resourceVersion preconditions (and ``dryRun`` for a server dry run), every
option in the body; `outcome_for` maps the answer. The workers re-evaluate the newest
snapshot before every delete and tell the queue whether the key failed or is done. It
never deletes without a uid precondition, nor while this replica is not the leader.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Final

import anyio

from zombied.cache import PodCache
from zombied.config import DryRun
from zombied.events import EventRecorder
from zombied.kube import ApiError, Kind, Kube, Request
from zombied.leader import Leadership
from zombied.log import get_logger
from zombied.pod import PodSnapshot
from zombied.queue import QueueClosed, WorkQueue
from zombied.ratelimit import TokenBucket, retry_delay

log = get_logger(__name__)

_DELETE_TIMEOUT: Final = 10.0


class Action(StrEnum):
    """What the worker does with the key after an answer."""

    DONE = "done"  # finished: deleted, gone, replaced, or a dry run
    RETRY_AFTER = "retry-after"  # throttled: requeue after Retry-After (else backoff)
    BACKOFF = "backoff"  # transient failure, or refused: requeue with per-key backoff
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
    overloaded: bool = False  # the server (or the way to it) says: slow down

    @property
    def failed(self) -> bool:
        return self.action is not Action.DONE


DELETED: Final = Outcome("deleted", Action.DONE, "pod.reaped")
DRY_RUN: Final = Outcome("dry_run", Action.DONE, "pod.dry_run")
ABANDONED: Final = Outcome("", Action.ABANDONED, "pod.abandoned", code=0)

#: What each kind of failed DELETE means for the key.
_ACTIONS: Final = {
    Kind.NOT_FOUND: ("gone", Action.DONE, "pod.gone"),
    Kind.CONFLICT: ("conflict", Action.DONE, "pod.conflict"),
    Kind.THROTTLED: ("error", Action.RETRY_AFTER, "pod.delete_failed"),
    Kind.TRANSIENT: ("error", Action.BACKOFF, "pod.delete_failed"),
    # Refused: the ledger names the missing rule; retried, as RBAC may be fixed.
    Kind.FORBIDDEN: ("error", Action.BACKOFF, "pod.delete_failed"),
    Kind.UNAUTHORIZED: ("error", Action.BACKOFF, "pod.delete_failed"),
    # Denied by admission (a policy, a webhook): retried, as the policy may change.
    Kind.DENIED: ("error", Action.BACKOFF, "pod.delete_failed"),
    Kind.GONE: ("error", Action.DROP, "pod.delete_failed"),
    Kind.INVALID: ("error", Action.DROP, "pod.delete_failed"),
}


def outcome_for(error: ApiError | None) -> Outcome:
    """Map the answer to a DELETE (None: 200/202) to what it means and what to do."""
    if error is None:
        return DELETED
    outcome, action, event = _ACTIONS[error.kind]
    return Outcome(
        outcome, action, event, error.code, error.retry_after, error.message, error.overloaded
    )


def delete_options(pod: PodSnapshot, *, dry_run: bool) -> dict[str, Any]:
    """The DeleteOptions body of a reap: preconditions, and ``dryRun`` when asked. Every
    option goes here: next to a body, the server silently ignores query options."""
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


class Reaper:
    """Rate-limited, precondition-guarded deletes, and the workers that drive them.

    ``on_answer(rule, outcome, code, seconds)`` records each attempt (``seconds`` None:
    nothing sent); ``on_rate(qps)`` each change of the adaptive rate.
    """

    def __init__(
        self,
        kube: Kube,
        *,
        qps: float = 5.0,
        burst: int = 10,
        dry_run: DryRun = DryRun.OFF,
        leadership: Leadership | None = None,
        events: EventRecorder | None = None,
        delete_timeout: float = _DELETE_TIMEOUT,
        on_answer: Callable[[str, str, int, float | None], None] | None = None,
        on_rate: Callable[[float], None] | None = None,
    ) -> None:
        self._kube = kube
        self.bucket = TokenBucket(qps, burst)
        self.events = events
        self._rng = random.Random()
        self.dry_run = dry_run
        self.leadership = leadership if leadership is not None else Leadership()
        self.delete_timeout = delete_timeout
        self._on_answer = (
            on_answer if on_answer is not None else (lambda _rule, _outcome, _code, _seconds: None)
        )
        self._on_rate = on_rate if on_rate is not None else (lambda _qps: None)
        self._reported_rate = self.bucket.qps
        self._on_rate(self._reported_rate)

    async def delete(
        self, pod: PodSnapshot, rule: str, *, since: datetime | None = None
    ) -> Outcome:
        """Delete ``pod`` (matched by ``rule``) once and report what happened."""
        since = since or pod.terminated_at
        plog = log.bind(
            namespace=pod.namespace, pod=pod.name, uid=pod.uid, rule=rule, node=pod.node
        )
        if since is not None:
            plog = plog.bind(age_s=round((datetime.now(UTC) - since).total_seconds(), 3))
        if self.dry_run is DryRun.CLIENT:
            self._on_answer(rule, DRY_RUN.outcome, DRY_RUN.code, None)
            plog.info(DRY_RUN.event, mode="client", reason=pod.reason)
            return DRY_RUN
        sent_at = await self.bucket.acquire()
        outcome = ABANDONED
        started = anyio.current_time()
        # Leadership is checked last, after the wait for a token.
        if self.leadership.leading:
            with self.leadership.acting():
                outcome = await self._request(pod)
        if outcome.overloaded:
            self.bucket.throttled(sent_at)
            if self.events is not None:  # Events yield to deletes: they slow down too
                self.events.bucket.throttled(sent_at)
        if (rate := self.bucket.rate()) != self._reported_rate:
            self._reported_rate = rate
            self._on_rate(rate)
        if outcome.action is Action.ABANDONED:
            plog.info(outcome.event, why="leadership lost")
            return outcome
        self._on_answer(rule, outcome.outcome, outcome.code, anyio.current_time() - started)
        if outcome is DELETED:
            plog.info(outcome.event, reason=pod.reason, owner=pod.owner)
            if self.events is not None:
                self.events.record(pod, rule)
        elif outcome is DRY_RUN:
            plog.info(outcome.event, mode="server", reason=pod.reason)
        elif outcome.action is Action.DONE:
            plog.info(outcome.event, code=outcome.code)
        else:
            plog.warning(
                outcome.event,
                code=outcome.code,
                action=str(outcome.action),
                message=outcome.message[:200],
            )
        return outcome

    async def _request(self, pod: PodSnapshot) -> Outcome:
        # The uid guards against a pod recreated under the same name, the resourceVersion
        # against one changed since it was judged: 409, and the watch brings the news.
        server_dry_run = self.dry_run is DryRun.SERVER
        request = Request("delete", "pods", pod.namespace, pod.name)
        try:
            await self._kube.request(
                request,
                body=delete_options(pod, dry_run=server_dry_run),
                timeout=self.delete_timeout,
            )
        except ApiError as exc:
            return outcome_for(exc)
        return DRY_RUN if server_dry_run else DELETED

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
        """Judge the newest snapshot of ``key`` again and delete it if still due."""
        judgement = cache.evaluate(key, take=True)
        if judgement is None:
            return None  # gone since it was queued, or queued again for its due time
        if judgement.rule is None:
            pod = judgement.pod
            log.info(
                "pod.skipped",
                namespace=pod.namespace,
                pod=pod.name,
                uid=pod.uid,
                why=judgement.skip,
            )
            return None
        if not self.leadership.leading:
            queue.add(key)
            return None
        outcome = await self.delete(judgement.pod, judgement.rule, since=judgement.since)
        if outcome is DELETED or outcome.outcome == "gone":
            # The watch would say so soon; until then nothing counts it as left to do.
            cache.remove(key, judgement.pod.uid)
        if outcome.action in (Action.DONE, Action.DROP):
            queue.forget(key)
        elif outcome.action is Action.ABANDONED:
            queue.add(key)
        elif outcome.action is Action.RETRY_AFTER and outcome.retry_after is not None:
            queue.add(key, retry_delay(outcome.retry_after, self._rng))
        else:
            queue.add_rate_limited(key)
        return outcome
