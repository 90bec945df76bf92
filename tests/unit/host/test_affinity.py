"""host/affinity.py: the client's cores and the server's, and the measuring process given back its cores."""

import os

import pytest

from stackbench.host import affinity

CORES = sorted(os.sched_getaffinity(0))


@pytest.mark.skipif(len(CORES) < 2, reason="needs two CPUs to split")
def test_the_server_gets_every_usable_core_but_the_clients_and_the_process_gets_its_cores_back():
    before = os.sched_getaffinity(0)
    assert affinity.split((CORES[-1],)) == set(CORES[:-1])
    with affinity.pinned_self({CORES[-1]}):
        assert os.sched_getaffinity(0) == {CORES[-1]}
    assert os.sched_getaffinity(0) == before
    with pytest.raises(RuntimeError), affinity.pinned_self({CORES[-1]}):
        raise RuntimeError("a launch that fails gives the cores back too")
    assert os.sched_getaffinity(0) == before


def test_client_cores_that_leave_the_server_none_or_are_not_usable_are_refused():
    with pytest.raises(ValueError, match="leave the server none"):
        affinity.split(tuple(CORES))
    with pytest.raises(ValueError, match="not all among the cores"):
        affinity.split((max(CORES) + 1,))
