"""The pairing check, a step of collect (data/results.parquet): What to run's gain is paired within a round, so a
speculative variant and its no-spec launch of the same round must have sent the same texts (measure/workloads.py
Texts). It reads the request files of both launches, so, like greedy agreement (results/agreement.py), it runs
over every part at once.

Per speculative launch and closed-loop cell, against the no-spec launch of the same node, stack, model and round and
the same cell (its key: workload, load and power cap), request by request (the same repeat, conversation index and
turn); a capped cell whose no-spec launch has no cell at that cap pairs with nothing (What to run does not judge it):

- paired_prompts_identical: the share of paired requests whose prompt (salt included) is identical. It must be 1:
  below it the round compared different texts, and What to run leaves that round out;
- paired_replies_identical: of the requests with identical prompts, the share whose whole reply is identical. At
  temperature 0 a lossless speculative variant answers as no-spec does (vLLM's "Lossless guarantees of
  Speculative Decoding"); batch shape and kernels can flip a near-tie, and the row's note says where the replies
  diverged. A low share on identical prompts is the variant's own doing, never the pairing's;
- text_gain, one row per paired request with an identical prompt: the variant's decode rate on it over no-spec's,
  the text named by its prompt set (table_title) and row (row_label) where the request files record them
  (prompt_set, prompt_row), else by its workload's YAML and its prompt's sha256; text_accept_rate beside it where
  the engine counts drafts per request. The report shows how a gain spreads over a class's texts from them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa

from stackbench.config.speculative import NO_SPEC
from stackbench.results import metrics
from stackbench.results.judged import JUDGED_METRICS
from stackbench.results.metrics import SERVER_SPEC_ACCEPTED, SERVER_SPEC_DRAFTED, M

PAIR = ["node", "stack", "model", "replicate", "key", "repeat", "request", "turn"]
SHOWN_CHARS = 200  # the request files keep the first 200 characters of a reply (measure/client.py to_row)
PROMPTS, REPLIES = M.paired_prompts_identical, M.paired_replies_identical
SALTED_PROMPT = "salted prompt "  # a text's row where its request file names no set and row: its prompt's sha256 follows
# Per request, where the files have them: the text's set and row (measure's request records) and its draft counts.
OPTIONAL = ["decode_tps", "prompt_set", "prompt_row", SERVER_SPEC_DRAFTED, SERVER_SPEC_ACCEPTED]


def launch_requests(part: Path) -> pd.DataFrame:
    """Every closed-loop request a launch's current cells sent (its launch.json names them with their
    fingerprints), with the launch's identity; empty where the files predate the pairing (no prompt_sha)."""
    spec_path = part.parent / "launch.json"
    if not spec_path.exists():
        return pd.DataFrame()
    spec = json.loads(spec_path.read_text())
    launch = spec["launch"]
    frames = []
    for cell in spec["cells"]:
        path = part.parent / "cells" / f"{cell['key']}--{cell['fingerprint']}.requests.parquet"
        if cell["concurrency"] is None or not path.exists():
            continue
        requests = pd.read_parquet(path)
        if "prompt_sha" not in requests or requests.empty:
            continue
        columns = ["repeat", "request", "turn", "status", "prompt_sha", "reply_sha", "content"]
        frames.append(requests[columns + [c for c in OPTIONAL if c in requests]].assign(
            key=cell["key"], workload=cell["workload"], concurrency=cell["concurrency"], power_cap_w=cell["power_cap_w"]))
    if not frames:
        return pd.DataFrame()
    return pd.concat(frames, ignore_index=True).assign(
        node=launch["node"], stack=launch["engine"], model=launch["model"]["name"], replicate=launch["replicate"],
        variant=launch["variant"], spec_method=launch["spec_method"])


def first_difference(a: str, b: str) -> int | None:
    """The first character at which two replies' shown text differs; None where the shown text is the same."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def pairing_rows(requests: pd.DataFrame, results: pd.DataFrame) -> list[dict]:
    """The two pairing rows of each speculative launch's cell (module docstring), on the basis of its judged row."""
    if requests.empty:
        return []
    ok = requests[requests["status"] == "ok"].reindex(columns=[*requests.columns, *(c for c in OPTIONAL if c not in requests)])
    spec, nospec = ok[ok["spec_method"] != NO_SPEC], ok[ok["spec_method"] == NO_SPEC]
    paired = spec.merge(nospec[PAIR + ["prompt_sha", "reply_sha", "content", "variant", "decode_tps"]], on=PAIR,
                        suffixes=("", "_ref"))
    rows = []
    for (_, _, _, variant, replicate, _), cell in paired.groupby(["node", "stack", "model", "variant", "replicate", "key"],
                                                                 sort=True):
        first = cell.iloc[0]
        base = results[(results["node"] == first["node"]) & (results["stack"] == first["stack"]) & (results["model"] == first["model"])
                       & (results["variant"] == variant) & (results["replicate"] == replicate)
                       & (results["workload"] == first["workload"]) & (results["concurrency"] == first["concurrency"])
                       & (results["metric"].isin(JUDGED_METRICS))]
        cap = first["power_cap_w"]  # a cell's rows at its own cap only: an uncapped cell's are the uncapped ones
        base = base[base["power_cap_w"].isna()] if cap is None or pd.isna(cap) else base[base["power_cap_w"] == cap]
        if base.empty:
            continue
        same_prompt = cell["prompt_sha"] == cell["prompt_sha_ref"]
        compared = cell[same_prompt]
        same_reply = compared["reply_sha"] == compared["reply_sha_ref"]
        where = [first_difference(a, b) for a, b in zip(compared.loc[~same_reply, "content"],
                                                          compared.loc[~same_reply, "content_ref"])]
        shown = sorted(w for w in where if w is not None)
        reference = f"{first['variant_ref']} of round {replicate}"
        diverged = ("" if not where else
                    f"; {len(where)} diverged, the earliest at character {shown[0]} of the reply" if shown else
                    f"; {len(where)} diverged after the first {SHOWN_CHARS} characters")
        common = {**base.iloc[0].to_dict(), "value_min": None, "value_max": None, "ci_low": None, "ci_high": None,
                  "mad": None, "repeat_values": None, "spread_over": None, "status": "ok", "reason": None,
                  "stat": "mean", "ttft_included": "no"}
        rows += [{**common, **metrics.row_fields(PROMPTS), "value": float(same_prompt.mean()), "n": len(cell),
                  "note": f"{int(same_prompt.sum())} of {len(cell)} requests sent the same prompt, salt included, as "
                          f"{reference}"},
                 {**common, **metrics.row_fields(REPLIES), "value": float(same_reply.mean()) if len(compared) else None,
                  "n": len(compared),
                  "note": f"{int(same_reply.sum())} of {len(compared)} identical prompts answered identically by "
                          f"{reference}{diverged}"}]
        rows += text_rows(compared, common, reference)
    return rows


def text_name(request) -> tuple[str, str]:
    """(prompt set, row) of a request: as its record names them, else its workload's YAML and its prompt's sha256
    (salt included: a salted prompt is the text where no set names it, so the same prompt under other salts counts
    as other texts, and the scope says salted prompts)."""
    named = request.get("prompt_set")
    if isinstance(named, str) and named:
        return named, str(request.get("prompt_row"))
    return f"{request['workload']}.yaml", SALTED_PROMPT + request["prompt_sha"][:12]


def text_rows(compared: pd.DataFrame, common: dict, reference: str) -> list[dict]:
    """text_gain and text_accept_rate of each request whose prompt was the same as no-spec's (module docstring)."""
    rows = []
    for request in compared.to_dict("records"):
        mine, theirs = request["decode_tps"], request["decode_tps_ref"]
        if not (pd.notna(mine) and pd.notna(theirs) and mine > 0 and theirs > 0):
            continue
        prompt_set, row = text_name(request)
        where = {**common, "table_title": prompt_set, "row_label": row, "n": 1,
                 "col_label": f"repeat {request['repeat']}, conversation {request['request']}, turn {request['turn']}"}
        rows.append({**where, **metrics.row_fields(M.text_gain), "value": float(mine / theirs), "stat": "single",
                     "note": f"decode {mine:.1f} tok/s against {theirs:.1f} on {reference}"})
        drafted, accepted = request[SERVER_SPEC_DRAFTED], request[SERVER_SPEC_ACCEPTED]
        if pd.notna(drafted) and drafted > 0 and pd.notna(accepted):
            rows.append({**where, **metrics.row_fields(M.text_accept_rate), "value": float(accepted / drafted),
                         "n": int(drafted), "stat": "single", "note": f"{accepted:.0f} of {drafted:.0f} drafted tokens accepted"})
    return rows


def pairing_across(part_files, results: pa.Table) -> list[dict]:
    """The pairing rows of every speculative launch among the parts (module docstring)."""
    frames = [launch_requests(Path(part)) for part in part_files]
    frames = [f for f in frames if not f.empty]
    if not frames:
        return []
    requests = pd.concat(frames, ignore_index=True)
    measured = results.select(["metric"]).to_pandas()
    judged = measured[measured["metric"].isin(JUDGED_METRICS)].index
    return pairing_rows(requests, results.take(pa.array(judged)).to_pandas())
