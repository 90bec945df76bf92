"""Config loading: YAML files validated against the JSON schemas shipped in the package (src/stackbench/schemas,
found by schema_path), defaults filled in. At the bottom of config/: the typed configs (config/model.py) read the
schemas' defaults from here, and the package's face (config/__init__.py) re-exports it.

Every error is one line that names the file, the field and what was expected, so a person can fix it
without reading a traceback. Validation runs before Snakemake plans any job.
"""

from __future__ import annotations

import copy
import functools
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from jsonschema import Draft202012Validator, validators


class ConfigError(ValueError):
    """A config file is wrong; the message is one line: '<file>: <field>: <problem>'."""


def _with_defaults(validator_class):
    """A validator that writes each property's schema `default` into the instance before checking it."""
    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, subschema in properties.items():
                if "default" in subschema and name not in instance:
                    instance[name] = copy.deepcopy(subschema["default"])
        yield from validate_properties(validator, properties, instance, schema)

    return validators.extend(validator_class, {"properties": set_defaults})


DefaultingValidator = _with_defaults(Draft202012Validator)


def field_path(error: jsonschema.ValidationError) -> str:
    parts = []
    for part in error.absolute_path:
        if isinstance(part, int):
            parts.append(f"[{part}]")
        else:
            parts.append(("." if parts else "") + str(part))
    return "".join(parts) or "(top level)"


def _describe(error: jsonschema.ValidationError) -> str:
    if error.validator == "additionalProperties":
        return f"{error.message.split('(')[-1].rstrip(')')}; allowed: {', '.join(sorted(error.schema.get('properties', {})))}"
    if error.validator == "enum":
        return f"expected one of {', '.join(map(str, error.validator_value))}, got {error.instance!r}"
    if error.validator == "type":
        return f"expected {error.validator_value}, got {error.instance!r}"
    return error.message


def schema_path(name: str) -> Path:
    """The one place a schema is found: package data, wherever the package is installed."""
    return Path(str(resources.files("stackbench") / "schemas" / f"{name}.schema.yaml"))


# libyaml's loader where PyYAML was built with it: the pure-Python one takes ~0.1 s per schema here.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@functools.cache
def load_schema(name: str) -> dict:
    """The parsed schema, read once per process and shared by every caller (they only read it): a plan
    validates one file per workload against the same schema, and re-parsing it per file cost a big
    sweep's `snakemake -n` 1.4 s of CPU (26 workloads; 0.04 s cached, with libyaml)."""
    with open(schema_path(name), encoding="utf-8") as handle:
        return yaml.load(handle, Loader=_LOADER)


def validate(instance: Any, schema: dict, where: str) -> Any:
    """Validate in place (filling defaults) and return the instance; raise ConfigError on the first problem."""
    validator = DefaultingValidator(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(instance))
    if error is not None:
        raise ConfigError(f"{where}: {field_path(error)}: {_describe(error)}")
    return instance


def load_yaml(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as handle:
            return yaml.load(handle, Loader=_LOADER)
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f"line {mark.line + 1}" if mark else "(parse)"
        raise ConfigError(f"{path}: {at}: not valid YAML: {getattr(err, 'problem', err)}") from None


def load_file(path: Path, schema_name: str) -> dict:
    data = load_yaml(path)
    if data is None:
        data = {}
    return validate(data, load_schema(schema_name), str(path))
