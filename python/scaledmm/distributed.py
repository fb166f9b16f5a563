"""Tensor-parallel w8a8 linear layers that give the bits of one device.

A row-parallel layer (o_proj, down_proj) gives each rank a slice of K: rank
r holds a[:, K_r] and weight[:, K_r]. Summing the ranks' float outputs after
the epilogue, as is usual, makes the result depend on the number of ranks.
Here each rank computes its int32 accumulators (gemm_s8s8s32), they are
all-reduced as int32 (torch.distributed SUM; integer addition is exact and
its wrap-around associative), and the epilogue runs once on the sum
(scaled_epilogue): the output is bit for bit scaled_mm on the whole K, for
any number of ranks and any split of K (doc/tensor-parallel.md).

A column-parallel layer (qkv, gate_up) needs nothing of this: rank r's
scaled_mm on its rows N_r of the weight gives exactly those columns of the
whole layer's output, whatever the other ranks hold.

The all-reduce carries M x N int32 (4 bytes per output), twice the bytes of
a bfloat16 all-reduce of the outputs.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.distributed as dist

from . import torch as _smt


def weight_colsum(weight_shard: torch.Tensor, group=None) -> torch.Tensor:
    """The int32 column sums of a row-parallel weight over all of K, for
    asymmetric activations (row_parallel_scaled_mm's colsum_b): each rank's
    sums over its slice, all-reduced (SUM) over group. Call it once per
    layer, when the weights are loaded.

    weight_shard: int8 [N, K_r], this rank's slice of K of the weight [N,
    K]. Returns int32 [N] on its device. group: a torch.distributed process
    group (None: the default group). Raises ValueError for a tensor not
    int8 [N, K_r]; torch.distributed's errors otherwise.
    """
    if weight_shard.dtype != torch.int8 or weight_shard.dim() != 2:
        raise ValueError("scaledmm.distributed.weight_colsum: weight_shard must be int8 "
                         f"[N, K_r], got {weight_shard.dtype} {tuple(weight_shard.shape)}")
    # int64 sums of one slice are exact; their int32 residue is the
    # contract's wrapping sum
    colsum = weight_shard.sum(dim=1, dtype=torch.int64).to(torch.int32)
    dist.all_reduce(colsum, op=dist.ReduceOp.SUM, group=group)
    return colsum


def row_parallel_scaled_mm(a_shard: torch.Tensor, weight_shard: torch.Tensor,
                           scale_a: torch.Tensor, scale_b: torch.Tensor,
                           out_dtype: torch.dtype = torch.float32,
                           bias: Optional[torch.Tensor] = None,
                           azp: Optional[torch.Tensor] = None,
                           colsum_b: Optional[torch.Tensor] = None,
                           group=None) -> torch.Tensor:
    """scaled_mm of a row-parallel layer, the bits of one device's scaled_mm
    on the whole K: this rank's int32 accumulators over its slice of K
    (gemm_s8s8s32), all-reduced (SUM, int32) over group, then the epilogue
    once (scaled_epilogue) on every rank.

    a_shard: int8 [M, K_r], this rank's columns K_r of the activations;
    weight_shard: int8 [N, K_r], the same slice of the weight [N, K];
    scale_a: float32, 1 or M elements (the activations' scales over all of
    K: per-token scales are computed on whole rows); scale_b: float32, 1 or
    N; bias: float32 [N] or None, added once; azp: int32, 1 or M, or None;
    colsum_b: int32 [N], the weight's column sums over all of K
    (weight_colsum), required with azp. Every tensor on one device, the
    group's (a CPU tensor needs a gloo group, a CUDA one NCCL). Returns
    [M, N] of out_dtype on every rank.
    Raises what gemm_s8s8s32, torch.distributed.all_reduce and
    scaled_epilogue raise (TypeError, ValueError, RuntimeError); the
    all-reduce is collective, so every rank of the group must call it.
    """
    acc = _smt.ops.gemm_s8s8s32(a_shard, weight_shard)
    dist.all_reduce(acc, op=dist.ReduceOp.SUM, group=group)
    return _smt.ops.scaled_epilogue(acc, scale_a, scale_b, out_dtype, bias, azp, colsum_b)
