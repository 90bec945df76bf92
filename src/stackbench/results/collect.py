"""The workflow's collect step (rule collect): data/results.parquet from the launches' parts, the rows derived across
launches, and the result bundles brought in. Two facts come from stages above this one and are passed in by the
caller (cli.py): the plausibility check (analysis/plausibility.py flag_table) and the definitions version bundles are
read against (plan/launchspec.py DEFINITIONS)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa

from stackbench.results import agreement, bundle, divergence, pairing, store


def collect_results(parts: Sequence, out: Path, *, check: Callable[[pa.Table], pa.Array] | None, definitions: int,
                    kept: Sequence = (), bundles: Sequence = ()) -> int:
    """data/results.parquet from the parts (and the `kept` parts of launches the run did not plan), with the rows
    derived across launches: greedy agreement needs both launches' outputs, so it is computed here, over every
    part (results/agreement.py). Result bundles (results/bundle.py) come in under their own source if their
    definitions are `definitions`, and `check` flags every row's plausibility (store.collect). Returns the row count."""
    every = [*parts, *kept]
    union = store.union_parts(parts, kept)  # read once: the derived rows see it with no launch marked kept
    at = store.COLUMNS.index("launch_kept")
    measured = union.set_column(at, "launch_kept", pa.array(np.zeros(union.num_rows, dtype=bool)))
    derived = list(agreement.agreement_across(every, measured)) + divergence.divergence_across(every, measured)
    derived += pairing.pairing_across(every, measured)
    derived += [row for path in bundles for row in bundle.import_rows(Path(path), definitions)]
    return store.collect(parts, out, derived, kept, check=check, union=union)
