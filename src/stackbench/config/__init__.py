"""Config loading: YAML files validated against the JSON schemas shipped in the package, defaults filled in
(config/loader.py); the typed configs the plan is made of are config/model.py. Every error is one line that names
the file, the field and what was expected.
"""

from __future__ import annotations

from stackbench.config.loader import ConfigError, load_file, load_schema, validate
from stackbench.config.model import Decision, Rental

__all__ = ["ConfigError", "default_decision", "default_rental", "load_file", "load_schema", "validate"]


def default_rental() -> Rental:
    """The node schema's `rental` defaults: no price, the stated download rate, one GPU."""
    return Rental(**validate({}, load_schema("node")["properties"]["rental"], "node.schema.yaml: rental"))


def default_decision() -> Decision:
    """What to run's rule for a node whose file is not at hand (a kept run, a bundle): the node schema's defaults."""
    node = load_schema("node")["properties"]
    return Decision.of({"launches": node["launches"]["default"], "decide": validate({}, node["decide"], "node.schema.yaml: decide")})
