"""Workloads measured as processes: the driver, its guard, outputs, start-up surface, snapshots, environment."""
