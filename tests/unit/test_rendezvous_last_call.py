"""The rendezvous last call (rendezvous.py): the first formation of an attempt's group waits the user's
lastCallTimeoutSeconds or torchrun's 30 s for late pods, pods still starting; only InPlace's re-forms after a loss,
whose pods are all running, wait 2 s, through the image's torchrun wrapper (ddp_trainer.torchrun, which reads
api.RDZV_LAST_CALL_AFTER_LOSS_ENV). Before, InPlace's 2 s governed the first formation too, and an elastic group
formed without its latecomers, whose joins then restarted it, charged to the trainer (issue 54, defect 9)."""

from __future__ import annotations

import pytest

from ddpjob_operator import api
from ddpjob_operator.state.spec import parse_spec
from ddpjob_operator.workers.builders import JobRef, build_worker_pod

from job_builders import NS, UID, make_job


def env_of(job) -> dict[str, str]:
    pod = build_worker_pod(JobRef("a", NS, UID), parse_spec(job.build()["spec"]), index=0, attempt=0, restarts=0)
    return {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}


def last_call_in(conf: str) -> str:
    return dict(item.split("=", 1) for item in conf.split(","))["last_call_timeout"]


@pytest.mark.parametrize("strategy, elastic, users, first, after_loss", [
    ("InPlace", (2, 4), None, "30", "2"),  # the elastic group of the issue: latecomers are waited for at first
    ("InPlace", None, None, "30", "2"),
    ("InPlace", (2, 4), 20, "20", "2"),  # the user's word for the first formation
    ("InPlace", (2, 4), 1, "1", "1"),  # ...and never a longer wait after a loss than the user asked for
    ("Recreate", None, None, "30", None),  # every formation is an attempt's first: no second value
    ("Recreate", (2, 4), 7, "7", None),
])
def test_the_first_formation_waits_the_long_last_call_and_re_forms_the_short_one(strategy, elastic, users, first,
                                                                                 after_loss):
    job = make_job("a").replicas(4)
    job._run()["restartStrategy"] = strategy
    if elastic:
        job.elastic(*elastic)
    if users is not None:
        job.obj["spec"]["rendezvous"] = {"lastCallTimeoutSeconds": users}
    env = env_of(job)
    assert last_call_in(env["PET_RDZV_CONF"]) == first
    assert env.get(api.RDZV_LAST_CALL_AFTER_LOSS_ENV) == after_loss


def test_torchft_groups_are_standalone_and_get_no_last_call():
    job = make_job("a").replicas(2)
    job._run()["restartStrategy"] = "InPlace"
    job.obj["spec"]["faultTolerance"] = {"mode": "TorchFT"}
    env = env_of(job)
    assert "PET_RDZV_CONF" not in env and api.RDZV_LAST_CALL_AFTER_LOSS_ENV not in env
