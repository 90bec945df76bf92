"""Model geometry from the model's own files: the real SmolLM2 GGUF's metadata (cross-checked against
what llama-server printed for it), hybrid and sliding-window GGUF layouts written here from llama.cpp's
source, a Hugging Face config.json written from vLLM's config class, and safetensors weight bytes."""

import json
import re
import struct
from pathlib import Path

import gguf
import numpy as np
import pytest
from helpers import SMOLLM2_METADATA, smollm2_metadata_gguf, write_gguf
from paths import ROOT

from stackbench.models import geometry

FIXTURES = ROOT / "tests/fixtures/models"


@pytest.fixture
def smollm2_gguf(tmp_path) -> Path:
    return smollm2_metadata_gguf(tmp_path)


def test_smollm2_geometry_agrees_with_what_llama_server_printed(smollm2_gguf):
    geo = geometry.read_geometry(smollm2_gguf)
    log = (ROOT / "tests/fixtures/llamacpp/server-nospec.log").read_text()
    printed = {k: int(v) for k, v in re.findall(r"print_info: (n_layer|n_head_kv|n_embd_head_k|n_embd_head_v)\s+= (\d+)", log)}
    assert (geo.layers, geo.attention_layers, geo.kv_heads, geo.key_length, geo.value_length) == (
        printed["n_layer"], printed["n_layer"], printed["n_head_kv"], printed["n_embd_head_k"], printed["n_embd_head_v"])
    assert (geo.linear_layers, geo.swa_layers, geo.mtp_layers, geo.architecture) == (0, 0, 0, "llama")
    kv_mib, cells = 90.0, 4096  # the same log: "CPU KV buffer size = 90.00 MiB" for -c 4096, f16
    assert f"KV buffer size =    {kv_mib:.2f} MiB" in log
    assert geo.kv_bytes_per_token(2) == kv_mib * 2**20 / cells


@pytest.fixture
def gguf_with_tensors(tmp_path) -> Path:
    """SmolLM2's captured llama.* fields with three small tensors of three types: 64 x 32 F32 (8192 bytes),
    32 F16 (64 bytes) and 4 rows of 64 Q4_1 elements (8 blocks of 20 bytes: 160), 8416 bytes of tensor data."""
    doc = json.loads(SMOLLM2_METADATA.read_text())
    path = tmp_path / "smollm2-shaped-with-tensors.gguf"
    writer = gguf.GGUFWriter(path, doc["architecture"])
    for key, value in doc["fields"].items():
        (writer.add_array if isinstance(value, list) else writer.add_uint32)(f"{doc['architecture']}.{key}", value)
    writer.add_tensor("token_embd.weight", np.zeros((64, 32), dtype=np.float32))
    writer.add_tensor("output_norm.weight", np.zeros(32, dtype=np.float16))
    writer.add_tensor("blk.0.attn_q.weight", np.zeros((4, 2 * 20), dtype=np.uint8), raw_dtype=gguf.GGMLQuantizationType.Q4_1)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_weight_bytes_are_the_tensor_data_whatever_its_type(gguf_with_tensors):
    geo = geometry.read_geometry(gguf_with_tensors)
    assert geo.weight_bytes == 64 * 32 * 4 + 32 * 2 + 8 * 20
    assert 0 < gguf_with_tensors.stat().st_size - geo.weight_bytes < 4096  # the rest is metadata and alignment


QWEN35_FROM_SOURCE = {"block_count": 65, "nextn_predict_layers": 1, "full_attention_interval": 4, "embedding_length": 5120,
                      "attention.head_count": 24, "attention.head_count_kv": 4, "attention.key_length": 256,
                      "attention.value_length": 256, "ssm.state_size": 128, "ssm.conv_kernel": 4}


def test_hybrid_gguf_from_source_counts_attention_recurrent_and_mtp_layers(tmp_path):
    """llama.cpp's qwen35 loader: layer i is full attention when (i + 1) % full_attention_interval == 0;
    convert_hf_to_gguf.py appends the MTP blocks to block_count."""
    geo = geometry.read_geometry(write_gguf(tmp_path / "qwen35-from-source.gguf", "qwen35", QWEN35_FROM_SOURCE))
    assert (geo.layers, geo.attention_layers, geo.linear_layers, geo.mtp_layers) == (64, 16, 48, 1)
    assert geo.kv_bytes_per_token(1, draft_layers=1) == 17 * 4 * 512


def test_hybrid_gguf_with_per_layer_kv_heads_marks_zero_head_layers_recurrent(tmp_path):
    """Jamba/Granite-hybrid style: head_count_kv is one entry per layer, 0 for a recurrent layer."""
    fields = {"block_count": 8, "embedding_length": 1024, "attention.head_count": 8,
              "attention.head_count_kv": [0, 0, 0, 2, 0, 0, 0, 2], "ssm.state_size": 16}
    geo = geometry.read_geometry(write_gguf(tmp_path / "hybrid-from-source.gguf", "granitehybrid", fields))
    assert (geo.attention_layers, geo.linear_layers, geo.kv_heads, geo.key_length) == (2, 6, 2, 128)


def test_sliding_window_gguf_counts_its_window_layers(tmp_path):
    fields = {"block_count": 12, "embedding_length": 1024, "attention.head_count": 8, "attention.head_count_kv": 4,
              "attention.sliding_window": 512, "attention.sliding_window_pattern": 6}
    geo = geometry.read_geometry(write_gguf(tmp_path / "swa-from-source.gguf", "gemma3", fields))
    assert (geo.attention_layers, geo.swa_layers, geo.sliding_window) == (2, 10, 512)


def test_sliding_window_without_a_pattern_is_an_error_naming_the_field(tmp_path):
    fields = {"block_count": 12, "embedding_length": 1024, "attention.head_count": 8, "attention.sliding_window": 512}
    path = write_gguf(tmp_path / "swa.gguf", "gemma2", fields)
    with pytest.raises(geometry.GeometryError, match=r"swa\.gguf: GGUF field gemma2\.attention\.sliding_window_pattern missing"):
        geometry.read_geometry(path)


def test_gguf_without_block_count_is_a_one_line_error(tmp_path):
    path = write_gguf(tmp_path / "broken.gguf", "llama", {"embedding_length": 64})
    with pytest.raises(geometry.GeometryError, match=r"^.*broken\.gguf: GGUF field llama\.block_count missing$"):
        geometry.read_geometry(path)


def test_a_file_that_is_not_gguf_is_a_one_line_error(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"not a gguf file at all")
    with pytest.raises(geometry.GeometryError, match=r"model\.gguf: not a readable GGUF file"):
        geometry.read_geometry(path)


def test_a_truncated_gguf_is_a_one_line_error(smollm2_gguf, tmp_path):
    path = tmp_path / "cut.gguf"
    path.write_bytes(smollm2_gguf.read_bytes()[:300])  # ends inside the metadata, as a half-copied file does
    with pytest.raises(geometry.GeometryError, match=r"cut\.gguf: not a readable GGUF file"):
        geometry.read_geometry(path)


def test_hf_config_from_source_reads_the_text_config_of_a_hybrid(tmp_path):
    geo = geometry.read_geometry(FIXTURES / "qwen3.5-27b-config-from-source")
    assert (geo.layers, geo.attention_layers, geo.linear_layers, geo.mtp_layers) == (64, 16, 48, 1)
    assert (geo.kv_heads, geo.key_length, geo.architecture, geo.weight_bytes) == (4, 256, "Qwen3_5ForConditionalGeneration", None)
    assert geo.kv_bytes_per_token(1) == 32768  # seed 000's unscaled cell size at fp8


def write_safetensors(path: Path, tensors: dict[str, int]) -> None:
    """The documented layout: u64 little-endian header length, JSON header, then the data bytes."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, size in tensors.items():
        header[name] = {"dtype": "BF16", "shape": [size // 2], "data_offsets": [offset, offset + size]}
        offset += size
    blob = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + bytes(offset))


def test_hf_weight_bytes_from_safetensors_headers_or_the_index(tmp_path):
    config = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64}
    (tmp_path / "config.json").write_text(json.dumps(config))
    write_safetensors(tmp_path / "model-00001-of-00002.safetensors", {"a": 64, "b": 128})
    write_safetensors(tmp_path / "model-00002-of-00002.safetensors", {"c": 32})
    geo = geometry.read_geometry(tmp_path / "config.json")
    assert (geo.weight_bytes, geo.kv_heads, geo.key_length, geo.attention_layers) == (224, 4, 16, 2)
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 1000}, "weight_map": {}}))
    assert geometry.read_geometry(tmp_path).weight_bytes == 1000


def test_hf_config_missing_a_field_names_file_and_field(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"num_attention_heads": 4, "hidden_size": 64}))
    with pytest.raises(geometry.GeometryError, match=r"config\.json: field num_hidden_layers missing"):
        geometry.read_geometry(tmp_path)


def test_fact_rows_carry_unit_and_the_file_they_came_from(smollm2_gguf):
    rows = {r["metric"]: r for r in geometry.read_geometry(smollm2_gguf).fact_rows()}
    assert rows["geometry_attention_layers"]["value"] == 30.0 and rows["geometry_kv_heads"]["unit"] == "heads"
    assert "geometry_sliding_window" not in rows and "geometry_weight_mib" not in rows  # unknown: no row, never 0
    assert rows["geometry_layers"]["note"] == f"model geometry read from {smollm2_gguf} (llama)"
