"""The embedded local node: registers this machine as one real Node on the local control plane and runs the
pods bound to it as local processes from the project's venv (the container image is not used)."""
