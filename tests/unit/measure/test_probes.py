"""Correctness beside speed, the verdict rules on hand-built probe outputs: agreement with the no-spec
reference token by token (or word by word), loops charged only where the reference does not loop, late flips
within tolerance, and who is compared across stacks. The probes measured against the synthetic engine are
tests/integration/test_probes_served.py; the real llama-server's, tests/integration/test_integration_llamacpp.py."""

from __future__ import annotations

import shutil

import pandas as pd
import pytest
import yaml
from paths import ROOT

from stackbench import analysis
from stackbench.config import ConfigError
from stackbench.measure import correctness
from stackbench.plan import expand
from stackbench.results import agreement


def doc(variant: str, spec_method: str, outputs: dict) -> dict:
    return {"ref": f"n/{variant}@1", "node": "n", "stack": "llamacpp", "variant": variant, "spec_method": spec_method,
            "model": "m", "workload": "probes", "outputs": outputs}


def output(text: str, pieces_are_tokens: bool) -> dict:
    return {"text": text, "pieces": text.split(" "), "completion_tokens": len(text.split(" ")), "pieces_are_tokens": pieces_are_tokens,
            "loops": correctness.is_looping(correctness.repetition_ratio(text))}


def test_identical_outputs_read_as_the_no_spec_reference_and_words_are_said_when_tokens_are_not_known():
    basis = pd.DataFrame([{"ref": "n/draft@1", "workload": "probes", "node": "n", "stack": "llamacpp", "variant": "draft",
                           "spec_method": "draft", "source": "measured", "metric": "smoke_score"}])
    rows = agreement.agreement_rows([doc("nospec", "none", {"p": output("a b c", True)}),
                                  doc("draft", "draft", {"p": output("a b c", False)})], basis)
    by_metric = {r["metric"]: r for r in rows}
    assert by_metric["output_agreement"]["value"] == 1 and by_metric["first_divergence_token"]["value"] is None
    assert by_metric["first_divergence_token"]["unit"] == "words" and "word by word" in by_metric["output_agreement"]["note"]
    verdict = analysis.correctness_by_variant(pd.DataFrame(rows).assign(status="ok", workload="probes", prompt_tokens=None))
    assert verdict.set_index("variant").loc["draft", "outputs"] == "= no-spec" and not verdict["flagged"].any()


def test_a_cells_loop_share_is_reported_for_every_variant_alike_and_is_no_verdict():
    """Seed run: one of three sampled extraction requests of draft-n2 crossed the loop threshold, no-spec's not;
    its greedy probe outputs are no-spec's, word for word. Reported, not charged."""
    rows = pd.DataFrame([{"node": "n", "stack": "llamacpp", "variant": variant, "workload": w, "metric": metric, "value": v,
                          "unit": "ratio", "prompt_tokens": None, "source": "measured", "status": "ok"}
                         for variant, w, metric, v in (("draft-n2", "extraction", "looping", 1 / 3), ("draft-n2", "code", "looping", 0.0),
                                                       ("nospec", "extraction", "looping", 0.0),
                                                       ("draft-n2", "probes", "output_agreement", 1.0),
                                                       ("draft-n2", "probes", "loops_charged", 0.0))])
    verdict = analysis.correctness_by_variant(rows).set_index("variant")
    assert not verdict["flagged"].any()
    assert verdict.loc["draft-n2", "outputs"] == "= no-spec"
    assert verdict.loc["draft-n2", "looping"] == pytest.approx(1 / 3) and verdict.loc["draft-n2", "looping_in"] == "extraction"
    assert verdict.loc["nospec", "looping"] == 0


def test_a_variant_looping_where_its_reference_does_not_on_the_same_prompt_is_charged():
    looped = "again and again " * 20
    basis = pd.DataFrame([{"ref": "n/draft@1", "workload": "probes", "node": "n", "stack": "llamacpp", "variant": "draft",
                           "spec_method": "draft", "source": "measured", "metric": "smoke_score"}])
    reference = {"p1": output("the sky is blue because air scatters short waves more than long ones", True),
                 "p2": output(looped.strip(), True)}
    candidate = {"p1": output(looped.strip(), True), "p2": output(looped.strip(), True)}
    rows = agreement.agreement_rows([doc("nospec", "none", reference), doc("draft", "draft", candidate)], basis)
    charged = next(r for r in rows if r["metric"] == "loops_charged")
    # p2 loops in both, word for word: never charged; p1 loops only with speculation.
    assert charged["value"] == 0.5 and "on p1;" in charged["note"]
    verdict = analysis.correctness_by_variant(pd.DataFrame(rows).assign(status="ok", prompt_tokens=None)).set_index("variant")
    assert verdict.loc["draft", "flagged"]
    assert "loop where no-spec's on the same prompts do not (0.50 of probe prompts)" in verdict.loc["draft", "caveat"]


def test_a_late_greedy_flip_is_reported_within_tolerance_and_an_early_one_is_charged():
    def verdict(agreement, divergence):
        rows = pd.DataFrame([{"node": "n", "stack": "vllm", "variant": "mtp", "workload": "probes", "metric": m, "value": v,
                              "unit": "tokens", "prompt_tokens": None, "source": "measured", "status": "ok"}
                             for m, v in (("output_agreement", agreement), ("first_divergence_token", divergence))])
        return analysis.correctness_by_variant(rows).iloc[0]

    late = verdict(0.93, 40)
    assert not late["flagged"] and late["outputs"] == "differs late at token 40 (agreement 0.93), within tolerance"
    assert verdict(0.95, 3)["flagged"] and verdict(0.6, 30)["flagged"]


def test_a_probe_workload_without_its_probes_is_refused_naming_the_file(tmp_path):
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    (tmp_path / "configs/workloads/probes.yaml").write_text(yaml.safe_dump({"kind": "probe", "prompts": ["Hi."]}))
    with pytest.raises(ConfigError, match=r"configs/workloads/probes.yaml: probes: required with kind probe"):
        expand.load_workload("probes", [1], tmp_path, "test")


def test_launches_without_a_stated_family_or_with_speculation_are_not_compared_across_stacks():
    outputs = {"p": output("a b c", True)}
    docs = [{**doc("nospec", "none", outputs), "ref": "x/nospec@1", "node": "x", "weights": None},
            {**doc("nospec", "none", outputs), "ref": "y/nospec@1", "node": "y", "weights": None},
            {**doc("draft", "draft", outputs), "ref": "z/draft@1", "node": "z", "weights": "F"},
            {**doc("nospec", "none", outputs), "ref": "w/nospec@1", "node": "w", "weights": "F"}]
    basis = pd.DataFrame([{"ref": d["ref"], "workload": "probes", "node": d["node"], "source": "measured"} for d in docs])
    assert agreement.cross_stack_rows(docs, basis) == []
