"""The text level shown (issue 66): per-text gains and acceptance (results/pairing.py text_gain, text_accept_rate),
their spread per cell and variant (analysis/levels.py), the scope beside each verdict (report/decisions.py) and the
table and chart (report/pairing.py). TEST DATA: rows built here, no engine ran."""

import math

import pandas as pd

from stackbench.analysis import decide, levels
from stackbench.report import decisions, pairing

CELL = {"node": "n", "stack": "llamacpp", "model": None, "power_cap_w": None, "workload": "code", "concurrency": 1,
        "prompt_tokens": None}


def _text_rows(texts_per_round: dict[int, list[str]], gain_of, accept_of=None, prompt_set="humaneval") -> pd.DataFrame:
    rows = []
    for round_no, texts in texts_per_round.items():
        for text in texts:
            where = {**CELL, "variant": "ngram-n8", "replicate": round_no, "table_title": prompt_set, "row_label": text}
            rows.append({**where, "metric": "text_gain", "value": gain_of(text), "n": 1})
            if accept_of:
                rows.append({**where, "metric": "text_accept_rate", "value": accept_of(text), "n": 40})
    return pd.DataFrame(rows)


NEW = {1: ["HumanEval/1", "HumanEval/2"], 2: ["HumanEval/3", "HumanEval/4"], 3: ["HumanEval/5", "HumanEval/6"]}
GAINS = {"HumanEval/1": 1.30, "HumanEval/2": 1.12, "HumanEval/3": 1.0, "HumanEval/4": 0.90, "HumanEval/5": 1.02,
         "HumanEval/6": 0.80}


def test_the_spread_counts_the_texts_that_pay_and_lose_and_names_the_best_and_worst():
    texts = levels.per_text(_text_rows(NEW, GAINS.get, lambda t: 0.5 if t == "HumanEval/1" else 0.1))
    row = levels.text_spread(texts).iloc[0]
    assert (row["texts"], row["pays"], row["loses"]) == (6, 2, 2)  # +30%, +12% pay; -10%, -20% lose
    assert row["best"] == "humaneval HumanEval/1" and math.isclose(row["best_gain"], 0.30)
    assert row["worst"] == "humaneval HumanEval/6" and math.isclose(row["worst_gain"], -0.20)
    assert math.isclose(row["accept_median"], 0.1)
    assert pairing.spread_sentence(row) == "at least +10% on 2 of 6 texts, below -5% on 2"


def test_a_text_asked_in_every_round_is_one_text_with_the_geometric_mean_of_its_rounds():
    rows = pd.concat([_text_rows({1: ["a"]}, lambda t: 1.21), _text_rows({2: ["a"]}, lambda t: 1.0)])
    texts = levels.per_text(rows)
    assert len(texts) == 1 and texts.iloc[0]["rounds"] == 2 and math.isclose(texts.iloc[0]["gain"], 0.1)
    assert texts["accept_rate"].isna().all()  # no per-request draft counts: the table says per launch only
    table = pairing.spread_table(levels.text_spread(texts), "n")[0]
    assert "per launch only" in table.rows[0][-1]


def test_the_scope_says_the_class_for_new_texts_and_these_texts_for_kept_ones():
    new = levels.scope(_text_rows(NEW, GAINS.get)).iloc[0]["scope"]
    assert new == "covers code: 6 texts of humaneval, 2 a round over 3 rounds"
    kept = levels.scope(_text_rows({k: ["HumanEval/1", "HumanEval/2"] for k in (1, 2, 3)}, GAINS.get)).iloc[0]["scope"]
    assert kept == "covers these 2 texts of humaneval, the same 2 a round over 3 rounds"
    mixed = pd.concat([_text_rows({1: ["a", "b", "c"]}, GAINS.get, prompt_set="HumanEval"),
                       _text_rows({2: ["x"]}, GAINS.get, prompt_set="Arena-Hard coding")])
    assert "4 texts of HumanEval (3) and Arena-Hard coding (1)" in levels.scope(mixed).iloc[0]["scope"]


def _choice(**fields) -> dict:
    base = dict.fromkeys(decide.CHOICE_COLUMNS)
    return {**base, **CELL, "metric": "decode_tps", "verdict": decide.RUN, "run": "ngram-n8", "leading": "ngram-n8",
            "gain": 0.1, "gain_low": 0.02, "gain_high": 0.2, "level": 0.01, "rounds": 3, "decided_at": 3, "why": "",
            "excluded": "", **fields}


def test_each_verdict_says_what_it_covers_beside_it_and_no_column_where_no_text_was_named():
    choices = pd.DataFrame([_choice(), _choice(workload="prose", verdict=decide.NOT_WORTH_IT, run="no-spec")])
    scope = levels.scope(_text_rows(NEW, GAINS.get))
    answer = decisions.answer_tables(choices, ["n"], scope=scope)[0]
    covers = answer.columns.index("covers")
    assert [r[covers] for r in answer.rows] == ["covers code: 6 texts of humaneval, 2 a round over 3 rounds", ""]
    assert any("Covers:" in line for line in answer.legend)
    table = decisions.what_to_run_tables(choices, ["n"], pd.DataFrame(), scope=scope)[0]
    assert table.rows[0][table.columns.index("covers")].startswith("covers code: 6 texts")
    assert "covers" not in decisions.answer_tables(choices, ["n"])[0].columns  # rows collected before the sets


def test_the_chart_sorts_each_cells_texts_by_gain():
    chart = pairing.spread_chart(levels.per_text(_text_rows(NEW, GAINS.get)), "n")
    (trace,) = chart["data"]
    assert trace["y"] == sorted(trace["y"]) and len(trace["y"]) == 6 and trace["text"][0] == "humaneval HumanEval/6"


def test_request_files_that_name_no_set_count_salted_prompts_not_texts():
    rows = _text_rows({1: ["salted prompt 0a1b", "salted prompt 2c3d"], 2: ["salted prompt 4e5f", "salted prompt 6a7b"]},
                      lambda t: 1.0, prompt_set="code.yaml")
    assert levels.scope(rows).iloc[0]["scope"] == "covers code: 4 salted prompts of code.yaml, 2 a round over 2 rounds"


def test_rows_collected_before_replicates_existed_read_as_round_one():
    rows = _text_rows({1: ["a", "b"]}, lambda t: 1.2).assign(replicate=None)
    assert levels.scope(rows).iloc[0]["scope"] == "covers code: 2 texts of humaneval, 2 a round over 1 round"
    assert levels.per_text(rows)["rounds"].tolist() == [1, 1]
