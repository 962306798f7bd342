"""The operator (`python -m ddpjob_operator`), with one namespace created in the window where kopf used to drop it:
after its namespace observer's first listing ends, before its watch lists again (controller/kopf_namespaces.py).

Run as `python -m support.late_namespace_operator` (tests/ on PYTHONPATH) with the operator's arguments;
LATE_NAMESPACE names the namespace. kopf makes both listings through `fetching.fetch_objs`; the first one made on
behalf of `namespace_observer` (its frame is on the stack) creates the namespace once it has yielded everything."""

from __future__ import annotations

import inspect
import os
import sys

from kopf._cogs.clients import fetching
from kubernetes import client, config

from ddpjob_operator.__main__ import main

NAME = os.environ["LATE_NAMESPACE"]
_real = fetching.fetch_objs
_created = False


async def fetch_objs(**kwargs):
    global _created
    first = (not _created and kwargs["resource"].plural == "namespaces"
             and any(frame.function == "namespace_observer" for frame in inspect.stack(0)))
    async for item in _real(**kwargs):
        yield item
    if first:
        _created = True
        config.load_kube_config()
        client.CoreV1Api().create_namespace({"metadata": {"name": NAME}})
        print(f"late-namespace: created {NAME} after kopf's first listing of namespaces", flush=True)


fetching.fetch_objs = fetch_objs
sys.exit(main())
