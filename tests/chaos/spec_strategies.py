"""hypothesis strategies for DDPJob objects, valid and invalid: out-of-range numbers, wrong types, unknown enum
values, inverted elastic bounds, reserved env names, labels that try to take over the operator's own, pod
templates the API server accepts but pods would not."""

from __future__ import annotations

from hypothesis import strategies as st

OPERATOR_LABELS = ("app.kubernetes.io/managed-by", "ddpjob.dev/job-name", "ddpjob.dev/replica-index",
                   "ddpjob.dev/restart-attempt", "app.kubernetes.io/component", "app.kubernetes.io/instance")


def maybe(strategy, absent_weight: int = 1):
    return st.one_of(*([st.none()] * absent_weight), strategy)


def mostly(valid, invalid, odds: int = 12):
    """valid, but invalid about once in `odds` draws: about half of the whole objects stay valid."""
    # The middle value, not 0: hypothesis favours boundaries, which would make "invalid" far more common.
    return st.integers(0, odds - 1).flatmap(lambda n: invalid if n == odds // 2 else valid)


small_ints = st.integers(min_value=-2, max_value=70)
wrong_types = st.sampled_from(["", "three", 1.5, True, [], {}])

env_names = mostly(st.one_of(st.sampled_from(["LR", "EPOCHS", "TORCH_NCCL_ASYNC_ERROR_HANDLING"]),
                             st.from_regex(r"\A[A-Z][A-Z0-9_]{0,8}\Z").filter(
                                 lambda n: not n.startswith(("PET_", "DDPJOB_")))),
                   st.sampled_from(["PET_NNODES", "MASTER_ADDR", "DDPJOB_NAME", "WORLD_SIZE", "RANK"]))
env_vars = st.lists(st.builds(lambda n, v: {"name": n, "value": v}, env_names, st.text(max_size=8)), max_size=3,
                    unique_by=lambda e: e["name"])
container_names = mostly(st.sampled_from(["trainer", "trainer", "sidecar"]),
                         st.sampled_from(["Bad_Name", "x" * 64, ""]))
gpu_limits = mostly(st.integers(0, 12).map(str), st.sampled_from(["-1", "lots", "0.5"]))


@st.composite
def containers(draw):
    container = {"name": draw(container_names), "image": "example.invalid/trainer:1"}
    if draw(st.booleans()):
        container["env"] = draw(env_vars)
    if draw(st.booleans()):
        container["resources"] = {"limits": {"nvidia.com/gpu": draw(gpu_limits)}}
    if draw(st.booleans()):
        container["ports"] = [{"name": "metrics", "containerPort": draw(st.integers(0, 70000))}]
    return container


labels = st.dictionaries(st.one_of(st.sampled_from(OPERATOR_LABELS), st.from_regex(r"\A[a-z]{1,6}\Z")),
                         st.from_regex(r"\A[a-z0-9]{0,8}\Z"), max_size=3)


@st.composite
def templates(draw):
    spec = {"containers": draw(mostly(st.lists(containers(), min_size=1, max_size=2), st.just([])))}
    # Keep the pods on the simulated nodes and off the shared GPUs where the spec lets us.
    spec["nodeSelector"] = {"type": "kwok"}
    spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    if draw(st.booleans()):
        spec["automountServiceAccountToken"] = draw(st.booleans())
    template = {"spec": spec}
    if draw(st.booleans()):
        template["metadata"] = {"labels": draw(labels), "annotations": draw(labels)}
    return template


@st.composite
def elastic_bounds(draw):
    low = draw(st.integers(1, 3))
    bounds = {"minReplicas": low, "maxReplicas": draw(st.integers(low, 4))}
    if draw(st.booleans()):
        bounds["maxRestarts"] = draw(mostly(st.integers(0, 3), st.just(-1)))
    return bounds


@st.composite
def ddpjob_specs(draw):
    spec = {"template": draw(templates())}
    fields = {
        "replicas": maybe(mostly(st.integers(1, 4), st.one_of(st.integers(-1, 0), st.integers(1025, 1100),
                                                               wrong_types))),
        "nprocPerNode": maybe(mostly(st.one_of(st.integers(1, 8), st.just("auto")),
                                     st.one_of(st.integers(-1, 0), st.integers(65, 70),
                                               st.sampled_from(["4", "bogus", "AUTO"])))),
        "gpusPerReplica": maybe(mostly(st.integers(0, 2), st.one_of(st.just(-1), st.integers(60, 70)))),
        "restartPolicy": maybe(mostly(st.sampled_from(["OnFailure", "ExitCode", "Never"]),
                                      st.sampled_from(["Always", ""]))),
        "runPolicy": maybe(st.fixed_dictionaries({}, optional={
            "backoffLimit": mostly(st.integers(0, 5), st.just(-1)),
            "activeDeadlineSeconds": mostly(st.integers(1, 30), st.integers(-1, 0)),
            "ttlSecondsAfterFinished": mostly(st.integers(0, 30), st.just(-1)),
            "cleanPodPolicy": mostly(st.sampled_from(["All", "Running", "None"]), st.just("Some")),
            "suspend": st.booleans(),
            "restartBackoffSeconds": mostly(st.integers(0, 2), st.one_of(st.just(-1), st.integers(3601, 3700))),
            # Accepted only with a `metrics` port on the trainer container (which the containers sometimes have).
            "progressDeadlineSeconds": mostly(st.integers(10, 60), st.one_of(st.integers(0, 9),
                                                                             st.integers(86401, 86500)))})),
        "elastic": maybe(mostly(elastic_bounds(), st.fixed_dictionaries(
            {"minReplicas": st.integers(0, 4), "maxReplicas": st.integers(0, 5)})), absent_weight=3),
        "rendezvous": maybe(st.fixed_dictionaries({}, optional={
            "port": mostly(st.integers(29400, 29401), st.one_of(st.integers(-1, 0), st.integers(65536, 65537))),
            "joinTimeoutSeconds": mostly(st.integers(1, 5), st.just(0)),
            "lastCallTimeoutSeconds": mostly(st.integers(0, 5), st.just(-1))})),
        "unknownField": maybe(st.just("x"), absent_weight=4),
    }
    for key, strategy in fields.items():
        value = draw(strategy)
        if value is not None:
            spec[key] = value
    elastic = spec.get("elastic")
    if elastic and isinstance(spec.get("replicas"), int) and 1 <= elastic["minReplicas"] <= elastic["maxReplicas"] \
            and draw(mostly(st.just(True), st.just(False))):
        spec["replicas"] = draw(st.integers(elastic["minReplicas"], elastic["maxReplicas"]))
    if draw(st.integers(0, 19)) == 10:
        del spec["template"]
    return spec


# Valid names get a "-<n>" suffix in the test. "f.g" and "f" * 60 are valid object names, but not for the
# job's Service and pod hostnames: the CRD rejects them (fuzz_regressions.json).
job_names = mostly(st.from_regex(r"\Af[a-z0-9]{0,12}\Z"), st.sampled_from(["Bad_Name", "f" * 60, "f.g", "-f"]),
                   odds=8)
