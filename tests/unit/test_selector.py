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
    ("selector", "names"),
    [
        ("a=b,", "end of string"),
        ("a b", "'b' after 'a'"),
        ("a in x", "'(' after the operator of 'a'"),
        ("a in (x", "end of string in the values of 'a'"),
        ("a>x", "got 'x'"),
        ("a=b)", "')'"),
        ("-a", "'-a'"),
        ("a=-b", "'-b'"),
        ("x/y/z=1", "'x/y/z'"),
    ],
)
def test_errors_name_what_is_wrong(selector: str, names: str) -> None:
    with pytest.raises(ValueError, match=re.escape(names)):
        LabelSelector.parse(selector)
