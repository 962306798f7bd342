"""Names shared with the trainer and the local node (README: "How the pieces fit"). Changing one breaks them."""

GROUP = "ddpjob.dev"
VERSION = "v1alpha1"
PLURAL = "ddpjobs"
KIND = "DDPJob"
API_VERSION = f"{GROUP}/{VERSION}"

LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_JOB_NAME = "ddpjob.dev/job-name"
LABEL_REPLICA_INDEX = "ddpjob.dev/replica-index"
LABEL_ATTEMPT = "ddpjob.dev/restart-attempt"
# The attempt's size, on each of its pods: the record of a decision already acted on (planner.py reads it back).
LABEL_REPLICAS = "ddpjob.dev/replicas"

MANAGED_BY = "ddpjob-operator"
TRAINER_CONTAINER = "trainer"
GPU_RESOURCE = "nvidia.com/gpu"
RENDEZVOUS_PORT_NAME = "rendezvous"
METRICS_PORT_NAME = "metrics"
# restartStrategy InPlace: each pod's torchrun agent (the image's entrypoint, ddp_trainer.torchrun) serves its
# in-place restart count here (in_place.py reads every pod's): below the trainer's 9400 + local rank.
AGENT_METRICS_PORT = 9399
AGENT_METRICS_PORT_ENV = "DDPJOB_AGENT_METRICS_PORT"
AGENT_RESTARTS_SERIES = "ddpjob_agent_restarts"
# restartStrategy InPlace: the rendezvous last call of every round after the agent's first (a re-form after a loss,
# its pods all running); the first waits PET_RDZV_CONF's (rendezvous.py). Read by ddp_trainer.torchrun.
RDZV_LAST_CALL_AFTER_LOSS_ENV = "DDPJOB_RDZV_LAST_CALL_AFTER_LOSS_SECONDS"
# What a trainer declares it can do: CAPABILITY_SERIES{name=<capability>} 1 on worker 0's metrics port
# (ddp_trainer.metrics; tracking/progress.py reads it). LIGHTHOUSE_RECONNECT: its TorchFT replica groups follow a
# Lighthouse made again (replica_groups.reconnects_to_a_new_lighthouse).
CAPABILITY_SERIES = "ddp_trainer_capability"
LIGHTHOUSE_RECONNECT = "lighthouse_reconnect"
TERMINATION_LOG = "/dev/termination-log"
# A memory-backed emptyDir over the container's 64 MiB /dev/shm: NCCL's shared-memory transport between the ranks
# of one pod, and DataLoader workers handing batches to their rank, both live there.
SHM_VOLUME = "dshm"
SHM_MOUNT_PATH = "/dev/shm"
# On every worker pod: a pod of the current attempt cannot vanish before the operator has seen it go (and counted
# the failure), even if the operator is down at that moment. Released once the status has moved past the pod.
TRACKING_FINALIZER = "ddpjob.dev/pod-tracking"


def worker_name(job: str, index: int) -> str:
    return f"{job}-worker-{index}"


def selector(job: str) -> str:
    return f"{LABEL_JOB_NAME}={job}"
