"""Request bodies in Kubernetes' protobuf encoding, for the kinds the simulator reads.

kubectl sends a built-in object it builds itself as protobuf, not JSON (``kubectl
create namespace``: client-go's typed clients prefer protobuf), and client-go falls
back to JSON after a 415 only for CBOR, never for protobuf. A server that serves a
built-in kind must therefore read it. The encoding is a four-byte magic
(``k8s\\x00``) and a ``runtime.Unknown`` envelope naming the kind, around the object's
message from the API's ``generated.proto``.

This module decodes the messages of :data:`KINDS` into the JSON form the store keeps,
and nothing else: for other kinds the server answers 415 and names the media types it
does read. Go's JSON encoder leaves out empty values (``omitempty``) while gogo-protobuf
writes them, so empty strings, zero numbers, empty lists and empty messages are dropped;
fields a message table does not list (``managedFields``, which the server owns) are
skipped, as the wire format allows. Pure: bytes in, a dict out.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Final

MEDIA_TYPE: Final = "application/vnd.kubernetes.protobuf"
_MAGIC: Final = b"k8s\x00"

#: A field: its JSON name and its type, ``[]`` for a repeated one. Types: ``str``,
#: ``int`` (zero dropped), ``*int`` / ``*bool`` (pointers in Go: kept when sent),
#: ``bytes``, ``time`` (metav1.Time), ``map`` (string to string) or a message below.
_Field = tuple[str, str]
_MESSAGES: Final[dict[str, dict[int, _Field]]] = {
    "Unknown": {
        1: ("typeMeta", "TypeMeta"),
        2: ("raw", "bytes"),
        3: ("contentEncoding", "str"),
        4: ("contentType", "str"),
    },
    "TypeMeta": {1: ("apiVersion", "str"), 2: ("kind", "str")},
    "ObjectMeta": {
        1: ("name", "str"),
        2: ("generateName", "str"),
        3: ("namespace", "str"),
        4: ("selfLink", "str"),
        5: ("uid", "str"),
        6: ("resourceVersion", "str"),
        7: ("generation", "int"),
        8: ("creationTimestamp", "time"),
        9: ("deletionTimestamp", "time"),
        10: ("deletionGracePeriodSeconds", "*int"),
        11: ("labels", "map"),
        12: ("annotations", "map"),
        13: ("ownerReferences", "OwnerReference[]"),
        14: ("finalizers", "str[]"),
    },
    "OwnerReference": {
        1: ("kind", "str"),
        3: ("name", "str"),
        4: ("uid", "str"),
        5: ("apiVersion", "str"),
        6: ("controller", "*bool"),
        7: ("blockOwnerDeletion", "*bool"),
    },
    "Time": {1: ("seconds", "int"), 2: ("nanos", "int")},
    "MapEntry": {1: ("key", "str"), 2: ("value", "str")},
    "Namespace": {
        1: ("metadata", "ObjectMeta"),
        2: ("spec", "NamespaceSpec"),
        3: ("status", "NamespaceStatus"),
    },
    "NamespaceSpec": {1: ("finalizers", "str[]")},
    "NamespaceStatus": {1: ("phase", "str"), 2: ("conditions", "NamespaceCondition[]")},
    "NamespaceCondition": {
        1: ("type", "str"),
        2: ("status", "str"),
        4: ("lastTransitionTime", "time"),
        5: ("reason", "str"),
        6: ("message", "str"),
    },
}
#: The kinds whose protobuf bodies the simulator reads.
KINDS: Final = frozenset({"Namespace"})


class UndecodableError(ValueError):
    """The body is not a protobuf-encoded object (the server answers 400)."""


def decode(body: bytes) -> dict[str, Any]:
    """A protobuf request body as the JSON object it encodes.

    An object of a kind outside :data:`KINDS` comes back with only ``apiVersion`` and
    ``kind``: enough for the caller to refuse a kind that does not match the URL.
    """
    if not body.startswith(_MAGIC):
        raise UndecodableError("not a Kubernetes protobuf body (no k8s\\x00 prefix)")
    envelope = _message("Unknown", body[len(_MAGIC) :])
    if envelope.get("contentEncoding"):
        raise UndecodableError(f"unsupported content encoding {envelope['contentEncoding']!r}")
    type_meta = envelope.get("typeMeta", {})
    kind = type_meta.get("kind", "")
    obj: dict[str, Any] = {"apiVersion": type_meta.get("apiVersion", ""), "kind": kind}
    if kind in KINDS:
        obj.update(_message(kind, envelope.get("raw", b"")))
    return obj


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise UndecodableError("truncated or overlong varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """The (field number, value) pairs of one message, in wire order."""
    found: list[tuple[int, int | bytes]] = []
    pos = 0
    while pos < len(data):
        tag, pos = _varint(data, pos)
        number, wire = tag >> 3, tag & 7
        value: int | bytes
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 2:
            length, pos = _varint(data, pos)
            value, pos = data[pos : pos + length], pos + length
            if pos > len(data):
                raise UndecodableError(f"field {number} runs past the end of its message")
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            value, pos = int.from_bytes(data[pos : pos + size], "little"), pos + size
        else:
            raise UndecodableError(f"field {number} has unsupported wire type {wire}")
        found.append((number, value))
    return found


def _signed(value: int) -> int:
    """A varint read as Go's int64 (two's complement over 64 bits)."""
    return value - (1 << 64) if value >= 1 << 63 else value


def _message(name: str, data: bytes) -> dict[str, Any]:
    table = _MESSAGES[name]
    result: dict[str, Any] = {}
    for number, raw in _fields(data):
        field = table.get(number)
        if field is None:
            continue
        key, kind = field
        if kind.endswith("[]"):
            result.setdefault(key, []).append(_value(kind[:-2], raw, number))
        elif kind == "map":
            entry = _message("MapEntry", _bytes(raw, number))
            result.setdefault(key, {})[entry.get("key", "")] = entry.get("value", "")
        else:
            result[key] = _value(kind, raw, number)
    # What Go's omitempty leaves out of JSON goes; a pointer field stays when it was sent.
    pointers = {key for key, kind in table.values() if kind.startswith("*")}
    return {k: v for k, v in result.items() if k in pointers or v not in ("", 0, None, [], {})}


def _bytes(raw: int | bytes, number: int) -> bytes:
    if not isinstance(raw, bytes):
        raise UndecodableError(f"field {number} should be length-delimited")
    return raw


def _value(kind: str, raw: int | bytes, number: int) -> Any:
    if kind in ("int", "*int"):
        if not isinstance(raw, int):
            raise UndecodableError(f"field {number} should be a number")
        return _signed(raw)
    if kind == "*bool":
        return bool(raw)
    data = _bytes(raw, number)
    if kind == "bytes":
        return data
    if kind == "str":
        try:
            return data.decode()
        except UnicodeDecodeError:
            raise UndecodableError(f"field {number} is not UTF-8") from None
    if kind == "time":
        seconds = _message("Time", data).get("seconds", 0)
        if not seconds:
            return None  # metav1.Time: an empty message is the zero time, null in JSON
        return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return _message(kind, data)
