"""scaledmm: int8 (w8a8) scaled matrix multiplication, bit-exact across backends.

The NumPy API (this module) needs no torch:
    scaled_mm, gemm_s8s8s32, quantize_i8, pack_b, Context, info, Error
The PyTorch ops and ScaledMMLinear live in scaledmm.torch.

Every number follows the numerics contract of the C library
(doc/numerics.md in the repository): every backend, shape, stride and
thread count gives the same bits as the scalar reference.
"""
from ._core import Error, PackedB
from ._numpy import (Context, bfloat16, context, gemm_s8s8s32, info, pack_b, quantize_i8,
                     scaled_mm)

__version__ = "0.1.0"
CONTRACT_VERSION = 1

__all__ = ["Context", "Error", "PackedB", "bfloat16", "context", "gemm_s8s8s32", "info",
           "pack_b", "quantize_i8", "scaled_mm", "__version__"]
