"""Kubernetes' `$(VAR)` expansion and downward-API env, as the kubelet computes a container's environment."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

_LABEL_REF = re.compile(r"^metadata\.(labels|annotations)\['([^']+)'\]$")


def expand(text: str, values: Mapping[str, str]) -> str:
    """`$(NAME)` becomes the value of NAME when defined and stays as written otherwise; `$$` escapes a `$`."""
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "$" or i + 1 >= len(text):
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "$":
            out.append("$")
            i += 2
        elif nxt == "(":
            end = text.find(")", i + 2)
            if end == -1:
                out.append(text[i:])
                break
            name = text[i + 2 : end]
            out.append(values[name] if name in values else text[i : end + 1])
            i = end + 1
        else:
            out.append("$")
            i += 1
    return "".join(out)


def field_ref(pod: dict, path: str) -> str:
    """The downward-API fields a kubelet resolves for env (fieldRef.fieldPath)."""
    meta, spec, status = pod.get("metadata", {}), pod.get("spec", {}), pod.get("status", {})
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.podIP": status.get("podIP", ""),
        "status.podIPs": ",".join(p.get("ip", "") for p in status.get("podIPs") or []),
        "status.hostIP": status.get("hostIP", ""),
        "status.hostIPs": ",".join(p.get("ip", "") for p in status.get("hostIPs") or []),
    }
    if path in simple:
        return simple[path]
    match = _LABEL_REF.match(path)
    if match:
        return (meta.get(match.group(1)) or {}).get(match.group(2), "")
    raise ValueError(f"unsupported downward API fieldPath {path!r} in local mode")


def container_env(
    pod: dict,
    container: dict,
    base: Mapping[str, str],
    lookup_key: Callable[[str, str, str, str], str | None] | None = None,
) -> dict[str, str]:
    """The container's env on top of `base`, in declaration order so that each value may refer to earlier ones.
    `lookup_key(kind, namespace, name, key)` reads configMapKeyRef/secretKeyRef values."""
    env = dict(base)
    namespace = pod.get("metadata", {}).get("namespace", "")
    for item in container.get("env") or []:
        name = item["name"]
        if "valueFrom" not in item:
            env[name] = expand(item.get("value", ""), env)
            continue
        source = item["valueFrom"]
        if "fieldRef" in source:
            env[name] = field_ref(pod, source["fieldRef"]["fieldPath"])
        elif "resourceFieldRef" in source:
            env[name] = _resource_field(container, source["resourceFieldRef"])
        else:
            kind = "configMap" if "configMapKeyRef" in source else "secret"
            ref = source.get("configMapKeyRef") or source.get("secretKeyRef") or {}
            value = lookup_key(kind, namespace, ref.get("name", ""), ref.get("key", "")) if lookup_key else None
            if value is None:
                if ref.get("optional"):
                    continue
                raise ValueError(f"env {name}: {kind} {ref.get('name')!r} has no key {ref.get('key')!r}")
            env[name] = value
    return env


def _resource_field(container: dict, ref: dict) -> str:
    kind, _, resource = ref.get("resource", "").partition(".")
    resources = container.get("resources") or {}
    return str((resources.get(kind) or {}).get(resource, "0"))
