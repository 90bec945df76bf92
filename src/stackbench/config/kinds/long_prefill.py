"""kind long-prefill: each prompt repeated to `prompt_tokens` (1024 unless set) where nothing else sizes it."""

from stackbench.config.kinds.base import PromptShape, WorkloadKind
from stackbench.config.model import Workload

DEFAULT_PROMPT_TOKENS = 1024


class LongPrefill(WorkloadKind):
    name = "long-prefill"
    draws = False  # its turns are built from its prompts to a length

    def turns(self, workload: Workload, index: int, count: int, repeat: int, shape: PromptShape) -> list[str]:
        prompt = workload.prompts[(repeat * count + index) % len(workload.prompts)]
        return [shape.drawn(prompt, index, workload.prompt_tokens or DEFAULT_PROMPT_TOKENS)]

    def deciding_points(self, workload: Workload, context_len: int) -> tuple[int | None, ...]:
        """Its one cell: the long-context use's prefill-bound request."""
        return self.points(workload)


KIND = LongPrefill()
