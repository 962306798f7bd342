"""The watch cache's slimming and its view of one job, on plain dicts shaped like kopf's indexes."""

from __future__ import annotations

from ddpjob_operator import api
from ddpjob_operator.controller.watch_cache import NETWORK_POLICY, SERVICE, WatchCache, child_entry, slim_job, slim_node, slim_pod

from job_builders import NOW, make_job, make_node, make_pod

KEY = ("ns", "a")


def full_pod():
    pod = make_pod("a", 0).failed(137, message="Root Cause ... exitcode: -9").build()
    pod["metadata"]["managedFields"] = [{"manager": "kubelet"}] * 3
    pod["metadata"]["annotations"] = {"big": "x" * 1000}
    pod["spec"]["containers"][0].update(image="trainer:1", env=[{"name": "X", "value": "y"}] * 50,
                                        ports=[{"name": "metrics", "containerPort": 9400}])
    pod["spec"]["volumes"] = [{"name": "v"}] * 10
    pod["status"].update(podIP="127.0.1.2", hostIP="127.0.0.1", conditions=[
        {"type": "Ready", "status": "False"}, {"type": "DisruptionTarget", "status": "True", "reason": "x"},
        {"type": "PodScheduled", "status": "True"}])
    return pod


def test_slim_pod_keeps_what_the_planner_reads_and_drops_the_rest():
    slim = slim_pod(full_pod())
    assert set(slim["metadata"]) == {"name", "namespace", "uid", "labels", "ownerReferences", "finalizers",
                                     "creationTimestamp"}
    assert slim["spec"] == {"nodeName": "node-0",
                            "containers": [{"name": "trainer", "ports": [{"name": "metrics", "containerPort": 9400}]}]}
    assert slim["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 137
    assert [c["type"] for c in slim["status"]["conditions"]] == ["DisruptionTarget", "PodScheduled"]
    assert slim["status"]["podIP"] == "127.0.1.2"
    assert len(repr(slim)) < len(repr(full_pod())) / 3


def test_slim_pod_verdicts_match_the_full_pod():
    from ddpjob_operator.recovery.failures import classify_pod_failure
    nodes = {"node-0": make_node()}
    assert classify_pod_failure(slim_pod(full_pod()), nodes, NOW, 30) == classify_pod_failure(full_pod(), nodes,
                                                                                              NOW, 30)


def test_slim_node_keeps_readiness_and_room_only():
    node = make_node("n", ready=False, since=5)
    node["metadata"]["labels"] = {"pool": "a"}
    node["metadata"]["annotations"] = {"big": "x" * 100}
    node["status"]["conditions"].append({"type": "MemoryPressure", "status": "False"})
    node["status"]["images"] = [{"names": ["x"]}] * 20
    node["status"]["allocatable"] = {"nvidia.com/gpu": "8", "cpu": "32"}
    node["spec"] = {"unschedulable": True, "taints": [{"key": "k", "effect": "NoSchedule"}], "podCIDR": "10.0.0.0/24"}
    assert slim_node(node) == {
        "metadata": {"name": "n", "labels": {"pool": "a"}},
        "spec": {"unschedulable": True, "taints": [{"key": "k", "effect": "NoSchedule"}]},
        "status": {"conditions": [node["status"]["conditions"][0]], "allocatable": {"nvidia.com/gpu": "8", "cpu": "32"}},
    }


def test_slim_job_drops_managed_fields_only():
    job = make_job("a").running().build()
    job["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    slim = slim_job(job)
    assert "managedFields" not in slim["metadata"]
    assert (slim["spec"], slim["status"]) == (job["spec"], job["status"])


def cache(job=None, pods=(), nodes=(), services=(), policies=()):
    return WatchCache(jobs={KEY: [job]} if job else {}, pods={KEY: list(pods)} if pods else {},
                      nodes={n["metadata"]["name"]: [n] for n in nodes},
                      children=[{KEY: list(services)} if services else {}, {KEY: list(policies)} if policies else {}])


def test_observe_sees_only_pods_the_job_controls_and_their_nodes():
    job = make_job("a").running().build()
    ours = make_pod("a", 0).build()
    borrowed = make_pod("a", 1).build()
    borrowed["metadata"]["ownerReferences"] = []
    svc = child_entry(SERVICE, {"metadata": {"name": "a", "uid": "s", "ownerReferences": owned_by(job)}})
    obs = cache(job, [ours, borrowed], [make_node("node-0"), make_node("other")], [svc]).observe(KEY, NOW)
    assert [p["metadata"]["name"] for p in obs.pods] == ["a-worker-0"]
    assert [p["metadata"]["name"] for p in obs.foreign_pods] == ["a-worker-1"]
    assert list(obs.nodes) == ["node-0"]
    assert obs.service_exists and obs.network_policy_exists


def test_observe_tells_a_lighthouse_apart_from_the_workers_and_reads_its_node():
    """TorchFT's Lighthouse carries the job's label but is no worker: never counted, sorted or replaced as one."""
    job = make_job("a").running().build()
    lighthouse = make_pod("a", 0).on_node("other").build()
    lighthouse["metadata"].update(name="a-lighthouse", uid="lh")
    lighthouse["metadata"]["labels"] = {"ddpjob.dev/job-name": "a", "app.kubernetes.io/component": "lighthouse"}
    obs = cache(job, [make_pod("a", 0).build(), lighthouse], [make_node("node-0"), make_node("other")]).observe(KEY, NOW)
    assert [p["metadata"]["name"] for p in obs.pods] == ["a-worker-0"]
    assert [p["metadata"]["name"] for p in obs.lighthouses] == ["a-lighthouse"]
    assert sorted(obs.nodes) == ["node-0", "other"]


def owned_by(job):
    return [{"kind": "DDPJob", "name": job["metadata"]["name"], "uid": job["metadata"]["uid"], "controller": True}]


def test_a_service_of_the_jobs_name_that_it_does_not_control_is_not_its_service():
    job = make_job("a").running().build()
    other = child_entry(SERVICE, {"metadata": {"name": "a", "uid": "s", "ownerReferences": [
        {"kind": "DDPJob", "name": "a", "uid": "uid-of-an-earlier-a", "controller": True}]}})
    assert cache(job, services=[other]).observe(KEY, NOW).service_exists is False


def test_a_job_deleted_and_recreated_under_its_name_is_the_newest_one():
    old = make_job("a").running().build()
    new = make_job("a").build()
    old["metadata"].update(creationTimestamp="2026-01-01T10:00:00Z", resourceVersion="5")
    new["metadata"].update(uid="uid-2", creationTimestamp="2026-01-01T11:00:00Z", resourceVersion="9")
    for jobs in ([old, new], [new, old]):
        view = WatchCache(jobs={KEY: jobs}, pods={KEY: [make_pod("a", 0).build()]}, nodes={}, children=[])
        obs = view.observe(KEY, NOW)
        assert obs.job["metadata"]["uid"] == "uid-2"
        assert [p["metadata"]["name"] for p in obs.foreign_pods] == ["a-worker-0"]


def test_a_terminating_namespace_makes_every_job_there_an_orphan():
    job = make_job("a").running().build()
    pod = make_pod("a", 0).build()
    view = WatchCache(jobs={KEY: [job]}, pods={KEY: [pod]}, nodes={}, children=[], namespaces={KEY[0]: [True]})
    assert view.observe(KEY, NOW) is None
    assert view.orphaned_pods(KEY) == [pod]


def test_a_gone_or_terminating_jobs_podgroups_are_orphans_and_a_live_jobs_are_not():
    job = make_job("a").running().build()
    group = {"metadata": {"name": "a-0", "uid": "pg", "ownerReferences": owned_by(job)}}
    def view(namespaces=None, gang=True, jobs=True):
        return WatchCache(jobs={KEY: [job]} if jobs else {}, pods={}, nodes={}, children=[],
                          namespaces=namespaces or {}, podgroups={KEY: [group]} if gang else None)
    assert view().orphaned_podgroups(KEY) == []
    assert view(namespaces={KEY[0]: [True]}).orphaned_podgroups(KEY) == [group]
    assert view(jobs=False).orphaned_podgroups(KEY) == [group]
    assert view(namespaces={KEY[0]: [True]}, gang=False).orphaned_podgroups(KEY) == [], "no gang API: none"


def test_a_namespace_the_api_server_called_terminating_is_believed_for_a_while():
    clock = [100.0]
    job = make_job("a").running().build()
    view = WatchCache(jobs={KEY: [job]}, pods={}, nodes={}, children=[], clock=lambda: clock[0])
    assert view.observe(KEY, NOW) is not None
    view.learn_terminating(KEY[0])
    assert view.observe(KEY, NOW) is None
    clock[0] += 61  # the namespace watch decides from then on (a namespace re-created under the name is new)
    assert view.observe(KEY, NOW) is not None


def test_observe_asks_for_a_network_policy_only_when_the_spec_wants_one():
    job = make_job("a").running().build()
    job["spec"]["networkPolicy"] = True
    assert cache(job).observe(KEY, NOW).network_policy_exists is False
    policy = child_entry(NETWORK_POLICY, {"metadata": {"name": "a", "ownerReferences": owned_by(job)}})
    assert cache(job, policies=[policy]).observe(KEY, NOW).network_policy_exists is True


def test_gone_or_deleting_job_observes_nothing_and_its_pods_are_orphans():
    pod = make_pod("a", 0).build()
    assert cache(None, [pod]).observe(KEY, NOW) is None
    assert cache(None, [pod]).orphaned_pods(KEY) == [pod]
    deleting = make_job("a").running().build()
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert cache(deleting, [pod]).observe(KEY, NOW) is None
    assert cache(deleting, [pod]).orphaned_pods(KEY) == [pod]
    live = make_job("a").running().build()
    assert cache(live, [pod]).orphaned_pods(KEY) == []


def test_recreated_job_disowns_the_old_jobs_pods():
    job = make_job("a").running().build()
    old = make_pod("a", 0).build()
    old["metadata"]["ownerReferences"] = [{"uid": "older-uid", "controller": True}]
    c = cache(job, [old])
    assert c.observe(KEY, NOW).pods == []
    assert c.orphaned_pods(KEY) == [old]
    assert api.TRACKING_FINALIZER in old["metadata"]["finalizers"]


def test_a_pod_nominated_for_a_node_holds_its_room_as_a_bound_one_does():
    """A preemptor the scheduler nominated for a node: its victims' room is its own (watch_cache.held_on)."""
    from ddpjob_operator.controller.watch_cache import bound_pod, held_on

    pod = make_pod("x", 0).pending().build()
    assert held_on(pod) is None and bound_pod(pod) is None
    pod["status"]["nominatedNodeName"] = "n3"
    assert held_on(pod) == "n3" and bound_pod(pod) is not None
    assert held_on(make_pod("x", 0).on_node("n1").build()) == "n1"
    assert held_on(make_pod("x", 0).on_node("n1").succeeded().build()) is None


def gpu_node(name, gpus="8"):
    return slim_node({"metadata": {"name": name}, "spec": {},
                      "status": {"conditions": [{"type": "Ready", "status": "True"}],
                                 "allocatable": {"nvidia.com/gpu": gpus}}})


def holder(uid, node, gpus):
    from ddpjob_operator.controller.watch_cache import bound_pod

    return bound_pod({"metadata": {"uid": uid}, "status": {"phase": "Running"},
                      "spec": {"nodeName": node, "containers": [
                          {"name": "c", "resources": {"requests": {"nvidia.com/gpu": gpus}}}]}})


def test_the_capacity_estimate_follows_every_change_and_parses_only_the_nodes_that_changed():
    nodes = {f"n{i}": [gpu_node(f"n{i}")] for i in range(3)}
    bound = {"n0": [holder("p0", "n0", "4")]}
    job = make_job("a").replicas(4).elastic(1, 4).gpus(4).build()
    cache = WatchCache({KEY: [job]}, {}, nodes, [], bound_pods=bound)
    assert cache.capacity(job, set()) == 5  # n0 holds 1 more 4-GPU pod, n1 and n2 2 each
    before = {room.name: room for room in cache._rooms()[0]}

    bound["n1"] = [holder("p1", "n1", "8")]  # a pod bound on n1
    assert cache.capacity(job, set()) == 3
    after = {room.name: room for room in cache._rooms()[0]}
    assert after["n0"] is before["n0"] and after["n2"] is before["n2"], "unchanged nodes are not parsed again"
    assert cache.capacity(job, {"p1"}) == 5, "the job's own pods' room is its own"

    bound["n0"] = [holder("p0", "n0", "8")]  # resized in place: the same uid asks more
    assert cache.capacity(job, set()) == 2
    nodes["n2"] = [gpu_node("n2", gpus="4")]  # the node's allocatable changed
    assert cache.capacity(job, set()) == 1
    del nodes["n2"], bound["n1"]
    assert cache.capacity(job, set()) == 2


def test_a_job_whose_quantity_does_not_parse_is_left_out_of_every_capacity_estimate():
    """A DDPJob stored before the CRD checked quantities: its own estimate is None (the planner fails it), and its
    pods waiting to be placed reserve nothing, so every other elastic job's estimate still answers."""
    nodes = {"n0": [gpu_node("n0")]}
    bad = make_job("bad").replicas(2).elastic(1, 2).status(phase="Pending", attempt=0, replicas=2).build()
    bad["metadata"]["uid"] = "bad-uid"
    bad["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "lots"}}
    good = make_job("good").replicas(4).elastic(1, 4).gpus(4).build()
    cache = WatchCache({KEY: [good], ("ns", "bad"): [bad]}, {}, nodes, [])
    assert cache.capacity(bad, set()) is None
    assert cache.reserved() == []
    assert cache.capacity(good, set()) == 2
