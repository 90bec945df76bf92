"""A change to how a figure is computed moves every cell's fingerprint: the files that compute the figures
are hashed next to the definitions version (plan/launchspec.py), and this test fails until a change to them
comes with a bump of DEFINITIONS and their new hash."""

import hashlib
import shutil

from paths import ROOT

from stackbench.plan import expand, launchspec

SOURCES = ("src/stackbench/measure/client.py", "src/stackbench/measure/summary.py", "src/stackbench/results/metrics.py",
           "src/stackbench/results/estimators.py", "src/stackbench/measure/clientload.py")


def sources_sha256() -> str:
    digest = hashlib.sha256()
    for path in SOURCES:
        digest.update((ROOT / path).read_bytes())
    return digest.hexdigest()


def test_the_definition_sources_are_the_ones_recorded_with_the_definitions_version():
    now = sources_sha256()
    assert now == launchspec.DEFINITIONS_SOURCES, (
        f"{', '.join(SOURCES)} changed: if a figure is computed differently, bump launchspec.DEFINITIONS "
        f"(now {launchspec.DEFINITIONS}) so cached cells are measured again; either way set "
        f'DEFINITIONS_SOURCES = "{now}"')



def test_a_new_definitions_version_measures_every_cell_again_on_the_same_server(tmp_path, monkeypatch):
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    cfg = expand.load_run_config(tmp_path, {"nodes": ["local-cpu"]})
    node = expand.load_node("local-cpu", cfg, tmp_path)
    spec = launchspec.build(cfg, node, node.launches[0])
    before = {spec.cell_fingerprint(c) for c in spec.cells}
    server = spec.server_fingerprint
    monkeypatch.setattr(launchspec, "DEFINITIONS", launchspec.DEFINITIONS + 1)
    assert {spec.cell_fingerprint(c) for c in spec.cells}.isdisjoint(before)
    assert spec.server_fingerprint == server  # the server itself needs no restart for it
