"""A change to how a figure is computed moves every cell's fingerprint: the code that computes the figures is hashed in
a normalised form next to the definitions version (plan/definitions.py), and this test fails until a change to it is
settled in definitions.lock.json, with a bump of DEFINITIONS where a figure changes."""

import shutil

from paths import ROOT

from stackbench.plan import definitions, expand, launchspec

CLIENT = ROOT / "src/stackbench/measure/client.py"


def test_the_figures_code_is_the_one_locked_with_the_definitions_version():
    now = definitions.sources_sha256()
    assert definitions.locked().get(str(definitions.DEFINITIONS)) == now, (
        f"{', '.join(definitions.SOURCES)} changed: if a figure is computed differently, bump plan/definitions.py "
        f"DEFINITIONS (now {definitions.DEFINITIONS}) so cached cells are measured again; either way run "
        "`python -m stackbench.plan.definitions` to lock the decision")


def test_a_comment_docstring_or_layout_edit_leaves_the_hash_and_a_code_edit_moves_it():
    source = CLIENT.read_text()
    head, _, rest = source.partition('"""\n')  # the module's docstring ends here
    reworded = ("# a comment\n" + head.replace(" the ", " a ") + '"""\n'
                + rest.replace("\n\n", "\n\n\n").replace("BUSY_RETRIES = 3", "BUSY_RETRIES = (  # how often\n        3)"))
    assert reworded != source and definitions.normalised(reworded) == definitions.normalised(source)
    assert definitions.normalised(source.replace("BUSY_RETRIES = 3", "BUSY_RETRIES = 4")) != definitions.normalised(source)


def test_locking_records_the_hash_under_the_current_version_and_keeps_the_others(tmp_path, monkeypatch):
    monkeypatch.setattr(definitions, "LOCK", tmp_path / "definitions.lock.json")
    (tmp_path / "definitions.lock.json").write_text('{"9": "old"}')
    monkeypatch.setattr(definitions, "DEFINITIONS", 11)
    definitions.lock()
    assert definitions.locked() == {"9": "old", "11": definitions.sources_sha256()}


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
