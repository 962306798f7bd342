"""A checkpoint by time and one by steps at the same step make one save. On a GPU the vote that carries rank 0's
request by time is read a step late (preemption.StepVote, asynchronous on its gloo group): a request cast at a step
the step cadence saves was answered by that save, and was written again one step later."""

from __future__ import annotations

import torch
from test_dcp_checkpoints import one_rank_group  # noqa: F401  (the fixture)

from ddp_trainer.config import parse_config
from ddp_trainer.distributed_env import DistEnv
from ddp_trainer.preemption import Verdict
from ddp_trainer.progress_log import Identity
from ddp_trainer.trainer import Trainer

ONE_RANK = DistEnv(rank=0, world_size=1, local_rank=0, local_world_size=1, restart_count=0)


class LateVote:
    """StepVote as it runs on a GPU: each verdict is the ballot cast the step before."""

    def __init__(self):
        self.cast, self.previous = 0, Verdict()

    @property
    def read_ballot(self) -> int:
        return self.cast - 1

    def step(self, ask_to_save: bool = False) -> Verdict:
        self.cast += 1
        verdict, self.previous = self.previous, Verdict(save=ask_to_save)
        return verdict

    def settle(self) -> Verdict:
        return self.previous


def test_a_request_by_time_cast_at_a_step_cadence_save_is_answered_by_it(tmp_path, one_rank_group):  # noqa: F811
    cfg = parse_config(["--workload", "digits", "--train.steps", "12", "--metrics.port", "0", "--checkpoint.dir",
                        str(tmp_path / "ck"), "--checkpoint.every-steps", "5", "--checkpoint.on-finish", "false"], {})
    trainer = Trainer(cfg, ONE_RANK, torch.device("cpu"), Identity("cadence", "0", 0))
    trainer.vote = LateVote()
    trainer._time_to_save = lambda: trainer.step in (5, 7)  # rank 0's clock: at a cadence step, and between
    saved: list[int] = []
    save = trainer.save_checkpoint

    def counted():
        saved.append(trainer.step)
        save()

    trainer.save_checkpoint = counted
    trainer.train(finish=False)
    assert saved == [5, 8, 10], saved  # 7's request is read at 8 and written there; 5's was the step save's
