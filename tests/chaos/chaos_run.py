"""One chaos run end to end: recorder, operator under chaos, workload driver; then the final checks and the
figures. The tests only choose the workload and the faults."""

from __future__ import annotations

import re

from driver import WorkloadDriver
from operator_chaos import OperatorUnderChaos
from recorder import InvariantRecorder
from workload import JobScript

# A reconcile pass that raised: the work queue logs it and retries, but under chaos that should only ever be a
# lost connection, or the API server saying it is unavailable (503: "apiserver is shutting down" while the outage
# test stops it), never a bug (KeyError, TypeError, a 500, ...).
FAILED_PASS = re.compile(r'msg="reconcile of .*? failed \((?P<error>\w+): (?:\((?P<code>\d{3})\))?')
CONNECTION_ERRORS = {"MaxRetryError", "ProtocolError", "NewConnectionError", "ConnectionRefusedError",
                     "ReadTimeoutError", "ConnectTimeoutError", "RemoteDisconnected", "ConnectionResetError"}
UNAVAILABLE = "503"


def unexpected_errors(log: str) -> list[str]:
    """Reconcile failures that are not a lost connection, and tracebacks outside the work queue's handling."""
    bad = [m["error"] for m in FAILED_PASS.finditer(log)
           if m["error"] not in CONNECTION_ERRORS and m["code"] != UNAVAILABLE]
    bad += [line[:300] for line in log.splitlines() if "Traceback" in line and "reconcile of" not in line
            and "level=debug" not in line]
    return bad


def run_chaos(api, namespace: str, op_chaos: OperatorUnderChaos, scripts: list[JobScript], seed: int, figures,
              timeout: float, during=None,
              create_over_seconds: float = 10.0) -> tuple[InvariantRecorder, WorkloadDriver]:
    recorder = InvariantRecorder(api, namespace).start()
    # On a fast machine the workload could end before the operator was killed a few times: hold the jobs'
    # success until it was.
    driver = WorkloadDriver(api, namespace, recorder, scripts, seed, create_over_seconds,
                            finish_when=lambda: op_chaos.kills >= op_chaos.min_kills)
    try:
        op_chaos.start()
        if during is not None:
            during.start()
        driver.run(timeout=timeout)
        if during is not None:
            during.join()
        op_chaos.stop()
        driver.check_outcomes()
        # Every job is over: the pods it keeps (cleanPodPolicy Running keeps finished ones) are all owned.
        recorder.check_owners_live()
        for error in op_chaos.errors:
            recorder.violation(f"operator did not start: {error}")
        for error in unexpected_errors(op_chaos.op.log()):
            recorder.violation(f"operator error: {error}")
    finally:
        recorder.stop()
        op_chaos._sample()
        figures.jobs = len(scripts)
        figures.faults = driver.total_faults
        figures.operator_kills = op_chaos.kills
        figures.violations = len(recorder.violations)
        figures.peak_rss_mib = op_chaos.peak_rss_kib / 1024
        figures.detail = "faults: " + ", ".join(f"{k}={v}" for k, v in sorted(driver.faults_injected.items()))
    return recorder, driver
