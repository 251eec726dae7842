"""Fault programme of the simulated API server: errors, latency, cuts, spec parsing."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

from kubesim.faults import DEFAULT_RETRY_AFTER, Decision, FaultError, Faults


def test_the_first_rule_for_the_verb_and_resource_answers() -> None:
    faults = Faults()
    assert faults.on_request("delete", "pods") == Decision(0.0, None)
    faults.add_error(verb="delete", resource="pods", status=503)
    faults.add_error(verb="list", status=429, retry_after=3)
    faults.add_error(verb="list", status=500)  # shadowed by the rule before it
    assert faults.on_request("delete", "pods").error == FaultError(503, None)
    assert faults.on_request("list", "pods").error == FaultError(429, 3)
    assert faults.on_request("get", "pods").error is None
    assert faults.on_request("delete", "events").error is None


def test_fraction_is_deterministic_with_a_seed() -> None:
    def run(seed: int) -> list[bool]:
        faults = Faults(seed=seed)
        faults.add_error("delete", "pods", status=500, fraction=0.2)
        return [faults.on_request("delete", "pods").error is not None for _ in range(1000)]

    first = run(7)
    assert first == run(7)
    assert first != run(8)
    assert 150 < sum(first) < 250  # fixed by the seed, not by luck


def test_count_limits_the_errors_and_retires_the_rule() -> None:
    faults = Faults()
    rule = faults.add_error(resource="pods", status=429, count=2)
    answers = [faults.on_request("list", "pods").error for _ in range(4)]
    assert answers == [FaultError(429, DEFAULT_RETRY_AFTER)] * 2 + [None, None]
    assert rule.fired == 2
    assert faults.rules == ()


def test_latency_adds_up_and_combines_with_errors() -> None:
    faults = Faults()
    faults.add_latency("list", "pods", 0.05)
    faults.add_latency(seconds=0.01)
    faults.add_error("list", status=502)
    decision = faults.on_request("list", "pods")
    assert decision.delay == pytest.approx(0.06)
    assert decision.error == FaultError(502, None)
    assert faults.on_request("watch", "pods") == Decision(pytest.approx(0.01), None)


def test_remove_and_clear() -> None:
    faults = Faults()
    rule = faults.add_error()
    faults.add_latency(seconds=1)
    faults.remove(rule)
    faults.remove(rule)
    assert faults.on_request("get", "pods") == Decision(1.0, None)
    faults.cut_watches_after(1)
    faults.clear()
    assert faults.on_request("get", "pods") == Decision()
    assert faults.on_watch_event() is False


@pytest.mark.parametrize(
    "bad",
    [
        {"status": 200},
        {"fraction": 1.5},
        {"count": 0},
        {"retry_after": -1},
    ],
)
def test_add_error_validates(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="must be"):
        Faults().add_error(**bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("n", "repeat", "cuts"),
    [(3, False, [False, False, True, False, False, False]), (2, True, [False, True] * 3)],
)
def test_cut_after_n_events(n: int, repeat: bool, cuts: list[bool]) -> None:
    faults = Faults()
    faults.cut_watches_after(n, repeat=repeat)
    assert [faults.on_watch_event() for _ in range(6)] == cuts
    assert faults.cut_generation == sum(cuts)


async def test_wait_cut_wakes_on_cut_now() -> None:
    faults = Faults()
    seen: list[int] = []

    async def watcher() -> None:
        seen.append(await faults.wait_cut(faults.cut_generation))

    async with anyio.create_task_group() as tg:
        tg.start_soon(watcher)
        tg.start_soon(watcher)
        await anyio.wait_all_tasks_blocked()
        assert seen == []
        faults.cut_watches()
    assert seen == [1, 1]
    assert await faults.wait_cut(0) == 1  # an older generation: at once


@pytest.mark.looptime
async def test_cut_every_period_on_loop_time() -> None:
    faults = Faults()
    start = anyio.current_time()
    faults.cut_watches_every(5)
    generations: list[int] = []

    async def watcher() -> None:
        generations.append(await faults.wait_cut(0))

    async with anyio.create_task_group() as tg:
        tg.start_soon(watcher)
        tg.start_soon(watcher)
    assert generations == [1, 1]
    assert anyio.current_time() - start == pytest.approx(5)
    assert await faults.wait_cut(1) == 2
    assert anyio.current_time() - start == pytest.approx(10)


@pytest.mark.looptime
async def test_cut_every_takes_effect_for_blocked_waiters() -> None:
    faults = Faults()
    start = anyio.current_time()

    async with anyio.create_task_group() as tg:
        tg.start_soon(faults.wait_cut, 0)
        await anyio.wait_all_tasks_blocked()
        faults.cut_watches_every(2)
    assert anyio.current_time() - start == pytest.approx(2)
    faults.cut_watches_every(None)
    with anyio.move_on_after(100):
        await faults.wait_cut(1)
    assert faults.cut_generation == 1


def test_specs_in_the_command_line_syntax() -> None:
    faults = Faults()
    error = faults.apply_spec(
        "error:verb=delete,resource=pods,status=503,fraction=0.2,retry_after=1,count=4"
    )
    assert error is not None
    assert (error.verb, error.resource, error.status, error.fraction) == (
        "delete",
        "pods",
        503,
        0.2,
    )
    assert (error.retry_after, error.remaining) == (1.0, 4)
    latency = faults.apply_spec("latency:verb=list,seconds=0.05")
    assert latency is not None
    assert (latency.verb, latency.resource, latency.seconds) == ("list", "*", 0.05)
    throttled = faults.apply_spec("error:status=429")
    assert throttled is not None
    assert throttled.retry_after == DEFAULT_RETRY_AFTER
    assert faults.apply_spec("cut-every:0.5") is None
    assert faults.apply_spec("cut-after:1,repeat") is None
    assert faults.apply_spec("cut-now") is None
    assert faults.cut_generation == 1
    assert [faults.on_watch_event() for _ in range(2)] == [True, True]


@pytest.mark.parametrize(
    "spec",
    [
        "boom:x=1",
        "error:status=abc",
        "error:fraction=2",
        "error:seconds=1",
        "error:verb",
        "latency:verb=list",
        "cut-every:",
        "cut-after:x",
        "cut-after:3,sometimes",
        "cut-now:1",
    ],
)
def test_a_bad_spec_is_refused_in_one_line_naming_it(spec: str) -> None:
    faults = Faults()
    with pytest.raises(ValueError, match=r"^bad fault spec ") as info:
        faults.apply_spec(spec)
    assert repr(spec) in str(info.value)
    assert "\n" not in str(info.value)
    assert (faults.rules, faults.cut_generation) == ((), 0)
