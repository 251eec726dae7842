"""RBAC of the simulated API server: tokens, rule matching, 403 texts, YAML loading."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubesim.rbac import (
    ADMIN_USER,
    Authorizer,
    PolicyRule,
    load_rules,
    rules_from_yaml,
    service_account_user,
)

SA = "system:serviceaccount:zombied:zombied"


def test_wildcards_and_subresources() -> None:
    authorizer = Authorizer()
    authorizer.add_user("any-status", [PolicyRule(("*",), ("*/status",), ("patch",))])
    authorizer.add_user("all-pods", [PolicyRule(("",), ("*",), ("*",), namespace="a")])
    assert authorizer.authorize("any-status", "patch", "", "pods/status", "a", "x") is None
    assert authorizer.authorize("any-status", "patch", "apps", "deployments/status", "a") is None
    assert authorizer.authorize("any-status", "patch", "", "pods", "a", "x") is not None
    assert authorizer.authorize("all-pods", "create", "", "pods/eviction", "a", "x") is None
    assert authorizer.authorize("all-pods", "create", "", "pods/eviction", "b", "x") is not None
    assert authorizer.authorize("all-pods", "list", "", "pods", None) is not None
    assert authorizer.authorize("all-pods", "list", "apps", "deployments", "a") is not None


def test_resource_names_never_match_unnamed_requests() -> None:
    authorizer = Authorizer()
    rule = PolicyRule(("",), ("pods",), ("get", "list", "delete"), resource_names=("p",))
    authorizer.add_user("u", [rule])
    assert authorizer.authorize("u", "get", "", "pods", "a", "p") is None
    assert authorizer.authorize("u", "list", "", "pods", "a") is not None
    assert authorizer.authorize("u", "delete", "", "pods", "a", "q") is not None


ROLE_IN_TEAM_A = """\
kind: Role
apiVersion: rbac.authorization.k8s.io/v1
metadata: {name: reaper, namespace: team-a}
rules:
  - {apiGroups: [""], resources: [pods], verbs: [list, watch, delete]}
"""

# Bound to a namespace by a RoleBinding; a binding of a role not in the file, and a role
# without a binding, grant nothing.
CLUSTERROLE_BOUND_IN_TEAM_B = """\
kind: ClusterRole
metadata: {name: reaper}
rules:
  - {apiGroups: [""], resources: [pods], verbs: [list, watch, delete]}
---
kind: RoleBinding
metadata: {name: reaper, namespace: team-b}
roleRef: {kind: ClusterRole, name: reaper}
subjects: [{kind: ServiceAccount, name: zombied, namespace: zombied}]
---
kind: RoleBinding
metadata: {name: view, namespace: team-b}
roleRef: {kind: ClusterRole, name: view}
---
kind: Role
metadata: {name: unbound, namespace: team-c}
rules:
  - {apiGroups: [""], resources: [pods], verbs: ["*"]}
"""

# A kustomize List; an unbound ClusterRole applies everywhere, non-resource rules and
# other kinds are skipped.
UNBOUND_CLUSTERROLE_IN_A_LIST = """\
apiVersion: v1
kind: List
items:
  - kind: ClusterRole
    metadata: {name: zombied}
    rules:
      - {apiGroups: [""], resources: [pods], verbs: [list]}
      - {nonResourceURLs: ["/healthz"], verbs: [get]}
  - kind: ServiceAccount
    metadata: {name: zombied, namespace: zombied}
---
---
kind: Deployment
metadata: {name: zombied}
"""

# Same-named Roles in two namespaces, each bound there; a binding in another namespace
# than its Role binds nothing.
SAME_NAMED_ROLES = (
    "---\n".join(
        f"""kind: Role
metadata: {{name: zombied, namespace: {ns}}}
rules:
  - {{apiGroups: [""], resources: [pods], verbs: [list]}}
---
kind: RoleBinding
metadata: {{name: zombied, namespace: {ns}}}
roleRef: {{kind: Role, name: zombied}}
"""
        for ns in ("team-a", "team-b")
    )
    + """---
kind: Role
metadata: {name: only-in-c, namespace: team-c}
rules:
  - {apiGroups: [""], resources: [pods], verbs: [delete]}
---
kind: RoleBinding
metadata: {name: wrong-namespace, namespace: team-d}
roleRef: {kind: Role, name: only-in-c}
"""
)


@pytest.fixture
def rbac_file(tmp_path: Path) -> Path:
    path = tmp_path / "rbac.yaml"
    path.write_text(CLUSTERROLE_BOUND_IN_TEAM_B)
    return path


def test_tokens_authenticate_users(rbac_file: Path) -> None:
    authorizer = Authorizer()
    token = authorizer.add_rbac_file(rbac_file)
    assert authorizer.authenticate(f"Bearer {token}") == SA
    assert authorizer.authenticate(f"bearer {token}") == SA
    assert authorizer.authenticate(f"Bearer {authorizer.admin_token}") == ADMIN_USER
    assert authorizer.authenticate(None) is None
    assert authorizer.authenticate("") is None
    assert authorizer.authenticate("Bearer ") is None
    assert authorizer.authenticate("Bearer wrong") is None
    assert authorizer.authenticate(f"Basic {token}") is None
    assert Authorizer().authorize("nobody", "get", "", "pods", "a", "b") is not None


def test_an_rbac_file_for_a_named_user(tmp_path: Path, rbac_file: Path) -> None:
    authorizer = Authorizer()
    token = authorizer.add_rbac_file(rbac_file, user="restricted")
    assert authorizer.authenticate(f"Bearer {token}") == "restricted"
    assert authorizer.authorize("restricted", "delete", "", "pods", "team-b", "y") is None
    assert authorizer.authorize("restricted", "delete", "", "pods", "team-a", "y") is not None
    with pytest.raises(ValueError, match=r"missing\.yaml"):
        load_rules(tmp_path / "missing.yaml")


REAPER = ("list", "watch", "delete")


@pytest.mark.parametrize(
    ("text", "rules"),
    [
        (ROLE_IN_TEAM_A, [PolicyRule(("",), ("pods",), REAPER, (), "team-a")]),
        (CLUSTERROLE_BOUND_IN_TEAM_B, [PolicyRule(("",), ("pods",), REAPER, (), "team-b")]),
        (UNBOUND_CLUSTERROLE_IN_A_LIST, [PolicyRule(("",), ("pods",), ("list",))]),
        (
            SAME_NAMED_ROLES,
            [
                PolicyRule(("",), ("pods",), ("list",), (), "team-a"),
                PolicyRule(("",), ("pods",), ("list",), (), "team-b"),
            ],
        ),
    ],
    ids=["role", "clusterrole-bound", "unbound-clusterrole", "same-named-roles"],
)
def test_rules_from_yaml(tmp_path: Path, text: str, rules: list[PolicyRule]) -> None:
    path = tmp_path / "rbac.yaml"
    path.write_text(text)
    assert load_rules(path) == rules


def test_service_account_user_comes_from_bindings() -> None:
    assert service_account_user(CLUSTERROLE_BOUND_IN_TEAM_B) == SA
    assert service_account_user("kind: ClusterRole\nmetadata: {name: x}\n") is None


@pytest.mark.parametrize(
    ("text", "at_fault"),
    [
        ("kind: Role\nmetadata: {name: r}\nrules: []\n", "metadata.namespace"),
        ("kind: ClusterRole\nmetadata: {}\n", "metadata.name"),
        (
            "kind: ClusterRole\nmetadata: {name: r}\nrules: [{apiGroups: [''], resources: [pods]}]",
            "verbs",
        ),
        (
            "kind: ClusterRole\nmetadata: {name: r}\n"
            "rules: [{apiGroups: '', resources: [pods], verbs: [get]}]",
            "apiGroups",
        ),
        ("kind: ClusterRole\n  metadata: [\n", "YAML"),
        (
            "kind: RoleBinding\nmetadata: {name: b, namespace: n}\n"
            "roleRef: {kind: Secret, name: x}",
            "roleRef.kind",
        ),
    ],
)
def test_bad_rbac_yaml_is_one_line_naming_the_file_and_the_field(text: str, at_fault: str) -> None:
    with pytest.raises(ValueError, match=r"^rbac\.yaml: ") as info:
        rules_from_yaml(text, source="rbac.yaml")
    assert at_fault in str(info.value)
    assert "\n" not in str(info.value)
