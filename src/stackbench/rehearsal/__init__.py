"""Rehearsals: a node's whole DAG on a machine without its GPUs, with two things replaced and nothing else:
each engine by a stand-in (standin.py, a TEST DOUBLE that says so in its name, log and /version) behind
the very command the real run would start, and the GPUs by simulated ones (simgpu.py, an NVML TEST DOUBLE).
The launcher that puts the stand-in behind the real command is launcher.py, and backend.py hands it, the
simulated GPUs and the time scale to the measure job (measure/backend.py); what selects a rehearsal and where
its files go is config/rehearsal.py. Figures of a rehearsal have the right shape and are plainly not measurements.
"""
