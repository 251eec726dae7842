"""Injected failures of the simulated API server: errors, latency and cut watches.

This module owns the fault programme a test (or the ``--fault`` command-line option)
sets up, and the decisions it yields; the server only asks. It never speaks HTTP and
never sleeps: it says how long to delay, it does not wait.

Hooks for the server:

* ``on_request(verb, resource) -> Decision(delay, error)`` once per request, before
  it is served. ``delay`` is the summed latency of every matching latency rule;
  ``error`` is ``(status, retry_after)`` from the first matching error rule that fires
  (send it as a ``Status`` with a ``Retry-After`` header when ``retry_after`` is set).
* ``on_watch_event() -> bool`` after each event written on any watch: True means
  close this stream now (the ``cut_watches_after`` countdown ran out; every other
  open watch is cut at the same moment through the generation below).
* Cutting every open watch is signalled by ``cut_generation``, an integer that grows
  by one per cut. A watch remembers the value when it starts and ends its stream as
  soon as the value changes: either by polling between events, or by racing the
  stream against ``await faults.wait_cut(since)``, which returns once
  ``cut_generation > since``. ``wait_cut`` also drives ``cut_watches_every``: the
  periodic cuts happen while someone waits, on the event loop's clock (so looptime
  tests stay instant), and are no-ops when no watch is open anyway.

Randomness comes from one ``random.Random(seed)``: the same seed and the same
sequence of requests give the same failures.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import NamedTuple

import anyio

WILDCARD = "*"
#: Retry-After sent with a 429 when the rule does not say (the apiserver always sends one).
DEFAULT_RETRY_AFTER = 1.0


class FaultError(NamedTuple):
    status: int
    retry_after: float | None


class Decision(NamedTuple):
    """What the server does to one request: wait ``delay`` seconds, then fail or serve."""

    delay: float = 0.0
    error: FaultError | None = None


NO_FAULT = Decision()


@dataclass(eq=False)
class FaultRule:
    """One programmed fault; ``remaining`` counts down when the rule has a count."""

    kind: str  # "error" or "latency"
    verb: str = WILDCARD
    resource: str = WILDCARD
    status: int = 503
    fraction: float = 1.0
    retry_after: float | None = None
    remaining: int | None = None
    seconds: float = 0.0
    fired: int = field(default=0)

    def matches(self, verb: str, resource: str) -> bool:
        return self.verb in (WILDCARD, verb) and self.resource in (WILDCARD, resource)


class Faults:
    """The fault programme; an empty one (the default) never interferes."""

    def __init__(self, seed: int | None = 0) -> None:
        self._rng = random.Random(seed)
        self._rules: list[FaultRule] = []
        self._generation = 0
        self._event: anyio.Event | None = None
        self._cut_after_repeat: int | None = None
        self._events_left: int | None = None
        self._every: float | None = None
        self._next_cut_at: float | None = None

    # --- programming ----------------------------------------------------------------------

    @property
    def rules(self) -> tuple[FaultRule, ...]:
        return tuple(self._rules)

    def add_error(
        self,
        verb: str = WILDCARD,
        resource: str = WILDCARD,
        *,
        status: int = 503,
        fraction: float = 1.0,
        retry_after: float | None = None,
        count: int | None = None,
    ) -> FaultRule:
        """Fail ``fraction`` of matching requests with ``status`` (at most ``count`` times)."""
        if not 400 <= status <= 599:
            raise ValueError(f"status must be an HTTP error code (400-599), got {status}")
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"fraction must be between 0 and 1, got {fraction}")
        if count is not None and count < 1:
            raise ValueError(f"count must be >= 1, got {count}")
        if retry_after is not None and (retry_after < 0 or not math.isfinite(retry_after)):
            raise ValueError(f"retry_after must be >= 0 seconds, got {retry_after}")
        if retry_after is None and status == 429:
            retry_after = DEFAULT_RETRY_AFTER
        rule = FaultRule(
            "error",
            verb=verb,
            resource=resource,
            status=status,
            fraction=fraction,
            retry_after=retry_after,
            remaining=count,
        )
        self._rules.append(rule)
        return rule

    def add_latency(
        self, verb: str = WILDCARD, resource: str = WILDCARD, seconds: float = 0.0
    ) -> FaultRule:
        """Delay every matching request by ``seconds``."""
        if seconds < 0 or not math.isfinite(seconds):
            raise ValueError(f"seconds must be >= 0, got {seconds}")
        rule = FaultRule("latency", verb=verb, resource=resource, seconds=seconds)
        self._rules.append(rule)
        return rule

    def remove(self, rule: FaultRule) -> None:
        """Forget ``rule``; removing a rule that is gone (count used up) is fine."""
        self._rules = [r for r in self._rules if r is not rule]

    def clear(self) -> None:
        """Drop every rule and stop periodic and counted cuts."""
        self._rules.clear()
        self._cut_after_repeat = self._events_left = None
        self._every = self._next_cut_at = None
        self._wake()

    # --- watch cuts ---------------------------------------------------------------------

    @property
    def cut_generation(self) -> int:
        return self._generation

    def cut_watches(self) -> None:
        """End every open watch now (clients see the stream close and resume)."""
        self._generation += 1
        self._wake()

    def cut_watches_after(self, n_events: int, *, repeat: bool = False) -> None:
        """Cut every open watch once ``n_events`` more events were sent (each time if repeat)."""
        if n_events < 1:
            raise ValueError(f"n_events must be >= 1, got {n_events}")
        self._events_left = n_events
        self._cut_after_repeat = n_events if repeat else None

    def cut_watches_every(self, seconds: float | None) -> None:
        """Cut every open watch each ``seconds`` (None stops it)."""
        if seconds is not None and (seconds <= 0 or not math.isfinite(seconds)):
            raise ValueError(f"seconds must be > 0, got {seconds}")
        self._every = seconds
        self._next_cut_at = None
        self._wake()  # waiters recompute their deadline

    def _wake(self) -> None:
        if self._event is not None:
            self._event.set()
            self._event = None

    async def wait_cut(self, since: int) -> int:
        """Return the new ``cut_generation`` once it exceeds ``since``."""
        while self._generation <= since:
            if self._event is None:
                self._event = anyio.Event()
            event = self._event
            if self._every is None:
                await event.wait()
                continue
            now = anyio.current_time()
            if self._next_cut_at is None:
                self._next_cut_at = now + self._every
            with anyio.move_on_after(self._next_cut_at - now):
                await event.wait()
            # The first waiter to wake at the deadline performs the cut; the others
            # then see the new generation.
            if self._next_cut_at is not None and anyio.current_time() >= self._next_cut_at:
                self._next_cut_at = None
                self.cut_watches()
        return self._generation

    # --- hooks --------------------------------------------------------------------------

    def on_request(self, verb: str, resource: str) -> Decision:
        """The fate of one request (see the module docstring)."""
        if not self._rules:
            return NO_FAULT
        delay = 0.0
        error: FaultError | None = None
        for rule in list(self._rules):
            if not rule.matches(verb, resource):
                continue
            if rule.kind == "latency":
                delay += rule.seconds
                rule.fired += 1
                continue
            if error is not None:
                continue
            if rule.fraction < 1.0 and self._rng.random() >= rule.fraction:
                continue
            error = FaultError(rule.status, rule.retry_after)
            rule.fired += 1
            if rule.remaining is not None:
                rule.remaining -= 1
                if rule.remaining <= 0:
                    self.remove(rule)
        return Decision(delay, error)

    def on_watch_event(self) -> bool:
        """Count one event sent on a watch; True when the watches must be cut now."""
        if self._events_left is None:
            return False
        self._events_left -= 1
        if self._events_left > 0:
            return False
        self._events_left = self._cut_after_repeat
        self.cut_watches()
        return True

    # --- command line -------------------------------------------------------------------

    def apply_spec(self, spec: str) -> FaultRule | None:
        """Add one fault written in the command-line syntax; return its rule, if any.

        ``error:verb=delete,resource=pods,status=503,fraction=0.2,retry_after=1,count=5``,
        ``latency:verb=list,resource=pods,seconds=0.05``, ``cut-now``, ``cut-every:5``,
        ``cut-after:100`` (``cut-after:100,repeat`` cuts every 100 events).
        """
        try:
            return self._apply_spec(spec.strip())
        except ValueError as exc:
            raise ValueError(f"bad fault spec {spec.strip()!r}: {exc}") from None

    def _apply_spec(self, spec: str) -> FaultRule | None:
        kind, _, args = spec.partition(":")
        kind = kind.strip()
        if kind == "cut-now":
            if args.strip():
                raise ValueError("cut-now takes no arguments")
            self.cut_watches()
            return None
        if kind == "cut-every":
            self.cut_watches_every(_number(args.strip(), "seconds"))
            return None
        if kind == "cut-after":
            count, _, flag = args.partition(",")
            if flag.strip() not in ("", "repeat"):
                raise ValueError(f"unknown flag {flag.strip()!r} (expected 'repeat')")
            self.cut_watches_after(_integer(count.strip(), "events"), repeat=bool(flag.strip()))
            return None
        if kind not in ("error", "latency"):
            raise ValueError(
                f"unknown kind {kind!r} (expected error, latency, cut-now, cut-every, cut-after)"
            )
        options = _options(args)
        allowed = (
            {"verb", "resource", "status", "fraction", "retry_after", "count"}
            if kind == "error"
            else {"verb", "resource", "seconds"}
        )
        unknown = sorted(set(options) - allowed)
        if unknown:
            raise ValueError(
                f"unknown option {unknown[0]!r} for {kind} (expected {', '.join(sorted(allowed))})"
            )
        verb = options.get("verb", WILDCARD)
        resource = options.get("resource", WILDCARD)
        if kind == "latency":
            if "seconds" not in options:
                raise ValueError("latency needs seconds=")
            return self.add_latency(verb, resource, _number(options["seconds"], "seconds"))
        return self.add_error(
            verb,
            resource,
            status=_integer(options.get("status", "503"), "status"),
            fraction=_number(options.get("fraction", "1"), "fraction"),
            retry_after=(
                _number(options["retry_after"], "retry_after") if "retry_after" in options else None
            ),
            count=_integer(options["count"], "count") if "count" in options else None,
        )


def _options(args: str) -> dict[str, str]:
    options: dict[str, str] = {}
    for item in args.split(","):
        if not item.strip():
            continue
        key, eq, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not eq or not key or not value.strip():
            raise ValueError(f"expected key=value, got {item.strip()!r}")
        if key in options:
            raise ValueError(f"option {key!r} given twice")
        options[key] = value.strip()
    return options


def _number(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{what} must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise ValueError(f"{what} must be finite, got {text!r}")
    return value


def _integer(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{what} must be an integer, got {text!r}") from None
