"""Measuring one launch: the sequencer (sequencer.py) starts its server, runs every cell not yet stored
(runner.py, client.py, workloads.py, probes.py), and assembles its rows (rows.py, summary.py, cellstore.py)."""
