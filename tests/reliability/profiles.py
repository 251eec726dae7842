"""Hypothesis budgets for the reliability suite: ``quick`` for ``make test``, ``nightly``
for soaks (``HYPOTHESIS_PROFILE``, else ``nightly`` when ``SOAK_S`` is set). Applied per
test, never globally; under CI no example database is kept: the printed blob reproduces.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large]
#: Under CI no example database (see above); elsewhere hypothesis' directory database.
_DATABASE: dict[str, None] = {"database": None} if os.environ.get("CI") else {}

settings.register_profile(
    "quick",
    max_examples=20,
    stateful_step_count=20,
    deadline=None,
    suppress_health_check=_SLOW_OK,
    print_blob=True,
    **_DATABASE,
)
settings.register_profile(
    "nightly",
    max_examples=200,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=_SLOW_OK,
    print_blob=True,
    **_DATABASE,
)


def profile_name() -> str:
    """The profile this run uses."""
    name = os.environ.get("HYPOTHESIS_PROFILE")
    if name:
        return name
    return "nightly" if os.environ.get("SOAK_S") else "quick"


def budget(*, fuzz: bool = False) -> settings:
    """Settings for a test; ``fuzz`` tests are pure and cheap, so they get 10x more examples."""
    base = settings.get_profile(profile_name())
    if fuzz:
        return settings(base, max_examples=base.max_examples * 10)
    return base
