"""Benchmark: share of wall time spent measuring vs launching, loading and tearing down, and the launch
count against the number of distinct server configurations (they must be equal), from the run.json
timelines the default sweep leaves under data/runs/.

    .venv/bin/python benchmarks/orchestration_overhead.py [--runs data/runs]
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from stackbench.plan import expand


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", default="data/runs")
    args = parser.parse_args()
    runs = sorted(Path(args.runs).glob("*/*/run.json"))
    if not runs:
        raise SystemExit(f"no run.json under {args.runs}; run `snakemake --cores 1 report` first")
    totals = {"ready": 0.0, "cell": 0.0, "teardown": 0.0}
    launches = 0
    print(f"{'launch':42} {'launches':>8} {'ready s':>8} {'cells s':>8} {'teardown s':>10} {'measuring':>9}")
    for path in runs:
        doc = json.loads(path.read_text())
        parts = {k: sum(e["seconds"] for e in doc["timeline"] if e["event"] == k) for k in totals}
        for k in totals:
            totals[k] += parts[k]
        launches += doc["launches"]
        share = parts["cell"] / max(1e-9, sum(parts.values()))
        print(f"{doc['node'] + '/' + doc['launch']:42} {doc['launches']:>8} {parts['ready']:>8.1f} {parts['cell']:>8.1f} "
              f"{parts['teardown']:>10.1f} {share:>9.1%}")
    nodes = sorted({p.parts[-3] for p in runs})
    _, planned = expand.load_plan(Path("."), {"nodes": nodes})
    configs = {f"{n.name}/{l.name}" for n in planned for l in n.launches}
    measured = {f"{p.parts[-3]}/{p.parts[-2]}" for p in runs}
    print(f"\nmeasuring share of server wall time: {totals['cell'] / sum(totals.values()):.1%} "
          f"(launch+load {totals['ready']:.1f} s, teardown {totals['teardown']:.1f} s, cells {totals['cell']:.1f} s)")
    print(f"server launches {launches} vs distinct server configurations measured {len(measured)}: "
          f"{'equal' if launches == len(measured) else 'NOT equal (restarts after failures)'}")
    missing = sorted(configs - measured)
    if missing:
        print(f"planned but not measured yet: {', '.join(missing)}")


if __name__ == "__main__":
    main()
