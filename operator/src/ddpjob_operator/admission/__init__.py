"""Admission by Kueue: its Workloads, the planner's Kueue step, and the queue label."""
