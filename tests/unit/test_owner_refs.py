"""owner_refs: one place for who controls a child and for the finalizer-release patch, for the cache's dicts and
the client's model objects alike (issue 27, item 12)."""

from __future__ import annotations

from kubernetes import client

from ddpjob_operator import api
from ddpjob_operator.state import owner_refs


def refs(kind="DDPJob", uid="u1", controller=True):
    as_dict = {"apiVersion": f"{api.GROUP}/v1alpha1", "kind": kind, "name": "a", "uid": uid, "controller": controller}
    as_model = client.V1OwnerReference(api_version=as_dict["apiVersion"], kind=kind, name="a", uid=uid,
                                       controller=controller)
    return [as_dict], [as_model]


def test_dicts_and_models_answer_the_same():
    for shape in refs():
        assert owner_refs.controlled_by(shape, "u1") and not owner_refs.controlled_by(shape, "u2")
        assert owner_refs.ddpjob_controlled(shape)
        assert owner_refs.describe_controller(shape) == "DDPJob a (uid u1)"
    for shape in refs(kind="Job"):
        assert not owner_refs.ddpjob_controlled(shape)
    for shape in refs(controller=False):
        assert owner_refs.controller_uid(shape) is None and owner_refs.describe_controller(shape) == "no controller"
    assert owner_refs.controller_uid(None) is None


def test_the_release_patch_tests_the_uid_and_the_entry_before_removing_it():
    patch = owner_refs.release_patch("u1", ["other", api.TRACKING_FINALIZER])
    assert patch == [
        {"op": "test", "path": "/metadata/uid", "value": "u1"},
        {"op": "test", "path": "/metadata/finalizers/1", "value": api.TRACKING_FINALIZER},
        {"op": "remove", "path": "/metadata/finalizers/1"},
    ]
    assert owner_refs.release_patch("u1", ["other"]) is None and owner_refs.release_patch("u1", None) is None
