"""Label and field selectors, parsed and matched the way the apiserver does.

This module owns the selector grammar (``fields.ParseSelector`` and
``labels.Parse`` semantics: ``=``, ``==``, ``!=``, ``in``, ``notin``, existence,
``<``/``>``, backslash escapes in field values) and the field labels each resource
supports. Parse failures raise :class:`ApiError` 400 with the apiserver's message;
matching never raises and never mutates the object.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kubesim.status import ApiError, bad_request

JSONDict = dict[str, Any]

_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_VALUE_RE = re.compile(rf"^({_NAME})?$")
_NAME_RE = re.compile(rf"^{_NAME}$")
_DNS1123_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _path(*keys: str) -> Callable[[JSONDict], str]:
    def get(obj: JSONDict) -> str:
        cur: Any = obj
        for key in keys:
            if not isinstance(cur, dict):
                return ""
            cur = cur.get(key)
        if cur is None:
            return ""
        if isinstance(cur, bool):
            return "true" if cur else "false"
        return str(cur)

    return get


def _pod_ips(obj: JSONDict) -> str:
    ips = (obj.get("status") or {}).get("podIPs") or []
    return ",".join(str(ip.get("ip", "")) for ip in ips if isinstance(ip, dict))


_META = {
    "metadata.name": _path("metadata", "name"),
    "metadata.namespace": _path("metadata", "namespace"),
}

#: Field labels each resource accepts in ``fieldSelector`` (apiserver's conversion funcs).
FIELD_LABELS: dict[str, dict[str, Callable[[JSONDict], str]]] = {
    "pods": {
        **_META,
        "spec.nodeName": _path("spec", "nodeName"),
        "spec.restartPolicy": _path("spec", "restartPolicy"),
        "spec.schedulerName": _path("spec", "schedulerName"),
        "spec.serviceAccountName": _path("spec", "serviceAccountName"),
        "spec.hostNetwork": lambda o: (
            "true" if (o.get("spec") or {}).get("hostNetwork") else "false"
        ),
        "status.phase": _path("status", "phase"),
        "status.podIP": _path("status", "podIP"),
        "status.podIPs": _pod_ips,
        "status.nominatedNodeName": _path("status", "nominatedNodeName"),
    },
    "nodes": {
        **_META,
        "spec.unschedulable": lambda o: (
            "true" if (o.get("spec") or {}).get("unschedulable") else "false"
        ),
    },
    "namespaces": {**_META, "status.phase": _path("status", "phase")},
    "events": {
        **_META,
        "involvedObject.kind": _path("involvedObject", "kind"),
        "involvedObject.namespace": _path("involvedObject", "namespace"),
        "involvedObject.name": _path("involvedObject", "name"),
        "involvedObject.uid": _path("involvedObject", "uid"),
        "involvedObject.apiVersion": _path("involvedObject", "apiVersion"),
        "involvedObject.resourceVersion": _path("involvedObject", "resourceVersion"),
        "involvedObject.fieldPath": _path("involvedObject", "fieldPath"),
        "reason": _path("reason"),
        "reportingComponent": _path("reportingComponent"),
        "source": _path("source", "component"),
        "type": _path("type"),
    },
    "leases": dict(_META),
}


@dataclass(frozen=True, slots=True)
class FieldTerm:
    field: str
    op: str  # "=" or "!="
    value: str


def _split_unescaped(text: str, sep: str) -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    escaped = False
    for ch in text:
        if escaped:
            cur.append("\\" + ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == sep:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if escaped:
        cur.append("\\")
    parts.append("".join(cur))
    return parts


def _unescape(value: str, selector: str) -> str:
    out: list[str] = []
    it = iter(value)
    for ch in it:
        if ch != "\\":
            out.append(ch)
            continue
        nxt = next(it, None)
        if nxt is None or nxt not in "\\,=":
            raise bad_request(f"invalid field selector: invalid escape sequence in {selector!r}")
        out.append(nxt)
    return "".join(out)


def parse_field_selector(
    text: str, resource: str, refused: frozenset[str] = frozenset()
) -> tuple[FieldTerm, ...]:
    """Parse ``fieldSelector`` and check each field is supported for ``resource``.

    ``refused`` names field labels the imitated version does not know yet.
    """
    if not text.strip():
        return ()
    terms: list[FieldTerm] = []
    for raw in _split_unescaped(text, ","):
        term = raw.strip()
        if not term:
            continue
        found = None
        for op in ("!=", "==", "="):
            idx = _find_unescaped(term, op)
            if idx >= 0 and (found is None or idx < found[0]):
                found = (idx, op)
        if found is None:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{term}'")
        idx, op = found
        field, value = term[:idx].strip(), term[idx + len(op) :]
        terms.append(FieldTerm(field, "!=" if op == "!=" else "=", _unescape(value, text)))
    labels = FIELD_LABELS.get(resource, _META)
    for parsed in terms:
        if parsed.field not in labels or parsed.field in refused:
            raise bad_request(f"field label not supported: {parsed.field}")
    return tuple(terms)


def _find_unescaped(text: str, needle: str) -> int:
    i = 0
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text.startswith(needle, i):
            return i
        i += 1
    return -1


@dataclass(frozen=True, slots=True)
class LabelReq:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!", ">", "<"
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, Any]) -> bool:
        has = self.key in labels
        val = labels.get(self.key)
        if self.op == "exists":
            return has
        if self.op == "!":
            return not has
        if self.op in ("=", "in"):
            return has and val in self.values
        if self.op in ("!=", "notin"):
            return not has or val not in self.values
        if not has:
            return False
        try:
            num = int(str(val))
        except ValueError:
            return False
        limit = int(self.values[0])
        return num > limit if self.op == ">" else num < limit


_TOKEN_RE = re.compile(r"\s*(!=|==|=|!|\(|\)|,|<|>|[^\s!=(),<>]+)")


def _label_error(text: str, why: str) -> ApiError:
    return bad_request(f"unable to parse requirement: {why}")


def _check_key(key: str, text: str) -> None:
    prefix, slash, name = key.rpartition("/")
    ok = bool(_NAME_RE.match(name)) and len(name) <= 63
    if slash:
        ok = ok and bool(prefix) and len(prefix) <= 253 and bool(_DNS1123_RE.match(prefix))
    if not ok:
        raise _label_error(
            text,
            f'<nil>: Invalid value: "{key}": name part must consist of alphanumeric characters, '
            "'-', '_' or '.', and must start and end with an alphanumeric character",
        )


def _check_value(value: str, text: str) -> None:
    if len(value) > 63 or not _VALUE_RE.match(value):
        raise _label_error(
            text,
            f'values[0][{value}]: Invalid value: "{value}": a valid label must be an empty string '
            "or consist of alphanumeric characters, '-', '_' or '.', and must start and end "
            "with an alphanumeric character",
        )


def parse_label_selector(text: str) -> tuple[LabelReq, ...]:  # noqa: PLR0915 - one grammar, one function
    """Parse ``labelSelector`` (equality- and set-based)."""
    if not text.strip():
        return ()
    tokens: list[str] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN_RE.match(text, pos)
        if m is None:
            raise _label_error(text, f"unexpected input at {pos}")
        tokens.append(m.group(1))
        pos = m.end()
    reqs: list[LabelReq] = []
    i = 0

    def peek() -> str | None:
        return tokens[i] if i < len(tokens) else None

    special = {"!=", "==", "=", "!", "(", ")", ",", "<", ">"}
    while i < len(tokens):
        negate = False
        if tokens[i] == "!":
            negate = True
            i += 1
        key = peek()
        if key is None or key in special:
            raise _label_error(
                text, f"found '{key or ''}', expected: !, identifier, or 'end of string'"
            )
        _check_key(key, text)
        i += 1
        nxt = peek()
        if negate:
            if nxt not in (None, ","):
                raise _label_error(text, f"found '{nxt}', expected: ',' or 'end of string'")
            reqs.append(LabelReq(key, "!"))
        elif nxt in (None, ","):
            reqs.append(LabelReq(key, "exists"))
        elif nxt in ("=", "==", "!=", "<", ">"):
            i += 1
            value = peek()
            if value is None or value in special - {"!"}:
                value = ""
            else:
                i += 1
            _check_value(value, text)
            op = "=" if nxt in ("=", "==") else nxt
            if op in ("<", ">"):
                try:
                    int(value)
                except ValueError:
                    raise _label_error(
                        text, f"for 'Gt', 'Lt' operators, the value must be an integer: {value}"
                    ) from None
            reqs.append(LabelReq(key, op, (value,)))
        elif nxt in ("in", "notin"):
            i += 1
            if peek() != "(":
                raise _label_error(text, f"found '{peek() or ''}', expected: '('")
            i += 1
            values: list[str] = []
            while True:
                tok = peek()
                if tok is None:
                    raise _label_error(text, "found '', expected: ')'")
                if tok == ")":
                    i += 1
                    break
                if tok == ",":
                    i += 1
                    continue
                if tok in special:
                    raise _label_error(text, f"found '{tok}', expected: ',', ')' or identifier")
                _check_value(tok, text)
                values.append(tok)
                i += 1
            # As labels.Parse does: "()" is the set holding the empty value.
            reqs.append(LabelReq(key, nxt, tuple(values) or ("",)))
        else:
            raise _label_error(text, f"found '{nxt}', expected: in, notin, =, ==, !=, gt, lt")
        if peek() == ",":
            i += 1
            if peek() is None:
                raise _label_error(text, "found '', expected: identifier after ','")
        elif peek() is not None:
            raise _label_error(text, f"found '{peek()}', expected: ',' or 'end of string'")
    return tuple(reqs)


@dataclass(frozen=True, slots=True)
class Selector:
    """A parsed pair of selectors; equal selectors hash alike, so watches share work."""

    fields: tuple[FieldTerm, ...]
    labels: tuple[LabelReq, ...]

    @property
    def empty(self) -> bool:
        return not self.fields and not self.labels

    def matches_index(self, fields: Mapping[str, str], labels: Mapping[str, str]) -> bool:
        """Match precomputed field values and labels (see ``Stored``)."""
        for term in self.fields:
            if (fields.get(term.field, "") == term.value) != (term.op == "="):
                return False
        return all(req.matches(labels) for req in self.labels)


def parse_selector(
    resource: str,
    field_selector: str,
    label_selector: str,
    refused_fields: frozenset[str] = frozenset(),
) -> Selector:
    return Selector(
        parse_field_selector(field_selector, resource, refused_fields),
        parse_label_selector(label_selector),
    )
