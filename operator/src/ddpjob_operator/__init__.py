"""The DDPJob operator: pure decision modules (spec, builders, failures, restart policy, conditions, planner) and
a thin I/O layer (watch cache, expectations, applier, work queue) wired to kopf in handlers.py."""
