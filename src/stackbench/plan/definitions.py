"""How the measured figures are computed, versioned: DEFINITIONS enters every cell's fingerprint (plan/launchspec.py),
so cells measured under other definitions are measured again instead of mixing with new ones, and a bundle measured
under others is refused (results/bundle.py).

The modules that compute the figures (SOURCES) are hashed in a normalised form, their syntax trees without
docstrings, comments or layout (`sources_sha256`), so an edit to a comment, a docstring or the formatting moves
nothing; a bundle's manifest carries the hash beside DEFINITIONS (measure/publish.py). definitions.lock.json, beside
this file, holds the hash each DEFINITIONS was settled on. When the code moves, tests/unit/plan/test_definitions.py
fails until its developer decides: a figure computed differently bumps DEFINITIONS (cached cells are measured again),
a change that computes every figure as before does not; either way `python -m stackbench.plan.definitions` records
the decision in the lock (docs/measurement-definitions.md).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
from pathlib import Path

DEFINITIONS = 10  # 10: texts drawn from public prompt sets, new each round (models/promptsets.py); a text's own messages
# (9: the client checks itself in every cell (loop lag, CPU share, client_saturated); no connection cap)
# (8: llama.cpp's salted single-turn requests reuse no cached prefix; the probes first on a launch)
# (7: salts drawn from the text seed, measure/workloads.py Texts, paired across a round's variants)
# (6: power and energy per GPU beside the node total, the host's load, divergence exact or bounded)
# (5: a reply cut off at max_tokens is an invalid answer, accuracy)
# The figures' code, in the package: the client's records, the summary of a repeat, the metrics' registry, the
# client's check of itself, and the intervals of the estimators.
SOURCES = ("measure/client.py", "measure/summary.py", "results/metrics.py", "results/estimators.py", "measure/clientload.py")
PACKAGE = Path(__file__).resolve().parent.parent
LOCK = Path(__file__).with_name("definitions.lock.json")


def normalised(source: str) -> str:
    """A module's syntax tree without its docstrings, fields left at None or empty omitted, so the form is the same
    across the Python versions that add such fields (3.12's type_params, 3.13's default_value)."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and ast.get_docstring(node, clean=False) is not None:
            node.body = node.body[1:] or [ast.Pass()]
    return _dump(tree)


def _dump(value) -> str:
    if isinstance(value, ast.AST):
        fields = (f"{name}={_dump(field)}" for name, field in ast.iter_fields(value) if field is not None and field != [])
        return f"{type(value).__name__}({', '.join(fields)})"
    if isinstance(value, list):
        return f"[{', '.join(map(_dump, value))}]"
    return repr(value)


@functools.cache
def sources_sha256() -> str:
    """The normalised figures' code, hashed (module by module, named)."""
    digest = hashlib.sha256()
    for name in SOURCES:
        digest.update(f"{name}\0{normalised((PACKAGE / name).read_text(encoding='utf-8'))}\0".encode())
    return digest.hexdigest()


def locked() -> dict[str, str]:
    """The lock: each DEFINITIONS version and the sources' hash it was settled on."""
    return json.loads(LOCK.read_text()) if LOCK.exists() else {}


def lock() -> str:
    """Records the sources' hash under the current DEFINITIONS (the developer's decision, see the module's doc)."""
    entries = {**locked(), str(DEFINITIONS): sources_sha256()}
    LOCK.write_text(json.dumps(dict(sorted(entries.items(), key=lambda item: int(item[0]))), indent=1) + "\n")
    return f"{LOCK}: definitions {DEFINITIONS} settled on sources {sources_sha256()}"


if __name__ == "__main__":
    print(lock())
