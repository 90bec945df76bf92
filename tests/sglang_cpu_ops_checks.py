"""Checks of the sgl_kernel stand-in (src/stackbench/sglang_cpu_ops) against plain-PyTorch references,
run by tests/test_sglang_cpu_ops.py with the sglang-cpu environment's Python (the project's own
environment has no torch). Each reference is the loop written beside the op's CPU kernel in sgl-kernel's
csrc/cpu; the stand-in computes the same thing vectorised, so a wrong index or offset shows here.

Prints one JSON object: check name -> "ok" or the failure.
"""

import json
import sys
import traceback

import torch

import sgl_kernel


def reference_assign_req_to_token_pool(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc):
    written = 0
    for row, start, end in zip(req_pool_indices.tolist(), start_offset.tolist(), end_offset.tolist()):
        req_to_token[row, start:end] = out_cache_loc[written:written + end - start].to(req_to_token.dtype)
        written += end - start


def reference_assign_extend_cache_locs(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc):
    written = 0
    for row, start, end in zip(req_pool_indices.tolist(), start_offset.tolist(), end_offset.tolist()):
        out_cache_loc[written:written + end - start] = req_to_token[row, start:end].to(out_cache_loc.dtype)
        written += end - start


def batch(index_dtype):
    """Three requests in a five-row pool, one of them with an empty range, in SGLang's dtypes."""
    generator = torch.Generator().manual_seed(7)
    req_to_token = torch.randint(0, 4096, (5, 32), dtype=torch.int32, generator=generator)
    req_pool_indices = torch.tensor([2, 4, 1], dtype=index_dtype)
    start_offset = torch.tensor([0, 3, 8], dtype=index_dtype)
    end_offset = torch.tensor([6, 3, 15], dtype=index_dtype)
    total = int((end_offset - start_offset).sum())
    out_cache_loc = torch.randperm(4096, generator=generator)[:total].to(torch.int64)
    return req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc


def check_assign_req_to_token_pool():
    for index_dtype in (torch.int32, torch.int64):
        indices, req_to_token, start, end, out_cache_loc = batch(index_dtype)
        expected = req_to_token.clone()
        reference_assign_req_to_token_pool(indices, expected, start, end, out_cache_loc)
        sgl_kernel.assign_req_to_token_pool_cpu(indices, req_to_token, start, end, out_cache_loc, req_to_token.shape[1])
        assert torch.equal(req_to_token, expected), f"{index_dtype}: req_to_token differs from the reference"


def check_assign_extend_cache_locs():
    for index_dtype in (torch.int32, torch.int64):
        indices, req_to_token, start, end, out_cache_loc = batch(index_dtype)
        expected = torch.full_like(out_cache_loc, -1)
        reference_assign_extend_cache_locs(indices, req_to_token, start, end, expected)
        got = torch.full_like(out_cache_loc, -1)
        sgl_kernel.assign_extend_cache_locs_cpu(indices, req_to_token, start, end, got, req_to_token.shape[1])
        assert torch.equal(got, expected), f"{index_dtype}: out_cache_loc differs from the reference"


def check_copy_all_layer_kv_cache():
    # K and V buffers of two layers with different row widths and dtypes, as SGLang passes them: base
    # addresses and bytes per slot row. Slots 1 and 2 swap (overlapping source and target) and 5 -> 0.
    buffers = [torch.randn(8, 3, 4, dtype=torch.float16), torch.randn(8, 3, 4, dtype=torch.float16),
               torch.randn(8, 2, 8, dtype=torch.float32), torch.randn(8, 5, dtype=torch.bfloat16)]
    tgt_loc, src_loc = torch.tensor([1, 2, 0]), torch.tensor([2, 1, 5])
    expected = []
    for buf in buffers:
        copy = buf.clone()
        copy[tgt_loc] = buf[src_loc]
        expected.append(copy)
    data_ptrs = torch.tensor([b.data_ptr() for b in buffers], dtype=torch.uint64)
    strides = torch.tensor([b.stride(0) * b.element_size() for b in buffers])
    sgl_kernel.copy_all_layer_kv_cache_cpu(data_ptrs, strides, tgt_loc, src_loc)
    for i, (got, want) in enumerate(zip(buffers, expected)):
        assert torch.equal(got, want), f"buffer {i} differs from the reference"
    # SGLang's own warm-up call at pool creation: slot 0 onto itself, which must change nothing.
    before = [b.clone() for b in buffers]
    zero = torch.zeros(1, dtype=torch.int64)
    sgl_kernel.copy_all_layer_kv_cache_cpu(data_ptrs, strides, zero, zero)
    assert all(torch.equal(b, a) for b, a in zip(buffers, before)), "copying slot 0 onto itself changed a buffer"


def check_other_ops_fail_loudly():
    try:
        from sgl_kernel import decode_attention_cpu  # noqa: F401  (intel_amx's kernel: not stood in)
    except ImportError as err:
        # Python words a failed from-import itself; it names the op and this stand-in's file.
        assert "decode_attention_cpu" in str(err) and "sglang_cpu_ops" in str(err), str(err)
    else:
        raise AssertionError("importing an op without a stand-in succeeded")
    try:
        sgl_kernel.extend_attention_cpu
    except AttributeError as err:
        assert "extend_attention_cpu" in str(err) and "stand-in" in str(err), str(err)
    else:
        raise AssertionError("an op without a stand-in was found")
    try:
        sgl_kernel.verify_tree_greedy_cpu(torch.zeros(1))
    except NotImplementedError as err:
        assert "verify_tree_greedy_cpu" in str(err), str(err)
    else:
        raise AssertionError("an op imported at start-up but not stood in ran without error")


CHECKS = {name: check for name, check in globals().items() if name.startswith("check_")}

if __name__ == "__main__":
    results = {}
    for name, check in CHECKS.items():
        try:
            check()
            results[name] = "ok"
        except Exception:  # noqa: BLE001 - every failure is reported by name to the pytest side
            results[name] = traceback.format_exc(limit=3)
    json.dump(results, sys.stdout)
