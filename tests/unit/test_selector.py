"""LabelSelector: the API server's grammar, and how it selects a pod's labels."""

from __future__ import annotations

import re

import pytest
from zombied.selector import LabelSelector, Requirement

LABELS = {"app": "web", "tier": "front", "replicas": "3", "empty": ""}


@pytest.mark.parametrize(
    ("selector", "selected"),
    [
        ("", True),
        ("app", True),
        ("missing", False),
        ("!missing", True),
        ("!app", False),
        ("app=web", True),
        ("app==web", True),
        ("app=api", False),
        ("app!=api", True),
        ("app!=web", False),
        ("missing!=x", True),  # a pod without the key is not "x"
        ("empty=", True),
        ("missing=", False),
        ("app in (api,web)", True),
        ("app in (api)", False),
        ("app notin (api)", True),
        ("app notin (web,api)", False),
        ("missing notin (web)", True),
        ("empty in ()", True),
        ("replicas>2", True),
        ("replicas>3", False),
        ("replicas<4", True),
        ("replicas<3", False),
        ("app>1", False),  # not a number: never greater or smaller
        ("missing<9", False),
        ("app=web,tier=front", True),
        ("app=web,tier=back", False),
    ],
)
def test_matches(selector: str, selected: bool) -> None:
    assert LabelSelector.parse(selector).matches(LABELS) is selected


def test_parse_structure() -> None:
    assert LabelSelector.parse(" a in (x, y) , !b ,c>1").requirements[:2] == (
        Requirement("a", "in", ("x", "y")),
        Requirement("b", "!"),
    )


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        ("a=b,", "found end of string, expected: a key"),
        ("a b", "found 'b' after 'a', expected: in, notin, =, ==, !=, >, <"),
        ("a in x", "expected '(' after the operator of 'a'"),
        ("a in (x", "found end of string in the values of 'a', expected: ',' or ')'"),
        ("a>x", "for '>' the value must be an integer, got 'x'"),
        ("a=b)", "found ')', expected: ',' or end of string"),
        ("-a", "invalid label key '-a'"),
        ("a=-b", "invalid label value '-b'"),
        ("x/y/z=1", "invalid label key prefix in 'x/y/z'"),
    ],
)
def test_errors_say_what_is_wrong(selector: str, message: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        LabelSelector.parse(selector)
