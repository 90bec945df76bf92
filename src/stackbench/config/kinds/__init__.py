"""The workload kinds, by the name a workload file's `kind:` gives, in the order of the schema's `kind`
enum: one module per kind in this package, each defining KIND, a WorkloadKind (base.py). A kind without
its schema entry, or an entry without its module, fails here on import."""

from __future__ import annotations

import importlib
import pkgutil

from stackbench.config import load_schema
from stackbench.config.kinds.base import WorkloadKind


def _registry() -> dict[str, WorkloadKind]:
    found = {}
    for module in pkgutil.iter_modules(__path__):
        if module.name != "base":
            kind = importlib.import_module(f"{__name__}.{module.name}").KIND
            found[kind.name] = kind
    named = load_schema("workload")["properties"]["kind"]["enum"]
    if set(named) != set(found):
        raise RuntimeError(f"workload kinds: schema enum {sorted(named)} differs from modules' {sorted(found)} "
                           "(stackbench/config/kinds)")
    return {name: found[name] for name in named}


KINDS: dict[str, WorkloadKind] = _registry()
