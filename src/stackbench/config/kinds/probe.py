"""kind probe: the correctness probes (measure/probes.py) its `probes` section asks, once per launch."""

from stackbench.config.kinds.base import WorkloadKind


class Probe(WorkloadKind):
    name = "probe"
    own_field = "probes"
    runs = "probes"


KIND = Probe()
