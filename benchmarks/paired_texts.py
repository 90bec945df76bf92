"""Paired texts against unpaired (issue 58): the SD over rounds of each judged cell's paired log ratio
log(variant / no-spec), with the texts paired (every variant of a round sends the same salts: measure/workloads.py
Texts, the pipeline now) beside unpaired texts (a fresh random text seed per launch: each variant of each round
answers other texts, as every request's random salt did before), measured in the same run, on the default's own
launch specs, each launch a real llama-server through the pipeline's own measure step (measure/sequencer.py).

Rounds interleave: round k launches no-spec and the variant in each arm, in a shuffled order. Printed per cell:
both arms' SD over rounds and their mean gain, and the largest SD of each arm.

    .venv/bin/python benchmarks/paired_texts.py [rounds] [variant]   (after the README's first command planned the default)
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
import statistics
import sys
import tempfile
from pathlib import Path

import pandas as pd

from stackbench.measure import sequencer
from stackbench.plan import launchspec

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "data/runs/local-cpu"
ARMS = ("paired", "unpaired")


def judged(spec_dir: str) -> launchspec.LaunchSpec:
    """A later round's launch spec of the default (the judged cells only), as the workflow planned it."""
    return launchspec.read(RUNS / spec_dir / "launch.json")


def measured(spec: launchspec.LaunchSpec, round_no: int, arm: str, out: Path) -> dict[str, float]:
    """One fresh launch of `spec` in `arm`: {cell key: its judged figure}."""
    seed = 0 if arm == "paired" else random.SystemRandom().randrange(2**31)
    launch = dataclasses.replace(spec.launch, replicate=round_no)
    spec = dataclasses.replace(spec, launch=launch, measure={**spec.measure, "text_seed": seed, "texts_across_rounds": "same"})
    folder = out / f"{arm}-{launch.variant}-r{round_no}"
    sequencer.LaunchRun(spec, folder).run()
    rows = pd.read_parquet(folder / "cells.parquet")
    rows = rows[rows["concurrency"].notna() & (rows["status"] == "ok")]
    judged_rows = rows[rows["metric"] == rows["concurrency"].map(lambda c: "decode_tps" if c == 1 else "aggregate_tps")]
    return {f"{w} c{c:.0f}": v for w, c, v in zip(judged_rows["workload"], judged_rows["concurrency"], judged_rows["value"])}


def main(rounds: int, variant: str) -> None:
    specs = {"nospec": judged("llamacpp--nospec--r2"), variant: judged(f"llamacpp--{variant}--r2")}
    got: dict[tuple[str, str, int], dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for round_no in range(1, rounds + 1):
            order = [(arm, name) for arm in ARMS for name in specs]
            random.Random(round_no).shuffle(order)
            for arm, name in order:
                got[(arm, name, round_no)] = measured(specs[name], round_no, arm, Path(tmp))
                print(f"round {round_no}: {arm} {name} measured", file=sys.stderr)
    cells = sorted(got[("paired", "nospec", 1)])
    print(f"{'cell':16} {'SD paired':>10} {'SD unpaired':>12} {'gain paired':>12} {'gain unpaired':>14}")
    worst = {arm: 0.0 for arm in ARMS}
    for cell in cells:
        line = []
        for arm in ARMS:
            logs = [math.log(got[(arm, variant, k)][cell] / got[(arm, "nospec", k)][cell]) for k in range(1, rounds + 1)
                    if cell in got[(arm, variant, k)] and cell in got[(arm, "nospec", k)]]
            sd = statistics.stdev(logs) if len(logs) > 1 else math.nan
            worst[arm] = max(worst[arm], sd)
            line.append((sd, math.expm1(statistics.mean(logs)) if logs else math.nan))
        print(f"{cell:16} {line[0][0]:10.3f} {line[1][0]:12.3f} {line[0][1]:+12.1%} {line[1][1]:+14.1%}")
    print(f"largest SD over rounds: paired {worst['paired']:.3f}, unpaired {worst['unpaired']:.3f}; {variant} against "
          f"no-spec, {rounds} rounds, each launch fresh; load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 4, sys.argv[2] if len(sys.argv) > 2 else "ngram-n16")
