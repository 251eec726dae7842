"""Label selectors, parsed and matched the way the API server does.

The grammar and checks follow apimachinery's ``labels.Parse`` (``key``, ``!key``,
``=``, ``==``, ``!=``, ``in``, ``notin``, ``>``, ``<``), so a selector the server would
refuse stops zombied at start-up instead of failing every LIST. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

#: apimachinery's name formats (IsDNS1123Label, IsDNS1123Subdomain): a namespace is a
#: DNS label; a label key's prefix, a pod's and a Lease's names are DNS subdomains.
DNS_LABEL: Final = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
DNS_SUBDOMAIN: Final = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
_NAME: Final = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
_INTEGER: Final = re.compile(r"[+-]?[0-9]+")
# The lexer's tokens: operators, parentheses and commas; everything else up to
# whitespace or one of those is an identifier (apimachinery's special symbols).
_TOKEN: Final = re.compile(r"\s*(==|!=|=|!|\(|\)|,|>|<|[^\s=!(),<>]+)")
_OPERATORS: Final = ("=", "==", "!=", "in", "notin", ">", "<")


@dataclass(frozen=True)
class Requirement:
    """One requirement: ``operator`` is one of exists, !, =, ==, !=, in, notin, >, <."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether a pod with these labels satisfies the requirement."""
        present = self.key in labels
        value = labels.get(self.key, "")
        if self.operator == "exists":
            return present
        if self.operator == "!":
            return not present
        if self.operator in ("=", "==", "in"):
            return present and value in self.values
        if self.operator in ("!=", "notin"):
            return not present or value not in self.values
        if not (present and _INTEGER.fullmatch(value)):
            return False
        bound = int(self.values[0])
        return int(value) > bound if self.operator == ">" else int(value) < bound


@dataclass(frozen=True)
class LabelSelector:
    """A parsed label selector; the empty selector matches every pod."""

    requirements: tuple[Requirement, ...] = ()

    @classmethod
    def parse(cls, text: str) -> LabelSelector:
        """Parse ``text``; `ValueError` says what is wrong, in the server's terms."""
        return cls(tuple(_Parser(text).requirements()))

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether a pod with these labels is selected."""
        return all(requirement.matches(labels) for requirement in self.requirements)


class _Parser:
    def __init__(self, text: str) -> None:
        # Every character but whitespace starts a token, so the matches are contiguous.
        self.tokens: list[str] = _TOKEN.findall(text)
        self.pos = 0

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> str | None:
        token = self.peek()
        self.pos += 1
        return token

    def requirements(self) -> list[Requirement]:
        found: list[Requirement] = []
        if self.peek() is None:
            return found
        while True:
            found.append(self.requirement())
            separator = self.take()
            if separator is None:
                return found
            if separator != ",":
                raise ValueError(f"found {separator!r}, expected: ',' or end of string")

    def requirement(self) -> Requirement:
        negated = self.peek() == "!"
        if negated:
            self.take()
        key = self.identifier("a key")
        _check_key(key)
        if negated or self.peek() in (None, ","):
            return Requirement(key, "!" if negated else "exists")
        operator = self.take()
        if operator not in _OPERATORS:
            raise ValueError(
                f"found {operator!r} after {key!r}, expected: in, notin, =, ==, !=, >, <"
            )
        values = self.value_set(key) if operator in ("in", "notin") else (self.value(),)
        for value in values:
            _check_value(value)
        if operator in (">", "<") and not _INTEGER.fullmatch(values[0]):
            raise ValueError(f"for {operator!r} the value must be an integer, got {values[0]!r}")
        return Requirement(key, operator, values)

    def identifier(self, what: str) -> str:
        token = self.take()
        if token is None or not _is_identifier(token):
            found = "end of string" if token is None else repr(token)
            raise ValueError(f"found {found}, expected: {what}")
        return token

    def value(self) -> str:
        if self.peek() in (None, ","):
            return ""  # "key=" selects the empty value, as on the server
        return self.identifier("a value")

    def value_set(self, key: str) -> tuple[str, ...]:
        if self.take() != "(":
            raise ValueError(f"expected '(' after the operator of {key!r}")
        values: list[str] = []
        while True:
            nxt = self.peek()
            if nxt is not None and _is_identifier(nxt):
                values.append(self.identifier("a value"))
                nxt = self.peek()
            else:
                values.append("")  # "(a,)" and "()" hold the empty value
            self.take()
            if nxt == ")":
                return tuple(values)
            if nxt != ",":
                found = "end of string" if nxt is None else repr(nxt)
                raise ValueError(f"found {found} in the values of {key!r}, expected: ',' or ')'")


def _is_identifier(token: str) -> bool:
    return token not in ("==", "!=", "=", "!", "(", ")", ",", ">", "<", "in", "notin")


def _check_key(key: str) -> None:
    prefix, sep, name = key.rpartition("/")
    if sep and not (len(prefix) <= 253 and DNS_SUBDOMAIN.fullmatch(prefix)):
        raise ValueError(f"invalid label key prefix in {key!r}")
    if not _NAME.fullmatch(name):
        raise ValueError(f"invalid label key {key!r}")


def _check_value(value: str) -> None:
    if value and not _NAME.fullmatch(value):
        raise ValueError(f"invalid label value {value!r}")
