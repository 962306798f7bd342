"""Training progress read from the workers' metrics: the scrape, percent done and ETA, the planner's progress step, and
hang detection."""
