"""The speculative-decoding methods a stack variant may name (`spec.method`), one entry each: the stack and
published schemas' enums are checked against this table (tests/unit/plan/test_speculative_methods.py), the
plan reads which methods run a second model, and each engine adapter maps every method to its engine's own
name for it (llama.cpp --spec-type, SGLang --speculative-algorithm, vLLM's speculative_config method).
"""

from __future__ import annotations

from dataclasses import dataclass

# The no-spec baseline: the method of a variant that runs no speculative decoding, which every speculative variant
# of a round is paired with and judged against (rows' `spec_method`; Launch.speculates).
NO_SPEC = "none"


@dataclass(frozen=True)
class SpecMethod:
    name: str
    # A run's draft_model: "needs" one (cannot start without it: SGLang DFLASH "requires setting
    # --speculative-draft-model-path"), "takes" one (eagle and mtp use the target's own head unless the run
    # names one), or "none" (ngram drafts from the prompt and takes no model).
    draft_model: str


SPEC_METHODS = {method.name: method for method in (
    SpecMethod(NO_SPEC, "none"),
    SpecMethod("mtp", "takes"),
    SpecMethod("eagle", "takes"),
    SpecMethod("dflash", "needs"),
    SpecMethod("dspark", "takes"),
    SpecMethod("ngram", "none"),
    SpecMethod("draft", "needs"),
)}
NEEDS_DRAFT_MODEL = tuple(m.name for m in SPEC_METHODS.values() if m.draft_model == "needs")
TAKES_DRAFT_MODEL = tuple(m.name for m in SPEC_METHODS.values() if m.draft_model in ("needs", "takes"))
