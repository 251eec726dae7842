"""``Status`` objects: the error answers of the simulated API server.

This module owns :class:`ApiError` and the constructors for every failure the
simulator answers, each with the reason, code, message and details a real
kube-apiserver sends for the same situation. It only builds values; it never
touches the store or the network.
"""

from __future__ import annotations

from typing import Any

JSONDict = dict[str, Any]


class ApiError(Exception):
    """A request failed; the server answers it with a ``kind: Status`` body."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: JSONDict | None = None,
        *,
        headers: dict[str, str] | None = None,
        metadata: JSONDict | None = None,
    ) -> None:
        super().__init__(message)
        self.metadata = metadata or {}
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = headers or {}

    def to_status(self) -> JSONDict:
        """The ``Status`` object sent as the response body."""
        body = status_object(self.code, self.reason, self.message, self.details)
        if self.metadata:
            body["metadata"] = dict(self.metadata)
        return body


def status_object(
    code: int, reason: str, message: str, details: JSONDict | None = None
) -> JSONDict:
    """A failure ``Status`` with the field order the apiserver uses."""
    body: JSONDict = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
    }
    if reason:
        body["reason"] = reason
    if details is not None:
        body["details"] = details
    body["code"] = code
    return body


def success_status(name: str, group: str, kind: str, uid: str) -> JSONDict:
    """What DELETE answers for resources that do not return the deleted object."""
    details: JSONDict = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = kind
    details["uid"] = uid
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details,
    }


def _details(qualified: str, name: str) -> JSONDict:
    group, _, kind = _split_qualified(qualified)
    out: JSONDict = {"name": name} if name else {}  # omitempty, as Go encodes it
    if group:
        out["group"] = group
    out["kind"] = kind
    return out


def _split_qualified(qualified: str) -> tuple[str, str, str]:
    kind, dot, group = qualified.partition(".")
    return group, dot, kind


def not_found(qualified: str, name: str) -> ApiError:
    """``pods "x" not found``; ``qualified`` is ``pods`` or ``leases.coordination.k8s.io``."""
    return ApiError(404, "NotFound", f'{qualified} "{name}" not found', _details(qualified, name))


def already_exists(qualified: str, name: str) -> ApiError:
    return ApiError(
        409, "AlreadyExists", f'{qualified} "{name}" already exists', _details(qualified, name)
    )


def conflict(qualified: str, name: str, why: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified} "{name}": {why}',
        _details(qualified, name),
    )


MODIFIED = (
    "the object has been modified; please apply your changes to the latest version and try again"
)


def stale(qualified: str, name: str) -> ApiError:
    """An update carried a resourceVersion that is no longer current."""
    return conflict(qualified, name, MODIFIED)


def expired(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def too_old(requested: int, oldest: int) -> ApiError:
    return expired(f"too old resource version: {requested} ({oldest})")


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


Cause = tuple[str, str, str]


def invalid(kind: str, name: str, causes: list[Cause]) -> ApiError:
    """422 with causes ``(field, reason, message)`` as field validation reports them."""
    return _invalid(kind, name, {"name": name, "kind": kind}, causes)


def invalid_options(qualified_kind: str, causes: list[Cause]) -> ApiError:
    """422 for request options (``DeleteOptions.meta.k8s.io``), which have no name."""
    kind, _, group = qualified_kind.partition(".")
    return _invalid(qualified_kind, "", {"group": group, "kind": kind}, causes)


def _invalid(shown_kind: str, name: str, details: JSONDict, causes: list[Cause]) -> ApiError:
    """The Invalid Status: every cause is reported, as field validation accumulates them."""
    parts = [f"{field}: {message}" for field, _, message in causes]
    text = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    details["causes"] = [
        {"reason": reason, "message": message, "field": field} for field, reason, message in causes
    ]
    return ApiError(422, "Invalid", f'{shown_kind} "{name}" is invalid: {text}', details)


def undecodable(message: str, code: int = 500) -> ApiError:
    """A request body or parameter the apiserver could not decode.

    kube-apiserver 1.20 answers some of these with 500 and no reason; newer ones with
    400 BadRequest (``code``).
    """
    return ApiError(code, "" if code == 500 else "BadRequest", message)


def unauthorized() -> ApiError:
    return ApiError(401, "Unauthorized", "Unauthorized")


def forbidden(message: str, qualified: str, name: str) -> ApiError:
    return ApiError(403, "Forbidden", message, _details(qualified, name))


def namespace_terminating(qualified: str, resource: str, name: str, namespace: str) -> ApiError:
    """A create in a namespace that is being deleted: the NamespaceLifecycle admission
    plugin's 403, with its ``NamespaceTerminating`` cause."""
    cause = {
        "reason": "NamespaceTerminating",
        "message": f"namespace {namespace} is being terminated",
        "field": "metadata.namespace",
    }
    return ApiError(
        403,
        "Forbidden",
        f'{qualified} "{name}" is forbidden: unable to create new content in namespace '
        f"{namespace} because it is being terminated",
        {"name": name, "kind": resource, "causes": [cause]},
    )


def internal_error(message: str) -> ApiError:
    return ApiError(500, "InternalError", f"Internal error occurred: {message}")


def path_not_found() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource", {})


def method_not_allowed() -> ApiError:
    return ApiError(
        405,
        "MethodNotAllowed",
        "the server does not allow this method on the requested resource",
        {},
    )


def unsupported_media_type(accepted: tuple[str, ...]) -> ApiError:
    return ApiError(
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: "
        + ", ".join(accepted),
    )


def too_large_rv(requested: int, current: int) -> ApiError:
    return ApiError(
        504,
        "Timeout",
        f"Timeout: Too large resource version: {requested}, current: {current}",
        {
            "causes": [
                {
                    "reason": "ResourceVersionTooLarge",
                    "message": "Too large resource version",
                }
            ],
            "retryAfterSeconds": 1,
        },
        headers={"Retry-After": "1"},
    )


REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def injected(code: int, retry_after: float | None) -> ApiError:
    """An error chosen by fault injection, shaped like the apiserver's own."""
    reason = REASONS.get(code, "InternalError" if code >= 500 else "BadRequest")
    messages = {
        429: "Too many requests, please try again later.",
        500: "Internal error occurred: injected fault",
        503: "the server is currently unable to handle the request",
        504: "the server was unable to return a response in the time allotted, but may still be "
        "processing the request",
    }
    headers: dict[str, str] = {}
    details: JSONDict | None = None
    if retry_after is not None:
        headers["Retry-After"] = str(max(0, round(retry_after)))
        details = {"retryAfterSeconds": max(0, round(retry_after))}
    return ApiError(
        code, reason, messages.get(code, f"injected fault {code}"), details, headers=headers
    )
