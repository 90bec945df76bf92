"""The stand-in's pace fitted to the seed posts where a post measured the same stack, speculative method and
shape (issue 47): per (engine, speculative method), the share of the bandwidth roofline one verification step
reaches and the acceptance of each draft position given the ones before it. Other launches keep the stand-in's
stated shape (standin.ROOFLINE_SHARE, rehearsal.accept_rate). Plain data: the stand-in (standin.Pace, through
launcher.py) and the rehearsal's report (report/budget.py, post against model) both read it.

The fit, on the rtx5090 node's own roofline (bandwidth 1792 GB/s over the checkpoint's bytes, rehearsal
launcher.engine_facts: 124.9 steps/s for the INT4, 118.0 for the NVFP4):
- SGLang EAGLE 3/1/4 (NEXTN, spec_method mtp), seed 000 section 1.1, short code at c1: 86.1 tok/s at accept
  length 3.56 (section 6's control): 24.2 verify steps/s = 0.194 of the roofline; 1 + p + p^2 + p^3 = 3.56
  gives p = 0.926;
- vLLM MTP, seed 004's short profile at c1: n=2 102 tok/s at lambda 2.01-2.03, n=3 100 tok/s at 2.14-2.18:
  50.5 and 46.3 steps/s = 0.428 and 0.392 of the roofline (mean 0.41); p = 0.627 and 0.595 (mean 0.61).
- prefill (every launch: a prompt is prefilled once, drafts or not), seed 000's SGLang without speculation on
  the RTX 5090 (section 8): a 17.9K-token prefix cold in 10.2 s (1,755 tok/s) and 1,199 tok/s at 123K. The
  stand-in's shape, a short rate s over (1 + n / (2 A)) for an n-token prompt (standin.prefill_s), through both
  points gives A = 104,000 tokens and s = 1,905 tok/s, the top of the post's own 1,680-1,915 tok/s; s is
  PREFILL_SHARE = 0.49 of the compute roofline, 209.5 TFLOPS of BF16 (the INT4 weights are unpacked to 16-bit
  math) over 2 x 27e9 flops a token (standin.prefill_roofline_tps). Seed 000's speculative 128,180-token prefill,
  1,136 tok/s, is 4% under the fit (1,180). Other GPUs and TP sizes take the share as a shape on their own
  roofline (host/boards.py TENSOR_TFLOPS); seed 001's 1,655-token cold TTFT on 4x RTX A6000 (0.6-1.2 s, stage
  not stated) reads slower than that roofline's 0.3 s at TP 4, whose prefill all-reduces over PCIe are not modeled.
Not fitted, shown against the model in the report: acceptance falling with context (seed 000's 1.68 at 128K;
the stand-in's acceptance does not depend on context) and every launch without speculation (no seed post
measured one on these flags).
"""

from __future__ import annotations

from stackbench.results.metrics import M

# A short prompt's prefill: this share of the compute roofline, each position c costing 1 + c / PREFILL_ATTENTION_TOKENS
# times a short prompt's (the fit above).
PREFILL_SHARE = 0.49
PREFILL_ATTENTION_TOKENS = 104_000
# (engine label as the rows and adapters write it, spec_method) -> (step share of the roofline, acceptance)
FITTED = {("SGLang", "mtp"): (0.194, 0.926), ("SGLang", "eagle"): (0.194, 0.926), ("vLLM", "mtp"): (0.41, 0.61)}

# The posts' figures the fit and the report compare: (engine label, spec_method, spec_tokens, workload, concurrency,
# metric, post value, unit, source). spec_tokens None: any depth.
POINTS = [
    ("SGLang", "mtp", 3, "seed-000-short-code", 1, M.decode_tps, 86.1, "tok/s", "seed 000 §1.1 短上下文 code (fitted)"),
    ("SGLang", "mtp", 3, "seed-000-short-code", 1, M.accept_len, 3.56, "", "seed 000 §6 control, code (fitted)"),
    ("SGLang", "mtp", 3, "seed-000-128k", 1, M.decode_tps, 31.5, "tok/s", "seed 000 §6 decode at 128K (not fitted)"),
    ("SGLang", "mtp", 3, "seed-000-128k", 1, M.accept_len, 1.68, "", "seed 000 §6 accept length at 128K (not fitted)"),
    ("vLLM", "mtp", 2, "seed-004-short", 1, M.decode_tps, 102.0, "tok/s", "seed 004 MTP A/B, n=2 c1 (fitted)"),
    ("vLLM", "mtp", 3, "seed-004-short", 1, M.decode_tps, 100.0, "tok/s", "seed 004 MTP A/B, n=3 c1 (fitted)"),
    ("vLLM", "mtp", 2, "seed-004-short", 1, M.tpot_ms, 9.9, "ms", "seed 004 TPOT n=2, 9.5-10.3 ms (midpoint)"),
]


# A speculative method no post measured on an engine is priced on the basis of the post that measured that method
# on another: SGLang's fit (seed 000, 3 drafts a step: 1 + p + p^2 + p^3 = 3.56), its acceptance, and its verify
# step's cost per draft: a step of k drafts costs 1 + k x DRAFT_COST plain steps, DRAFT_COST from SGLang's step
# share against a plain step's (standin.ROOFLINE_SHARE 0.7 / 0.194 = 3.61 plain steps for 3 drafts: 0.87 a draft).
# So llama.cpp's MTP reads the speed-up SGLang's reads at the same acceptance and depth (issue 67: priced at a plain
# step's share and the rehearsal's acceptance, llama.cpp MTP-n3 read 181 against no-spec's 76.2 tok/s, 2.4x, beside
# SGLang's +13%). The rehearsal's report says which launches are priced so (launcher.py facts' priced_as).
METHOD_BASIS = {"mtp": ("SGLang", "mtp"), "eagle": ("SGLang", "eagle")}
BASIS_DRAFTS = 3
# A plain decode step reaches this share of the bandwidth roofline (weights read once per step): a shape, not a figure;
# the stand-in's ROOFLINE_SHARE.
PLAIN_STEP_SHARE = 0.7
DRAFT_COST = (PLAIN_STEP_SHARE / FITTED[("SGLang", "mtp")][0] - 1) / BASIS_DRAFTS


def fitted(engine_label: str, spec_method: str) -> tuple[float, float] | None:
    """(step share, acceptance) fitted to a post for this engine (its label: Adapter.engine_label) and method;
    None where no post measured it."""
    return FITTED.get((engine_label, spec_method))


def priced(engine_label: str, spec_method: str, drafts: int | None = None) -> tuple[float, float, bool, str] | None:
    """(step share, acceptance, whether fitted to this engine, the basis in words) a speculative launch of `drafts`
    drafts a step is paced at: its own fit, else the method's basis on another engine (METHOD_BASIS: its acceptance,
    its cost per draft); None where neither exists."""
    own = fitted(engine_label, spec_method)
    if own:
        return (*own, True, f"fitted to {engine_label} {spec_method} (rehearsal/calibration.py FITTED)")
    basis = METHOD_BASIS.get(spec_method)
    if basis is None:
        return None
    depth = drafts or BASIS_DRAFTS
    share, accept = PLAIN_STEP_SHARE / (1 + depth * DRAFT_COST), FITTED[basis][1]
    return (share, accept, False, f"{engine_label} {spec_method} priced on {basis[0]}'s {basis[1]} fit: a verify step of "
            f"{depth} drafts at {share:.3f} of the roofline, acceptance {accept:g} (rehearsal/calibration.py METHOD_BASIS)")
