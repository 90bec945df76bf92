"""Model geometry read from the model's own files, so the KV-pool audit and the decode roofline never
back-solve it from the figures they check.

Two sources, each read the way its engine reads it:
- GGUF metadata (llama.cpp's keys, read with the `gguf` package that llama.cpp maintains):
  `<arch>.block_count`, `<arch>.attention.head_count_kv` (a number, or one entry per layer with 0 for
  recurrent layers), `<arch>.attention.key_length` / `value_length` (default: embedding length / heads),
  `<arch>.attention.sliding_window` and `sliding_window_pattern`, `<arch>.full_attention_interval`
  (Qwen3-Next/3.5: layer i is full attention when (i + 1) % interval == 0, as llama.cpp's
  `recurrent_layer_arr`), `<arch>.ssm.*` (a pure SSM model: every layer recurrent) and
  `<arch>.nextn_predict_layers` (MTP blocks, counted inside block_count by convert_hf_to_gguf.py).
- A Hugging Face model folder: config.json (its `text_config` for multimodal checkpoints) with
  num_hidden_layers, num_key_value_heads, head_dim, layer_types / layers_block_type /
  full_attention_interval for hybrids, num_nextn_predict_layers or mtp_num_hidden_layers; weight bytes
  from the safetensors headers (documented format: 8-byte little-endian header length, then JSON with
  each tensor's data_offsets).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from stackbench.results import metrics
from stackbench.results.metrics import M
from stackbench.results.store import LAUNCH_COLUMNS


def kv_heads_per_rank(kv_heads, tp=1):
    """KV heads one tensor-parallel rank holds (scalars or numpy/pandas arrays): split across ranks and
    replicated when there are fewer heads than ranks, as vLLM (`get_num_kv_heads`: max(1, total // tp))
    and SGLang size their pools."""
    return np.maximum(1, kv_heads // np.maximum(1, tp))


def kv_bytes_per_token(layers, kv_heads, key_length, value_length, key_bytes, value_bytes, tp=1):
    """K+V bytes one token costs in `layers` full-attention layers on ONE tensor-parallel rank (scalars or
    numpy/pandas arrays); engines log that per-rank figure against the global token count."""
    return layers * kv_heads_per_rank(kv_heads, tp) * (key_length * key_bytes + value_length * value_bytes)


class GeometryError(ValueError):
    """A model file that does not say what the geometry needs; the message names the file and field."""


@dataclass(frozen=True)
class Geometry:
    source: str  # the file the figures were read from
    architecture: str
    layers: int  # decoder layers of the main model (MTP layers not counted)
    attention_layers: int  # full-attention layers: K and V kept for every token of the context
    swa_layers: int  # sliding-window layers: K and V kept for the last `sliding_window` tokens only
    linear_layers: int  # recurrent layers (mamba, GDN, linear attention): a fixed state per sequence
    kv_heads: int
    key_length: int
    value_length: int
    mtp_layers: int  # multi-token-prediction layers (each one full-attention layer when it drafts)
    sliding_window: int | None = None
    weight_bytes: int | None = None  # tensor data in the file(s)

    def kv_bytes_per_token(self, key_bytes: float, value_bytes: float | None = None, tp: int = 1, draft_layers: int = 0) -> float:
        return kv_bytes_per_token(self.attention_layers + draft_layers, self.kv_heads, self.key_length, self.value_length,
                                  key_bytes, key_bytes if value_bytes is None else value_bytes, tp)

    def fact_rows(self) -> list[dict]:
        """The geometry as server-row figures (workload "server") for measure.py to merge with its basis;
        analysis reads measured rows' geometry from these rows only."""
        figures = {
            M.geometry_layers: self.layers, M.geometry_attention_layers: self.attention_layers,
            M.geometry_swa_layers: self.swa_layers, M.geometry_linear_layers: self.linear_layers,
            M.geometry_kv_heads: self.kv_heads, M.geometry_key_length: self.key_length,
            M.geometry_value_length: self.value_length, M.geometry_mtp_layers: self.mtp_layers,
            M.geometry_sliding_window: self.sliding_window,
            M.geometry_weight_mib: self.weight_bytes / 2**20 if self.weight_bytes else None,
        }
        note = f"model geometry read from {self.source} ({self.architecture})"
        return [{**metrics.row_fields(metric), "value": float(value), "stat": "single", "n": 1, "status": "ok", "note": note}
                for metric, value in figures.items() if value is not None]


def read_geometry(path: str | Path) -> Geometry:
    """Geometry of a GGUF file, or of a Hugging Face model folder (or its config.json)."""
    path = Path(path)
    if path.is_dir() or path.name == "config.json":
        return _from_hf(path if path.is_dir() else path.parent)
    if path.suffix == ".gguf":
        return _from_gguf(path)
    raise GeometryError(f"{path}: not a .gguf file or a Hugging Face model folder with config.json")


# -- GGUF -------------------------------------------------------------------------------------------------
def _from_gguf(path: Path) -> Geometry:
    import gguf  # llama.cpp's own reader; imported here so analysis and reports do not need it

    try:
        reader = gguf.GGUFReader(path)
    except (ValueError, OSError, IndexError) as err:  # IndexError: a truncated file ends inside a field
        raise GeometryError(f"{path}: not a readable GGUF file ({type(err).__name__}: {err})") from err

    def field(key: str, required: bool = True):
        found = reader.fields.get(key)
        if found is None:
            if required:
                raise GeometryError(f"{path}: GGUF field {key} missing")
            return None
        return found.contents()

    arch = field("general.architecture")
    blocks = int(field(f"{arch}.block_count"))
    mtp = int(field(f"{arch}.nextn_predict_layers", False) or 0)
    layers = blocks - mtp
    embedding, heads = field(f"{arch}.embedding_length"), field(f"{arch}.attention.head_count")
    heads_kv = field(f"{arch}.attention.head_count_kv", False)
    per_layer_kv = list(heads_kv)[:layers] if isinstance(heads_kv, list) else [heads_kv if heads_kv is not None else heads] * layers
    if isinstance(heads, list):
        heads = max(heads)
    default_head_length = embedding // heads if embedding and heads else None
    key_length = field(f"{arch}.attention.key_length", False) or default_head_length
    value_length = field(f"{arch}.attention.value_length", False) or default_head_length
    if key_length is None:
        raise GeometryError(f"{path}: GGUF fields {arch}.attention.key_length and {arch}.embedding_length missing")

    interval = field(f"{arch}.full_attention_interval", False)
    if interval:
        recurrent = [(i + 1) % int(interval) != 0 for i in range(layers)]
    elif field(f"{arch}.ssm.state_size", False) is not None and not isinstance(heads_kv, list):
        recurrent = [True] * layers  # a pure SSM (mamba) model: no attention layer at all
    else:
        recurrent = [kv == 0 for kv in per_layer_kv]  # hybrids list 0 KV heads for their recurrent layers
    if field(f"{arch}.attention.key_length_mla", False) is not None:
        raise GeometryError(f"{path}: GGUF field {arch}.attention.key_length_mla present; MLA's latent KV is not modelled")
    window = field(f"{arch}.attention.sliding_window", False)
    swa = [False] * layers
    if window:
        pattern = field(f"{arch}.attention.sliding_window_pattern", False)
        if pattern is None:  # llama.cpp hard-codes the pattern per architecture when the file has none
            raise GeometryError(f"{path}: GGUF field {arch}.attention.sliding_window_pattern missing beside "
                                f"{arch}.attention.sliding_window; which layers slide is not in the file")
        swa = _gguf_swa_layers(pattern, layers)
    attention_kv = {int(kv) for kv, r, s in zip(per_layer_kv, recurrent, swa) if not r and not s and kv}
    if len(attention_kv) > 1:
        raise GeometryError(f"{path}: GGUF field {arch}.attention.head_count_kv differs across attention layers "
                            f"({sorted(attention_kv)}); per-layer KV widths are not supported")
    kv_heads = attention_kv.pop() if attention_kv else int(max((kv for kv in per_layer_kv if kv), default=0))
    return Geometry(
        source=str(path), architecture=arch, layers=layers,
        attention_layers=sum(not r and not s for r, s in zip(recurrent, swa)),
        swa_layers=sum(s and not r for r, s in zip(recurrent, swa)), linear_layers=sum(recurrent),
        kv_heads=kv_heads, key_length=int(key_length), value_length=int(value_length), mtp_layers=mtp,
        sliding_window=int(window) if window else None,
        weight_bytes=sum(int(t.n_bytes) for t in reader.tensors))


def _gguf_swa_layers(pattern, layers: int) -> list[bool]:
    """llama.cpp's `set_swa_pattern(n)`: every n-th layer is dense and the others slide (n = 0: all
    slide); an array gives one flag per layer (true = sliding)."""
    if isinstance(pattern, list):
        return [bool(flag) for flag in pattern[:layers]]
    return [int(pattern) == 0 or (i + 1) % int(pattern) != 0 for i in range(layers)]


# -- Hugging Face ---------------------------------------------------------------------------------------
FULL_ATTENTION_TYPES = {"full_attention", "attention"}
SLIDING_TYPES = {"sliding_attention", "sliding_window"}


def _from_hf(folder: Path) -> Geometry:
    config_path = folder / "config.json"
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise GeometryError(f"{config_path}: not a readable config.json ({err})") from err
    text = config.get("text_config") or config  # multimodal checkpoints nest the language model's config

    def need(key: str):
        if text.get(key) is None:
            raise GeometryError(f"{config_path}: field {key} missing")
        return text[key]

    if text.get("kv_lora_rank"):
        raise GeometryError(f"{config_path}: field kv_lora_rank present; MLA's latent KV is not modelled")
    layers = int(need("num_hidden_layers"))
    heads = int(need("num_attention_heads"))
    kinds = _hf_layer_kinds(text, layers, config_path)
    head_dim = text.get("head_dim") or int(need("hidden_size")) // heads
    mtp = text.get("num_nextn_predict_layers") or text.get("mtp_num_hidden_layers") or 0
    return Geometry(
        source=str(config_path), architecture=(config.get("architectures") or [config.get("model_type", "unknown")])[0],
        layers=layers, attention_layers=kinds.count("full"), swa_layers=kinds.count("sliding"),
        linear_layers=kinds.count("linear"), kv_heads=int(text.get("num_key_value_heads") or heads),
        key_length=int(head_dim), value_length=int(head_dim), mtp_layers=int(mtp),
        sliding_window=text.get("sliding_window") if "sliding" in kinds else None,
        weight_bytes=_safetensors_bytes(folder))


def _hf_layer_kinds(text: dict, layers: int, config_path: Path) -> list[str]:
    """'full', 'sliding' or 'linear' per layer, from whichever field the model family uses."""
    listed = text.get("layer_types") or text.get("layers_block_type")
    if listed:
        if len(listed) < layers:
            raise GeometryError(f"{config_path}: field layer_types has {len(listed)} entries for {layers} layers")
        return ["full" if t in FULL_ATTENTION_TYPES else "sliding" if t in SLIDING_TYPES else "linear" for t in listed[:layers]]
    if text.get("full_attention_interval"):
        interval = int(text["full_attention_interval"])
        return ["full" if (i + 1) % interval == 0 else "linear" for i in range(layers)]
    if text.get("sliding_window") and text.get("use_sliding_window", True):
        return ["sliding"] * layers  # Mistral/Phi-3 style: one window for every layer
    return ["full"] * layers


def _safetensors_bytes(folder: Path) -> int | None:
    index = folder / "model.safetensors.index.json"
    if index.exists():
        total = json.loads(index.read_text(encoding="utf-8")).get("metadata", {}).get("total_size")
        if total:
            return int(total)
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None
    total = 0
    for file in files:
        with file.open("rb") as handle:
            try:
                (length,) = struct.unpack("<Q", handle.read(8))
                header = json.loads(handle.read(length))
            except (struct.error, json.JSONDecodeError) as err:
                raise GeometryError(f"{file}: not a safetensors file (header: {err})") from err
        total += sum(t["data_offsets"][1] - t["data_offsets"][0] for name, t in header.items() if name != "__metadata__")
    return total


# -- the seeds' models (configs/models): geometry for published rows ----------------------------------------
@dataclass(frozen=True)
class PublishedGeometry:
    """A configs/models file: the geometry of a model named by published rows, each figure with its source."""

    name: str
    match: tuple[str, ...]
    figures: dict[str, float]
    from_audited_seed: tuple[str, ...]

    @property
    def source(self) -> str:
        return f"configs/models/{self.name}.yaml" + (
            f" ({', '.join(self.from_audited_seed)}: no seed quotes them; only checkable against the seed itself)"
            if self.from_audited_seed else "")


def load_published_geometries(root: Path = Path(".")) -> list[PublishedGeometry]:
    from stackbench.config import load_file

    out = []
    for path in sorted((root / "configs/models").glob("*.yaml")):
        figures = load_file(path, "model")["figures"]
        out.append(PublishedGeometry(path.stem, tuple(load_file(path, "model")["match"]),
                                     {k: f["value"] for k, f in figures.items()},
                                     tuple(k for k, f in figures.items() if f["from_audited_seed"])))
    return out


# What a figure's row says about that figure alone, not about the launch it belongs to.
NOT_A_LAUNCH_FACT = ("concurrency", "request_rate", "power_cap_w", "value_min", "value_max", "ci_low", "ci_high", "mad",
                     "spread_over", "repeat_values", "table_id", "table_title", "row_label", "col_label", "prompt_tokens", "output_tokens", "reason")


def published_geometry_rows(records: list[dict], geometries: list[PublishedGeometry]) -> list[dict]:
    """geometry_* rows for each published launch whose model name matches a configs/models entry, so the
    analysis reads every launch's geometry from rows, measured or published, and never a config file."""
    out, seen = [], set()
    for record in records:
        key = tuple(record.get(k) for k in LAUNCH_COLUMNS)
        name = str(record.get("model") or "").lower()
        found = next((g for g in geometries if any(m in name for m in g.match)), None)
        if found is None or key in seen:
            continue
        seen.add(key)
        # The launch's own basis (the first figure's), as a measured launch's server rows carry it.
        launch = {**record, **dict.fromkeys(NOT_A_LAUNCH_FACT), "workload": "server"}
        out += [{**launch, **metrics.row_fields(f"geometry_{field}"), "value": float(value), "stat": "single", "n": 1,
                 "status": "ok", "note": found.source}
                for field, value in found.figures.items()]
    return out
