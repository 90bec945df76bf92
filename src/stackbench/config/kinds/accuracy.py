"""kind accuracy: a fixed, seeded subset of a fixed-answer task set (measure/accuracy.py), once per launch."""

from stackbench.config.kinds.base import WorkloadKind


class Accuracy(WorkloadKind):
    name = "accuracy"
    own_field = "accuracy"
    own_field_is = "the task set and subset: "
    runs = "accuracy"
    every_cap = False  # greedy answers do not move with a power cap; the set costs ~40 s a run on the CPU default


KIND = Accuracy()
