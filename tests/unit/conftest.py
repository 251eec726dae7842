"""Keep synchronous tests from leaking an event loop.

looptime's ``pytest_pyfunc_call`` asks the event loop policy for the current loop
even for synchronous tests; with no loop set, the policy creates one that nobody
closes, and its ``ResourceWarning`` later fails an unrelated test
(``filterwarnings = error``). Every synchronous test here therefore runs with a
loop of its own that is closed afterwards. Asynchronous tests are left to
pytest-asyncio.
"""

from __future__ import annotations

import asyncio
from collections.abc import Generator

import pytest


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Generator[None, object, object]:
    # pytest-asyncio marks every coroutine test (auto mode) and wraps its function.
    if pyfuncitem.get_closest_marker("asyncio") is not None:
        return (yield)
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        return (yield)
    finally:
        asyncio.set_event_loop(None)
        loop.close()
