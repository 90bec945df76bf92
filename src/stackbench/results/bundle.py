"""Result bundles: one node's run as one file someone else can read beside their own (docs/bundles.md).

A bundle is an uncompressed tar of plain members: `rows.parquet` (the node's measured or rehearsal rows, in this
contract), `config/...` (the node, stack and workload files as written), `launches/<launch>/...` (each launch's
resolved spec, the exact server command and the run record) and `manifest.json`. The manifest lists every other
member's sha256 and holds the provenance (owner, node, stackbench and definitions versions, engines, weights
ids, host facts); its `content_hash` is the sha256 of the manifest without that field, so it covers every byte.
No model files travel.

Reading one refuses it by name when a member's bytes, the member list or the manifest itself do not match the
content hash, when its figures were computed under other metric definitions (plan/definitions.py
DEFINITIONS): those figures never mix with ours, and when its rows are in a results format this stackbench does not
read (the manifest's `results_format`, store.FORMAT_VERSION). Its rows enter the results as source `bundle:<owner>`
(`bundle:<owner>:rehearsal` for a rehearsal's), never `measured` or `published`, with one `bundle_manifest`
row per bundle (accepted or refused) that the report's Bundles section lists.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from stackbench.results import metrics, store
from stackbench.results.metrics import M

FORMAT = 1
MANIFEST = "manifest.json"
ROWS = "rows.parquet"
SUFFIX = ".stackbench.tar"
PREFIX = "bundle:"
OWNER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")


class BundleRefused(ValueError):
    """A bundle that may not enter the results; the message starts with its file name."""


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def content_hash(manifest: dict) -> str:
    """sha256 of the manifest's canonical JSON without its own content_hash (which lists every member's sha256)."""
    body = {k: v for k, v in manifest.items() if k != "content_hash"}
    return _sha256(json.dumps(body, sort_keys=True, separators=(",", ":"), default=str).encode())


# What a bundle's rows were made as (their source where they were made) stays after the owner in their source here,
# and in the bundle's provenance line, so a rehearsal's are never taken for measured rows; measured rows are plainly
# the owner's.
SOURCE_TAIL = {"rehearsal": ":rehearsal"}
PROVENANCE_NOTE = {"rehearsal": "; a rehearsal: stand-in engines on simulated GPUs"}
# A manifest says whether every row was a rehearsal's (measure/publish.py): what its rows were made as.
MADE_AS = {False: "measured", True: "rehearsal"}


def source_of(owner: str, made_as: str) -> str:
    return f"{PREFIX}{owner}{SOURCE_TAIL.get(made_as, '')}"


def manifest_made_as(manifest: dict) -> str:
    return MADE_AS[bool(manifest.get("rehearsal"))]


def rows_bytes(rows: pd.DataFrame) -> bytes:
    """The rows as Parquet bytes in this contract (a deterministic writer: same rows, same bytes)."""
    sink = io.BytesIO()
    pq.write_table(store.to_table(rows), sink)
    return sink.getvalue()


def write(out: Path, rows: pd.DataFrame, members: dict[str, bytes], provenance: dict) -> Path:
    """Write a bundle: the rows, the other members (name -> bytes) and the manifest (provenance + hashes)."""
    owner = provenance.get("owner", "")
    if not OWNER.match(owner):
        raise ValueError(f"owner label {owner!r}: letters, digits and _ . @ - only, at most 64 (it becomes the source bundle:<owner>)")
    every = {ROWS: rows_bytes(rows), **members}
    if MANIFEST in members:
        raise ValueError(f"{MANIFEST} is written by the bundle itself")
    manifest = {"format": FORMAT, **provenance, "results_format": store.FORMAT_VERSION, "rows": len(rows),
                "files": {name: {"sha256": _sha256(data), "bytes": len(data)} for name, data in sorted(every.items())}}
    manifest["content_hash"] = content_hash(manifest)

    def write_tar(tmp: str) -> None:
        with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
            for name, data in [(MANIFEST, json.dumps(manifest, indent=1, sort_keys=True, default=str).encode()),
                               *sorted(every.items())]:
                info = tarfile.TarInfo(name)
                info.size, info.mtime, info.mode = len(data), 0, 0o644
                tar.addfile(info, io.BytesIO(data))

    return store.atomic_write(out, write_tar)


@dataclass(frozen=True)
class Bundle:
    path: Path
    manifest: dict
    members: dict[str, bytes]

    @property
    def owner(self) -> str:
        return self.manifest["owner"]

    @property
    def rows(self) -> pd.DataFrame:
        return store.conform(pq.read_table(io.BytesIO(self.members[ROWS]))).to_pandas()

    def member_json(self, name: str) -> dict:
        return json.loads(self.members[name])


def read(path: Path, definitions: int | None = None) -> Bundle:
    """Open and verify a bundle; raise BundleRefused (naming the file) when its content does not match its manifest
    hash, or when `definitions` is given and the bundle's figures were computed under others."""
    path = Path(path)
    name = path.name
    try:
        with tarfile.open(path, "r:") as tar:
            members = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    except (OSError, tarfile.TarError) as err:
        raise BundleRefused(f"{name}: refused: not a readable bundle ({err})") from err
    if MANIFEST not in members:
        raise BundleRefused(f"{name}: refused: no {MANIFEST}")
    try:
        manifest = json.loads(members.pop(MANIFEST))
    except ValueError as err:
        raise BundleRefused(f"{name}: refused: {MANIFEST} is not JSON ({err})") from err
    if manifest.get("format") != FORMAT:
        raise BundleRefused(f"{name}: refused: bundle format {manifest.get('format')!r}, this stackbench reads {FORMAT}")
    if why := store.unreadable(manifest.get("results_format", 0)):  # 0: made before the results format had a version
        raise BundleRefused(f"{name}: refused: its rows are in {why}: read it with the stackbench that made it "
                            f"({manifest.get('stackbench_version')})")
    listed = manifest.get("files", {})
    changed = sorted(m for m in set(listed) | set(members)
                     if m not in members or m not in listed or _sha256(members[m]) != listed[m].get("sha256"))
    if changed:
        raise BundleRefused(f"{name}: refused: content does not match its manifest hash ({', '.join(changed)} changed, "
                            "added or missing)")
    if content_hash(manifest) != manifest.get("content_hash"):
        raise BundleRefused(f"{name}: refused: content does not match its manifest hash (the manifest was edited)")
    if definitions is not None and manifest.get("definitions") != definitions:
        raise BundleRefused(f"{name}: refused: its figures were computed under metric definitions "
                            f"{manifest.get('definitions')!r} (sources {str(manifest.get('definitions_sources'))[:12]}), "
                            f"this checkout's are {definitions}: figures under other definitions never mix")
    return Bundle(path, manifest, members)


def provenance_text(manifest: dict) -> str:
    """One line of where a bundle's figures come from, for the Bundles section."""
    host = manifest.get("host", {})
    engines = "; ".join(f"{e.get('launch')}: {e.get('engine')} {e.get('version')} ({e.get('image')})"
                        for e in manifest.get("engines", []))
    weights = ", ".join(f"{model} {wid}" for model, wid in sorted(manifest.get("weights", {}).items()))
    return (f"node {manifest.get('node')}; {manifest.get('rows')} rows; stackbench {manifest.get('stackbench_version')}; "
            f"definitions {manifest.get('definitions')}; made {manifest.get('created')}; GPU {host.get('gpu')} "
            f"(driver {host.get('driver', 'unknown')}); CPU {host.get('cpu')}; OS {host.get('os')}; weights {weights or 'unknown'}; "
            f"engines {engines or 'unknown'}; content sha256 {manifest.get('content_hash', '')[:16]}"
            f"{PROVENANCE_NOTE.get(manifest_made_as(manifest), '')}")


def manifest_row(path: Path, manifest: dict | None, refused: str | None) -> dict:
    """The bundle's own row in the results: its provenance, or why it was refused."""
    manifest = manifest or {}
    owner = manifest.get("owner") or Path(path).name.removesuffix(SUFFIX)
    return {"source": source_of(owner, manifest_made_as(manifest)), "ref": manifest.get("content_hash", "unknown")[:16],
            "node": manifest.get("node", "unknown"), "stack": "unknown", "variant": "unknown",
            **metrics.row_fields(M.bundle_manifest), "value": None if refused else float(manifest.get("rows", 0)), "stat": "single",
            "status": "rejected" if refused else "ok", "reason": refused, "table_title": Path(path).name,
            "note": None if refused else provenance_text(manifest),
            "stackbench_version": manifest.get("stackbench_version")}


def import_rows(path: Path, definitions: int) -> list[dict]:
    """A bundle's rows for the results, under source bundle:<owner>, and its manifest row; a refused bundle gives its
    manifest row only, saying why."""
    try:
        bundle = read(path, definitions)
    except BundleRefused as err:
        manifest = None
        try:
            with tarfile.open(path, "r:") as tar:
                manifest = json.loads(tar.extractfile(MANIFEST).read())
        except Exception:  # noqa: BLE001 - the refusal already says why; the manifest only names the owner
            manifest = None
        return [manifest_row(path, manifest if isinstance(manifest, dict) else None, str(err))]
    rows = bundle.rows
    rows["source"] = [source_of(bundle.owner, source) for source in rows["source"]]
    rows["implausible"] = None  # checked again here, at collect, on this machine's rules
    return [*store.records_of(rows), manifest_row(path, bundle.manifest, None)]


def found(folder: Path, named: list[str] | tuple = ()) -> list[Path]:
    """The bundles to import: every *.stackbench.tar in `folder` (data/bundles), and those named in the run config."""
    listed = sorted(Path(folder).glob(f"*{SUFFIX}")) if Path(folder).is_dir() else []
    paths = [Path(n).expanduser() for n in named]
    missing = [(i, p) for i, p in enumerate(paths) if not p.is_file()]
    if missing:
        i, path = missing[0]
        raise FileNotFoundError(f"configs/config.yaml (or --config): bundles[{i}]: no bundle file at {path}")
    return list(dict.fromkeys([*listed, *paths]))
