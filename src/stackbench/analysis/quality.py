"""Quality in the verdict: the served models (node, stack, variant) whose divergence from the node's quality
reference is beyond the node's quality_limit (results/divergence.py writes a `quality_beyond_limit` row per
launch measured against the reference, 1 beyond, with the reason in its note)."""

from __future__ import annotations

import pandas as pd

from stackbench.results.metrics import M
from stackbench.results.store import MEASURED

VARIANT = ["node", "stack", "variant"]


def beyond_limit(results: pd.DataFrame, node_limits: dict[str, dict] | None = None) -> pd.DataFrame:
    """One row per variant beyond its node's quality limit: node, stack, variant and reason ("mean KLD 0.21 above
    the node's limit 0.1 from <reference>"). The limits are those the rows carry (the node file's quality_limit
    when the launch was measured), or `node_limits` ({node: {mean_kld, same_top_token}}) where given, judged
    again on the rows' mean_kld and same_top_token; a variant with several launches is judged on its worst."""
    rows = results[results["source"].isin(MEASURED) & (results["status"] == "ok")]
    if node_limits is None:
        hit = rows[(rows["metric"] == M.quality_beyond_limit) & (rows["value"] > 0)]
        found = hit.assign(reason=hit["note"].str.split("; ").str[0] + " from " + hit["row_label"].fillna("the reference"))
    else:
        figures = rows[rows["metric"].isin([M.mean_kld, M.same_top_token]) & rows["node"].isin(list(node_limits))]
        reasons = []
        for record in figures.itertuples(index=False):
            limit = (node_limits.get(record.node) or {}).get(record.metric)
            worse = limit is not None and (record.value > limit if record.metric == M.mean_kld else record.value < limit)
            if worse:
                words = "mean KLD" if record.metric == M.mean_kld else "same top token"
                side = "above" if record.metric == M.mean_kld else "under"
                reasons.append({"node": record.node, "stack": record.stack, "variant": record.variant,
                                "reason": f"{words} {record.value:.3g} {side} the node's limit {limit:g} from {record.row_label}"})
        found = pd.DataFrame(reasons, columns=[*VARIANT, "reason"])
    if found.empty:
        return pd.DataFrame(columns=[*VARIANT, "reason"])
    joined = found.groupby(VARIANT, sort=True)["reason"].agg(lambda r: "; ".join(dict.fromkeys(r)))
    return joined.reset_index()
