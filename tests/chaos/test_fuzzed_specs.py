"""Fuzzed DDPJobs (hypothesis) sent to the real API server. Each is either rejected at apply time with a message
that names the field, or accepted and then driven by the operator to a sane phase with a status the API server
validated. The operator never crashes, never logs an unexpected error, and does not loop hot afterwards.

Shrunk failing examples are kept in fuzz_regressions.json and always run first."""

from __future__ import annotations

import itertools
import json
import os
import re
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import seed as hypothesis_seed
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from chaos_run import unexpected_errors
from operator_chaos import OperatorUnderChaos
from recorder import GROUP, PLURAL, VERSION
from spec_strategies import ddpjob_specs, job_names
from support.cluster import wait_until

pytestmark = pytest.mark.slow

REGRESSIONS = Path(__file__).with_name("fuzz_regressions.json")
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "40"))
SANE_PHASES = {"Pending", "Running", "Failed", "Suspended", "Succeeded", "Restarting"}
# A rejection names what is wrong: a field path (spec.x, metadata.name, ...) or the field's own name.
NAMES_A_FIELD = re.compile(r"(spec\.|metadata\.name|\.name|replicas|template|containers|env)")


def regression_examples() -> list[dict]:
    return json.loads(REGRESSIONS.read_text())["examples"]


def manifest(name: str, spec: dict) -> dict:
    return {"apiVersion": "ddpjob.dev/v1alpha1", "kind": "DDPJob", "metadata": {"name": name}, "spec": spec}


def test_fuzzed_specs_are_rejected_with_the_field_or_driven_to_a_sane_phase(api, namespace, operator_process, seed,
                                                                           figures):
    custom = client.CustomObjectsApi(api)
    chaos = OperatorUnderChaos(operator_process, seed, kill=False).start()
    serial = itertools.count()
    tried, rejected, accepted = [0], [], []

    def check(name: str, spec: dict) -> None:
        tried[0] += 1
        # A unique suffix: earlier examples' jobs may still be terminating under the same name.
        unique = f"{name}-{next(serial)}" if name.startswith("f") and len(name) < 40 else name
        body = manifest(unique, spec)
        log_from = len(operator_process.log())
        try:
            custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
        except ApiException as exc:
            assert exc.status in (400, 422), f"unexpected HTTP {exc.status} for {json.dumps(body)}: {exc.body}"
            message = json.loads(exc.body).get("message", "")
            assert NAMES_A_FIELD.search(message), f"rejection does not name a field: {message!r}"
            rejected.append(message)
            return
        accepted.append(unique)

        ttl = (spec.get("runPolicy") or {}).get("ttlSecondsAfterFinished")

        def sane():
            try:
                job = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, unique)
            except ApiException as exc:
                # A short TTL can delete a job that finished before this poll saw it: finished is sane.
                if exc.status == 404 and ttl is not None:
                    return {"phase": "Deleted by its TTL"}
                raise
            status = job.get("status") or {}
            return status.get("phase") in SANE_PHASES and \
                status.get("observedGeneration") == job["metadata"]["generation"] and status
        status = wait_until(sane, timeout=45, interval=0.3, what=f"{unique} in a sane phase ({json.dumps(spec)})")
        if status["phase"] == "Failed":
            failed = next(c for c in status["conditions"] if c["type"] == "Failed")
            assert failed["reason"] and failed["message"], status
        assert operator_process.alive(), f"operator died on {json.dumps(body)}"
        errors = unexpected_errors(operator_process.log()[log_from:])
        assert errors == [], f"operator error after {json.dumps(body)}: {errors[:3]}"
        try:
            custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, unique)
        except ApiException as exc:
            if exc.status != 404 or ttl is None:
                raise

    @hypothesis_seed(seed)
    @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=False,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
    @given(name=job_names, spec=ddpjob_specs())
    def fuzz(name, spec):
        check(name, spec)

    for case in regression_examples():
        fuzz = example(name=case["name"], spec=case["spec"])(fuzz)
    try:
        fuzz()
        # Not hot: once every example is deleted and the garbage collector has removed its pods (each pod event
        # is a pass, and on a loaded machine the collector lags by seconds), the operator idles. Counted in
        # reconcile passes, not CPU seconds: a loaded machine makes fewer passes, never more, while a job that
        # requeues itself at once makes hundreds a second. Pods that never go away fail here: their tracking
        # finalizer was not released.
        core = client.CoreV1Api(api)
        wait_until(lambda: not custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"]
                   and not core.list_namespaced_pod(namespace).items,
                   timeout=120, interval=1, what="every fuzzed job and its pods to be gone")
        passes = "ddpjob_reconcile_duration_seconds_count"
        before, started = operator_process.metric(passes), time.monotonic()
        time.sleep(10)
        made, window = operator_process.metric(passes) - before, time.monotonic() - started
        assert made <= 5 * window, f"{made:.0f} reconcile passes in {window:.0f} s of idling: a hot loop"
    finally:
        chaos.stop()
        figures.jobs, figures.faults = tried[0], len(rejected)
        figures.peak_rss_mib = chaos.peak_rss_kib / 1024
        figures.detail = f"fuzz examples tried {tried[0]}: rejected {len(rejected)}, accepted {len(accepted)}"
    assert rejected and accepted, "the strategies must produce both valid and invalid DDPJobs"
