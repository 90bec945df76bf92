"""What a workload kind (`kind:` in configs/workloads/*.yaml) decides, in one interface: the plan asks it
which fields it owns (checked when the file is read) and which points its cells run at; the runner asks it
how a cell is run and which user turns each conversation sends. Each kind is one module beside this one
(the registry in __init__ finds them), plus its name in schemas/workload.schema.yaml's `kind` enum."""

from __future__ import annotations

from typing import Protocol

from stackbench.config.model import Workload


class PromptShape(Protocol):
    """How the runner builds one cell's prompt texts to length (measure/workloads.py)."""

    def sized(self, text: str) -> str:
        """The text built to the cell's length in the served model's tokens; as written when it has none."""

    def drawn(self, text: str, index: int, fallback: int | None) -> str:
        """As `sized`, else to conversation `index`'s drawn synthetic length, else to `fallback` tokens
        (None: as written)."""


class WorkloadKind:
    """A kind that sends the workload's prompts as measured repeats, one single-turn conversation each;
    a kind module subclasses it and overrides what it does differently."""

    name: str = ""
    # The workload field this kind alone gives and requires (None: none), and the words its error says of it.
    own_field: str | None = None
    own_field_is: str = ""
    # How the runner runs a cell (measure/runner.py CellRunner.run): "repeats" of the load, measured, or
    # "probes": the correctness probes once.
    runs: str = "repeats"
    # Whether its cells run again at every power cap of a sweep (False: uncapped only; what it measures does
    # not move with the cap).
    every_cap: bool = True
    # Whether a conversation is one text of the class, drawn (measure/workloads.py drawn: new texts each round,
    # the same on every variant of a round), where no length is built; False: the kind's own `turns`.
    draws: bool = True

    def points(self, workload: Workload) -> tuple[int | None, ...]:
        """The prompt lengths a cell runs at, one cell each per concurrency; None: the workload's own."""
        return (None,)

    def deciding_points(self, workload: Workload, context_len: int) -> tuple[int | None, ...]:
        """The points of a one-off workload that What to run decides the long-context use on, which its rounds
        repeat like a judged workload (plan/expand.py long_context_deciding); none for a kind that stands for
        no such use."""
        return ()

    def turns(self, workload: Workload, index: int, count: int, repeat: int, shape: PromptShape) -> list[str]:
        """The user turns of conversation `index` of `count` in repeat `repeat`: conversations and repeats
        rotate through the prompt list, so a cell sees every prompt."""
        return [shape.drawn(workload.prompts[(repeat * count + index) % len(workload.prompts)], index, None)]
