"""The seed posts' figures, stored as data, regenerate the posts' own tables cell by cell."""

import math

import pytest

from stackbench.report import tables
from stackbench.store import BASIS_COLUMNS, COLUMNS


def cells(table):
    return {row[0]: dict(zip(table.columns[1:], row[1:])) for row in table.rows}


def test_every_figure_is_transcribed_with_source(published_frame):
    assert len(published_frame) == 172
    assert set(published_frame["source"]) == {"published"}
    assert published_frame["ref"].str.match(r"^00[0-4]_[0-9a-f]+\.txt §").all()
    assert set(published_frame.columns) >= set(COLUMNS)


def test_unstated_basis_is_unknown_never_guessed(published_frame):
    seed000 = published_frame[published_frame["ref"].str.startswith("000_")]
    # The post never names its GPU or the engine version.
    assert set(seed000["gpu"]) == {"unknown"}
    assert set(seed000["engine_version"]) == {"unknown"}
    # A text basis field is never empty: it holds a value or the word unknown.
    text_basis = [c for c in BASIS_COLUMNS if published_frame[c].dtype == object]
    assert not published_frame[text_basis].isna().any().any()


def test_ranges_keep_both_ends(published_frame):
    c4 = published_frame[(published_frame["table_id"] == "s004-mtp-ab") & (published_frame["col_label"] == "c4")].iloc[0]
    assert (c4["value"], c4["value_min"], c4["value_max"], c4["stat"], c4["n"]) == (366, 358, 377, "median", 3)
    rate = published_frame[(published_frame["table_id"] == "s004-mtp-ab") & (published_frame["row_label"] == "n=2")
                           & (published_frame["metric"] == "accept_rate")].iloc[0]
    assert rate["stat"] == "range" and math.isclose(rate["value"], 0.505)


def test_seed000_fix_table_matches_the_post(published_frame):
    table = tables.seed_table(published_frame, "s000-fix-ab")
    got = cells(table)
    assert table.columns == ["", "before", "after", "change"]
    assert got["cell_size"] == {"before": "163840†", "after": "32768†", "change": "÷5"}
    assert got["KV pool tokens"] == {"before": "44913†", "after": "211357†", "change": "×4.71"}
    assert got["max input tokens"]["change"] == "×4.65"
    assert got["127K single request"]["before"] == "rejected"
    assert got["short-context code"] == {"before": "86.1†", "after": "86.1†", "change": "0"}
    assert got["short-context extraction"]["after"] == "85.9†"
    assert got["short-context prose"]["after"] == "59.8†"
    assert got["two-stream aggregate"] == {"before": "170.1†", "after": "171.8†", "change": "+1%"}
    assert got["running VRAM"]["before"] == "26182†" and got["running VRAM"]["after"] == "30626†"
    assert got["VRAM left free"]["before"] == "6016†" and got["VRAM left free"]["after"] == "1572†"


def test_seed004_mtp_ab_matches_the_post(published_frame):
    got = cells(tables.seed_table(published_frame, "s004-mtp-ab"))
    assert [got["n=3"][c] for c in ("c1", "c2", "c3", "c4")] == ["100", "179", "271", ""]
    assert [got["n=2"][c] for c in ("c1", "c2", "c3", "c4")] == ["102", "188", "276", "366 (358–377)"]
    assert got["n=3"]["accept rate"] == "0.38–0.39§" and got["n=2"]["accept rate"] == "0.5–0.51§"
    assert got["n=3"]["λ"] == "2.14–2.18§" and got["n=2"]["λ"] == "2.01–2.03§"
    assert got["n=3"]["KV tokens"] == "174372†" and got["n=2"]["KV tokens"] == "184242†"


def test_seed002_power_sweep_matches_the_post(published_frame):
    table = tables.seed_table(published_frame, "s002-power-sweep")
    assert [row[:2] for row in table.rows] == [["180 W", "62†"], ["220 W", "116†"], ["260 W", "162†"], ["300 W", "170†"]]
    assert table.caveats == []  # one poster, one basis; the cap is the axis


def test_seed001_stage_table_matches_the_post(published_frame):
    got = cells(tables.seed_table(published_frame, "s001-stages"))
    assert [got[s]["decode"] for s in got] == ["73.4†", "109.1†", "76.4†", "96.1†"]
    assert got["3: FP8 TP2 MTP"]["conc8 aggregate"] == "356†" and got["4: FP8 TP2 DFlash2"]["conc8 aggregate"] == "227†"
    assert got["4: FP8 TP2 DFlash2"]["accept length"] == "3.3–3.6§"


def test_seed000_fourway_caveat_names_what_the_post_warns_about(published_frame):
    text = " ".join(tables.seed_table(published_frame, "s000-fourway").caveats)
    assert "OS: row 1 at Windows 11, row 2 at Ubuntu" in text
    assert "context: row 1 at 262144, row 2 at 32768" in text
    assert "temperature: row 1 at 0.7, row 2 at 0" in text


@pytest.mark.parametrize("table_id", ["s000-fix-ab", "s000-fourway", "s001-stages", "s002-power-sweep",
                                      "s003-calculator", "s004-mtp-ab", "s004-per-position", "s004-generations"])
def test_every_published_row_lands_in_exactly_one_cell(published_frame, table_id):
    rows = published_frame[published_frame["table_id"] == table_id]
    table = tables.seed_table(published_frame, table_id)
    value_columns = [i for i, c in enumerate(table.columns) if i > 0 and c != "change"]
    shown = sum(len(row[i].split(" / ")) for row in table.rows for i in value_columns if row[i])
    assert shown == len(rows)
