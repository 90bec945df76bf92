"""Analyses the seed posts did by hand, done on every row: decode roofline, KV-pool audit, spread and
bimodality, speculative value against context, power sweet spots, and like-for-like comparison.

Pure, vectorized functions over the results table (pandas groupby/merge; no per-row Python), so they run
the same on measured and published rows and on a million rows. Every lookup joins on the whole cell
(CELL) or the whole launch (LAUNCH), so a power-cap or concurrency sweep never mixes its cells.
Measured rows carry their model's geometry as server rows read from the model's own files
(stackbench.models.geometry); published rows from configs/models, written as rows of their own at collect.

One module per analysis; this package exposes their functions.
"""

from stackbench.analysis.acceptance import ACCEPTANCE_METRICS, acceptance_by_workload
from stackbench.analysis.clientstate import saturated_cells
from stackbench.analysis.common import BITS_PER_WEIGHT, CELL, LAUNCH
from stackbench.analysis.comparison import compare
from stackbench.analysis.correctness import (
    CORRECTNESS_METRICS,
    CROSS_STACK_METRICS,
    DIVERGENCE_METRICS,
    QUALITY_METRICS,
    correctness_by_variant,
    cross_stack_matrices,
    divergence_tables,
    quality_tables,
)
from stackbench.analysis.decide import DECIDE_METRICS, launch_variance, what_to_run
from stackbench.analysis.energy import ENERGY_METRICS, cap_floors, depth_by_cap, energy_cells, fewest_joules
from stackbench.analysis.gpustate import slowed_cells
from stackbench.analysis.held import decisions_held, variant_gains
from stackbench.analysis.kv_audit import kv_audit
from stackbench.analysis.power import power_sweet_spots, stock_limits
from stackbench.analysis.roofline import roofline, weight_format
from stackbench.analysis.speculative import spec_value_by_context
from stackbench.analysis.spread import is_bimodal, spread_flags

__all__ = [
    "ACCEPTANCE_METRICS", "acceptance_by_workload",
    "BITS_PER_WEIGHT", "CELL", "CORRECTNESS_METRICS", "CROSS_STACK_METRICS", "LAUNCH", "compare",
    "correctness_by_variant", "cross_stack_matrices", "QUALITY_METRICS", "quality_tables",
    "DIVERGENCE_METRICS", "divergence_tables", "DECIDE_METRICS", "launch_variance", "what_to_run",
    "decisions_held", "variant_gains",
    "ENERGY_METRICS", "cap_floors", "depth_by_cap", "energy_cells", "fewest_joules", "is_bimodal", "slowed_cells",
    "saturated_cells", "kv_audit",
    "power_sweet_spots", "stock_limits",
    "roofline", "spec_value_by_context", "spread_flags", "weight_format"
]
