"""Where and at what size a job's pods go: gang scheduling, the placement timeout and verdicts, the capacity estimate,
elastic resizing and who gets freed room."""
