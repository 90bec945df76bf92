"""The import-only sgl_kernel stand-in (src/stackbench/provision/sglang_cpu_ops), loaded from its file as
SGLang's CPU engine would import it."""

import importlib.util

from paths import ROOT

STAND_IN = ROOT / "src/stackbench/provision/sglang_cpu_ops/sgl_kernel/__init__.py"


def load_stand_in():
    spec = importlib.util.spec_from_file_location("sgl_kernel", STAND_IN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
