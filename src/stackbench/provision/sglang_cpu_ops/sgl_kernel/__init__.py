"""Import-only stand-in for SGLang's `sgl_kernel`, so that SGLang 0.5.23's CPU engine starts on a CPU
without SGLang's CPU kernels (SGLang's adapter, engines/sglang.py native_env, puts this folder on the
PYTHONPATH of a --device cpu server).

PyPI's sgl_kernel is the CUDA build (it fails to import without libcuda.so.1) and its CPU build is not on
PyPI, yet the CPU engine imports the ops below at start-up, whether or not it will use them. Without
speculative decoding it calls none of them, so none has a stand-in implementation:
- copy_all_layer_kv_cache_cpu runs only when the KV pool is made with enable_kv_cache_copy, which
  mem_cache/kv_cache_configurator.py sets only when a speculative algorithm is configured;
- assign_req_to_token_pool_cpu runs only in alloc_for_spec_decode and the DFlash worker (prefill's
  write_cache_indices loops in PyTorch when the attention backend is not a Triton one);
- the rest belong to the speculative modules (cache_locs, spec_tree, eagle, multi_layer_eagle).
A run with every op recording its calls served chat requests with none called. Each one raises when
called, and any name not listed fails at import, so a path that needs a real kernel stops with its name,
and rows from this server are SGLang's own PyTorch CPU path.
"""

import sys

STAND_IN = "stackbench's import-only stand-in for sgl_kernel (src/stackbench/provision/sglang_cpu_ops)"
# The `from sgl_kernel import ...` names of SGLang 0.5.23's modules under `if _is_cpu:` at module level.
STARTUP_IMPORTS = ("copy_all_layer_kv_cache_cpu", "assign_req_to_token_pool_cpu", "assign_extend_cache_locs_cpu",
                   "assign_draft_cache_locs_contiguous_cpu", "build_tree_kernel_efficient_cpu", "verify_tree_greedy_cpu",
                   "fill_accept_out_cache_loc_cpu", "fill_bonus_tokens_cpu", "rotate_input_ids_cpu")


def _refusing(name: str):
    def refuse(*args, **kwargs):
        raise NotImplementedError(f"sgl_kernel.{name} was called, but {STAND_IN} only lets SGLang import it: "
                                  "this server configuration needs SGLang's real CPU kernels")

    refuse.__name__ = name
    return refuse


for _name in STARTUP_IMPORTS:
    globals()[_name] = _refusing(_name)


def __getattr__(name: str):
    raise AttributeError(f"sgl_kernel.{name}: not provided by {STAND_IN}; this server configuration needs "
                         "SGLang's real CPU kernels")


# The server log records what ran; stackbench's SGLang adapter reads this line into the launch's facts.
print(f"sgl_kernel stand-in: {STAND_IN}; no op runs, every call raises", file=sys.stderr, flush=True)
