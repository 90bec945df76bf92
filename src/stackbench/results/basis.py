"""Measurement basis (口径): which fields make two figures comparable, and the caveats when they differ.

A table's caveats are generated from its rows: every basis field whose values differ between rows is
named with the values per row and one sentence on why it matters; rows whose stat is not a median or
mean get a marker. Rows with identical basis get no caveat.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

# Field -> why a difference in it makes figures incomparable. Order is the order caveats are printed in.
WHY_IT_MATTERS: dict[str, str] = {
    "node": "different machines",
    "gpu": "different GPUs have different memory bandwidth, the ceiling of decode speed",
    "gpu_count": "a different number of GPUs shares the work",
    "tp": "tensor-parallel size changes per-GPU weight reads and adds communication",
    "os": "drivers and schedulers differ between operating systems; the same engine runs at different speeds",
    "engine": "different inference engines",
    "engine_version": "kernels and schedulers change between engine versions",
    "engine_image": "a different container image is a different build",
    "model": "different checkpoints",
    "weights_id": "one checkpoint name over different weight bytes (another file, revision or conversion); figures may not be of the same model",
    "quant": "bytes read per token set the decode ceiling; a different quantization is a different workload",
    "kv_dtype": "the KV-cache dtype changes KV bytes per token, pool size and long-context speed",
    "context_len": "server context length changes KV layout and attention cost; speeds at different contexts are not comparable",
    "prompt_tokens": "longer prompts slow decode (more KV read per token) and lower speculative acceptance",
    "output_tokens": "short outputs are dominated by fixed overheads, long ones amortise them",
    "workload": "content changes speculative acceptance: code and JSON are predictable, prose is not",
    "concurrency": "an aggregate over several streams is not the speed one stream sees",
    "temperature": "sampling at temperature > 0 lowers speculative acceptance compared with greedy decoding",
    "thinking": "with thinking on, a reasoning model spends its output on reasoning tokens; its template, content and acceptance differ",
    "reasoning_effort": "a higher reasoning effort makes longer, differently shaped outputs; per-token speed and latency move with it",
    "method_scale": "a post's method run at a reduced scale (shorter outputs or prompts) is not the post's figure; fixed overheads weigh more",
    "ttft_included": "a rate with time-to-first-token inside is lower than the decode rate alone",
    "power_cap_w": "a power cap lowers clocks; speed falls steeply below the sweet spot",
    "spec_method": "a different speculative method",
    "spec_tokens": "a different speculative depth",
    "metric": "single-stream decode, aggregate and end-to-end rates measure different things",
    "source": "measured here versus transcribed from a post",
}

# What a row says of a figure its server cannot give (an external endpoint: no log, no version route, no
# speculative counters): never a blank, never a guess. engines/ and measure/rows.py write it, the report shows it.
NOT_REPORTED = "not reported by this endpoint"


def not_reported(metric: str) -> str:
    """The reason on a launch's row for a figure its endpoint cannot give (it ends with NOT_REPORTED)."""
    return f"{metric}: {NOT_REPORTED}"


# What a server's log says when it runs a 4-bit float checkpoint (NVFP4, MXFP4) on a GPU without FP4 tensor cores: an
# adapter's setup fact (rows' engine_setup), which the report repeats beside the rows it concerns.
UNPACKED_FP4 = "4-bit float weights unpacked to BF16, no FP4 tensor cores"

# Stats that are not a central value of repeats get a marker on their row.
STAT_MARKERS: dict[str, tuple[str, str]] = {
    "single": ("†", "a single figure: one run, or repeats not stated"),
    "peak": ("‡", "peak, not typical throughput"),
    "range": ("§", "published as a range; the value is its midpoint"),
}

DISPLAY_NAMES = {
    "context_len": "context",
    "kv_dtype": "KV dtype",
    "ttft_included": "TTFT in rate",
    "power_cap_w": "power cap (W)",
    "gpu_count": "GPU count",
    "tp": "TP size",
    "os": "OS",
    "prompt_tokens": "prompt tokens",
    "output_tokens": "output tokens",
    "engine_version": "engine version",
    "engine_image": "engine image",
    "spec_method": "speculative method",
    "spec_tokens": "speculative depth",
    "reasoning_effort": "reasoning effort",
    "method_scale": "method scale",
    "weights_id": "weights id",
}


# Lengths a post states as "about 400 tokens" are met by a measured length within this share of it: a
# tokenizer and a salt per request never reproduce a post's prompt to the token. Inside it no caveat; the
# exact lengths stay in the rows (a measured row shows its own).
LENGTH_TOLERANCE = 0.10
LENGTH_FIELDS = ("prompt_tokens", "output_tokens")


def within_tolerance(a: float, b: float) -> bool:
    """Two lengths alike: they differ by at most LENGTH_TOLERANCE of the larger."""
    return abs(a - b) <= LENGTH_TOLERANCE * max(abs(a), abs(b))


def _length_anchors(values) -> dict[str, str]:
    """Displayed length -> the displayed length of its cluster's smallest member (ascending, each value joins
    the cluster whose smallest member it is within tolerance of): alike lengths compare equal."""
    numbers = sorted({float(v) for v in values if v != "unknown"})
    anchors: dict[str, str] = {}
    anchor = None
    for number in numbers:
        if anchor is None or not within_tolerance(anchor, number):
            anchor = number
        anchors[format_value(number)] = format_value(anchor)
    return anchors


@dataclass(frozen=True)
class Caveat:
    field: str
    values_by_row: dict[int, tuple[str, ...]]  # display row number (1-based) -> values seen in that row
    why: str

    def text(self) -> str:
        if len(self.values_by_row) == 1:
            return self.whole_table_text()
        groups: dict[str, list[int]] = {}
        for row, values in sorted(self.values_by_row.items()):
            groups.setdefault(" / ".join(values), []).append(row)
        parts = [f"{_rows_phrase(rows)} {_at(value)}" for value, rows in groups.items()]
        name = DISPLAY_NAMES.get(self.field, self.field)
        return f"{name}: {', '.join(parts)}. Why it matters: {self.why}."

    def whole_table_text(self, shown: int = 6) -> str:
        """A table read as one block (a node's full table): the values it holds; the results column says
        which row has which."""
        values = [v for vs in self.values_by_row.values() for v in vs]
        text = ", ".join(values[:shown]) + (" …" if len(values) > shown else "")
        name = DISPLAY_NAMES.get(self.field, self.field)
        return f"{name}: {text} (column {self.field} in the results says which row). Why it matters: {self.why}."


def _at(value: str) -> str:
    return "unknown" if value == "unknown" else f"at {value}"


def _rows_phrase(rows: Sequence[int]) -> str:
    spans: list[str] = []
    start = prev = rows[0]
    for row in list(rows[1:]) + [None]:
        if row is not None and row == prev + 1:
            prev = row
            continue
        spans.append(str(start) if start == prev else f"{start}-{prev}")
        if row is not None:
            start = prev = row
    word = "row" if len(rows) == 1 else "rows"
    return f"{word} {', '.join(spans)}"


def format_value(value) -> str:
    """Render a basis value for a caveat: nulls are 'unknown', whole floats lose their '.0'."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return "unknown"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def gpu_key(name: str) -> str:
    """A GPU's name without its vendor, brand and memory size: a post's "RTX 5090 32GB" and NVML's "NVIDIA
    GeForce RTX 5090" are one GPU (a caveat compares GPUs, not spellings)."""
    words = re.sub(r"\b\d+\s*G(i)?B\b", " ", name, flags=re.IGNORECASE).lower().split()
    return " ".join(w for w in words if w not in ("nvidia", "geforce"))


# Fields whose spellings differ between sources for one thing: compared after this normalisation.
NORMALISED = {"gpu": gpu_key}


DISTINCT_FIRST = 1000  # records above which caveats reduces a table to its distinct combinations first


def caveats(records: pd.DataFrame, row_column: str = "row_no", axes: Sequence[str] = ()) -> list[Caveat]:
    """Caveats for one table.

    `records` holds the underlying result rows, each tagged with the display row it feeds
    (`row_column`, 1-based). `axes` are the fields the table varies on purpose (a power sweep's cap,
    a before/after's variant); they are not caveats.
    """
    fields = [f for f in WHY_IT_MATTERS if f not in axes and f in records.columns]
    # Per field, its distinct (row, value) pairs from plain lists. A table of many records has few distinct
    # combinations and is reduced to them first; on a small one that pass costs more than it saves.
    if len(records) > DISTINCT_FIRST:
        records = records[[row_column, *fields]].drop_duplicates()
    rows = records[row_column].tolist()
    seen: dict[str, dict[int, set[str]]] = {f: {} for f in fields}
    for name in fields:
        values = records[name].tolist()
        if records[name].dtype == "float64":  # NaN never equals itself: as None, a row's nulls are one pair
            values = [None if v != v else v for v in values]
        for row, value in set(zip(rows, values)):
            seen[name].setdefault(int(row), set()).add(format_value(value))
    found: list[Caveat] = []
    for name in fields:
        if name == "weights_id" and not one_name_two_weights(records):
            continue  # a weights id differs under other checkpoint names: the model caveat already says so
        values_by_row = {row: tuple(sorted(shown, key=_value_order)) for row, shown in sorted(seen[name].items())}
        normalise = NORMALISED.get(name)
        compared = values_by_row if normalise is None else {
            row: tuple(sorted({v if v == "unknown" else normalise(v) for v in shown})) for row, shown in values_by_row.items()}
        if _differs(name, compared):
            found.append(Caveat(name, values_by_row, WHY_IT_MATTERS[name]))
    return found


def one_name_two_weights(records: pd.DataFrame) -> bool:
    """Whether one checkpoint name (model) stands over two known weights ids in these rows: the weights_id caveat.
    Unknown ids (published rows, external servers) never raise it; without a model column any difference does."""
    if "weights_id" not in records.columns:
        return False
    known = records[records["weights_id"].notna() & (records["weights_id"] != "unknown")]
    if "model" not in records.columns:
        return known["weights_id"].nunique() > 1
    return bool((known.groupby("model")["weights_id"].nunique() > 1).any())


def _value_order(value: str):
    """Numbers by size, then text, then unknown last."""
    try:
        return (0, float(value), "")
    except ValueError:
        return (1 if value != "unknown" else 2, 0.0, value)


def _differs(name: str, values_by_row: dict[int, tuple[str, ...]]) -> bool:
    """Rows that differ from each other, or one row mixing two stated values. A row whose figures state the
    field once and leave it unstated elsewhere (a launch's pool has no temperature) is not a mix, and reads
    as its stated value beside other rows. Lengths compare within LENGTH_TOLERANCE."""
    anchors = _length_anchors([v for vs in values_by_row.values() for v in vs]) if name in LENGTH_FIELDS else {}
    compared = []
    for values in values_by_row.values():
        stated = {anchors.get(v, v) for v in values if v != "unknown"}
        if len(stated) > 1:
            return True
        compared.append(frozenset(stated) or frozenset(["unknown"]))
    return len(set(compared)) > 1


WIDE_MARKER = "⚠"
WIDE_NOTE = "wide spread across repeats"


def is_wide(record) -> bool:
    """A figure whose repeats spread widely (flagged at measurement time) is marked, not hidden."""
    note = record.get("note") if hasattr(record, "get") else None
    return isinstance(note, str) and note.startswith(WIDE_NOTE)


def stat_marker(stat: str | None) -> str:
    return STAT_MARKERS.get(stat or "", ("", ""))[0]


def marker_legend(stats: Sequence[str], wide: bool = False) -> list[str]:
    """One legend line per marker that appears in the table."""
    seen = [s for s in STAT_MARKERS if s in set(stats)]
    lines = [f"{STAT_MARKERS[s][0]} {STAT_MARKERS[s][1]}" for s in seen]
    return lines + ([f"{WIDE_MARKER} {WIDE_NOTE}: read the range, not the median"] if wide else [])
