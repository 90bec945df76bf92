"""The seed posts' figures, stored as data, regenerate the posts' own tables in the posts' own layout."""

import math
import re

import pandas as pd
import pytest
from paths import ROOT

from stackbench.report.layouts import load_layouts
from stackbench.report.seeds import SHOWN_BARE, seed_table
from stackbench.report.table import MISSING
from stackbench.results import published
from stackbench.results.store import BASIS_COLUMNS, COLUMNS


@pytest.fixture(scope="module")
def layouts():
    return load_layouts(ROOT / "data/published")


@pytest.fixture(scope="module")
def stored_order(published_frame):
    """The rows in the order collect stores them (sorted by cell), not the YAML's: layouts must restore the post's order."""
    return published_frame.sort_values(["source", "node", "stack", "variant", "workload", "concurrency", "metric"])


def table(frame, layouts, table_id):
    return seed_table(frame, table_id, layouts.get(table_id))


def cells(t):
    return {row[0]: dict(zip(t.columns[1:], row[1:])) for row in t.rows}


def rows_of(frame, **where):
    hit = frame
    for column, value in where.items():
        hit = hit[hit[column] == value]
    return hit


def test_every_figure_is_transcribed_with_source(published_frame):
    figures = published_frame[~published_frame["metric"].str.startswith("geometry_")]
    assert len(figures) == 179  # the seeds' figures; the geometry rows of their model come from configs/models
    geometry = published_frame[published_frame["metric"].str.startswith("geometry_")]
    assert set(geometry["note"]).pop().startswith("configs/models/qwen3.8-27b.yaml")
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
    c4 = rows_of(published_frame, table_id="s004-mtp-ab", col_label="c4").iloc[0]
    assert (c4["value"], c4["value_min"], c4["value_max"], c4["stat"], c4["n"]) == (366, 358, 377, "median", 3)
    rate = rows_of(published_frame, table_id="s004-mtp-ab", row_label="n=2", metric="accept_rate").iloc[0]
    assert rate["stat"] == "range" and math.isclose(rate["value"], 0.505)


# -- misfits of issue 15: each seed table in its post's own layout -------------------------------------------
def test_seed000_fix_table_has_the_posts_rows_text_cells_and_one_vram_cell(stored_order, layouts):
    t = table(stored_order, layouts, "s000-fix-ab")
    got = cells(t)
    # The post's rows are its metrics: its own columns, not split by unit; each figure carries its row's unit
    # (a token count shown bare).
    assert t.columns == ["指标", "修复前", "修复后", "变化"]
    assert list(got) == ["cell_size", "KV 池 token", "单条输入上限", "127K 单路请求", "短上下文 code", "短上下文 抽取",
                         "短上下文 创作", "双流聚合", "运行显存"]
    assert got["cell_size"] == {"修复前": "163840 B†", "修复后": "32768 B†", "变化": "÷5"}
    assert got["KV 池 token"] == {"修复前": "44913 (kv_pool_tokens)†", "修复后": "211357 (kv_pool_tokens)†", "变化": "×4.71"}
    assert got["单条输入上限"] == {"修复前": "45417 (max_input_tokens)†", "修复后": "211000 (max_input_tokens)†", "变化": "×4.65"}
    # 成功 is the post's text, not the prefill figure of section 6.
    assert got["127K 单路请求"] == {"修复前": "被拒（HTTP 400）", "修复后": "成功", "变化": "—"}
    assert got["短上下文 code"] == {"修复前": "86.1 tok/s†", "修复后": "86.1 tok/s†", "变化": "0"}
    assert got["短上下文 抽取"] == {"修复前": "85.9 tok/s†", "修复后": "85.9 tok/s†", "变化": "0"}
    assert got["短上下文 创作"] == {"修复前": "59.8 tok/s†", "修复后": "59.8 tok/s†", "变化": "0"}
    assert got["双流聚合"] == {"修复前": "170.1 tok/s†", "修复后": "171.8 tok/s†", "变化": "+1%"}
    # One post cell, one table cell: VRAM used and left free together.
    assert got["运行显存"] == {"修复前": "26182 MiB（余 6016）†", "修复后": "30626 MiB（余 1572）†", "变化": "预算用满"}


def test_the_1136_prefill_rate_comes_from_section_6(published_frame):
    rate = rows_of(published_frame, metric="prefill_tps", value=1136.0)
    assert list(rate["ref"]) == ["000_f5f23f880eef9d52.txt §6"] and list(rate["table_id"]) == ["s000-127k"]


def test_seed000_section2_keeps_column_labels_and_the_text_cell(stored_order, layouts):
    t = table(stored_order, layouts, "s000-spec-on-off-pool")
    assert t.columns == ["运行", "KV 池", "128K 请求"]
    got = cells(t)
    assert got["不开投机"] == {"KV 池": "279214†", "128K 请求": "能跑"}
    assert got["开 NEXTN"]["KV 池"] == "44913†"
    assert got["开 NEXTN"]["128K 请求"].startswith("Input length (125837 tokens) exceeds")


def test_seed004_mtp_ab_keeps_the_posts_column_order_and_ratios(stored_order, layouts):
    t = table(stored_order, layouts, "s004-mtp-ab")
    assert t.columns == ["MTP", "c1", "c2", "c3", "c4", "接受率", "λ", "KV tokens", "65K 满上下文并发"]
    got = cells(t)
    assert list(got) == ["n=3", "n=2"]
    assert [got["n=3"][c] for c in ("c1", "c2", "c3", "c4")] == ["100 tok/s", "179 tok/s", "271 tok/s", "—"]
    assert [got["n=2"][c] for c in ("c1", "c2", "c3", "c4")] == ["102 tok/s", "188 tok/s", "276 tok/s",
                                                                 "366 tok/s (358–377)"]
    assert got["n=3"]["接受率"] == "38–39%§" and got["n=2"]["接受率"] == "50–51%§"
    assert got["n=3"]["λ"] == "2.14–2.18§" and got["n=2"]["λ"] == "2.01–2.03§"
    assert got["n=3"]["65K 满上下文并发"] == "2.66×†" and got["n=2"]["65K 满上下文并发"] == "2.81×†"


def test_seed004_generations_table_has_the_posts_four_rows(stored_order, layouts):
    t = table(stored_order, layouts, "s004-generations")
    got = cells(t)
    # Rows are the post's metrics (GiB, a token count, MiB, tok/s): the models' columns stay whole, each figure
    # with its row's unit.
    assert t.columns == ["项目", "Qwen3.6 n=2", "Qwen3.8 n=2"]
    assert list(got) == ["模型加载显存", "KV Cache token 数", "nvidia-smi 稳态占用", "短档聚合吞吐 c1/c2/c3"]
    assert got["模型加载显存"] == {"Qwen3.6 n=2": "18.65 GiB†", "Qwen3.8 n=2": "18.41 GiB†"}
    assert got["KV Cache token 数"] == {"Qwen3.6 n=2": "166931 (kv_pool_tokens)†", "Qwen3.8 n=2": "184242 (kv_pool_tokens)†"}
    assert got["nvidia-smi 稳态占用"] == {"Qwen3.6 n=2": "32108 MiB†", "Qwen3.8 n=2": "31268 MiB†"}
    throughput = got["短档聚合吞吐 c1/c2/c3"]
    assert re.sub("[†‡§]", "", throughput["Qwen3.6 n=2"]) == "101 tok/s / 198 tok/s / 288 tok/s"
    assert throughput["Qwen3.8 n=2"] == "102 tok/s / 188 tok/s / 276 tok/s"
    # The power figures are the post's prose, not a row of this table.
    assert not rows_of(stored_order, table_id="s004-generations", metric="power_w").shape[0]


def test_seed002_opening_table_keeps_the_method_column(stored_order, layouts):
    t = table(stored_order, layouts, "s002-op")
    # 速度 holds tok/s, wall seconds and a per-token ms, one unit per row: the post's one column, each figure
    # in the post's wording with its unit.
    assert t.columns == ["场景", "速度", "测法"]
    got = cells(t)
    assert list(got) == ["常规对话（游记创作）", "中文散文", "工具调用", "多轮 radix 命中", "思考档 medium"]
    assert got["常规对话（游记创作）"] == {"速度": "88 t/s", "测法": "600 tokens 输出计时，3 次取中位"}
    assert got["中文散文"] == {"速度": "178 t/s†", "测法": "2048 tokens 输出"}
    assert got["工具调用"] == {"速度": "3.2–4.2s 完整轮§", "测法": "带 tool schema 的完整往返"}
    assert got["多轮 radix 命中"] == {"速度": "第二轮 2.77s†", "测法": "同前缀第二轮含 300 tokens 输出"}
    assert got["思考档 medium"] == {"速度": "6.1 ms/tok†", "测法": "reasoning_effort 三档实测，medium 是甜点"}


# -- published-basis corrections ------------------------------------------------------------------------------
def test_seed002_88_and_178_are_not_single_stream(published_frame, layouts, stored_order):
    rows = rows_of(published_frame, table_id="s002-op", metric="decode_tps")
    assert rows["concurrency"].isna().all()
    assert any("82-84" in c for c in table(stored_order, layouts, "s002-op").caveats)


def test_seed000_depth_is_not_inherited_where_the_post_does_not_state_it(published_frame):
    short = rows_of(published_frame, table_id="s000-accept-by-context", row_label="short context").iloc[0]
    llamacpp = rows_of(published_frame, table_id="s000-fourway", stack="llamacpp").iloc[0]
    assert pd_isna(short["spec_tokens"]) and pd_isna(llamacpp["spec_tokens"])


def pd_isna(value):
    return value is None or (isinstance(value, float) and math.isnan(value))


def test_seed000_171_8_is_at_an_ambiguous_context(published_frame):
    rows = rows_of(published_frame, metric="aggregate_tps", value=171.8)
    assert len(rows) == 2 and rows["context_len"].isna().all()
    assert rows["note"].str.contains("ambiguous").all()


def test_seed002_repliers_do_not_inherit_the_original_posters_settings(published_frame):
    leon = published_frame[published_frame["table_id"].isin(["s002-power-sweep", "s002-per-content"])]
    assert set(leon["variant"]) == {"mtp"} and leon["spec_tokens"].isna().all() and leon["tp"].isna().all()
    dflash = published_frame[published_frame["table_id"].isin(["s002-dflash2-main", "s002-dflash2-dev507"])]
    assert set(dflash["kv_dtype"]) == {"unknown"} and set(dflash["os"]) == {"unknown"}


def test_seed002_no_power_limit_is_said_not_guessed(stored_order, layouts):
    t = table(stored_order, layouts, "s002-dflash2-dev507")
    assert any("no limit was set" in c for c in t.caveats)
    assert rows_of(stored_order, table_id="s002-dflash2-dev507")["power_cap_w"].isna().all()


def test_seed000_launches_that_differ_have_different_variants(published_frame):
    pools = rows_of(published_frame, metric="kv_pool_tokens")
    assert pools.loc[pools["value"] == 45423, "variant"].iloc[0] != pools.loc[pools["value"] == 44913, "variant"].iloc[0]
    limits = rows_of(published_frame, metric="max_input_tokens")
    assert limits.loc[limits["value"] == 45417, "variant"].iloc[0] != limits.loc[limits["value"] == 60967, "variant"].iloc[0]
    # Within one table the two 44913 pools are one launch and stay one variant.
    assert len(set(pools.loc[pools["value"] == 44913, "variant"])) == 2


def test_figures_worth_adding_are_there(published_frame):
    accept = rows_of(published_frame, table_id="s000-mtp-value").iloc[0]
    assert (accept["value_min"], accept["value_max"], accept["ref"].endswith("§1.2")) == (1.6, 2.0, True)
    assert rows_of(published_frame, metric="model_size_gb", value=17.7).shape[0] == 1
    crash = rows_of(published_frame, table_id="s000-mamba-crash").iloc[0]
    assert crash["status"] == "failed" and "Can not alloc mamba cache" in crash["reason"]


# -- tables that keep the plain derived layout ------------------------------------------------------------------
def test_seed002_power_sweep_matches_the_post(stored_order, layouts):
    t = table(stored_order, layouts, "s002-power-sweep")
    assert [row[:2] for row in t.rows] == [["180 W", "62 tok/s†"], ["220 W", "116 tok/s†"], ["260 W", "162 tok/s†"],
                                               ["300 W", "170 tok/s†"]]
    assert t.caveats == []  # one poster, one basis; the cap is the axis


def test_seed001_stage_table_matches_the_post(stored_order, layouts):
    got = cells(table(stored_order, layouts, "s001-stages"))
    assert list(got) == ["1: BF16 TP4 MTP", "2: FP8 TP4 MTP", "3: FP8 TP2 MTP", "4: FP8 TP2 DFlash2"]
    assert [got[s]["decode"] for s in got] == ["73.4 tok/s†", "109.1 tok/s†", "76.4 tok/s†", "96.1 tok/s†"]
    assert [got[s]["weights per GPU"] for s in got] == ["38 GB†", "7.6 GB†", "15 GB†", ""]
    assert got["3: FP8 TP2 MTP"]["conc8 aggregate"] == "356 tok/s†"
    assert got["4: FP8 TP2 DFlash2"]["conc8 aggregate"] == "227 tok/s†"
    assert got["4: FP8 TP2 DFlash2"]["accept length"] == "3.3–3.6§"


def test_seed000_fourway_caveat_names_what_the_post_warns_about(stored_order, layouts):
    text = " ".join(table(stored_order, layouts, "s000-fourway").caveats)
    assert "OS: row 1 at Windows 11, row 2 at Ubuntu" in text
    assert "context: row 1 at 262144, row 2 unknown" in text
    assert "temperature: row 1 at 0.7, row 2 at 0" in text


def test_a_layout_names_a_table_once(tmp_path):
    text = (ROOT / "data/published/004_14e3323af99a7fa5.yaml").read_text(encoding="utf-8")
    (tmp_path / "004.yaml").write_text(text.replace("table_id: s004-power", "table_id: s004-generations")
                                       .replace("    basis: {spec_tokens: 2, concurrency: null}\n",
                                                "    basis: {spec_tokens: 2, concurrency: null}\n    layout: {columns: [a, b]}\n"),
                                       encoding="utf-8")
    with pytest.raises(published.config.ConfigError, match="has a layout already"):
        load_layouts(tmp_path)


@pytest.mark.parametrize("table_id", ["s000-fix-ab", "s000-fourway", "s001-stages", "s002-power-sweep", "s002-op",
                                      "s003-calculator", "s004-mtp-ab", "s004-per-position", "s004-generations"])
def test_every_published_row_lands_in_exactly_one_cell(stored_order, layouts, table_id):
    rows = stored_order[stored_order["table_id"] == table_id]
    layout = layouts[table_id]
    t = table(stored_order, layouts, table_id)
    first = (layout.columns or ["", *dict.fromkeys(rows["col_label"].dropna()), "value"])[1]
    post_columns = rows["col_label"].fillna(first)
    shown_in = [_shown_in(t, *record) for record in zip(post_columns, rows["unit"], rows["metric"], rows["value"])]
    post_of = {shown: post for shown, post in zip(shown_in, post_columns)}
    placed = set(zip(rows["row_label"], shown_in))
    assert {label for label, _ in placed} <= {row[0] for row in t.rows}
    assert {col for _, col in placed} <= set(t.columns[1:])
    # A cell that shows figures shows every record behind it (text cells are the post's own words), and a cell
    # with none behind it shows none: no figure twice, in another unit's sub-column.
    for row in t.rows:
        for column, text in zip(t.columns[1:], row[1:]):
            behind = rows[(rows["row_label"] == row[0]).to_numpy() & (pd.Series(shown_in) == column).to_numpy()]
            if post_of.get(column, column) in layout.text.get(row[0], {}) or (layout.change or {}).get("column") == column:
                continue
            if not len(behind):
                assert text in ("", MISSING), (row[0], column, text)
            else:
                assert text not in ("", MISSING), (row[0], column, text)
                if row[0] in layout.templates:  # the post's wording holds the figures, its units its own
                    continue
                parts = text.split(" / ")
                assert len(parts) == len(behind), (row[0], column, text)
                if column in post_of.values():  # a whole column (not split by unit): each figure carries its unit
                    for part, unit, metric, value in zip(parts, behind["unit"], behind["metric"], behind["value"]):
                        suffix = _suffix(layout, unit, metric)
                        assert pd_isna(value) or suffix in part, (row[0], column, part, suffix)


def _suffix(layout, unit, metric):
    """What a published figure is written with: the layout's suffix for its metric, or its unit (none shown for
    a ratio, a count or a rescaled figure)."""
    fmt = layout.formats.get(metric, {})
    if fmt.get("suffix") or fmt.get("scale", 1.0) != 1.0 or unit in SHOWN_BARE:
        return fmt.get("suffix", "")
    return f" {unit}"


def _shown_in(t, column, unit, metric, value):
    """The table column a published record shows in: its post's whole column where the table keeps it whole (a
    column of one unit, or a table whose rows are its metrics), else the sub-column titled with the record's
    unit (one shown bare, a ratio or count, by its metric); a record without a figure (a text cell's) in the first."""
    split = [c for c in t.columns[1:] if c.startswith(f"{column} (")]
    if not split:
        return column
    if pd_isna(value):
        return split[0]
    titled = [c for c in (f"{column} ({unit})", f"{column} ({metric})") if c in split]
    assert len(titled) == 1, (column, unit, metric, split)
    return titled[0]


def test_a_layout_text_cell_in_an_unknown_column_is_an_error(tmp_path):
    text = (ROOT / "data/published/000_f5f23f880eef9d52.yaml").read_text(encoding="utf-8")
    (tmp_path / "000.yaml").write_text(text.replace("不开投机: {128K 请求: 能跑}", "不开投机: {128K请求: 能跑}"), encoding="utf-8")
    with pytest.raises(published.config.ConfigError, match=r"table s000-spec-on-off-pool: layout.text.不开投机: column '128K请求'"):
        load_layouts(tmp_path)
