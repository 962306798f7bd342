"""The capacity estimate and the elastic size decision (capacity.py), table-driven."""

from decimal import Decimal

import pytest

from ddpjob_operator.placement.capacity import (GROW, SHRINK, NodeRoom, decide_size, pod_requests, pods_that_fit,
                                                size_to_start, template_problem)


def node(name, gpus=8, ready=True, unschedulable=False, taints=()):
    return NodeRoom(name, ready, unschedulable, tuple(taints), {"nvidia.com/gpu": Decimal(gpus), "cpu": Decimal(64)})


def held(node_name, uid, gpus):
    return (node_name, uid, {"nvidia.com/gpu": Decimal(gpus)})


EIGHT = {"nvidia.com/gpu": Decimal(8)}


@pytest.mark.parametrize(
    "name, nodes, bound, own, asks, tolerations, want",
    [
        ("4 free nodes, 8 GPUs a pod", [node(f"n{i}") for i in range(4)], [], set(), EIGHT, [], 4),
        (
            "one node busy with another pod",
            [node(f"n{i}") for i in range(4)],
            [held("n0", "x", 8)],
            set(),
            EIGHT,
            [],
            3,
        ),
        ("a half-used node holds no 8-GPU pod", [node("n0"), node("n1")], [held("n0", "x", 4)], set(), EIGHT, [], 1),
        (
            "a half-used node holds one 4-GPU pod",
            [node("n0")],
            [held("n0", "x", 4)],
            set(),
            {"nvidia.com/gpu": Decimal(4)},
            [],
            1,
        ),
        (
            "the job's own pods give their room back",
            [node("n0"), node("n1")],
            [held("n0", "mine", 8)],
            {"mine"},
            EIGHT,
            [],
            2,
        ),
        ("a NotReady node holds nothing", [node("n0"), node("n1", ready=False)], [], set(), EIGHT, [], 1),
        ("a cordoned node holds nothing", [node("n0"), node("n1", unschedulable=True)], [], set(), EIGHT, [], 1),
        (
            "a NoSchedule taint the pod does not tolerate",
            [node("n0", taints=[{"key": "k", "effect": "NoSchedule"}])],
            [],
            set(),
            EIGHT,
            [],
            0,
        ),
        (
            "... that it tolerates",
            [node("n0", taints=[{"key": "k", "effect": "NoSchedule"}])],
            [],
            set(),
            EIGHT,
            [{"key": "k", "operator": "Exists"}],
            1,
        ),
        (
            "a PreferNoSchedule taint does not keep pods off",
            [node("n0", taints=[{"key": "k", "effect": "PreferNoSchedule"}])],
            [],
            set(),
            EIGHT,
            [],
            1,
        ),
        ("a resource no node has", [node("n0")], [], set(), {"example.com/fpga": Decimal(1)}, [], 0),
        ("a pod that asks nothing: one a node", [node("n0"), node("n1")], [], set(), {}, [], 2),
    ],
)
def test_pods_that_fit(name, nodes, bound, own, asks, tolerations, want):
    assert pods_that_fit(nodes, bound, own, asks, tolerations) == want, name


def test_only_nodes_the_node_selector_picks_count():
    pool = [
        NodeRoom("p0", True, False, (), {"nvidia.com/gpu": Decimal(8)}, {"pool": "a"}),
        NodeRoom("p1", True, False, (), {"nvidia.com/gpu": Decimal(8)}, {"pool": "b"}),
        node("plain"),
    ]
    assert pods_that_fit(pool, [], set(), EIGHT, [], {"pool": "a"}) == 1
    assert pods_that_fit(pool, [], set(), EIGHT, [], {}) == 3


def test_pod_requests_sum_containers_and_take_limits_for_missing_requests():
    spec = {
        "containers": [
            {"resources": {"limits": {"nvidia.com/gpu": "8"}, "requests": {"cpu": "500m"}}},
            {"resources": {"requests": {"cpu": "1"}}},
        ],
        "initContainers": [{"resources": {"requests": {"cpu": "4"}}}],
    }
    assert pod_requests(spec) == {"nvidia.com/gpu": Decimal(8), "cpu": Decimal(4)}


@pytest.mark.parametrize(
    "name, desired, minimum, current, fits, unschedulable, want",
    [
        ("all fit, placed: stay", 4, 2, 4, 4, False, None),
        ("3 of 4 fit, the gang of 4 cannot be placed: shrink to 3", 4, 2, 4, 3, True, (3, SHRINK)),
        ("1 fits, fewer than min 2: shrink to min and wait there", 4, 2, 4, 1, True, (2, SHRINK)),
        ("at min already and unschedulable: wait", 4, 2, 2, 1, True, None),
        ("the estimate says 4 fit but the scheduler disagrees: step down by one", 4, 2, 4, 4, True, (3, SHRINK)),
        ("running at 3 of 4, a node freed: grow to 4", 4, 2, 3, 4, False, (4, GROW)),
        ("running at 2 of 4, room for 3: grow to 3", 4, 2, 2, 3, False, (3, GROW)),
        ("room for more than desired: grow to desired only", 4, 2, 2, 9, False, (4, GROW)),
        ("running at 3 of 4, no room: stay", 4, 2, 3, 3, False, None),
        (
            "a node under it lost: fits 2 < current, but it is placed: the failure policy decides",
            3,
            2,
            3,
            2,
            False,
            None,
        ),
    ],
)
def test_decide_size(name, desired, minimum, current, fits, unschedulable, want):
    decision = decide_size(desired=desired, minimum=minimum, current=current, fits=fits, unschedulable=unschedulable)
    assert (None if decision is None else (decision.size, decision.reason)) == want, name
    if decision is not None:
        assert str(decision.size) in decision.message and str(desired) in decision.message


@pytest.mark.parametrize(
    "name, desired, minimum, fits, want",
    [
        ("rigid: always desired", 4, None, 1, 4),
        ("elastic, all fit", 4, 2, 8, 4),
        ("elastic, 3 fit", 4, 2, 3, 3),
        ("elastic, fewer than min fit: min (the gang waits there)", 4, 2, 1, 2),
        ("elastic, unknown capacity: desired", 4, 2, None, 4),
    ],
)
def test_size_to_start(name, desired, minimum, fits, want):
    assert size_to_start(desired=desired, minimum=minimum, fits=fits) == want, name


@pytest.mark.parametrize("name, reserved, want", [
    ("nothing reserved", [], 4),
    ("another job's new attempt of 2 x 8 GPUs, not bound yet, holds two nodes' room", [(EIGHT, 2)], 2),
    ("a reservation bigger than the cluster takes it all", [(EIGHT, 9)], 0),
    ("small reservations pack onto one node", [({"nvidia.com/gpu": Decimal(4)}, 2)], 3),
])
def test_room_reserved_for_other_jobs_pods_not_bound_yet(name, reserved, want):
    nodes = [node(f"n{i}") for i in range(4)]
    assert pods_that_fit(nodes, [], set(), EIGHT, reserved=reserved) == want, name


def pod_template(*containers, init=()):
    return {"spec": {"containers": [{"name": f"c{i}", "resources": r} for i, r in enumerate(containers)],
                     "initContainers": [{"name": f"i{i}", "resources": r} for i, r in enumerate(init)]}}


@pytest.mark.parametrize("name, template, want", [
    # A DDPJob stored before the CRD checked quantities (the fuzzer's "lots"): named by its field.
    ("a word", pod_template({"limits": {"nvidia.com/gpu": "lots"}}),
     "spec.template.spec.containers[0].resources.limits[nvidia.com/gpu]: 'lots' is not a Kubernetes quantity"),
    ("the second container's request", pod_template({"limits": {"cpu": "1"}}, {"requests": {"memory": "8GB"}}),
     "spec.template.spec.containers[1].resources.requests[memory]: '8GB' is not"),
    ("an init container", pod_template({}, init=[{"limits": {"cpu": "x1"}}]),
     "spec.template.spec.initContainers[0].resources.limits[cpu]: 'x1' is not"),
    ("null", pod_template({"limits": {"cpu": None}}), "spec.template.spec.containers[0].resources.limits[cpu]: None"),
    ("every usual form", pod_template({"limits": {"nvidia.com/gpu": 2, "cpu": "500m", "memory": "8Gi"},
                                       "requests": {"cpu": "0.5", "memory": "1e3"}}), None),
    ("no resources", pod_template({}), None),
    ("no template", None, None),
    # Fields of another type than Kubernetes gives them (issue 54, defect 11): every planner pass raised on them.
    ("grace period with a unit", {"spec": {"terminationGracePeriodSeconds": "30s", "containers": []}},
     "spec.template.spec.terminationGracePeriodSeconds: '30s' is not a whole number of seconds (such as 30, not "
     "'30s'): fix the template and apply the job again"),
    ("grace period a fraction", {"spec": {"terminationGracePeriodSeconds": 2.5}},
     "spec.template.spec.terminationGracePeriodSeconds: 2.5 is not a whole number of seconds"),
    ("grace period negative", {"spec": {"terminationGracePeriodSeconds": -1}},
     "spec.template.spec.terminationGracePeriodSeconds: -1 is not a whole number"),
    ("grace period a boolean", {"spec": {"terminationGracePeriodSeconds": True}},
     "spec.template.spec.terminationGracePeriodSeconds: True is not"),
    ("grace period 0", {"spec": {"terminationGracePeriodSeconds": 0}}, None),
    ("labels a list", {"metadata": {"labels": ["team=a"]}},
     "spec.template.metadata.labels: ['team=a'] is not a map of names to strings: fix the template"),
    ("a label value a number", {"metadata": {"labels": {"team": "a", "tier": 1}}},
     "spec.template.metadata.labels[tier]: 1 is not a string (quote it: '1'): fix the template"),
    ("an annotation value a map", {"metadata": {"annotations": {"a": {"b": "c"}}}},
     "spec.template.metadata.annotations[a]: {'b': 'c'} is not a string"),
    ("annotations a string", {"metadata": {"annotations": "a=b"}},
     "spec.template.metadata.annotations: 'a=b' is not a map of names to strings"),
    ("metadata a string", {"metadata": "x"}, "spec.template.metadata: 'x' is not an object"),
    ("tolerations a map", {"spec": {"tolerations": {"key": "gpu", "operator": "Exists"}}},
     "spec.template.spec.tolerations: {'key': 'gpu', 'operator': 'Exists'} is not a list of tolerations (objects)"),
    ("a toleration a string", {"spec": {"tolerations": ["gpu"]}},
     "spec.template.spec.tolerations: ['gpu'] is not a list of tolerations"),
    ("nodeSelector a string", {"spec": {"nodeSelector": "pool=gpu"}},
     "spec.template.spec.nodeSelector: 'pool=gpu' is not a map of names to strings"),
    ("containers a map", {"spec": {"containers": {"name": "trainer"}}},
     "spec.template.spec.containers: {'name': 'trainer'} is not a list of containers (objects)"),
    ("all typed as a pod's", {"metadata": {"labels": {"a": "1"}, "annotations": {"b": "true"}},
                              "spec": {"terminationGracePeriodSeconds": 30, "nodeSelector": {"pool": "gpu"},
                                       "tolerations": [{"key": "gpu", "operator": "Exists"}], "containers": []}},
     None),
])
def test_template_problem_names_the_first_value_that_is_no_quantity(name, template, want):
    got = template_problem(template)
    assert (got is None) == (want is None), (name, got)
    assert got is None or got.startswith(want), (name, got)
