"""The sequence of rounds (docs/what-to-run.md): after each look, which variants the next round launches again,
and whether the budget allows it. Only the variants of cells still undecided go on, each with its stack's
no-spec (a gain is paired within a round); a round that would pass `decide.budget_minutes` or
`decide.most_launches` is not started, and the cells it would have served stay undecided, saying so."""

from __future__ import annotations

import pandas as pd

from stackbench.analysis import decide
from stackbench.config.model import Decision


def still_open(choices: pd.DataFrame) -> list[tuple[str, str]]:
    """(stack, variant) of every contender of an undecided cell, and of that cell's no-spec, sorted."""
    open_cells = choices[(choices["verdict"] == decide.UNDECIDED) & (choices["candidates"] > 0)]
    wanted = {(row.stack, variant) for row in open_cells.itertuples(index=False)
              for variant in [*row.contenders.split(", "), row.ref_variant] if isinstance(variant, str) and variant}
    return sorted(wanted)


def next_round(choices: pd.DataFrame, look: int, decision: Decision, spent_s: float, launch_s: float) -> tuple[list, str]:
    """The (stack, variant) pairs the round after `look` launches, and a sentence saying why (or why none): none
    once every cell is decided, at most_launches, or where the round (its launches at `launch_s` each, the mean
    of the later rounds' launches so far) would take the sequence's measuring time past budget_minutes."""
    wanted = still_open(choices)
    if not wanted:
        return [], f"every judged cell decided at round {look}"
    if look >= decision.most:
        return [], f"the budget's {decision.most} rounds are spent; {len(wanted)} variant(s) still open"
    cost = launch_s * len(wanted)
    if decision.budget_minutes is not None and spent_s + cost > decision.budget_minutes * 60:
        return [], (f"round {look + 1} ({len(wanted)} launches, about {cost / 60:.1f} min) would pass the budget of "
                    f"{decision.budget_minutes:g} min ({spent_s / 60:.1f} min spent)")
    return wanted, f"round {look + 1}: {len(wanted)} launches, about {cost / 60:.1f} min"
