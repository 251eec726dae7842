"""Who may do what on the simulated API server: bearer tokens and RBAC-style rules.

This module owns authentication (a bearer token names a user) and authorization (a
user's :class:`PolicyRule` list allows a verb on a resource in a namespace), with the
semantics of Kubernetes RBAC: ``"*"`` wildcards, subresources written ``pods/status``
(and matched by ``*/status``), ``resourceNames`` that never match a request without a
name (list, watch, create), a Role's rules bound to its own namespace and a
ClusterRole's valid everywhere. Rules load from the project's own Role/ClusterRole
YAML, so a test can run the daemon under exactly the permissions it ships with. The
403 text is the kube-apiserver's, byte for byte (``responsewriters.forbiddenMessage``
wrapped by ``apierrors.NewForbidden``), because operators and zombied's own error
reporting read it. Non-resource paths (discovery, ``/version``) are allowed to every
authenticated user, as the default ``system:discovery`` role does.

It never speaks HTTP: the server extracts verb, group, resource, namespace and name
from the request and turns the answer into a ``Status`` object.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

WILDCARD = "*"
ADMIN_USER = "system:admin"
#: Message (and reason) of the apiserver's 401 answer.


class InvalidRbac(ValueError):
    """An RBAC manifest that cannot be read as Roles, ClusterRoles and bindings."""


_ROLE_KINDS = frozenset({"Role", "ClusterRole"})
_BINDING_KINDS = frozenset({"RoleBinding", "ClusterRoleBinding"})


@dataclass(frozen=True, slots=True)
class PolicyRule:
    """One RBAC rule; ``namespace=None`` means every namespace and the cluster scope."""

    api_groups: tuple[str, ...]
    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    resource_names: tuple[str, ...] = ()
    namespace: str | None = None

    def __post_init__(self) -> None:
        # Accept lists from callers; keep the rule hashable and immutable.
        for field in ("api_groups", "resources", "verbs", "resource_names"):
            value = getattr(self, field)
            if isinstance(value, str):
                raise TypeError(f"PolicyRule.{field} must be a sequence of strings, not a str")
            object.__setattr__(self, field, tuple(value))

    def allows(self, verb: str, api_group: str, resource: str, namespace: str, name: str) -> bool:
        """True when this rule grants the request (``namespace`` ``""`` = cluster scope)."""
        if self.namespace is not None and namespace != self.namespace:
            return False
        if WILDCARD not in self.verbs and verb not in self.verbs:
            return False
        if WILDCARD not in self.api_groups and api_group not in self.api_groups:
            return False
        if not _resource_matches(self.resources, resource):
            return False
        if self.resource_names:
            return bool(name) and name in self.resource_names
        return True


def _resource_matches(rule_resources: Sequence[str], resource: str) -> bool:
    if WILDCARD in rule_resources or resource in rule_resources:
        return True
    _, slash, subresource = resource.partition("/")
    return bool(slash) and f"*/{subresource}" in rule_resources


ALLOW_ALL = (PolicyRule(api_groups=("*",), resources=("*",), verbs=("*",)),)


def forbidden_message(  # noqa: PLR0917 - mirrors the request attributes, in their order
    user: str, verb: str, api_group: str, resource: str, namespace: str | None, name: str | None
) -> str:
    """The kube-apiserver's 403 message for this request.

    ``resource`` may carry a subresource (``pods/status``); the prefix names only the
    group-qualified resource (``leases.coordination.k8s.io``) and the object's name.
    """
    base = resource.partition("/")[0]
    qualified = f"{base}.{api_group}" if api_group else base
    prefix = f'{qualified} "{name}"' if name else qualified
    where = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    return (
        f'{prefix} is forbidden: User "{user}" cannot {verb} resource "{resource}" '
        f'in API group "{api_group}" {where}'
    )


class Authorizer:
    """Bearer tokens to users, users to rules; the admin token may do everything."""

    def __init__(self, *, admin_token: str | None = None) -> None:
        self._users_by_token: dict[str, str] = {}
        self._rules: dict[str, tuple[PolicyRule, ...]] = {}
        self.admin_token = admin_token or secrets.token_urlsafe(24)
        self._users_by_token[self.admin_token] = ADMIN_USER
        self._rules[ADMIN_USER] = ALLOW_ALL

    def add_user(self, user: str, rules: Iterable[PolicyRule], *, token: str | None = None) -> str:
        """Register ``user`` with ``rules`` (replacing earlier ones); return its token."""
        token = token or secrets.token_urlsafe(24)
        if token in self._users_by_token and self._users_by_token[token] != user:
            raise ValueError("token already belongs to another user")
        self._users_by_token[token] = user
        self._rules[user] = tuple(rules)
        return token

    def revoke(self, token: str) -> None:
        """Stop accepting ``token`` (an expired or rotated credential): its requests get 401."""
        self._users_by_token.pop(token, None)

    def add_rbac_file(self, path: str | Path, user: str | None = None) -> str:
        """Register a user with the rules of an RBAC manifest; return its token.

        Without ``user``, the first ServiceAccount subject bound in the file names it
        (``system:serviceaccount:NS:NAME``), else ``restricted``.
        """
        text = _read(path)
        rules = rules_from_yaml(text, source=str(path))
        name = user or service_account_user(text, source=str(path)) or "restricted"
        return self.add_user(name, rules)

    def is_admin(self, user: str | None) -> bool:
        return user == ADMIN_USER

    def authenticate(self, header: str | None) -> str | None:
        """The user named by an ``Authorization: Bearer <token>`` header, or None (-> 401)."""
        if not header:
            return None
        scheme, _, token = header.strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        return self._users_by_token.get(token.strip())

    def authorize(  # noqa: PLR0917 - the request attributes, in the apiserver's order
        self,
        user: str,
        verb: str,
        api_group: str,
        resource: str,
        namespace: str | None,
        name: str | None = None,
    ) -> str | None:
        """None when allowed, else the apiserver's 403 message.

        ``namespace`` empty or None means a cluster-scoped request (a cluster-wide LIST
        of pods, or a Node); ``resource`` includes the subresource (``pods/eviction``).
        """
        ns = namespace or ""
        for rule in self._rules.get(user, ()):
            if rule.allows(verb, api_group, resource, ns, name or ""):
                return None
        return forbidden_message(user, verb, api_group, resource, namespace, name)


# --- loading Role / ClusterRole manifests -------------------------------------------------


def _read(path: str | Path) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidRbac(f"{path}: cannot read RBAC file: {exc.strerror}") from exc


def load_rules(path: str | Path) -> list[PolicyRule]:
    """The rules granted by the Roles/ClusterRoles of a (multi-document) YAML file."""
    return rules_from_yaml(_read(path), source=str(path))


def _documents(text: str, source: str) -> Iterator[tuple[int, Mapping[str, Any]]]:
    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InvalidRbac(f"{source}: not valid YAML: {first_line}") from exc
    for index, doc in enumerate(docs):
        if doc is None:
            continue
        if not isinstance(doc, Mapping):
            raise InvalidRbac(f"{source}: document {index + 1} is not a mapping")
        if doc.get("kind") == "List" and isinstance(doc.get("items"), list):
            for item in doc["items"]:
                if not isinstance(item, Mapping):
                    raise InvalidRbac(f"{source}: document {index + 1}: list item is not a mapping")
                yield index, item
        else:
            yield index, doc


def _strings(value: object, where: str, field: str, *, required: bool) -> tuple[str, ...]:
    if value is None:
        if required:
            raise InvalidRbac(f"{where}: rule has no {field}")
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidRbac(f"{where}: {field} must be a list of strings")
    return tuple(value)


_RuleFields = tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[str, ...]]


def _parse_rules(doc: Mapping[str, Any], where: str) -> list[_RuleFields]:
    raw = doc.get("rules")
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise InvalidRbac(f"{where}: rules must be a list")
    parsed: list[_RuleFields] = []
    for number, rule in enumerate(raw, start=1):
        rule_where = f"{where} rule {number}"
        if not isinstance(rule, Mapping):
            raise InvalidRbac(f"{rule_where}: not a mapping")
        if "nonResourceURLs" in rule and "resources" not in rule:
            continue  # non-resource paths are open to authenticated users here
        verbs = _strings(rule.get("verbs"), rule_where, "verbs", required=True)
        resources = _strings(rule.get("resources"), rule_where, "resources", required=True)
        groups = _strings(rule.get("apiGroups"), rule_where, "apiGroups", required=True)
        names = _strings(rule.get("resourceNames"), rule_where, "resourceNames", required=False)
        if not verbs:
            raise InvalidRbac(f"{rule_where}: verbs is empty")
        parsed.append((groups, resources, verbs, names))
    return parsed


def _name_of(doc: Mapping[str, Any], where: str) -> tuple[str, str | None]:
    meta = doc.get("metadata")
    if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str):
        raise InvalidRbac(f"{where}: metadata.name is missing")
    namespace = meta.get("namespace")
    if namespace is not None and not isinstance(namespace, str):
        raise InvalidRbac(f"{where}: metadata.namespace must be a string")
    return meta["name"], namespace


def rules_from_yaml(text: str, *, source: str = "<rbac>") -> list[PolicyRule]:
    """The rules granted by the RBAC objects in ``text``.

    Without any binding in the text, every Role grants its rules in its own namespace
    and every ClusterRole everywhere. With bindings, only bound roles count: a
    ClusterRoleBinding grants a ClusterRole everywhere, a RoleBinding grants a Role or
    ClusterRole in the binding's namespace. Subjects are not checked: the token that
    uses these rules is the subject. Other kinds (ServiceAccount, Deployment...) are
    ignored.
    """
    # (kind, namespace or None, name) -> rules; Roles of the same name in different
    # namespaces are different Roles.
    roles: dict[tuple[str, str | None, str], list[_RuleFields]] = {}
    bindings: list[tuple[str, str, str | None]] = []  # (role kind, role name, binding ns)
    for index, doc in _documents(text, source):
        kind = doc.get("kind")
        where = f"{source}: {kind} (document {index + 1})"
        if kind in _ROLE_KINDS:
            name, namespace = _name_of(doc, where)
            where = f"{source}: {kind} {name!r}"
            if kind == "Role" and not namespace:
                raise InvalidRbac(f"{where}: a Role needs metadata.namespace")
            scope = namespace if kind == "Role" else None
            roles[(str(kind), scope, name)] = _parse_rules(doc, where)
        elif kind in _BINDING_KINDS:
            name, namespace = _name_of(doc, where)
            where = f"{source}: {kind} {name!r}"
            ref = doc.get("roleRef")
            if not isinstance(ref, Mapping) or ref.get("kind") not in _ROLE_KINDS:
                raise InvalidRbac(f"{where}: roleRef.kind must be Role or ClusterRole")
            if not isinstance(ref.get("name"), str):
                raise InvalidRbac(f"{where}: roleRef.name is missing")
            if kind == "RoleBinding" and not namespace:
                raise InvalidRbac(f"{where}: a RoleBinding needs metadata.namespace")
            if kind == "ClusterRoleBinding" and ref["kind"] != "ClusterRole":
                raise InvalidRbac(f"{where}: a ClusterRoleBinding can only refer to a ClusterRole")
            bindings.append(
                (ref["kind"], ref["name"], namespace if kind == "RoleBinding" else None)
            )

    # (role, the scope it is granted in)
    grants: list[tuple[tuple[str, str | None, str], str | None]]
    if bindings:
        grants = []
        for role_kind, role_name, binding_ns in bindings:
            # A RoleBinding sees only the Roles of its own namespace.
            key = (role_kind, binding_ns if role_kind == "Role" else None, role_name)
            if key in roles:  # else a role defined elsewhere (built-in "view"): unknown rules
                grants.append((key, binding_ns))
    else:
        grants = [(key, key[1]) for key in roles]

    result: list[PolicyRule] = []
    seen: set[PolicyRule] = set()
    for key, scope in grants:
        for groups, resources, verbs, names in roles[key]:
            rule = PolicyRule(groups, resources, verbs, names, scope)
            if rule not in seen:
                seen.add(rule)
                result.append(rule)
    return result


def service_account_user(text: str, *, source: str = "<rbac>") -> str | None:
    """``system:serviceaccount:NS:NAME`` of the first ServiceAccount bound in ``text``."""
    for _, doc in _documents(text, source):
        if doc.get("kind") not in _BINDING_KINDS:
            continue
        meta = doc.get("metadata")
        binding_ns = meta.get("namespace") if isinstance(meta, Mapping) else None
        for subject in doc.get("subjects") or ():
            if isinstance(subject, Mapping) and subject.get("kind") == "ServiceAccount":
                namespace = subject.get("namespace") or binding_ns
                if isinstance(namespace, str) and isinstance(subject.get("name"), str):
                    return f"system:serviceaccount:{namespace}:{subject['name']}"
    return None
