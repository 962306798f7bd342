"""What each replica group says about its process group in the handle it sends with every quorum request
(replica_groups.AdvertisedHandle), and the quorum check that reads it (QuorumClient): a quorum that some group's
process group was not built for is built again by all, also when a new Lighthouse reuses a quorum's number.
test_torchft_lighthouse_replaced.py runs it with real groups and Lighthouses."""

import json
from types import SimpleNamespace

from torchft.process_group import _rendezvous  # type: ignore[import-untyped]

from ddp_trainer.replica_groups import AdvertisedHandle, QuorumClient, built_for_another, built_for_key


class StorePG:
    """The part of a torchft process group the mixin builds on: a handle naming its store, and a rebuild."""

    def __init__(self, handle_id: str):
        self.handle_id, self.rebuilt = handle_id, []

    def get_reconfigure_handle(self) -> str:
        return json.dumps({"id": self.handle_id, "store": "vm:4000", "global_rank": None})

    def reconfigure(self, opts):
        self.rebuilt.append(opts.uuid)
        return "work"


class Group(AdvertisedHandle, StorePG):
    pass


def group(handle_id: str, advertise: str = "") -> Group:
    g = Group(handle_id)
    g.advertise = advertise
    return g


def build(groups: list[Group], quorum_id: int) -> list[str]:
    """The handles of one quorum as the Lighthouse hands them out, and every group built for it."""
    handles = [g.get_reconfigure_handle() for g in groups]
    for g in groups:
        assert g.reconfigure(SimpleNamespace(uuid=quorum_id, handles=handles)) == "work"
    return handles


def test_each_build_puts_its_rendezvous_keys_under_a_prefix_of_its_own_and_says_what_it_was_built_for():
    a = group("a", advertise="10.0.0.7")
    first = json.loads(a.get_reconfigure_handle())
    assert first == {"id": "a", "store": "10.0.0.7:4000/g0", "global_rank": None, "built_for": None}
    handles = build([a, group("b")], 2)
    assert a.rebuilt == [2] and a.built_for == built_for_key(2, handles)
    again = json.loads(a.get_reconfigure_handle())
    assert again["store"] == "10.0.0.7:4000/g1" and again["built_for"] == built_for_key(2, handles)
    # torchft's own rendezvous reads the prefix as part of the store's address: a prefixed store, the rank by id.
    assert _rendezvous(SimpleNamespace(uuid=2, handles=handles), "a").store_addr == "10.0.0.7:4000/g0/torchft/2"


def test_the_key_is_the_quorums_number_and_its_groups_in_order():
    a, b = json.dumps({"id": "a"}), json.dumps({"id": "b"})
    assert built_for_key(2, [a, b]) == built_for_key(2, [a, b])
    assert len({built_for_key(2, [a, b]), built_for_key(3, [a, b]), built_for_key(2, [b, a]), built_for_key(2, [a])}) == 4


def test_a_quorum_every_group_was_built_for_needs_no_build():
    a, b = group("a"), group("b")
    build([a, b], 2)
    handles = [a.get_reconfigure_handle(), b.get_reconfigure_handle()]
    assert not built_for_another(handles, 2)


def test_a_reused_number_with_a_group_built_for_another_quorum_is_built_again():
    # The old Lighthouse's quorum 2 had a and b. A new one: quorum 1 with a alone, then quorum 2 with both again.
    a, b = group("a"), group("b")
    build([a, b], 2)
    build([a], 1)
    handles = [a.get_reconfigure_handle(), b.get_reconfigure_handle()]
    assert built_for_another(handles, 2), "b still has its process group of the old quorum 2; a has one of quorum 1"


def test_the_same_number_with_other_groups_is_another_quorum():
    # The old Lighthouse's quorum 1 had a and b; the new one's quorum 1 has a alone.
    a, b = group("a"), group("b")
    build([a, b], 1)
    assert built_for_another([a.get_reconfigure_handle()], 1)


def test_a_group_that_never_built_or_handles_of_another_making():
    assert built_for_another([group("a").get_reconfigure_handle()], 1)  # a newcomer: its number changes anyway
    assert not built_for_another(["not json"], 1)  # torchft's own rule alone


class Quorums:
    """torchft's ManagerClient: answers the quorums it is given, and has other calls."""

    def __init__(self, *quorums):
        self.quorums = list(quorums)

    def _quorum(self, **_):
        return self.quorums.pop(0)

    def should_commit(self, *args):
        return ("should_commit", args)


def test_the_client_makes_the_manager_build_a_quorum_of_its_own_number_that_a_group_was_not_built_for():
    a, b = group("a"), group("b")
    build([a, b], 2)
    fine = [a.get_reconfigure_handle(), b.get_reconfigure_handle()]
    build([a], 1)
    stale = [a.get_reconfigure_handle(), b.get_reconfigure_handle()]
    manager = SimpleNamespace(_quorum_id=2)
    client = QuorumClient(Quorums(SimpleNamespace(quorum_id=2, reconfigure_handles=fine),
                                  SimpleNamespace(quorum_id=2, reconfigure_handles=stale),
                                  SimpleNamespace(quorum_id=3, reconfigure_handles=stale)), manager)
    assert client._quorum(step=5).quorum_id == 2 and manager._quorum_id == 2  # built for it: nothing to do
    assert client._quorum(step=6).quorum_id == 2 and manager._quorum_id == -1  # torchft's "none yet": it builds
    manager._quorum_id = 2
    assert client._quorum(step=7).quorum_id == 3 and manager._quorum_id == 2  # a new number: torchft builds anyway
    assert client.should_commit(1, 2) == ("should_commit", (1, 2))
