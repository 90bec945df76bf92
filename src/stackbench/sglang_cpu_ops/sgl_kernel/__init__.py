"""Stand-in for SGLang's `sgl_kernel` on a CPU without SGLang's CPU kernels: pure-PyTorch versions of
exactly the ops SGLang 0.5.23's CPU engine calls when it serves a dense model with
`--attention-backend torch_native` and no speculative decoding.

Why it exists: PyPI's sgl_kernel is the CUDA build (it fails to import without libcuda.so.1) and the
CPU build is not on PyPI, yet the CPU engine imports a few of its ops unconditionally. The node
configs/nodes/local-cpu-sglang.yaml puts this folder first on the server's PYTHONPATH. A server running
on these stand-ins checks that stackbench measures SGLang correctly; its speed says nothing about
SGLang's own CPU kernels.

Each op follows the contract written beside its CPU kernel in sgl-kernel's csrc/cpu (quoted in its
docstring). Names SGLang imports at start-up but never calls on this path raise when called, and any
other name fails at import, so a code path that needs a real kernel stops the server with its name.
"""

from __future__ import annotations

import ctypes
import sys

import torch

STAND_IN = "stackbench's PyTorch stand-in for sgl_kernel (src/stackbench/sglang_cpu_ops)"
IMPLEMENTED = ("copy_all_layer_kv_cache_cpu", "assign_req_to_token_pool_cpu", "assign_extend_cache_locs_cpu")


def copy_all_layer_kv_cache_cpu(data_ptrs: torch.Tensor, strides: torch.Tensor, tgt_loc: torch.Tensor,
                                src_loc: torch.Tensor) -> None:
    """For every K/V buffer b: buf_b[tgt_loc[i], :] = buf_b[src_loc[i], :], all source rows of a
    buffer read before any target row is written (gather then scatter).

    data_ptrs: base address of each buffer (uint64); strides: bytes per slot row of each buffer.
    """
    if data_ptrs.numel() == 0 or tgt_loc.numel() == 0:
        return
    if tgt_loc.numel() != src_loc.numel():
        raise ValueError(f"copy_all_layer_kv_cache_cpu: {tgt_loc.numel()} targets but {src_loc.numel()} sources")
    targets, sources = tgt_loc.long(), src_loc.long()
    rows_needed = int(torch.maximum(targets.max(), sources.max())) + 1
    for address, row_bytes in zip(data_ptrs.tolist(), strides.tolist()):
        rows = _byte_rows(address, row_bytes, rows_needed)
        rows[targets] = rows[sources]  # the indexed read is a copy, so overlapping slots are safe


def assign_req_to_token_pool_cpu(req_pool_indices: torch.Tensor, req_to_token: torch.Tensor,
                                 start_offset: torch.Tensor, end_offset: torch.Tensor,
                                 out_cache_loc: torch.Tensor, pool_len: int) -> None:
    """req_to_token[req_pool_indices[i], start_offset[i]:end_offset[i]] = out_cache_loc[prefix[i]:prefix[i+1]],
    prefix being the running sum of the requests' lengths (end - start)."""
    rows, columns = _request_ranges(req_to_token, pool_len, req_pool_indices, start_offset, end_offset)
    req_to_token[rows, columns] = out_cache_loc[: rows.numel()].to(req_to_token.dtype)


def assign_extend_cache_locs_cpu(req_pool_indices: torch.Tensor, req_to_token: torch.Tensor,
                                 start_offset: torch.Tensor, end_offset: torch.Tensor,
                                 out_cache_loc: torch.Tensor, pool_len: int) -> None:
    """The gather the other way: out_cache_loc[prefix[i]:prefix[i+1]] =
    req_to_token[req_pool_indices[i], start_offset[i]:end_offset[i]]."""
    rows, columns = _request_ranges(req_to_token, pool_len, req_pool_indices, start_offset, end_offset)
    out_cache_loc[: rows.numel()] = req_to_token[rows, columns].to(out_cache_loc.dtype)


def _request_ranges(req_to_token: torch.Tensor, pool_len: int, req_pool_indices: torch.Tensor,
                    start_offset: torch.Tensor, end_offset: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(row, column) of every req_to_token cell in the requests' [start, end) ranges, request by request."""
    if req_to_token.dim() != 2 or req_to_token.size(1) != pool_len:
        raise ValueError(f"req_to_token is {tuple(req_to_token.shape)}, expected (requests, {pool_len})")
    lengths = (end_offset.long() - start_offset.long()).clamp(min=0)
    total = int(lengths.sum())
    rows = req_pool_indices.long().repeat_interleave(lengths)
    first_of_request = (torch.cumsum(lengths, 0) - lengths).repeat_interleave(lengths)
    columns = start_offset.long().repeat_interleave(lengths) + torch.arange(total) - first_of_request
    return rows, columns


def _byte_rows(address: int, row_bytes: int, rows: int) -> torch.Tensor:
    """A (rows, row_bytes) uint8 view of memory SGLang owns, given only its address (as the kernel is)."""
    memory = (ctypes.c_uint8 * (rows * row_bytes)).from_address(address)
    return torch.frombuffer(memory, dtype=torch.uint8).view(rows, row_bytes)


def _not_on_this_path(name: str):
    def refuse(*args, **kwargs):
        raise NotImplementedError(f"sgl_kernel.{name} was called, but {STAND_IN} has no version of it: "
                                  "this server configuration needs SGLang's real CPU kernels")

    refuse.__name__ = name
    return refuse


# Imported at start-up by SGLang's speculative-decoding modules (spec_tree, eagle, multi_layer_eagle,
# cache_locs), which the model runner imports whether or not speculation is on; never called without it.
for _name in ("assign_draft_cache_locs_contiguous_cpu", "build_tree_kernel_efficient_cpu", "verify_tree_greedy_cpu",
              "fill_accept_out_cache_loc_cpu", "fill_bonus_tokens_cpu", "rotate_input_ids_cpu"):
    globals()[_name] = _not_on_this_path(_name)


def __getattr__(name: str):
    raise AttributeError(f"sgl_kernel.{name}: not provided by {STAND_IN}; this server configuration needs "
                         "SGLang's real CPU kernels")


# The server log records what ran: stackbench's SGLang adapter reads this line into every row's facts.
print(f"sgl_kernel stand-in: {STAND_IN}; PyTorch ops: {', '.join(IMPLEMENTED)}", file=sys.stderr, flush=True)
