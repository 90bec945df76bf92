"""kind ladder: one cell per prompt length in `ladder` (served model's tokens), at each concurrency."""

from stackbench.config.kinds.base import WorkloadKind
from stackbench.config.model import Workload


class Ladder(WorkloadKind):
    name = "ladder"
    draws = False  # its turns are built from its prompts to a length
    own_field = "ladder"
    own_field_is = "a list of prompt lengths, "

    def points(self, workload: Workload) -> tuple[int | None, ...]:
        return workload.ladder

    def deciding_points(self, workload: Workload, context_len: int) -> tuple[int | None, ...]:
        """The longest prompt that fits the launch's context with its reply: the long-context use's answer. The
        shorter lengths are the ladder's one-off sweep; a length over the context is a rejection, no figure."""
        fits = [n for n in workload.ladder if n + workload.output_tokens <= context_len]
        return (max(fits),) if fits else ()


KIND = Ladder()
