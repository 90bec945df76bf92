"""The default with its classes at `same` and at `new`, in one run (issue 66 item 8): the README's first command
twice, one arm with `measure.texts_across_rounds: same` (every round asks the same texts: a verdict covers those)
and one with `new` (each round draws new texts: a verdict covers the class), each into its own runs, parts,
results and reports (the engines, models and data sets are shared, so the second arm's cache is as warm as the
first's). Printed per judged cell, side by side: each arm's verdict, the width of its gain's interval (high - low,
in points of gain, as What to run prints it) and the distinct texts its rounds asked; then each arm's time, its
decided cells and the targets of issue 66 ("Done when"), with by how much a missed one is missed.

    .venv/bin/python benchmarks/texts_same_new.py [node]     (after the README's first command built the engines)
    .venv/bin/python benchmarks/texts_same_new.py --read <dir>   (print an earlier run's arms again, no measuring)
"""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARMS = ("same", "new")
# issue 66, "Done when": of the 10 judged cells at least 7 decided, at least 8 distinct texts a c1 cell, 15 min warm
DECIDED_AT_LEAST, TEXTS_AT_LEAST, MINUTES_AT_MOST = 7, 8, 15
INTERVAL = re.compile(r"\(([+-]?[\d.]+)% to ([+-]?[\d.]+)%")
CELL = ("stack", "workload", "concurrency", "power cap W", "prompt tokens")


def arm_config(out: Path, arm: str, node: str) -> Path:
    """The arm's --configfile (JSON is YAML, as the rehearsal writes its own): its texts setting and its own
    runs, parts, results and reports; merged over configs/config.yaml by Snakemake."""
    folder = out / arm
    given = folder / "config.yaml"
    given.parent.mkdir(parents=True, exist_ok=True)
    given.write_text(json.dumps({"nodes": [node], "measure": {"texts_across_rounds": arm}, "paths": {
        "runs": str(folder / "runs"), "parts": str(folder / "parts"), "results": str(folder / "results.parquet"),
        "reports": str(folder / "reports")}}))
    return given


def run_arm(out: Path, arm: str, node: str) -> float:
    """One arm: the default's report target under the arm's config; its wall seconds."""
    started = time.monotonic()
    argv = [sys.executable, "-m", "snakemake", "report", "--cores", "1", "--configfile", str(arm_config(out, arm, node))]
    done = subprocess.run(argv, cwd=ROOT)
    seconds = time.monotonic() - started
    (out / arm / "seconds.txt").write_text(f"{seconds:.1f}\n")
    if done.returncode:
        print(f"{arm}: snakemake exited {done.returncode}; its report is read as far as it got", file=sys.stderr)
    return seconds


def width(gain: str) -> float | None:
    """'+12.0% (+3.0% to +20.0%, one-sided ...)' -> 17.0 (points); None where no interval is printed."""
    found = INTERVAL.search(gain or "")
    return float(found.group(2)) - float(found.group(1)) if found else None


def verdicts(reports: Path, node: str) -> dict[tuple, dict]:
    """Cell -> its What to run row (the report's CSV: verdict, interval, scope where the report states it)."""
    path = reports / "tables" / f"what-to-run-{node}.csv"
    if not path.exists():
        return {}
    with path.open() as f:
        rows = list(csv.DictReader(f))
    return {tuple(r.get(c, "") for c in CELL): r for r in rows}


def texts_asked(results: Path) -> dict[tuple, int]:
    """Cell (stack, workload, concurrency) -> the distinct texts its rounds asked (analysis/levels.py scope over the
    results' text_gain rows); empty where the run predates them."""
    from stackbench.analysis import levels
    from stackbench.report import queries

    if not results.exists():
        return {}
    scope = levels.scope(queries.texts_input(queries.Results(results)))
    return {(s, w, float(c)): int(n) for s, w, c, n in zip(scope["stack"], scope["workload"], scope["concurrency"], scope["texts"])}


def cell_name(cell: tuple) -> str:
    stack, workload, concurrency, cap, tokens = cell
    return " ".join([stack, workload, f"c{float(concurrency):.0f}", *([f"{cap} W"] if cap else []),
                     *([f"{float(tokens):.0f} tok"] if tokens else [])])


def side_by_side(out: Path, node: str) -> list[str]:
    """The printed comparison of the arms under `out` (module docstring)."""
    arms = {arm: (verdicts(out / arm / "reports", node), texts_asked(out / arm / "results.parquet")) for arm in ARMS}
    cells = sorted({cell for rows, _ in arms.values() for cell in rows})
    lines = [f"{'cell':28}" + "".join(f" | {arm + ': verdict':24} {'width':>7} {'texts':>5}" for arm in ARMS)]
    for cell in cells:
        line = f"{cell_name(cell):28}"
        for arm in ARMS:
            rows, texts = arms[arm]
            row = rows.get(cell, {})
            said = width(row.get("gain over no-spec (interval)", ""))
            asked = texts.get((cell[0], cell[1], float(cell[2] or "nan")), None)
            line += f" | {row.get('verdict', '-'):24} {'' if said is None else f'{said:.1f}':>7} {'' if asked is None else asked:>5}"
        lines.append(line)
    lines.append("")
    for arm in ARMS:
        rows, texts = arms[arm]
        judged = [r for r in rows.values() if r["verdict"] != "not judged"]
        decided = sum(r["verdict"] != "undecided" for r in judged)
        widths = [w for w in (width(r.get("gain over no-spec (interval)", "")) for r in judged) if w is not None]
        c1 = {cell: n for cell, n in texts.items() if cell[2] == 1.0}
        fewest = min(c1.values(), default=0)
        seconds_file = out / arm / "seconds.txt"
        minutes = float(seconds_file.read_text()) / 60 if seconds_file.exists() else None
        checks = [f"decided {decided} of {len(judged)} judged" + ("" if decided >= DECIDED_AT_LEAST else
                                                                  f" (target {DECIDED_AT_LEAST}: {DECIDED_AT_LEAST - decided} short)"),
                  f"median interval width {sorted(widths)[len(widths) // 2]:.1f} points" if widths else "no interval printed",
                  f"fewest texts a c1 cell {fewest}" + ("" if fewest >= TEXTS_AT_LEAST else
                                                         f" (target {TEXTS_AT_LEAST}: {TEXTS_AT_LEAST - fewest} short)"),
                  "time not measured" if minutes is None else f"{minutes:.1f} min" + (
                      "" if minutes <= MINUTES_AT_MOST else f" (target {MINUTES_AT_MOST}: {minutes - MINUTES_AT_MOST:.1f} over)")]
        lines.append(f"{arm}: " + "; ".join(checks))
    same, new = arms["same"][0], arms["new"][0]
    flips = [cell_name(c) for c in cells if {same.get(c, {}).get("verdict"), new.get(c, {}).get("verdict")} == {"run", "not worth it"}]
    lines.append("cells 'run' in one arm and 'not worth it' in the other: " + (", ".join(flips) or "none"))
    return lines


def main(argv: list[str]) -> None:
    if argv[:1] == ["--read"]:
        out, node = Path(argv[1]), argv[2] if len(argv) > 2 else "local-cpu"
    else:
        node = argv[0] if argv else "local-cpu"
        out = ROOT / "data/benchmarks/texts-same-new"
        for arm in ARMS:
            print(f"== {arm}: {run_arm(out, arm, node) / 60:.1f} min", file=sys.stderr)
    print("\n".join(side_by_side(out, node)))


if __name__ == "__main__":
    main(sys.argv[1:])
