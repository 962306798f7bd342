"""Concurrent spec edits (scale, suspend, resume) from several clients while the operator reconciles the same
jobs. Its status writes then meet 409 Conflicts: they must be retried on fresh state, never surface as an
unhandled exception, never count as a failure (restarts stays 0), and every job converges on its last spec."""

from __future__ import annotations

import random
import re
import threading
import time

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from chaos_run import unexpected_errors
from operator_chaos import OperatorUnderChaos
from recorder import GROUP, PLURAL, VERSION, InvariantRecorder
from support.cluster import wait_until
from workload import JobScript

pytestmark = pytest.mark.slow

JOBS = 8
EDITORS = 3
EDIT_SECONDS = 40


def edit_forever(custom: client.CustomObjectsApi, ns: str, names: list[str], rng: random.Random,
                 stop: threading.Event, counts: dict[str, int]) -> None:
    while not stop.is_set():
        name = rng.choice(names)
        action = rng.choice(("scale", "scale", "suspend", "resume"))
        try:
            if action == "scale":
                custom.patch_namespaced_custom_object_scale(GROUP, VERSION, ns, PLURAL, name,
                                                            {"spec": {"replicas": rng.randint(1, 4)}})
            else:
                custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name,
                                                      {"spec": {"runPolicy": {"suspend": action == "suspend"}}})
            counts[action] = counts.get(action, 0) + 1
        except ApiException as exc:
            counts[f"http {exc.status}"] = counts.get(f"http {exc.status}", 0) + 1
        time.sleep(rng.uniform(0.0, 0.3))


def converged(custom: client.CustomObjectsApi, rec: InvariantRecorder, ns: str, name: str) -> bool:
    job = custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)
    status, replicas = job.get("status") or {}, job["spec"]["replicas"]
    pods = rec.pods_of(name)
    return (status.get("observedGeneration") == job["metadata"]["generation"] and status.get("phase") == "Running"
            and status.get("replicas") == replicas and len(pods) == replicas
            and len(rec.running_pods(name, status.get("attempt"))) == replicas)


def test_concurrent_scale_and_suspend_edits_converge(api, namespace, operator_process, seed, figures):
    custom = client.CustomObjectsApi(api)
    rng = random.Random(seed)
    operator_process.verbose = True  # its debug lines are where the conflicts it retried are counted
    chaos = OperatorUnderChaos(operator_process, seed, kill=False).start()
    recorder = InvariantRecorder(api, namespace).start()
    names = [f"c{i}" for i in range(JOBS)]
    for name in names:
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL,
                                               JobScript(name, rng.randint(1, 3), "OnFailure", 3).manifest())
    stop, counts = threading.Event(), {}
    editors = [threading.Thread(target=edit_forever, args=(custom, namespace, names, random.Random(seed + i), stop,
                                                           counts), daemon=True) for i in range(EDITORS)]
    try:
        for t in editors:
            t.start()
        time.sleep(EDIT_SECONDS)
        stop.set()
        for t in editors:
            t.join(timeout=30)
        for name in names:  # the last word: resumed, so converged means Running
            custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name,
                                                  {"spec": {"runPolicy": {"suspend": False}}})
        for name in names:
            wait_until(lambda: converged(custom, recorder, namespace, name), timeout=120,
                       what=f"{name} converged on its last spec")
        for name in names:
            status = recorder.job(name).status
            if status.get("restarts") != 0:
                recorder.violation(f"{name}: spec edits counted as failures: restarts {status.get('restarts')}")
        log = operator_process.log()
        for error in unexpected_errors(log):
            recorder.violation(f"operator error: {error}")
        conflicts = len(re.findall(r"status conflict; re-reading", log))
    finally:
        stop.set()
        recorder.stop()
        chaos.stop()
        figures.jobs, figures.faults = JOBS, sum(v for k, v in counts.items() if not k.startswith("http"))
        figures.violations = len(recorder.violations)
        figures.peak_rss_mib = chaos.peak_rss_kib / 1024
        figures.detail = f"edits {counts}"
    figures.detail += f", status conflicts retried {conflicts}"
    assert recorder.violations == [], "\n".join(recorder.violations[:30])
    assert counts.get("scale", 0) > 20 and counts.get("suspend", 0) > 5, counts
    assert conflicts > 0, "no status write ever met a conflict: the edits did not race the reconciles"
