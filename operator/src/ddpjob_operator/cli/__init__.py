"""`kubectl ddpj`: follow a DDPJob from a terminal (docs/cli.md). The commands read what the operator records in
the job's status and the pods it labels; nothing server-side beyond the operator. Pure parts (view, history, why,
manifest) take plain dicts and are unit-tested without a cluster; main.py and logs.py talk to the API."""
