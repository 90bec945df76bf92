"""Your row beside theirs: a node measured with a post's method (a seed-<NNN>-<what> workload) appears in
that post's regenerated tables, its headline reads that method's cells, and its ladder and Pareto charts are
drawn. All rows here are hand-built test data, not measurements."""

import shutil

import pandas as pd
import pytest
from paths import ROOT

from stackbench.cli import published_records
from stackbench.report import render
from stackbench.report.layouts import METHOD_DEFAULT, load_layouts
from stackbench.report.seeds import OTHER_LAUNCHES, seed_table
from stackbench.results import basis, published, store

NODE = "test-gpu"


def launch(variant: str = "mtp-n2", prompt: int = 407, **extra) -> dict:
    return dict(source="measured", ref=f"run-{variant}", node=NODE, stack="vllm", variant=variant,
                spec_method="mtp" if variant.startswith("mtp") else "none",
                spec_tokens=int(variant[-1]) if variant.startswith("mtp") else None, status="ok", stat="median", n=3,
                os="Debian 13", engine="vLLM", engine_version="v0.11.0", thinking="off", model="lyf/Qwen3.8-27B-Heretic-ARA-NVFP4-MTP-VL",
                quant="NVFP4 (compressed-tensors)", kv_dtype="fp8", context_len=65536, temperature=0.0,
                ttft_included="no", gpu="RTX 4090 24GB", gpu_count=1, tp=1, _prompt=prompt, **extra)


def method_rows(variant: str = "mtp-n2", prompt: int = 407) -> list[dict]:
    """seed-004-short on one launch: ~400 prompt tokens measured as `prompt`, 512 output, c1-c4, greedy."""
    base = launch(variant, prompt)
    prompt = base.pop("_prompt")
    rows = []
    for c in (1, 2, 3, 4):
        cell = dict(base, workload="seed-004-short", concurrency=c, prompt_tokens=prompt, output_tokens=512)
        rows += [dict(cell, metric="aggregate_tps", value=90.0 * c, unit="tok/s"),
                 dict(cell, metric="decode_tps", value=95.0 - c, unit="tok/s")]
    rows += [dict(base, workload="seed-004-short", concurrency=1, prompt_tokens=prompt, output_tokens=512,
                  metric="accept_len", value=2.05, unit="ratio"),
             dict(base, metric="kv_pool_tokens", value=120000, unit="tokens", stat="single")]
    # Another workload on the same launch: the headline must not read it once the method ran.
    rows.append(dict(base, workload="code", concurrency=1, prompt_tokens=40, output_tokens=64, metric="decode_tps",
                     value=300.0, unit="tok/s"))
    return rows


def ladder_rows(variant: str = "mtp-n2") -> list[dict]:
    """One launch at c1 over four prompt lengths of one workload: a context ladder."""
    base = launch(variant)
    base.pop("_prompt")
    rows = []
    for prompt in (1000, 8000, 32000, 128000):
        cell = dict(base, workload="seed-000-128k", concurrency=1, prompt_tokens=prompt, output_tokens=256)
        rows += [dict(cell, metric="prefill_tps", value=2000.0 - prompt / 100, unit="tok/s"),
                 dict(cell, metric="decode_tps", value=90.0 - prompt / 2000, unit="tok/s")]
    return rows


def write(tmp_path, measured: list[dict], published_dir=ROOT / "data/published"):
    """Published rows plus `measured` in a results file, and the report rendered from it."""
    table = store.to_table(pd.DataFrame(published_records(published_dir, ROOT) + measured))
    path = tmp_path / "results.parquet"
    store.atomic_write_parquet(table, path)
    out = tmp_path / "reports"
    render.write_report(path, out, published_dir)
    return out


@pytest.fixture(scope="module")
def beside(tmp_path_factory):
    return write(tmp_path_factory.mktemp("beside"), method_rows() + method_rows("nospec") + ladder_rows())


@pytest.fixture(scope="module")
def post_004(tmp_path_factory):
    """data/published with post 004 alone (seed-004-short's post): a test that reads only 004's tables renders
    its report in less than half the time of all five posts'. `beside` keeps all five."""
    folder = tmp_path_factory.mktemp("published-004")
    for path in (ROOT / "data/published").glob("004_*.yaml"):
        shutil.copy(path, folder)
    return folder


def table_lines(reports, table_id):
    return (reports / "tables" / f"{table_id}.md").read_text(encoding="utf-8").splitlines()


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def caveat_fields(lines: list[str]) -> set[str]:
    return {line[2:].split(":")[0] for line in lines if line.startswith("- ")}


def test_a_node_measured_with_the_method_stands_beside_the_post(beside):
    lines = table_lines(beside, "s004-mtp-ab")
    mine = [line for line in lines if f"{NODE}, same method" in line]
    assert len(mine) == 1  # one row per launch that is the post rows' own (stack, method, depth)
    # The no-spec launch ran the workload too: in the block under the table, titled so, never "same method".
    block = [cells(line)[0] for line in lines if line.startswith("|")]
    at = block.index(OTHER_LAUNCHES)
    assert block[at + 1:] == [f"{NODE}, same workload, other launch (vllm / nospec; 407 prompt / 512 output tokens)"]
    row = dict(zip(cells(lines[4]), cells(next(line for line in mine if "mtp-n2" in line))))
    assert "407 prompt / 512 output tokens" in row["MTP"]  # its exact length
    assert (row["c1"], row["c2"], row["c3"], row["c4"]) == ("90 tok/s", "180 tok/s", "270 tok/s", "360 tok/s")  # with units
    assert row["λ"] == "2.05" and row["KV tokens"] == "120000†"
    assert any("same method: measured with seed-004-short" in line for line in lines)  # the source line
    fields = caveat_fields(lines)
    assert {"gpu", "engine version"} <= fields
    # thinking: the post states it off, as the method sends it; engine: one spelling (the engine's own, vLLM)
    for same in ("prompt tokens", "output tokens", "temperature", "thinking", "concurrency", "engine"):
        assert same not in fields, (same, fields)


def test_a_length_outside_the_tolerance_is_a_caveat(tmp_path, post_004):
    far = round(400 * (1 + basis.LENGTH_TOLERANCE) + 20)
    lines = table_lines(write(tmp_path, method_rows(prompt=far), post_004), "s004-mtp-ab")
    caveats = [line for line in lines if line.startswith("- prompt tokens:")]
    assert caveats and f"at {far}" in caveats[0] and "at 400" in caveats[0]


def test_tables_without_a_method_get_no_measured_rows(beside):
    assert not any("same method" in line for line in table_lines(beside, "s004-vram"))


def test_the_headline_reads_the_method_and_says_so(beside):
    lines = table_lines(beside, f"headline-{NODE}")
    row = dict(zip(cells(lines[4]), cells(next(line for line in lines if line.startswith("| measured | vllm | mtp-n2")))))
    assert row["decode tok/s"] == "94"  # seed-004-short at c1, not the code workload's 300
    assert "seed-004-short" in lines[2]  # "Source: ..." names the method


def test_ladder_and_pareto_charts_are_drawn_for_such_a_node_only(beside, tmp_path, post_004):
    page = (beside / "index.html").read_text(encoding="utf-8")
    assert f"Context ladder on {NODE}: seed-000-128k" in page
    assert f"Throughput per stream against aggregate on {NODE}: seed-004-short" in page
    assert "Context ladder on rtx5090" not in page and "against aggregate on rtx5090" not in page  # no such cells
    plain = write(tmp_path, [r for r in method_rows() if r.get("workload") != "seed-004-short"], post_004)
    page = (plain / "index.html").read_text(encoding="utf-8")
    assert "Context ladder on" not in page and "Throughput per stream against aggregate on" not in page


def test_one_rule_says_which_post_a_ref_belongs_to():
    ref = published.ref_of("004_14e3323af99a7fa5.txt", "MTP n=2 和 n=3 A/B")
    assert published.post_of(ref) == "004" and published.section_of(ref) == "MTP n=2 和 n=3 A/B"
    assert published.post_of("run-20261201") == "" and published.method_post("seed-004-short") == "004"


def test_a_method_that_is_not_a_method_workload_is_a_config_error(tmp_path):
    from stackbench import config

    text = (ROOT / "data/published/004_14e3323af99a7fa5.yaml").read_text(encoding="utf-8")
    bad = tmp_path / "004_14e3323af99a7fa5.yaml"
    bad.write_text(text.replace("method: seed-004-short", "method: short", 1), encoding="utf-8")
    with pytest.raises(config.ConfigError, match="method"):
        published.load_file(bad, ROOT)


def test_the_method_default_comes_from_the_schema():
    layouts = load_layouts(ROOT / "data/published")
    assert METHOD_DEFAULT is None and layouts["s004-192k-profile"].method == []
    assert layouts["s004-mtp-ab"].method == ["seed-004-short"]


def test_a_capped_sweep_shows_one_cap_beside_the_post(tmp_path, post_004):
    """The method run at two caps (both applied: the GPU read them back) on one launch: its row shows the uncapped cells, one figure per column."""
    capped = [dict(r, power_cap_w=300.0, power_cap_enforced_w=300.0, value=r["value"] / 2)
              for r in method_rows() if r.get("workload") == "seed-004-short"]
    lines = table_lines(write(tmp_path, method_rows() + capped, post_004), "s004-mtp-ab")
    row = dict(zip(cells(lines[4]), cells(next(line for line in lines if f"{NODE}, same method" in line))))
    assert row["c1"] == "90 tok/s" and row["c4"] == "360 tok/s"


def test_an_aggregate_the_post_formed_from_decode_rates_is_matched_with_the_measured_decode_sum():
    """s000-fourway's 171.8 is 1.1's 双流聚合, 90.9 + 80.9 (aggregate: decode_sum): the same-method entry under
    its row shows the measured aggregate_decode_tps, never the wall aggregate, and says so."""
    from stackbench.report import layouts

    records = pd.DataFrame(published_records(ROOT / "data/published", ROOT))
    layout = layouts.load_layouts(ROOT / "data/published")["s000-fourway"]
    assert layout.aggregate == "decode_sum" and layout.method_rows == {"4: SGLang + MTP": "seed-000-short-code"}
    rows = []
    for base in (dict(launch("mtp-n3"), stack="sglang"), launch("nospec")):  # the post row's stack/method/depth, and not
        base.pop("_prompt")
        cell = dict(base, workload="seed-000-short-code", concurrency=2, prompt_tokens=30, output_tokens=512, unit="tok/s")
        rows += [dict(cell, metric="aggregate_tps", value=150.0), dict(cell, metric="aggregate_decode_tps", value=171.0)]
    table = seed_table(records, "s000-fourway", layout, store.to_table(pd.DataFrame(rows)).to_pandas())
    (row,) = [r for r in table.rows if "same method" in r[0]]
    assert row[0].startswith("4: SGLang + MTP · test-gpu, same method (sglang / mtp-n3")  # under the post row it reproduces
    assert "171 tok/s" in row[1:] and not any("150" in c for c in row[1:])
    labels = [r[0] for r in table.rows]
    # Another stack's launch never stands under the SGLang row's label (issue 47): the table has no vLLM row, so
    # it stands under its workload's name.
    assert labels[labels.index(OTHER_LAUNCHES) + 1:] == [
        "seed-000-short-code · test-gpu, same workload, other launch (vllm / nospec; 30 prompt / 512 output tokens)"]
    assert any("sum of its streams' decode rates" in c for c in table.caveats)
