"""The sequence of rounds (docs/what-to-run.md): the horizon, fixed at the first look, and after each look which
variants and cells the next round launches again, and whether the budget allows it. Only the cells still undecided
go on, each with its stack's no-spec (a gain is paired within a round), so a cell decided early costs no more
launch time; a round past the horizon or `decide.budget_minutes` is not started, and the cells it would have
served stay undecided, saying so."""

from __future__ import annotations

import dataclasses
import math

import pandas as pd

from stackbench.analysis import decide
from stackbench.config.model import Decision


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


def next_round(choices: pd.DataFrame, look: int, decision: Decision, spent_s: float, launch_s: float) -> tuple[list, str]:
    """The (stack, variant) pairs the round after `look` launches, and a sentence saying why (or why none): none
    once every cell is decided or at the horizon (`decision.most`, fixed at the first look from the budget: a
    round the horizon promised is launched, so the looks spend the error they were given). The sentence prices
    the round at `launch_s` a launch (the mean of the later rounds' launches so far) against the time spent."""
    wanted = still_open(choices)
    if not wanted:
        return [], f"every judged cell decided at round {look}"
    if look >= decision.most:
        return [], f"the horizon's {decision.most} rounds are spent; {len(wanted)} variant(s) still open"
    cost = launch_s * len(wanted)
    return wanted, f"round {look + 1}: {len(wanted)} launches, about {cost / 60:.1f} min ({spent_s / 60:.1f} min spent)"
