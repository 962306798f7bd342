"""Kueue's webhook configurations (config/components/webhook/manifests.yaml of the pinned module) for a manager
that runs as a local process: each webhook calls https://127.0.0.1:PORT<path> with the cluster CA's bundle,
instead of an in-cluster Service this cluster cannot route to.

Kept: the webhooks of Kueue's own API (kueue.x-k8s.io) and of batch/v1 Jobs, the one built-in integration the
local cluster enables (the queue benchmark's baseline). The Job webhooks only see Jobs that name a queue, so a
stopped manager never blocks anyone else's Jobs (the chart's uninstall hook, for one).

    python hack/kueue_webhooks.py MANIFESTS URL CA_FILE > webhooks.yaml"""

from __future__ import annotations

import base64
import sys
from pathlib import Path

import yaml  # type: ignore[import-untyped]  # pyyaml ships no stubs

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KEPT_GROUPS = {"kueue.x-k8s.io", "batch"}


def local_webhooks(docs: list[dict], url: str, ca_bundle: str) -> list[dict]:
    out = []
    for doc in docs:
        if not doc or doc.get("kind") not in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            continue
        hooks = []
        for hook in doc.get("webhooks") or []:
            groups = {g for rule in hook.get("rules") or [] for g in rule.get("apiGroups") or []}
            if not groups or not groups <= KEPT_GROUPS:
                continue
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"{url}{path}", "caBundle": ca_bundle}
            if "batch" in groups:
                hook["objectSelector"] = {"matchExpressions": [{"key": QUEUE_LABEL, "operator": "Exists"}]}
            hooks.append(hook)
        doc["metadata"]["name"] = f"kueue-{doc['metadata']['name']}"
        doc["webhooks"] = hooks
        out.append(doc)
    return out


def main(argv: list[str]) -> int:
    manifests, url, ca_file = argv
    ca_bundle = base64.b64encode(Path(ca_file).read_bytes()).decode()
    docs = list(yaml.safe_load_all(Path(manifests).read_text()))
    yaml.safe_dump_all(local_webhooks(docs, url, ca_bundle), sys.stdout, sort_keys=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
