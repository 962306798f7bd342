"""hypothesis strategies for DDPJob objects, valid and invalid: out-of-range numbers, wrong types, unknown enum
values, inverted elastic bounds, reserved env names, labels that try to take over the operator's own, pod
templates the API server accepts but pods would not."""

from __future__ import annotations

from hypothesis import strategies as st

OPERATOR_LABELS = ("app.kubernetes.io/managed-by", "ddpjob.dev/job-name", "ddpjob.dev/replica-index",
                   "ddpjob.dev/restart-attempt", "app.kubernetes.io/component", "app.kubernetes.io/instance")


def maybe(strategy, absent_weight: int = 1):
    return st.one_of(*([st.none()] * absent_weight), strategy)


small_ints = st.integers(min_value=-2, max_value=70)
wrong_types = st.sampled_from(["", "three", 1.5, True, [], {}])

env_names = st.one_of(st.sampled_from(["LR", "EPOCHS", "PET_NNODES", "MASTER_ADDR", "DDPJOB_NAME", "WORLD_SIZE",
                                       "TORCH_NCCL_ASYNC_ERROR_HANDLING", "RANK"]),
                      st.from_regex(r"\A[A-Z][A-Z0-9_]{0,8}\Z"))
env_vars = st.lists(st.builds(lambda n, v: {"name": n, "value": v}, env_names, st.text(max_size=8)), max_size=3,
                    unique_by=lambda e: e["name"])
container_names = st.one_of(st.just("trainer"), st.just("sidecar"), st.sampled_from(["Bad_Name", "x" * 64, ""]))
gpu_limits = st.one_of(st.integers(0, 12).map(str), st.sampled_from(["-1", "lots", "0.5"]))


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
    spec = {"containers": draw(st.lists(containers(), min_size=0, max_size=2))}
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
def ddpjob_specs(draw):
    spec = {"template": draw(templates())}
    fields = {
        "replicas": maybe(st.one_of(st.integers(-1, 5), st.integers(1000, 1100), wrong_types)),
        "nprocPerNode": maybe(st.one_of(small_ints, st.sampled_from(["auto", "4", "bogus", "AUTO"]))),
        "gpusPerReplica": maybe(st.one_of(st.integers(-1, 2), st.integers(60, 70))),
        "restartPolicy": maybe(st.sampled_from(["OnFailure", "ExitCode", "Never", "Always", ""])),
        "runPolicy": maybe(st.fixed_dictionaries({}, optional={
            "backoffLimit": st.integers(-1, 5), "activeDeadlineSeconds": st.integers(-1, 30),
            "ttlSecondsAfterFinished": st.integers(-1, 30),
            "cleanPodPolicy": st.sampled_from(["All", "Running", "None", "Some"]), "suspend": st.booleans(),
            "restartBackoffSeconds": st.one_of(st.integers(-1, 2), st.integers(3590, 3700))})),
        "elastic": maybe(st.fixed_dictionaries({"minReplicas": st.integers(-1, 4), "maxReplicas": st.integers(0, 5)},
                                               optional={"maxRestarts": st.integers(-1, 3)}), absent_weight=2),
        "rendezvous": maybe(st.fixed_dictionaries({}, optional={
            "port": st.one_of(st.integers(-1, 3), st.integers(29400, 29401), st.integers(65535, 65537)),
            "joinTimeoutSeconds": st.integers(0, 5), "lastCallTimeoutSeconds": st.integers(-1, 5)})),
        "unknownField": maybe(st.just("x"), absent_weight=4),
    }
    for key, strategy in fields.items():
        value = draw(strategy)
        if value is not None:
            spec[key] = value
    if draw(st.integers(0, 9)) == 0:
        del spec["template"]
    return spec


job_names = st.one_of(st.from_regex(r"\Af[a-z0-9]{0,12}\Z"), st.sampled_from(["Bad_Name", "f" * 64, "-f"]))
