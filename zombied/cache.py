"""The pod cache, and the one step that turns a pod's newest state into queue work.

`PodCache` is the only holder of pod snapshots, each with the `Judgement` reached when
it was stored. `PodCache.evaluate` (judgement → delay → enqueue) runs on every watch
change and again right before every delete, so the two never act on different
judgements. It never talks to the API server.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from zombied.log import get_logger
from zombied.pod import KEEP_ANNOTATION, PodSnapshot
from zombied.queue import WorkQueue
from zombied.rules import Decision, Judgement, RuleSet, judge, precluded

log = get_logger(__name__)


def _utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class CacheEntry:
    """The judgement on the newest snapshot of a terminal pod, and when it was first seen."""

    judgement: Judgement
    first_seen: datetime

    @property
    def snapshot(self) -> PodSnapshot:
        return self.judgement.pod


class PodCache:
    """Snapshots of terminal pods by key, kept in step with the work queue."""

    def __init__(
        self,
        rules: RuleSet,
        queue: WorkQueue[str],
        *,
        now: Callable[[], datetime] = _utcnow,
    ) -> None:
        self._rules = rules
        self.queue = queue
        self._now = now
        self._entries: dict[str, CacheEntry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    @property
    def zombies(self) -> int:
        """Entries judged zombies, due or not."""
        return sum(entry.judgement.zombie for entry in self._entries.values())

    def get(self, key: str) -> CacheEntry | None:
        return self._entries.get(key)

    def entries(self) -> list[CacheEntry]:
        return list(self._entries.values())

    def due_now(self) -> int:
        """Cached zombies whose min age has passed."""
        now = self._now()
        return sum(
            entry.judgement.decision(now) is Decision.DELETE for entry in self._entries.values()
        )

    def evaluate(self, key: str, *, take: bool = False) -> Judgement | None:
        """Put the queue in step with the judgement on the newest snapshot of ``key``.

        A zombie is queued for its due time; anything else, or a key no longer cached,
        leaves the queue. With ``take`` the caller is the worker holding ``key``: a zombie
        due now is left to it instead of queued again. Returns the judgement, unless the
        key is not cached or is a zombie queued again for later (None: nothing to do now).
        """
        entry = self._entries.get(key)
        if entry is None:
            self.queue.discard(key)
            return None
        due = entry.judgement.due
        if due is None:
            self.queue.discard(key)
            return entry.judgement
        delay = max(0.0, (due - self._now()).total_seconds())
        if delay > 0 or not take:
            self.queue.add(key, delay)
            return None
        return entry.judgement

    def upsert(self, snapshot: PodSnapshot) -> None:
        """Record the newest state of a pod and evaluate it; a pod no rule may judge (not
        terminal, or being deleted) leaves."""
        key = snapshot.key
        if precluded(snapshot) is not None:
            self.remove(key)
            return
        old = self._entries.get(key)
        same_pod = old is not None and old.snapshot.uid == snapshot.uid
        said = old.snapshot.keep_value if old is not None and same_pod else None
        if snapshot.keep_unclear and snapshot.keep_value != said:  # once per pod and value
            log.warning(
                "pod.keep_not_understood",
                namespace=snapshot.namespace,
                pod=snapshot.name,
                uid=snapshot.uid,
                value=snapshot.keep_value,
                via=snapshot.keep_via,
                hint=f'{KEEP_ANNOTATION} takes "true" or "false"; the pod is kept',
            )
        first_seen = old.first_seen if old is not None and same_pod else self._now()
        # Judged once, here: nothing an entry is judged on changes before its delete.
        judgement = judge(snapshot, self._rules, first_seen=first_seen)
        self._entries[key] = CacheEntry(judgement, first_seen)
        self.evaluate(key)

    def remove(self, key: str, uid: str | None = None) -> None:
        """Forget a pod (deleted, or no longer terminal); with ``uid`` only that pod."""
        entry = self._entries.get(key)
        if entry is None or (uid is not None and entry.snapshot.uid != uid):
            return
        del self._entries[key]
        self.queue.discard(key)

    def reconcile(self, owns: Callable[[str], bool], snapshots: Iterable[PodSnapshot]) -> int:
        """Replace the pods of the namespaces ``owns`` selects with a fresh LIST; return
        how many cached pods the LIST no longer holds."""
        seen: set[str] = set()
        for snapshot in snapshots:
            seen.add(snapshot.key)
            self.upsert(snapshot)
        stale = [
            key
            for key, entry in self._entries.items()
            if key not in seen and owns(entry.snapshot.namespace)
        ]
        for key in stale:
            self.remove(key)
        return len(stale)
