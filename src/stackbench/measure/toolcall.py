"""Tool-call round trips (a workload with `tool`, seed 002's "带 tool schema 的完整往返"): the request sends
the tool schema as `tools`, its answer ends where the model ends it, and each streamed call is checked."""

from __future__ import annotations

import json

from stackbench.measure.client import RequestRecord
from stackbench.measure.summary import Figure
from stackbench.results.metrics import M


def call_ok(record: RequestRecord, name: str) -> bool:
    """The streamed tool call names the schema's function and its arguments parse as a JSON object."""
    try:
        arguments = json.loads(record.tool_arguments)
    except ValueError:
        return False
    return record.tool_name == name and isinstance(arguments, dict)


def figures(records: list[RequestRecord], tool: dict) -> list[Figure]:
    """tool_call_ok (our own): the share of requests whose answer is a complete call of the schema's function
    with arguments that parse; the round trip itself is request_wall_s (submit to the last chunk)."""
    ok = [r for r in records if r.status == "ok"]
    if not ok:
        return []
    passed = sum(call_ok(r, tool["name"]) for r in ok)
    return [Figure(M.tool_call_ok, passed / len(ok), "mean", len(ok),
                   note=f"{passed} of {len(ok)} answers call {tool['name']} with arguments that parse as JSON")]
