"""What the API server's validation refuses in an object's metadata, as Invalid causes.

A namespace's name must be a DNS-1123 label, every other served kind's a DNS-1123
subdomain (``ValidateObjectMeta`` with each kind's name function): an uppercase pod
name is refused at create, so no client ever meets one. An object being deleted takes
no new finalizers (``ValidateObjectMetaUpdate``). Each check returns the causes the
apiserver reports, with its wording; the caller raises one 422 with all of them.
Pure: no store, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

from kubesim.status import Cause

_LABEL: Final = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN: Final = rf"{_LABEL}(\.{_LABEL})*"
#: (pattern, length limit, the apiserver's explanation) of each name format.
_LABEL_NAME: Final = (
    re.compile(_LABEL),
    63,
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
    f"regex used for validation is '{_LABEL}')",
)
_SUBDOMAIN_NAME: Final = (
    re.compile(_SUBDOMAIN),
    253,
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
    "or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
    f"regex used for validation is '{_SUBDOMAIN}')",
)


def name_causes(resource: str, name: str) -> list[Cause]:
    """Why ``name`` cannot name an object of ``resource`` (empty: it can)."""
    pattern, limit, explanation = _LABEL_NAME if resource == "namespaces" else _SUBDOMAIN_NAME
    problems = []
    if len(name) > limit:
        problems.append(f"must be no more than {limit} characters")
    if not pattern.fullmatch(name):
        problems.append(explanation)
    return [
        ("metadata.name", "FieldValueInvalid", f'Invalid value: "{name}": {problem}')
        for problem in problems
    ]


def new_finalizer_causes(before: Iterable[str], after: Iterable[str]) -> list[Cause]:
    """The cause when an update adds finalizers to an object that is being deleted."""
    added = sorted(set(after) - set(before))
    if not added:
        return []
    shown = ", ".join(f'"{name}"' for name in added)
    return [
        (
            "metadata.finalizers",
            "FieldValueForbidden",
            "Forbidden: no new finalizers can be added if the object is being deleted, found "
            f"new finalizers []string{{{shown}}}",
        )
    ]
