"""The sequence of rounds (docs/what-to-run.md): each stack's horizon, fixed at its first look and kept after, and
after each look which variants and cells the next round launches again. Only the cells still undecided go on,
each with its stack's no-spec (a gain is paired within a round), so a cell decided early costs no more launch
time. `decide.budget_minutes` is spent once, at a stack's first look: it fixes the horizon at the rounds it
affords; every round up to the horizon is then launched for the cells still open (the looks spend the error
they were given), and none past it, the cells it would have served staying undecided, saying so."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pandas as pd

from stackbench.analysis import decide
from stackbench.config.model import Decision

HORIZONS_FILE = "horizons.json"  # beside the looks: each stack's horizon as its first look fixed it


def still_open(choices: pd.DataFrame) -> list[tuple[str, str]]:
    """(stack, variant) of every contender of an undecided cell, and of that cell's no-spec, sorted."""
    open_cells = choices[(choices["verdict"] == decide.UNDECIDED) & (choices["candidates"] > 0)]
    wanted = {(row.stack, variant) for row in open_cells.itertuples(index=False)
              for variant in [*row.contenders.split(", "), row.ref_variant] if isinstance(variant, str) and variant}
    return sorted(wanted)


def judged_launches(choices: pd.DataFrame) -> int:
    """The launches a full round holds: every contender of every judged cell and each cell's no-spec."""
    judged = choices[choices["candidates"] > 0]
    return len({(row.stack, variant) for row in judged.itertuples(index=False)
                for variant in [*row.contenders.split(", "), row.ref_variant] if isinstance(variant, str) and variant})


def horizon(rule: Decision, look: int, spent_s: float, round_s: float) -> tuple[Decision, str]:
    """The rule with its horizon fixed at the first look (`look`), and a sentence saying why: the last round the
    budget affords were every later round as long as a full round so far (`round_s`; later rounds relaunch only
    the cells still open, so they cost less), never past `decide.most_launches`. The looks' error is spent up to
    it (docs/what-to-run.md), so it is fixed before any look decides."""
    if rule.budget_minutes is None or round_s <= 0:
        return rule, f"horizon: round {rule.most} (decide.most_launches)"
    affords = look + max(0, math.floor((rule.budget_minutes * 60 - spent_s) / round_s))
    fixed = max(look, min(rule.most, affords))
    why = (f"horizon: round {fixed}, fixed before the first look: the budget of {rule.budget_minutes:g} min affords "
           f"{affords - look} more round(s) at {round_s / 60:.1f} min a full round ({spent_s / 60:.1f} min spent)")
    return dataclasses.replace(rule, most=fixed), why + (f"; decide.most_launches caps it at {rule.most}" if affords > rule.most else "")


def open_cells(choices: pd.DataFrame) -> list[list]:
    """[stack, workload, concurrency, power cap] of every cell still undecided: the cells the next round measures."""
    undecided = choices[(choices["verdict"] == decide.UNDECIDED) & (choices["candidates"] > 0)]
    return sorted([row.stack, row.workload, int(row.concurrency), None if pd.isna(row.power_cap_w) else float(row.power_cap_w)]
                  for row in undecided.itertuples(index=False))


def fix_horizons(rule: Decision, choices: pd.DataFrame, look: int, spent_s: float, launch_s: float,
                 fixed_file: Path) -> tuple[Decision, str]:
    """The rule with each judged stack's horizon (Decision.horizons) and a sentence saying why: a stack whose horizon
    `fixed_file` holds under this same rule keeps it (its looks already spent error under it, so a stack joining
    the node later moves nothing of it); a new one gets its own now (horizon), at a full round of the new stacks'
    launches (`launch_s` each) against the node's time spent. A changed rule (another budget, say) fixes every
    stack afresh. Writes the file back with the new ones."""
    stored = json.loads(fixed_file.read_text()) if fixed_file.exists() else {}
    under = dataclasses.asdict(dataclasses.replace(rule, horizons=None))
    kept = dict(stored.get("horizons", {})) if stored.get("rule") == under else {}
    judged = choices[choices["candidates"] > 0]
    new = judged[~judged["stack"].isin(kept)]
    said = [f"{stack} keeps round {most}, fixed at its first look" for stack, most in sorted(kept.items())]
    if len(new):
        own, why = horizon(rule, look, spent_s, launch_s * judged_launches(new))
        stacks = sorted(set(new["stack"]))
        kept |= {stack: own.most for stack in stacks}
        said.insert(0, f"{why} ({', '.join(stacks)})")
        fixed_file.parent.mkdir(parents=True, exist_ok=True)
        fixed_file.write_text(json.dumps({"rule": under, "horizons": kept}, indent=1, sort_keys=True))
    return dataclasses.replace(rule, horizons=kept), "; ".join(said) or f"horizon: round {rule.most}"


def next_round(choices: pd.DataFrame, look: int, decision: Decision, spent_s: float, launch_s: float) -> tuple[list, str]:
    """The (stack, variant) pairs the round after `look` launches, and a sentence saying why (or why none): none
    once every cell is decided, and none of a stack at its horizon (Decision.of_stack, fixed at its first look from
    the budget: a round the horizon promised is launched, so the looks spend the error they were given). The
    sentence prices the round at `launch_s` a launch (the mean of the later rounds' launches so far) against the
    time spent."""
    wanted = still_open(choices)
    if not wanted:
        return [], f"every judged cell decided at round {look}"
    going = [(stack, variant) for stack, variant in wanted if look < decision.of_stack(stack).most]
    if not going:
        return [], f"the horizon's {look} rounds are spent; {len(wanted)} variant(s) still open"
    cost = launch_s * len(going)
    return going, f"round {look + 1}: {len(going)} launches, about {cost / 60:.1f} min ({spent_s / 60:.1f} min spent)"
