"""Two torchrun agents as two "nodes" on localhost, configured only through the PET_* env the operator injects
(same names, is_host pinned on node 0), form one group of world size 4 and train."""

import re
import sys
import uuid

from launch import DONE, PROGRESS, start, stop, trainer_env
from support.ports import free_port

NODES, PROCS = 2, 2


def operator_env(node: int, port: int, rdzv_id: str) -> dict[str, str]:
    """What the operator's rendezvous_env gives worker <node> (README contract), with 127.0.0.1 for the
    worker-0 DNS name."""
    conf = f"is_host={'true' if node == 0 else 'false'},join_timeout=120,last_call_timeout=2"
    return trainer_env(
        PET_NNODES=str(NODES), PET_NPROC_PER_NODE=str(PROCS), PET_RDZV_BACKEND="c10d",
        PET_RDZV_ENDPOINT=f"127.0.0.1:{port}", PET_RDZV_ID=rdzv_id, PET_RDZV_CONF=conf, PET_MAX_RESTARTS="0",
        PET_NODE_RANK=str(node), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
        DDPJOB_NAME="two-nodes", DDPJOB_NAMESPACE="default", DDPJOB_ATTEMPT="0", DDPJOB_REPLICA_INDEX=str(node),
        DDPJOB_RESTARTS="0", DDPJOB_COLLECTIVE_TIMEOUT_SECONDS="120",
    )


def test_two_agents_form_one_group_of_four(tmp_path):
    port, rdzv_id = free_port(), f"{uuid.uuid4()}-0"
    # The image's command line: torchrun with no rendezvous flags, `-m ddp_trainer` and the workload args.
    cmd = [sys.executable, "-m", "torch.distributed.run", "-m", "ddp_trainer", "--workload", "digits",
           "--train.steps", "30", "--metrics.port", "0", "--log.every-steps", "10"]
    logs = [tmp_path / f"node{i}.log" for i in range(NODES)]
    agents = [start(cmd, env=operator_env(i, port, rdzv_id), log=logs[i]) for i in range(NODES)]
    try:
        codes = [a.wait(timeout=240) for a in agents]
    finally:
        for a in agents:
            stop(a)
    texts = [log.read_text() for log in logs]
    assert codes == [0, 0], "\n\n".join(t[-3000:] for t in texts)
    for text in texts:
        assert "world_size=4 backend=gloo" in text
    ranks_per_node = [{int(m["rank"]) for m in PROGRESS.finditer(t)} for t in texts]
    assert sorted(ranks_per_node, key=min) == [{0}, {2}]  # local rank 0 of each node talks; ranks 0..3 exist
    all_lines = [m for t in texts for m in PROGRESS.finditer(t)]
    assert {m["job"] for m in all_lines} == {"two-nodes"} and {m["attempt"] for m in all_lines} == {"0"}
    done = [DONE.search(t) for t in texts]
    finished = [d for d in done if d]
    assert len(finished) == 1 and finished[0]["step"] == "30"
    assert re.search(r"step=30/30 ", "".join(texts))
