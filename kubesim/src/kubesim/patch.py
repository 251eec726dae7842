"""PATCH semantics of the simulated API server: JSON merge, strategic merge, JSON patch.

This module owns how a patch document is applied to an object: RFC 7386 merge
patch, a simplified strategic merge patch (lists of known fields merged by their
merge key, ``$patch`` / ``$setElementOrder`` / ``$retainKeys`` /
``$deleteFromPrimitiveList`` directives understood) and RFC 6902 JSON patch. It is
pure: it takes and returns plain JSON values and raises :class:`ApiError` 4xx for
patches that cannot apply; it never looks at the store.
"""

from __future__ import annotations

import copy
from typing import Any

from kubesim.status import ApiError, bad_request

#: Merge keys of the list fields the simulator's kinds carry (from the API's
#: ``x-kubernetes-patch-merge-key`` annotations).
MERGE_KEYS = {
    "conditions": "type",
    "containerStatuses": "name",
    "initContainerStatuses": "name",
    "ephemeralContainerStatuses": "name",
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "ports": "containerPort",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "ownerReferences": "uid",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "addresses": "type",
    "taints": "key",
    "podIPs": "ip",
    "hostIPs": "ip",
    "resourceClaims": "name",
}
#: Primitive lists merged as sets rather than replaced.
MERGED_PRIMITIVE_LISTS = frozenset({"finalizers"})

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
PATCH_TYPES = (JSON_PATCH, MERGE_PATCH, APPLY_PATCH, STRATEGIC_MERGE_PATCH)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, ``null`` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """A strategic merge patch with the merge keys in :data:`MERGE_KEYS`."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith(("$setElementOrder/", "$retainKeys")) or key == "$patch":
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.partition("/")[2]
            if isinstance(result.get(field), list) and isinstance(value, list):
                result[field] = [v for v in result[field] if v not in value]
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list) and key in MERGE_KEYS:
            result[key] = _merge_list(result.get(key), value, MERGE_KEYS[key])
        elif isinstance(value, list) and key in MERGED_PRIMITIVE_LISTS:
            current = list(result.get(key) or [])
            result[key] = current + [v for v in value if v not in current]
        elif isinstance(value, dict):
            merged = strategic_merge_patch(result.get(key), value)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        else:
            result[key] = copy.deepcopy(value)
    return result


def _merge_list(current: Any, patch: list[Any], merge_key: str) -> list[Any]:
    if not isinstance(current, list):
        current = []
    if any(isinstance(item, dict) and item.get("$patch") == "replace" for item in patch):
        return [copy.deepcopy(i) for i in patch if not (isinstance(i, dict) and "$patch" in i)]
    result = list(current)
    for item in patch:
        if not isinstance(item, dict) or merge_key not in item:
            result.append(copy.deepcopy(item))
            continue
        index = next(
            (
                i
                for i, existing in enumerate(result)
                if isinstance(existing, dict) and existing.get(merge_key) == item[merge_key]
            ),
            None,
        )
        if item.get("$patch") == "delete":
            if index is not None:
                del result[index]
            continue
        if index is None:
            result.append(strategic_merge_patch({}, item))
        else:
            result[index] = strategic_merge_patch(result[index], item)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise bad_request(f"the server rejected our request due to an error in our request: {path}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _walk(doc: Any, parts: list[str], path: str) -> Any:
    for part in parts:
        if isinstance(doc, dict) and part in doc:
            doc = doc[part]
        elif isinstance(doc, list) and part.isdigit() and int(part) < len(doc):
            doc = doc[int(part)]
        else:
            raise _unprocessable(f"doc is missing path: {path}")
    return doc


def _unprocessable(message: str) -> ApiError:
    return ApiError(422, "UnprocessableEntity", message)


def json_patch(target: Any, ops: Any) -> Any:
    """RFC 6902 (add, remove, replace, move, copy, test)."""
    if not isinstance(ops, list):
        raise bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    doc = copy.deepcopy(target)
    for op in ops:
        if not isinstance(op, dict) or not isinstance(op.get("op"), str):
            raise bad_request("json patch operation is not an object with an op")
        kind = op["op"]
        path = str(op.get("path", ""))
        parts = _pointer(path)
        if kind == "test":
            if _walk(doc, parts, path) != op.get("value"):
                raise _unprocessable(f"testing value {path} failed")
            continue
        if kind in ("move", "copy"):
            from_path = str(op.get("from", ""))
            value = copy.deepcopy(_walk(doc, _pointer(from_path), from_path))
            if kind == "move":
                doc = _remove(doc, _pointer(from_path), from_path)
            doc = _add(doc, parts, value, path, replace=False)
        elif kind == "add":
            doc = _add(doc, parts, copy.deepcopy(op.get("value")), path, replace=False)
        elif kind == "replace":
            _walk(doc, parts, path)
            doc = _add(doc, parts, copy.deepcopy(op.get("value")), path, replace=True)
        elif kind == "remove":
            doc = _remove(doc, parts, path)
        else:
            raise bad_request(f"Unexpected kind: {kind}")
    return doc


def _add(doc: Any, parts: list[str], value: Any, path: str, *, replace: bool) -> Any:
    if not parts:
        return value
    parent = _walk(doc, parts[:-1], path)
    last = parts[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-":
            parent.append(value)
        elif last.isdigit() and int(last) <= len(parent):
            if replace:
                parent[int(last)] = value
            else:
                parent.insert(int(last), value)
        else:
            raise _unprocessable(f"add operation does not apply: doc is missing path: {path}")
    else:
        raise _unprocessable(f"doc is missing path: {path}")
    return doc


def _remove(doc: Any, parts: list[str], path: str) -> Any:
    if not parts:
        return None
    parent = _walk(doc, parts[:-1], path)
    last = parts[-1]
    if isinstance(parent, dict) and last in parent:
        del parent[last]
    elif isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        del parent[int(last)]
    else:
        raise _unprocessable(f"remove operation does not apply: doc is missing path: {path}")
    return doc


def apply_patch(content_type: str, target: Any, patch: Any) -> Any:
    """Apply ``patch`` of ``content_type`` (one of :data:`PATCH_TYPES`) to ``target``."""
    if content_type == JSON_PATCH:
        return json_patch(target, patch)
    if not isinstance(patch, dict):
        raise bad_request(
            "json: cannot unmarshal array into Go value of type map[string]interface {}"
        )
    if content_type == STRATEGIC_MERGE_PATCH:
        return strategic_merge_patch(target, patch)
    # Server-side apply is approximated by a merge of the applied configuration.
    return merge_patch(target, patch)
