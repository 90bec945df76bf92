"""Result bundles (results/bundle.py, measure/publish.py): a node's run goes out as one file and comes back into a
fresh results set under its own source with the same figures; a changed row or other metric definitions refuse it
by name; a rehearsal stays a rehearsal; regenerate writes a node file from it. Weights provenance
(models/provenance.py): sha256 cached beside the files by size and mtime, never recomputed while they match."""

import io
import json
import tarfile

import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml
from helpers import collect_results

from stackbench.measure import publish
from stackbench.models import provenance
from stackbench.plan import definitions
from stackbench.plan.definitions import DEFINITIONS
from stackbench.results import basis, bundle, store
from stackbench.results.metrics import M

FIGURES = ["value", "value_min", "value_max", "ci_low", "ci_high", "mad", "n", "unit", "stat", "repeat_values"]
KEY = ["node", "stack", "variant", "replicate", "workload", "concurrency", "metric"]


def rows(node="cpu", source="measured", scale=1.0):
    base = dict(source=source, ref=f"{node}/llamacpp--nospec", node=node, stack="llamacpp", variant="nospec", replicate=1,
                spec_method="none", status="ok", model="smollm2-135m-q4km", quant="Q4_K_M", weights_id="0123456789ab",
                engine="llama.cpp", engine_version="b11434", engine_image="none (native build)", gpu="none (CPU: test)",
                gpu_count=0, os="Debian 12", stackbench_version="0.1.0+abc")
    out = []
    for workload, concurrency, decode in (("code", 1, 66.0), ("code", 2, 40.0), ("prose", 1, 70.5)):
        spread = [decode * scale - 1, decode * scale, decode * scale + 1.5]
        cell = {**base, "workload": workload, "concurrency": concurrency, "prompt_tokens": 55, "output_tokens": 64}
        out.append({**cell, "metric": "decode_tps", "value": decode * scale, "value_min": spread[0], "value_max": spread[2],
                    "mad": 1.0, "n": 3, "unit": "tok/s", "stat": "median", "spread_over": "repeats", "repeat_values": spread})
        out.append({**cell, "metric": "aggregate_tps", "value": decode * scale * concurrency * 0.95, "n": 3, "unit": "tok/s",
                    "stat": "median"})
    return out


def part(path, records):
    store.atomic_write_parquet(store.to_table(records), path)
    return str(path)


@pytest.fixture
def published(tmp_path):
    """A measured node ("cpu") collected, with its run folder and config files, and its bundle."""
    root = tmp_path / "owner"
    (root / "configs/nodes").mkdir(parents=True)
    (root / "configs/stacks").mkdir()
    (root / "configs/workloads").mkdir()
    node_doc = {"description": "owner's CPU", "hardware": {"gpu": {"model": "none", "count": 0}, "cpu_threads": 2},
                "workloads": ["code", "prose"], "concurrency": [1, 2], "launches": 3,
                "models": {"smollm2-135m-q4km": {"prepare": "smollm2-q4km", "quant": "Q4_K_M"},
                           "own-model": {"gguf": "/home/owner/own.gguf", "quant": "Q8_0"}},
                "runs": [{"stack": "llamacpp", "model": "smollm2-135m-q4km", "variants": ["nospec"], "repeats": 2}]}
    (root / "configs/nodes/cpu.yaml").write_text(yaml.safe_dump(node_doc))
    (root / "configs/stacks/llamacpp-owner.yaml").write_text("engine: llamacpp\n")
    (root / "configs/workloads/code.yaml").write_text("kind: single\n")
    launch = root / "data/runs/cpu/llamacpp--nospec"
    launch.mkdir(parents=True)
    (launch / "launch.json").write_text(json.dumps({"node": {"file": "configs/nodes/cpu.yaml"},
                                                    "launch": {"stack_config": "llamacpp-owner", "workloads": ["code"]}}))
    (launch / "server_command.json").write_text(json.dumps({"argv": ["llama-server", "-m", "model.gguf", "--port", "8080"]}))
    (launch / "run.json").write_text(json.dumps({"facts": {"gpu": {"driver": "570.1"}}}))
    results = root / "data/results.parquet"
    collect_results([part(tmp_path / "cpu.parquet", rows())], results)
    out = publish.make_bundle("cpu", results, root / "data/runs", root / "data/outgoing", owner="alice", root=root)
    return results, out


def test_round_trip_into_a_fresh_results_set_keeps_every_figure(published, tmp_path):
    theirs, out = published
    fresh = tmp_path / "reader/results.parquet"
    collect_results([part(tmp_path / "mine.parquet", rows(node="mine", scale=1.1))], fresh, bundles=[str(out)])
    got = store.read_results(fresh)
    assert set(got["source"]) == {"measured", "bundle:alice"}
    imported = got[(got["source"] == "bundle:alice") & (got["metric"] != M.bundle_manifest)].sort_values(KEY).reset_index(drop=True)
    original = store.read_results(theirs).sort_values(KEY).reset_index(drop=True)
    assert len(imported) == len(original) == 6
    compared = FIGURES + ["weights_id", "engine_version", "model", "replicate", "spread_over"]
    pd.testing.assert_frame_equal(imported[compared], original[compared], check_dtype=False)  # n: nulls elsewhere make it float
    manifest = got[got["metric"] == M.bundle_manifest].iloc[0]
    assert manifest["status"] == "ok" and manifest["table_title"] == out.name
    assert "weights smollm2-135m-q4km 0123456789ab" in manifest["note"] and "driver 570.1" in manifest["note"]


def test_the_manifest_covers_commands_configs_and_versions(published):
    found = bundle.read(published[1], DEFINITIONS)
    assert found.manifest["commands"] == {"llamacpp--nospec": "llama-server -m model.gguf --port 8080"}
    assert found.manifest["definitions"] == DEFINITIONS and found.manifest["rehearsal"] is False
    assert found.manifest["definitions_sources"] == definitions.sources_sha256()  # the figures' code, normalised
    assert {"config/node.yaml", "config/stacks/llamacpp-owner.yaml", "config/workloads/code.yaml",
            "launches/llamacpp--nospec/launch.json", "rows.parquet"} <= set(found.members)
    assert not any(name.endswith((".gguf", ".safetensors")) for name in found.members)  # no model files
    assert found.manifest["engines"][0]["version"] == "b11434"


def rewrite(path, member, change):
    """The bundle with one member's bytes changed, its manifest kept as it was."""
    with tarfile.open(path) as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar.getmembers()]
    with tarfile.open(path, "w") as tar:
        for info, data in members:
            data = change(data) if info.name == member else data
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_one_changed_row_is_refused_by_name(published, tmp_path):
    out = published[1]

    def doctor(data):
        frame = pq.read_table(io.BytesIO(data)).to_pandas()
        frame.loc[0, "value"] *= 5
        sink = io.BytesIO()
        pq.write_table(store.to_table(frame), sink)
        return sink.getvalue()

    rewrite(out, "rows.parquet", doctor)
    with pytest.raises(bundle.BundleRefused, match=rf"^{out.name}: refused: content does not match its manifest hash \(rows.parquet"):
        bundle.read(out, DEFINITIONS)
    fresh = tmp_path / "reader/results.parquet"
    collect_results([part(tmp_path / "mine.parquet", rows(node="mine"))], fresh, bundles=[str(out)])
    got = store.read_results(fresh)
    refused = got[got["source"] == "bundle:alice"]
    assert refused["metric"].tolist() == [M.bundle_manifest] and refused["status"].tolist() == ["rejected"]
    assert refused["reason"].iloc[0].startswith(f"{out.name}: refused: content does not match")


def test_an_edited_manifest_is_refused(published):
    out = published[1]
    rewrite(out, bundle.MANIFEST, lambda data: data.replace(b'"alice"', b'"mallory"'))
    with pytest.raises(bundle.BundleRefused, match="the manifest was edited"):
        bundle.read(out)


def test_other_metric_definitions_are_refused_with_that_reason(tmp_path):
    out = bundle.write(tmp_path / "old.stackbench.tar", pd.DataFrame(rows()), {},
                       {"owner": "bob", "node": "cpu", "definitions": DEFINITIONS - 1})
    with pytest.raises(bundle.BundleRefused, match=rf"old.stackbench.tar: refused: .*metric definitions {DEFINITIONS - 1}"):
        bundle.read(out, DEFINITIONS)
    assert bundle.read(out).owner == "bob"  # the content itself is intact


def test_a_bundle_carries_its_rows_results_format_and_one_of_a_newer_format_is_refused(published, tmp_path, monkeypatch):
    assert bundle.read(published[1]).manifest["results_format"] == store.FORMAT_VERSION
    monkeypatch.setattr(store, "FORMAT_VERSION", store.FORMAT_VERSION + 1)  # a later stackbench makes it
    out = bundle.write(tmp_path / "new.stackbench.tar", pd.DataFrame(rows()), {},
                       {"owner": "dan", "node": "cpu", "definitions": DEFINITIONS, "stackbench_version": "9.0"})
    monkeypatch.undo()
    with pytest.raises(bundle.BundleRefused, match=rf"^new.stackbench.tar: refused: its rows are in results format "
                       rf"{store.FORMAT_VERSION + 1}, this stackbench reads formats 0, {store.FORMAT_VERSION}: .*\(9.0\)$"):
        bundle.read(out)


def test_a_rehearsals_rows_stay_marked_rehearsal(tmp_path):
    out = bundle.write(tmp_path / "r.stackbench.tar", pd.DataFrame(rows(source="rehearsal")), {},
                       {"owner": "carol", "node": "cpu", "definitions": DEFINITIONS, "rehearsal": True})
    assert set(bundle.read(out).rows["source"]) == {"rehearsal"}
    imported = bundle.import_rows(out, DEFINITIONS)
    assert {r["source"] for r in imported} == {"bundle:carol:rehearsal"}


def test_regenerate_writes_a_node_file_for_this_machine_and_the_commands(published, tmp_path):
    reader = tmp_path / "reader"
    machine = {"hardware": {"gpu": {"model": "none", "count": 0}, "cpu_threads": 4}}
    node_file, commands = publish.regenerate(published[1], root=reader, machine=machine)
    assert node_file == reader / "configs/nodes/cpu-from-alice.yaml"
    doc = yaml.safe_load(node_file.read_text())
    assert doc["runs"] == [{"stack": "llamacpp", "model": "smollm2-135m-q4km", "variants": ["nospec"], "repeats": 2}]
    assert doc["workloads"] == ["code", "prose"] and doc["launches"] == 3 and doc["hardware"]["cpu_threads"] == 4
    assert doc["models"]["smollm2-135m-q4km"] == {"prepare": "smollm2-q4km", "quant": "Q4_K_M"}  # the pipeline makes it
    assert doc["models"]["own-model"]["gguf"].startswith("<path to own-model")
    assert (reader / "configs/stacks/llamacpp-owner.yaml").exists()
    assert any("nodes=[cpu-from-alice]" in c for c in commands) and any("data/bundles" in c for c in commands)


# -- weights provenance ---------------------------------------------------------------------------------------
def test_a_gguf_is_hashed_once_and_read_from_its_cache_while_size_and_mtime_match(tmp_path, monkeypatch):
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF" + bytes(range(256)) * 64)
    first = provenance.provenance(gguf)
    import hashlib

    assert first.sha256 == hashlib.sha256(gguf.read_bytes()).hexdigest() and first.hashed == 1
    cache = json.loads((tmp_path / "model.gguf.weights.json").read_text())
    stat = gguf.stat()
    assert cache["files"][0]["bytes"] == stat.st_size and cache["files"][0]["mtime_ns"] == stat.st_mtime_ns

    def never(path):
        raise AssertionError(f"rehashed {path}")

    monkeypatch.setattr(provenance, "_file_sha256", never)
    second = provenance.provenance(gguf)
    assert second.hashed == 0 and second.weights_id == first.weights_id == first.sha256[:12]
    # A touched file (same size, new mtime) is hashed again.
    monkeypatch.undo()
    import os

    os.utime(gguf, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert provenance.provenance(gguf).hashed == 1


def test_a_hub_snapshot_folder_hashes_its_weight_files_and_records_its_revision(tmp_path):
    snapshot = tmp_path / "models--org--name/snapshots/5f1c2e3d4b5a69788796a5b4c3d2e1f0a9b8c7d6"
    snapshot.mkdir(parents=True)
    (snapshot / "model-00001-of-00002.safetensors").write_bytes(b"a" * 100)
    (snapshot / "model-00002-of-00002.safetensors").write_bytes(b"b" * 100)
    (snapshot / "config.json").write_text("{}")
    found = provenance.provenance(snapshot)
    assert found.kind == "hf" and found.revision == snapshot.name
    assert [f["name"] for f in found.files] == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    assert found.weights_id == f"{found.sha256[:12]}@{snapshot.name[:12]}"
    assert (snapshot.parent / f"{snapshot.name}.weights.json").exists()  # beside the folder, never inside it
    assert provenance.provenance(snapshot).hashed == 0
    assert provenance.weights_id(tmp_path / "missing.gguf") == "unknown"


def test_one_checkpoint_name_over_two_weights_ids_is_a_caveat_other_names_are_not():
    base = {"os": "Ubuntu", "stat": "median", "model": "m"}
    same_name = pd.DataFrame([{**base, "weights_id": "aaa", "row_no": 1}, {**base, "weights_id": "bbb", "row_no": 2}])
    assert [c.field for c in basis.caveats(same_name)] == ["weights_id"]
    other_names = same_name.assign(model=["m", "n"])
    assert [c.field for c in basis.caveats(other_names)] == ["model"]
    unknown = same_name.assign(weights_id=["aaa", "unknown"])
    assert basis.caveats(unknown) == []


def test_the_report_sets_a_bundle_beside_our_rows_and_lists_it_under_bundles(tmp_path):
    from paths import ROOT

    from stackbench.report import render

    theirs = [{**r, "weights_id": "ffff00001111"} for r in rows()]
    out = bundle.write(tmp_path / "cpu.stackbench.tar", pd.DataFrame(theirs), {}, {"owner": "alice", "node": "cpu",
                                                                                   "definitions": DEFINITIONS})
    old = bundle.write(tmp_path / "old.stackbench.tar", pd.DataFrame(rows()), {}, {"owner": "bob", "node": "cpu",
                                                                                 "definitions": DEFINITIONS - 1})
    results = tmp_path / "results.parquet"
    collect_results([part(tmp_path / "mine.parquet", rows(scale=1.1))], results, bundles=[str(out), str(old)])
    render.write_report(results, tmp_path / "reports", ROOT / "data/published")
    text = (tmp_path / "reports/report.md").read_text()
    headline = text[text.index("### Headline on cpu"):text.index("## What to run")]
    assert "| measured | llamacpp | nospec |" in headline and "| bundle:alice | llamacpp | nospec |" in headline
    assert "weights id: row 1 at 0123456789ab, row 2 at ffff00001111" in headline
    section = text[text.index("## Bundles"):text.index("## Full tables")]
    assert "| cpu.stackbench.tar | bundle:alice | cpu | 6 | accepted |" in section
    assert "| old.stackbench.tar | bundle:bob | cpu |  | refused | old.stackbench.tar: refused: its figures were computed " \
           f"under metric definitions {DEFINITIONS - 1}" in section


def test_every_measured_row_of_a_launch_carries_its_weights_id(tmp_path, monkeypatch):
    import dataclasses

    from paths import ROOT

    from stackbench.engines import ADAPTERS
    from stackbench.measure.rows import RowMaker
    from stackbench.plan import expand, launchspec

    monkeypatch.chdir(ROOT)
    cfg, nodes = expand.load_plan(ROOT, {"nodes": ["rtx5090"]})
    node, launch = expand.find_launch(nodes, "rtx5090", "llamacpp--nospec")
    spec = launchspec.build(cfg, node, launch)
    gguf = tmp_path / "served.gguf"
    gguf.write_bytes(b"GGUF weights")
    served = dataclasses.replace(spec, launch=dataclasses.replace(spec.launch, model=dataclasses.replace(spec.launch.model,
                                                                                                       path=str(gguf))))
    maker = RowMaker(served, "run", ADAPTERS["llamacpp"], 1.25)
    assert maker.basis(None)["weights_id"] == provenance.provenance(gguf).weights_id
    assert RowMaker(spec, "run", ADAPTERS["llamacpp"], 1.25).basis(None)["weights_id"] == "unknown"  # not on this machine


def test_regenerating_a_bundle_of_a_node_file_this_checkout_has_runs_that_node_under_its_name(published, tmp_path):
    reader = tmp_path / "reader"
    (reader / "configs/nodes").mkdir(parents=True)
    (reader / "configs/nodes/cpu.yaml").write_bytes(bundle.read(published[1]).members["config/node.yaml"])
    node_file, commands = publish.regenerate(published[1], root=reader, machine={"hardware": {}})
    assert node_file == reader / "configs/nodes/cpu.yaml" and commands[-1].endswith("--config 'nodes=[cpu]'")


def test_bundles_named_in_the_run_config_come_in_beside_the_folders_and_a_missing_one_names_its_field(tmp_path):
    folder = tmp_path / "bundles"
    folder.mkdir()
    (folder / "a.stackbench.tar").write_bytes(b"")
    named = tmp_path / "elsewhere.stackbench.tar"
    named.write_bytes(b"")
    assert bundle.found(folder, [str(named)]) == [folder / "a.stackbench.tar", named]
    with pytest.raises(FileNotFoundError, match=r"bundles\[1\]: no bundle file at .*gone.stackbench.tar"):
        bundle.found(folder, [str(named), str(tmp_path / "gone.stackbench.tar")])
