"""kind multi-turn: each conversation sends the first `turns` prompts in order, so later turns reuse the
first's prefix from the server's cache; a sized cell builds only the first (the long shared prefix)."""

from stackbench.config.kinds.base import PromptShape, WorkloadKind
from stackbench.config.model import Workload


class MultiTurn(WorkloadKind):
    name = "multi-turn"
    draws = False  # its turns are one growing conversation of its prompts

    def turns(self, workload: Workload, index: int, count: int, repeat: int, shape: PromptShape) -> list[str]:
        turns = list(workload.prompts[: workload.turns])
        turns[0] = shape.sized(turns[0])
        return turns


KIND = MultiTurn()
