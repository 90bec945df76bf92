"""The host a launch runs on, below serve, measure and provision: NVML telemetry (telemetry.py), power caps
(powercap.py), host facts (facts.py) and the locks and records of the GPUs and servers on it (locks.py)."""
