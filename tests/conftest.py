import shutil
from pathlib import Path

import pandas as pd
import pytest

from stackbench import published, store

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def published_frame() -> pd.DataFrame:
    return store.to_table(published.load_all(ROOT / "data/published", ROOT)).to_pandas()


@pytest.fixture
def repo_copy(tmp_path) -> Path:
    """A copy of the repository's workflow, configs and data (no runs, no environments) to run Snakemake in."""
    dest = tmp_path / "repo"
    dest.mkdir()
    for name in ("Snakefile", "workflow", "configs", "envs"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, dest / name)
    shutil.copytree(ROOT / "data/published", dest / "data/published")
    return dest
