"""kind single: the workload's prompts as written (or sized), one turn each, measured in repeats."""

from stackbench.config.kinds.base import WorkloadKind


class Single(WorkloadKind):
    name = "single"


KIND = Single()
