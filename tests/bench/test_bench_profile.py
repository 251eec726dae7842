"""Summaries of py-spy's collapsed stacks."""

from __future__ import annotations

from bench.profile import parse_collapsed, parse_frame, summarise

TEXT = "\n".join(
    [
        "<module> (zombied:6);run (zombied/daemon.py:10);delete (zombied/reaper.py:50);"
        "dumps (json/__init__.py:231) 6",
        "<module> (zombied:6);run (zombied/daemon.py:10);_read (aiohttp/streams.py:9) 3",
        "<module> (zombied:6);select (selectors.py:468) 1",
        "garbage line",
    ]
)


def test_parse_frame_splits_function_and_path() -> None:
    frame = parse_frame("delete (zombied/reaper.py:50)")
    assert (frame.function, frame.path, frame.library) == ("delete", "zombied/reaper.py", "zombied")
    assert parse_frame("odd").function == "odd"


def test_summary_ranks_zombied_functions_and_libraries() -> None:
    summary = summarise(parse_collapsed(TEXT))
    assert summary.samples == 10
    assert summary.inclusive[0] == ("run (zombied/daemon.py)", 9)
    assert ("delete (zombied/reaper.py)", 6) in summary.inclusive
    assert summary.own[0] == ("dumps (json/__init__.py)", 6)
    assert dict(summary.libraries) == {"json": 6, "aiohttp": 3, "other": 1}
