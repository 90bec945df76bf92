"""kind divergence: one fixed text scored once per launch, its prompt log-probabilities (measure/divergence.py)."""

from stackbench.config.kinds.base import WorkloadKind


class Divergence(WorkloadKind):
    name = "divergence"
    own_field = "divergence"
    own_field_is = "the scored text and its cut: "
    runs = "divergence"
    every_cap = False  # a distribution over the next token does not move with a power cap


KIND = Divergence()
