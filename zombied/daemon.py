"""The running controller: watches, reaper workers, leader election and probes, wired.

Everything ``zombied run`` starts lives in one anyio task group. Shutdown drains:
readiness turns false, the watches stop, in-flight and already due deletes finish
within ``--drain-timeout``, the lease is released. It decides what healthy and ready
mean and never holds pod data itself. An exception escaping a watch loop, a worker or
the elector is a bug: it is logged, ``/healthz`` fails and the process exits non-zero.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AsyncExitStack, contextmanager
from datetime import UTC, datetime
from types import TracebackType
from typing import TYPE_CHECKING, Final, Self

import anyio
import kubernetes_asyncio

from zombied import __version__, metrics
from zombied.cache import PodCache
from zombied.events import EventRecorder
from zombied.http import HttpServer, LoopMonitor
from zombied.kube import Kube, open_kube, pool_size
from zombied.kubectl import own_namespace
from zombied.leader import Leadership, LeaseElector, default_identity
from zombied.log import get_logger
from zombied.queue import WorkQueue
from zombied.reaper import Reaper
from zombied.watch import Watcher, scopes_for

if TYPE_CHECKING:
    from zombied.config import Config

log = get_logger(__name__)

#: A watch loop that made no progress for this long past its timeout is wedged.
_SILENT_SLACK: Final = 60.0


class Daemon:
    """``async with Daemon(config):`` runs the controller; leaving the block drains."""

    def __init__(self, config: Config, *, identity: str | None = None) -> None:
        self.config = config
        self.identity = identity or default_identity()
        self.queue: WorkQueue[str] = WorkQueue(
            on_depth=metrics.queue_depth_changed, on_wait=metrics.queue_waited
        )
        self.cache = PodCache(config.rules, self.queue)
        self.scopes = scopes_for(config.rules.scope)
        self.leadership = Leadership(not config.leader_elect, on_change=metrics.leading)
        metrics.leading(self.leadership.leading, changed=False)
        self.monitor = LoopMonitor()
        self.watchers: list[Watcher] = []
        self.kube: Kube | None = None
        self.events: EventRecorder | None = None
        self.reaper: Reaper | None = None
        self.elector: LeaseElector | None = None
        self.http: HttpServer | None = None
        self.draining = False
        self._stack: AsyncExitStack | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        # One scope per group of tasks, so that draining stops them in order.
        self._watch_scope = anyio.CancelScope()
        self._work_scope = anyio.CancelScope()
        self._background_scope = anyio.CancelScope()
        self._workers_done = anyio.Event()
        self._drained = anyio.Event()
        self._crashed = ""

    @property
    def http_port(self) -> int:
        return self.http.port if self.http is not None else 0

    def readiness(self) -> tuple[bool, str]:
        """Ready when every scope is synced, nothing is refused and not draining."""
        reasons: list[str] = ["draining"] if self.draining else []
        if self.kube is not None:
            reasons.extend(self.kube.permissions.problems())
        reasons.extend(
            f"scope {watcher.scope.label}: first list not done"
            for watcher in self.watchers
            if not watcher.state.synced
        )
        return (not reasons, "; ".join(reasons) if reasons else "ok")

    def ready(self) -> bool:
        return self.readiness()[0]

    def health(self) -> tuple[bool, str]:
        """Unhealthy only when wedged: loop stalled, or a watch loop dead or silent."""
        if self._crashed:
            return False, self._crashed
        ok, why = self.monitor.check()
        if not ok:
            return ok, why
        if self.draining or self._tg is None:
            return True, "ok"
        now = anyio.current_time()
        for watcher in self.watchers:
            label = watcher.scope.label
            if not watcher.state.alive:
                return False, f"watch loop of scope {label} is not running"
            limit = 2 * watcher.timeout_max + _SILENT_SLACK
            if now - watcher.state.last_progress > limit:
                return False, f"watch loop of scope {label} silent for {limit:.0f}s"
        return True, "ok"

    def healthy(self) -> bool:
        return self.health()[0]

    def _before_scrape(self) -> None:
        now = anyio.current_time()
        metrics.watch_ages({w.scope.label: now - w.state.last_event for w in self.watchers})
        metrics.watch_timeouts({w.scope.label: w.state.watch_timeout for w in self.watchers})
        zombies = [
            (entry.judgement.rule, entry.judgement.due)
            for entry in self.cache.entries()
            if entry.judgement.zombie
        ]
        metrics.zombies_known(len(zombies))
        metrics.zombies_overdue(
            metrics.overdue_by_rule(self.config.rules.names, zombies, datetime.now(UTC))
        )
        metrics.rate_limit_waiting(self.reaper.bucket.waiting if self.reaper is not None else 0)
        metrics.events_queued(len(self.events) if self.events is not None else 0)

    async def __aenter__(self) -> Self:
        config = self.config
        stack = AsyncExitStack()
        await stack.__aenter__()
        try:
            self.kube = await stack.enter_async_context(
                open_kube(
                    config.kubeconfig,
                    config.context,
                    pool_size=pool_size(watches=len(self.scopes), workers=config.max_in_flight),
                    on_failure=metrics.api_failed,
                )
            )
            # Entered before the workers' task group, so it exits after them.
            self.events = await stack.enter_async_context(
                EventRecorder(
                    self.kube,
                    identity=self.identity,
                    on_dropped=metrics.events_dropped,
                )
            )
            self._build(self.kube, self.events)
            self.http = await stack.enter_async_context(
                HttpServer(
                    *config.listen,
                    health=self.health,
                    ready=self.readiness,
                    before_scrape=self._before_scrape,
                )
            )
            self._tg = await stack.enter_async_context(anyio.create_task_group())
            await self._tg.start(self._run_background)
            await self._tg.start(self._run_watchers)
            await self._tg.start(self._run_workers)
        except BaseException:
            if self._tg is not None:
                self._tg.cancel_scope.cancel()
            # Not shielded: the task group must exit in its own cancel scope.
            await stack.aclose()
            raise
        self._stack = stack
        log.info(
            "daemon.started",
            version=__version__,
            scopes=[scope.label for scope in self.scopes],
            rules=list(config.rules.names),
            dry_run=str(config.dry_run),
            leader_elect=config.leader_elect,
            identity=self.identity,
        )
        return self

    def _build(self, kube: Kube, events: EventRecorder) -> None:
        config = self.config
        if config.leader_elect:
            self.elector = LeaseElector(
                kube,
                name=config.lease_name,
                namespace=config.lease_namespace or own_namespace() or "default",
                identity=self.identity,
                lease_duration=config.lease_duration,
                renew_deadline=config.renew_deadline,
                retry_period=config.retry_period,
                leadership=self.leadership,
            )
        self.reaper = Reaper(
            kube,
            qps=config.qps,
            burst=config.burst,
            dry_run=config.dry_run,
            leadership=self.leadership,
            events=events,
            on_answer=metrics.delete_answered,
            on_rate=metrics.delete_rate_changed,
        )
        self.watchers = [
            Watcher(
                kube,
                scope,
                self.cache,
                # as client-go's reflector: at random from the timeout to twice it
                timeout_min=config.watch_timeout,
                timeout_max=2 * config.watch_timeout,
                on_synced=metrics.scope_synced,
                on_restart=metrics.watch_restarted,
            )
            for scope in self.scopes
        ]

    async def _run_background(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        with self._background_scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self.monitor.run)
                if self.elector is not None:
                    await tg.start(self._guarded, "lease elector", self.elector.run)
                task_status.started()

    async def _run_watchers(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        with self._watch_scope:
            async with anyio.create_task_group() as tg:
                for watcher in self.watchers:
                    task = f"watch loop of scope {watcher.scope.label}"
                    await tg.start(self._guarded, task, watcher.run)
                task_status.started()

    async def _run_workers(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        reaper = self.reaper
        assert reaper is not None  # built in __aenter__ before the workers start
        try:
            with self._work_scope:
                async with anyio.create_task_group() as tg:
                    for _ in range(self.config.max_in_flight):
                        tg.start_soon(self._work, reaper)
                    task_status.started()
        finally:
            self._workers_done.set()

    async def _guarded(
        self,
        task: str,
        run: Callable[..., Awaitable[None]],
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        with self._crash_on_bug(task):
            await run(task_status=task_status)

    async def _work(self, reaper: Reaper) -> None:
        with self._crash_on_bug("reaper worker"):
            await reaper.work(self.cache, self.queue)

    @contextmanager
    def _crash_on_bug(self, task: str) -> Iterator[None]:
        """Log a bug with its traceback and fail liveness; the exception goes on."""
        try:
            yield
        except Exception as exc:
            if not self._crashed:
                self._crashed = f"{task} crashed: {type(exc).__name__}: {str(exc)[:200]}"
            log.critical("daemon.crashed", task=task, error=repr(exc)[:500], exc_info=True)
            raise

    async def drain(self) -> None:
        """Stop watching, finish what is due within the drain timeout, release the lease."""
        if self.draining:
            await self._drained.wait()
            return
        self.draining = True
        started = anyio.current_time()
        due = self.cache.due_now()
        log.info("daemon.draining", due=due, timeout_s=self.config.drain_timeout)
        with anyio.CancelScope(shield=True):
            self._watch_scope.cancel()
            self.queue.shut_down(drain=True)
            if not self.leadership.leading:
                self._work_scope.cancel()  # a standby has nothing to finish
            with anyio.move_on_after(self.config.drain_timeout) as timer:
                await self._workers_done.wait()
            if timer.cancelled_caught:
                self.queue.shut_down(drain=False)
                self._work_scope.cancel()
                log.warning("daemon.drain_timeout", left=len(self.queue))
                await self._workers_done.wait()
            if self.events is not None:
                # The Events of the last deletes get what is left of the drain timeout.
                left = self.config.drain_timeout - (anyio.current_time() - started)
                await self.events.drain(max(left, 0.0))
            if self.elector is not None:
                await self.elector.release()
            self._background_scope.cancel()
        # A deleted zombie leaves the cache at once: what is left was not deleted, the
        # due ones because their delete failed, was refused or ran out of time.
        left_due = self.cache.due_now()
        log.info(
            "daemon.drained",
            left_due=left_due,
            left_not_due=self.cache.zombies - left_due,
            duration_s=round(anyio.current_time() - started, 3),
        )
        self._drained.set()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        stack, self._stack = self._stack, None
        if stack is None:
            return None
        if exc is None:
            await self.drain()
        else:
            self.draining = True
            if self._tg is not None:
                self._tg.cancel_scope.cancel()
        return bool(await stack.__aexit__(exc_type, exc, tb))


async def serve(config: Config) -> int:
    """Run until SIGTERM/SIGINT, drain, return 0; a second signal exits at once."""
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with Daemon(config) as daemon:
            async for signum in signals:
                log.info("daemon.signal", signal=signal.Signals(signum).name, action="drain")
                break
            async with anyio.create_task_group() as tg:
                tg.start_soon(_exit_on_second_signal, signals)
                await daemon.drain()
                tg.cancel_scope.cancel()
    return 0


async def _exit_on_second_signal(signals: AsyncIterator[signal.Signals]) -> None:
    async for signum in signals:
        name = signal.Signals(signum).name
        log.warning("daemon.signal", signal=name, action="exit now")
        sys.stdout.flush()
        sys.stderr.flush()
        # Exit as a killed process would: 128 + signal.
        os._exit(128 + int(signum))


def versions() -> dict[str, str]:
    return {"zombied": __version__, "kubernetes_asyncio": kubernetes_asyncio.__version__}
