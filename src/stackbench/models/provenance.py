"""Which bytes a launch served: the sha256 of a GGUF file, or of a Hugging Face folder's weight files plus its
snapshot revision when the folder is a hub snapshot (``.../snapshots/<rev>/``), and the short weights id every
measured row carries (results column ``weights_id``).

Hashing a 50 GB checkpoint takes minutes, so each file's digest is computed once and cached beside the weights
in ``<file or folder>.weights.json``, keyed by each file's size and modification time (ns): a second run reads
the cache and rehashes nothing unless a file changed. Where the folder beside the weights is not writable (a
read-only hub cache), the cache goes under ``~/.cache/stackbench/weights/`` instead, keyed by the absolute path.
The cache sits beside the folder, never inside it, so a pipeline-made folder (a Snakemake output) never changes.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from stackbench.results import store

# A Hugging Face folder's weight files: tensors and the index that says which tensor is in which shard.
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".npz", ".h5", ".msgpack")
WEIGHT_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
CACHE_SUFFIX = ".weights.json"
CACHE_FORMAT = 1
ID_LENGTH = 12  # hex digits of the combined sha256 in a row's weights_id
CHUNK = 8 * 2**20
UNKNOWN = "unknown"


@dataclass(frozen=True)
class WeightsProvenance:
    path: str
    kind: str  # gguf | hf | file
    sha256: str  # a GGUF's own digest; a folder's: sha256 over "<name> <sha256>\n" of its weight files, sorted
    files: list[dict] = field(default_factory=list)  # {name, bytes, mtime_ns, sha256}
    revision: str | None = None  # a hub snapshot's commit (the folder name under snapshots/)
    hashed: int = 0  # files hashed by this call (0: all read from the cache)

    @property
    def weights_id(self) -> str:
        """The short id on every row: the digest's first 12 hex digits, and the snapshot's revision where known."""
        short = self.sha256[:ID_LENGTH]
        return f"{short}@{self.revision[:ID_LENGTH]}" if self.revision else short

    def to_json(self) -> dict:
        return {**asdict(self), "weights_id": self.weights_id}


def weight_files(path: Path) -> list[Path]:
    """The files whose bytes are the weights: the file itself, or a folder's tensors (and their index)."""
    if path.is_file():
        return [path]
    found = [p for p in sorted(path.rglob("*")) if p.is_file() and not p.name.startswith(".")
             and (p.name.endswith(WEIGHT_SUFFIXES) or p.name in WEIGHT_INDEXES)]
    return found


def snapshot_revision(path: Path) -> str | None:
    """The hub commit of a folder ``.../models--org--name/snapshots/<rev>`` (the hub cache's layout), else None."""
    parts = path.absolute().parts  # not resolved: the snapshot folder's name is the revision
    if len(parts) >= 2 and parts[-2] == "snapshots" and len(parts[-1]) >= 7:
        return parts[-1]
    return None


def cache_path(path: Path) -> Path:
    """Where the digests of `path` are cached: beside it, or under ~/.cache/stackbench where that is read-only."""
    beside = path.parent / (path.name + CACHE_SUFFIX)
    if os.access(path.parent, os.W_OK):
        return beside
    key = hashlib.sha256(str(path.absolute()).encode()).hexdigest()[:24]
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "stackbench" / "weights" / f"{key}.json"


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _read_cache(cache: Path) -> dict[str, dict]:
    try:
        doc = json.loads(cache.read_text())
    except (OSError, ValueError):
        return {}
    if doc.get("format") != CACHE_FORMAT:
        return {}
    return {f["name"]: f for f in doc.get("files", [])}


def _write_cache(cache: Path, doc: dict) -> None:
    try:
        store.atomic_write_text(cache, json.dumps(doc, indent=1))
    except OSError:
        pass  # a cache that cannot be written costs a rehash next time, never the run


def provenance(path: str | os.PathLike) -> WeightsProvenance:
    """The weights' digests, read from the cache where a file's size and mtime match it, else hashed (and cached)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"weights not found: {path}")
    files = weight_files(path)
    if not files:
        raise FileNotFoundError(f"{path}: no weight files ({', '.join(WEIGHT_SUFFIXES)}) in the folder")
    cache = cache_path(path)
    cached = _read_cache(cache)
    records, hashed = [], 0
    for file in files:
        name = file.name if path.is_file() else str(file.relative_to(path))
        stat = file.stat()  # follows a hub snapshot's symlinks to their blobs
        known = cached.get(name)
        if known and known.get("bytes") == stat.st_size and known.get("mtime_ns") == stat.st_mtime_ns:
            digest = known["sha256"]
        else:
            digest, hashed = _file_sha256(file), hashed + 1
        records.append({"name": name, "bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": digest})
    if path.is_file():
        kind, combined = ("gguf" if path.suffix == ".gguf" else "file"), records[0]["sha256"]
    else:
        kind = "hf"
        combined = hashlib.sha256("".join(f"{r['name']} {r['sha256']}\n" for r in records).encode()).hexdigest()
    found = WeightsProvenance(path=str(path), kind=kind, sha256=combined, files=records,
                              revision=None if path.is_file() else snapshot_revision(path), hashed=hashed)
    if hashed or not cached:
        _write_cache(cache, {"format": CACHE_FORMAT, **{k: v for k, v in found.to_json().items() if k != "hashed"}})
    return found


def weights_id(path: str | os.PathLike | None) -> str:
    """A row's weights_id: the short digest of the weights at `path`, "unknown" where they cannot be read here
    (an external server's model, a path on another machine)."""
    if not path:
        return UNKNOWN
    try:
        return provenance(path).weights_id
    except OSError:
        return UNKNOWN
