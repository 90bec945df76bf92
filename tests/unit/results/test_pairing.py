"""The pairing check (results/pairing.py) on request records built here (TEST DATA: no engine ran): a variant's
requests against its no-spec launch of the same round, request by request."""

import pandas as pd

from stackbench.results import pairing


def _requests(variant: str, replicate: int, salts: list[str], replies: list[str]) -> pd.DataFrame:
    return pd.DataFrame({
        "node": "n", "stack": "llamacpp", "model": "m", "replicate": replicate, "key": "code--c1--nocap",
        "workload": "code", "concurrency": 1, "power_cap_w": None, "repeat": range(len(salts)), "request": 0,
        "turn": 0, "status": "ok", "prompt_sha": salts, "reply_sha": [r[:16] for r in replies],
        "content": replies, "variant": variant, "spec_method": "none" if variant == "nospec" else "ngram"})


RESULTS = pd.DataFrame([{"node": "n", "stack": "llamacpp", "model": "m", "variant": v, "replicate": k, "workload": "code",
                         "concurrency": 1, "power_cap_w": None, "metric": "decode_tps", "value": 30.0,
                         "source": "measured", "ref": f"n/{v}--r{k}"} for v in ("nospec", "ngram-n8") for k in (1, 2)])


def _rows(requests: pd.DataFrame) -> dict:
    return {(r["metric"], r["replicate"]): r for r in pairing.pairing_rows(requests, RESULTS)}


def test_paired_texts_read_one_and_the_replies_that_diverge_say_where():
    rows = _rows(pd.concat([_requests("nospec", 1, ["a", "b"], ["The cat sat.", "Hello there"]),
                            _requests("ngram-n8", 1, ["a", "b"], ["The cat sat.", "Hello world"])]))
    assert rows[(pairing.PROMPTS, 1)]["value"] == 1.0
    replies = rows[(pairing.REPLIES, 1)]
    assert replies["value"] == 0.5 and replies["n"] == 2
    assert "1 diverged, the earliest at character 6" in replies["note"]


def test_unpaired_texts_are_told_apart_from_diverging_replies():
    rows = _rows(pd.concat([_requests("nospec", 2, ["a", "b"], ["x", "y"]),
                            _requests("ngram-n8", 2, ["a", "c"], ["x", "z"])]))
    assert rows[(pairing.PROMPTS, 2)]["value"] == 0.5
    # only the request with the same prompt is judged on its reply, and it answered identically
    assert rows[(pairing.REPLIES, 2)]["value"] == 1.0 and rows[(pairing.REPLIES, 2)]["n"] == 1


def test_a_variant_pairs_only_with_the_no_spec_of_its_own_round():
    rows = _rows(pd.concat([_requests("nospec", 1, ["a"], ["x"]), _requests("ngram-n8", 2, ["a"], ["x"])]))
    assert rows == {}


def test_first_difference():
    assert pairing.first_difference("abc", "abd") == 2
    assert pairing.first_difference("abc", "abc") is None
    assert pairing.first_difference("ab", "abc") == 2


def test_a_cell_pairs_at_its_own_cap_only_and_its_row_is_that_caps():
    """Issue 60: the capped cell pairs with no-spec's cell at the same cap (the key carries the cap), and an uncapped
    cell's pairing row is built on its uncapped row, never on a capped one listed before it."""
    capped = RESULTS.assign(power_cap_w=400.0, value=20.0)
    results = pd.concat([capped, RESULTS], ignore_index=True)
    at_400 = _requests("ngram-n8", 1, ["a"], ["x"]).assign(key="code--c1--400W", power_cap_w=400.0)
    rows = pairing.pairing_rows(pd.concat([_requests("nospec", 1, ["a"], ["x"]), _requests("ngram-n8", 1, ["a"], ["x"]),
                                           at_400]), results)
    # the 400 W cell has no no-spec at 400 W: no pairing row; the uncapped cell's rows carry no cap
    assert len(rows) == 2 and all(pd.isna(r["power_cap_w"]) for r in rows)


def test_each_paired_text_gets_its_gain_and_acceptance_named_by_its_set_and_row():
    nospec = _requests("nospec", 1, ["a", "b"], ["x", "y"]).assign(decode_tps=[30.0, 30.0])
    ngram = _requests("ngram-n8", 1, ["a", "b"], ["x", "y"]).assign(
        decode_tps=[45.0, 27.0], prompt_set="humaneval", prompt_row=["HumanEval/12", "HumanEval/40"],
        server_spec_drafted_tokens=[40, 0], server_spec_accepted_tokens=[30, 0])
    rows = [r for r in pairing.pairing_rows(pd.concat([nospec, ngram]), RESULTS) if r["metric"].startswith("text_")]
    gains = {r["row_label"]: r for r in rows if r["metric"] == "text_gain"}
    assert gains["HumanEval/12"]["value"] == 1.5 and gains["HumanEval/40"]["value"] == 0.9
    assert {r["table_title"] for r in rows} == {"humaneval"}
    accepted = [r for r in rows if r["metric"] == "text_accept_rate"]  # the text that drafted nothing has no rate
    assert len(accepted) == 1 and accepted[0]["value"] == 0.75 and accepted[0]["row_label"] == "HumanEval/12"


def test_a_text_no_set_names_is_its_workloads_yaml_and_prompt_and_an_unpaired_one_has_no_gain():
    nospec = _requests("nospec", 1, ["a" * 16, "b" * 16], ["x", "y"]).assign(decode_tps=[30.0, 30.0])
    ngram = _requests("ngram-n8", 1, ["a" * 16, "c" * 16], ["x", "y"]).assign(decode_tps=[60.0, 60.0])
    gains = [r for r in pairing.pairing_rows(pd.concat([nospec, ngram]), RESULTS) if r["metric"] == "text_gain"]
    assert [(r["table_title"], r["row_label"], r["value"]) for r in gains] == [("code.yaml", "salted prompt aaaaaaaaaaaa", 2.0)]


def test_a_launchs_request_file_brings_each_requests_set_row_rate_and_draft_counts_where_it_has_them(tmp_path):
    """The request files as measure writes them (cells/<key>--<fingerprint>.requests.parquet): the set and row
    columns are read where a file has them and left empty where it predates them."""
    import json

    part = tmp_path / "llamacpp--ngram-n8" / "part.parquet"
    (part.parent / "cells").mkdir(parents=True)
    launch = {"node": "n", "engine": "llamacpp", "model": {"name": "m"}, "replicate": 1, "variant": "ngram-n8",
              "spec_method": "ngram"}
    cells = [{"key": "code--c1", "fingerprint": "f1", "concurrency": 1, "workload": "code", "power_cap_w": None},
             {"key": "prose--c1", "fingerprint": "f2", "concurrency": 1, "workload": "prose", "power_cap_w": None}]
    (part.parent / "launch.json").write_text(json.dumps({"launch": launch, "cells": cells}))
    base = {"repeat": [0], "request": [0], "turn": [0], "status": ["ok"], "prompt_sha": ["a"], "reply_sha": ["r"],
            "content": ["x"], "decode_tps": [40.0]}
    pd.DataFrame({**base, "prompt_set": ["humaneval"], "prompt_row": ["HumanEval/3"], "server_spec_drafted_tokens": [10],
                  "server_spec_accepted_tokens": [7]}).to_parquet(part.parent / "cells/code--c1--f1.requests.parquet")
    pd.DataFrame(base).to_parquet(part.parent / "cells/prose--c1--f2.requests.parquet")
    got = pairing.launch_requests(part).set_index("workload")
    assert got.loc["code", "prompt_row"] == "HumanEval/3" and got.loc["code", "server_spec_accepted_tokens"] == 7
    assert pd.isna(got.loc["prose", "prompt_set"]) and got.loc["prose", "decode_tps"] == 40.0
