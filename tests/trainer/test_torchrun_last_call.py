"""The image's torchrun wrapper waits the operator's long last call for the first rendezvous round and the short
one (DDPJOB_RDZV_LAST_CALL_AFTER_LOSS_SECONDS, InPlace) for every round after it: a real c10d rendezvous handler
on a local store (issue 54, defect 9). The operator's side is tests/unit/test_rendezvous_last_call.py."""

from __future__ import annotations

from datetime import timedelta

import pytest
from torch.distributed import TCPStore
from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import DynamicRendezvousHandler, RendezvousTimeout

from ddp_trainer import torchrun as launcher
from ddpjob_operator import api


def test_the_wrapper_reads_the_operators_variable():
    assert launcher.LAST_CALL_AFTER_LOSS_ENV == api.RDZV_LAST_CALL_AFTER_LOSS_ENV


@pytest.mark.parametrize("environ, want", [
    ({}, None),  # Recreate, or an operator that sets none: torchrun's one last call for every round
    ({api.RDZV_LAST_CALL_AFTER_LOSS_ENV: "2"}, 2.0),
    ({api.RDZV_LAST_CALL_AFTER_LOSS_ENV: "0.5"}, 0.5),
    ({api.RDZV_LAST_CALL_AFTER_LOSS_ENV: "soon"}, None),  # unreadable: torchrun's own, never a crash
    ({api.RDZV_LAST_CALL_AFTER_LOSS_ENV: "0"}, None),  # torch refuses a last call that is not positive
])
def test_the_later_rounds_last_call(environ, want):
    assert launcher.last_call_after_loss(environ) == want


def test_the_first_round_waits_the_long_last_call_and_the_rounds_after_it_the_short_one():
    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    backend = C10dRendezvousBackend(store, "run")
    handler = DynamicRendezvousHandler.from_backend(
        "run", store, backend, min_nodes=1, max_nodes=1,
        timeout=RendezvousTimeout(join=timedelta(seconds=30), last_call=timedelta(seconds=30)))
    restore = launcher.shorten_last_call_after_first_round(timedelta(seconds=2), DynamicRendezvousHandler)
    try:
        assert handler._settings.timeout.last_call == timedelta(seconds=30)
        handler.next_rendezvous()
        assert handler._settings.timeout.last_call == timedelta(seconds=2)
        assert handler._settings.timeout.join == timedelta(seconds=30)  # only the last call changes
    finally:
        restore()
        handler.shutdown()
    assert DynamicRendezvousHandler.next_rendezvous is restore.original
