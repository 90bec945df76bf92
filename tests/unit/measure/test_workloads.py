"""Prompt salts: they defeat prefix caches without moving a prompt's token count between runs."""

import re

from stackbench.measure import workloads


def test_salts_differ_but_keep_one_shape():
    salts = {workloads.salt() for _ in range(50)}
    assert len(salts) > 45  # 64**4 choices: two equal salts in 50 draws are all but impossible
    shape = re.compile(r"\[run (\w+) (\w+) (\w+) (\w+)\] ")
    for salt in salts:
        assert set(shape.fullmatch(salt).groups()) <= set(workloads.SALT_WORDS)
