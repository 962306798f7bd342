"""What failed and what the job does about it: failure classes and budgets, restart policy, the recovery history,
in-place restarts, one pod replaced, worker 0's success ending an InPlace job, torchft replica groups, Terminating
pods, a NotReady node's grace, refused pods."""
