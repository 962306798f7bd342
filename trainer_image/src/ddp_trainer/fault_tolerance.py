"""The environment contract between the operator and the trainer for torchft replica groups, read here and nowhere
else. TORCHFT_LIGHTHOUSE turns the mode on: each pod is one replica group (its own standalone torchrun inside),
and the groups average gradients through torchft's Manager, which a Lighthouse server coordinates. Without it the
trainer is one DDP group as before (replica_groups.py holds the mode itself; docs/trainer.md says what it does).

torchft's Manager also reads TORCHFT_TIMEOUT_SEC, TORCHFT_QUORUM_TIMEOUT_SEC and TORCHFT_CONNECT_TIMEOUT_SEC on its
own (manager.py, `get_timeout`, int() seconds), but only for some of its deadlines: the Manager server's connect
timeout and the HTTP checkpoint transport take the constructor's values. So they are parsed here, held to the
whole seconds torchft's own int() accepts (a "2.5" would crash the Manager later, in its constructor), and passed
to every place as timedeltas."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

from .config import Config, ConfigError

LIGHTHOUSE_ENV = "TORCHFT_LIGHTHOUSE"  # http://<job>-lighthouse.<job>.<ns>.svc:29510; set: torchft mode on
REPLICA_GROUP_ENV = "REPLICA_GROUP_ID"  # this pod's group, 0..N-1
NUM_REPLICA_GROUPS_ENV = "NUM_REPLICA_GROUPS"  # N, the groups the job wants
MIN_REPLICAS_ENV = "TORCHFT_MIN_REPLICAS"  # the fewest groups a quorum may have (Manager's min_replica_size)
TIMEOUT_ENV = "TORCHFT_TIMEOUT_SEC"  # collectives, should_commit, a heal's transfer
QUORUM_TIMEOUT_ENV = "TORCHFT_QUORUM_TIMEOUT_SEC"  # how long a quorum may take to form
CONNECT_TIMEOUT_ENV = "TORCHFT_CONNECT_TIMEOUT_SEC"  # RPC connections to the Lighthouse and the peers' Managers
# The pod's IP (the operator's downward-API POD_IP): what this group tells the others to reach it by. torchft's
# default is the host name, and a pod's short host name resolves in that pod alone; torchrun's standalone store
# address (MASTER_ADDR) is localhost. Either would only work with every group on one machine.
ADVERTISE_ENV = "POD_IP"

# The trainer's checkpoint keeps the Manager's state: its step is the trainer's step, and this its other counter.
BATCHES_COMMITTED_KEY = "torchft_batches_committed"

DEFAULT_TIMEOUT_SECONDS = 60  # torchft's own defaults for all three
DEFAULT_QUORUM_TIMEOUT_SECONDS = 60
DEFAULT_CONNECT_TIMEOUT_SECONDS = 60


@dataclass(frozen=True)
class ReplicaGroupEnv:
    lighthouse: str
    replica_group: int
    num_replica_groups: int
    min_replicas: int
    timeout: timedelta
    quorum_timeout: timedelta
    connect_timeout: timedelta
    advertise: str | None = None  # ADVERTISE_ENV: the address peers reach this group's Manager, store and heals at

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> ReplicaGroupEnv | None:
        """None when TORCHFT_LIGHTHOUSE is unset or empty (the plain DDP path); ConfigError naming the variable
        for a value that cannot be used."""
        env = os.environ if environ is None else environ
        lighthouse = env.get(LIGHTHOUSE_ENV, "").strip()
        if not lighthouse:
            return None
        groups = _integer(env, NUM_REPLICA_GROUPS_ENV, None, minimum=1)
        group = _integer(env, REPLICA_GROUP_ENV, None, minimum=0)
        if group >= groups:
            raise ConfigError(f"{REPLICA_GROUP_ENV}={group} must be below {NUM_REPLICA_GROUPS_ENV}={groups}")
        min_replicas = _integer(env, MIN_REPLICAS_ENV, 1, minimum=1)
        if min_replicas > groups:
            raise ConfigError(
                f"{MIN_REPLICAS_ENV}={min_replicas} is more than {NUM_REPLICA_GROUPS_ENV}={groups}: "
                "no quorum could form"
            )
        return cls(
            lighthouse=lighthouse,
            replica_group=group,
            num_replica_groups=groups,
            min_replicas=min_replicas,
            timeout=timedelta(seconds=_integer(env, TIMEOUT_ENV, DEFAULT_TIMEOUT_SECONDS, minimum=1)),
            quorum_timeout=timedelta(
                seconds=_integer(env, QUORUM_TIMEOUT_ENV, DEFAULT_QUORUM_TIMEOUT_SECONDS, minimum=1)
            ),
            connect_timeout=timedelta(
                seconds=_integer(env, CONNECT_TIMEOUT_ENV, DEFAULT_CONNECT_TIMEOUT_SECONDS, minimum=1)
            ),
            advertise=env.get(ADVERTISE_ENV, "").strip() or None,
        )


def check_even_split(cfg: Config, group_world_size: int, replicas: ReplicaGroupEnv) -> None:
    """Every rank of every group takes an equal share of the global batch B: torchft's sampler gives each rank an
    equal shard, and a group's average must weigh its ranks alike."""
    ranks = group_world_size * replicas.num_replica_groups
    fixed = cfg.train.global_batch_size
    if fixed > 0 and fixed % ranks:
        raise ConfigError(
            f"--train.global-batch-size={fixed} must divide evenly over {ranks} ranks "
            f"({replicas.num_replica_groups} replica groups x {group_world_size}) in torchft mode"
        )


def _integer(env: Mapping[str, str], name: str, default: int | None, minimum: int) -> int:
    text = env.get(name, "").strip()
    if not text:
        if default is None:
            raise ConfigError(f"{name} must be set when {LIGHTHOUSE_ENV} is (torchft replica groups)")
        return default
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"{name} must be a whole number, got {text!r}") from None
    if value < minimum:
        raise ConfigError(f"{name} must be >= {minimum}, got {value}")
    return value
