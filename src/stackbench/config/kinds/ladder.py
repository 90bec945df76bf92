"""kind ladder: one cell per prompt length in `ladder` (served model's tokens), at each concurrency."""

from stackbench.config.kinds.base import WorkloadKind
from stackbench.config.model import Workload


class Ladder(WorkloadKind):
    name = "ladder"
    own_field = "ladder"
    own_field_is = "a list of prompt lengths, "

    def points(self, workload: Workload) -> tuple[int | None, ...]:
        return workload.ladder


KIND = Ladder()
