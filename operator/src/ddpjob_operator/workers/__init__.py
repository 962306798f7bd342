"""What the operator creates for a job: the headless Service and worker pods, torchrun's environment, pod names and
order, and who may own them."""
