"""scaledmm for PyTorch: custom ops on CPU and GPU tensors, and ScaledMMLinear.

Importing this module makes the operators available as torch.ops.scaledmm.*:

    scaled_mm(a, b, scale_a, scale_b, out_dtype, bias=None, azp=None) -> Tensor
    scaled_mm_out(a, b, scale_a, scale_b, bias, azp, out) -> ()
    gemm_s8s8s32(a, b) -> Tensor
    scaled_epilogue(acc, scale_a, scale_b, out_dtype, bias=None, azp=None, colsum_b=None) -> Tensor
    quantize_i8(x, scale=None, azp=None, symmetric=True) -> (q, scale, azp)
    pack_b(weight) -> PackedB
    scaled_mm_packed(a, b: PackedB, scale_a, scale_b, out_dtype, bias=None, azp=None) -> Tensor
    scaled_mm_packed_out(a, b: PackedB, scale_a, scale_b, bias, azp, out) -> ()
    linear_packed(x, b: PackedB, scale_b, out_dtype, bias=None, x_scale=None, x_azp=None,
                  symmetric=True) -> (out, q, scale, azp)

PackedB (torch.classes.scaledmm.PackedB, a TorchScript custom class) is a
weight packed once for the library's kernels on one device (see pack_b);
scaled_mm_packed gives the bits of scaled_mm with the unpacked weight, and
skips the packing work scaled_mm redoes on every call. linear_packed is
quantize_i8 followed by scaled_mm_packed in one call (smm_linear), with
the same bits.

Call the ops that take a PackedB through this module's functions
(scaled_mm_packed, linear_packed) or call_packed(op, *args): called as
torch.ops.scaledmm.* from Python, each call pays about 15 us more for
torch's __torch_function__ lookup on the PackedB (see call_packed).

They are C++ operators registered with torch's dispatcher, compiled against
the installed torch the first time this module is imported (about a minute,
with ninja and a C++ compiler; the result is cached in
$SCALEDMM_TORCH_BUILD_DIR, default ~/.cache/scaledmm/torch_ops/<torch
version>), and linked to the libscaledmm bundled with the package. Each op
has a fake (meta) kernel, so torch.compile(fullgraph=True) traces through
them, and torch.library.opcheck passes.

The tensors' device picks the backend: CPU tensors run on the library's cpu
backend (set_cpu_backend("reference") selects the scalar reference), CUDA
tensors on the cuda backend (rocm under a ROCm build of torch) on the
tensors' device and torch's current stream there, so CUDA-graph capture
records them. Every number is the numerics contract's (doc/numerics.md):
the same bits on every backend and for every batch size, so a row's result
never depends on the rows batched with it.

Bad input (wrong dtype, device, shape, or a view that a leading dimension
cannot express) raises TypeError, ValueError or RuntimeError naming the
argument, and nothing is written.
"""
from __future__ import annotations

import hashlib
import logging
import os
import re
import sys
import weakref
from pathlib import Path
from typing import Callable, List, Optional, Union

import torch

from . import _core

_PKG = Path(__file__).resolve().parent


def _build_dir() -> Path:
    src = (_PKG / "csrc" / "torch_ops.cpp").read_bytes() + (_PKG / "include" / "scaledmm.h").read_bytes()
    tag = "torch%s-py%d%d-%s" % (torch.__version__, sys.version_info[0], sys.version_info[1],
                                 hashlib.sha256(src).hexdigest()[:12])
    base = os.environ.get("SCALEDMM_TORCH_BUILD_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "scaledmm", "torch_ops")
    return Path(base) / re.sub(r"[^A-Za-z0-9_.+-]", "_", tag)


def _load_ops() -> None:
    try:
        torch.ops.scaledmm.scaled_mm   # already registered in this process
        return
    except (AttributeError, RuntimeError):
        pass
    build = _build_dir()
    built = build / "scaledmm_torch_ops.so"
    if built.is_file():   # the folder's name carries the sources' hash
        torch.ops.load_library(str(built))
        return
    from torch.utils import cpp_extension

    build.mkdir(parents=True, exist_ok=True)
    libdir = _PKG / "_lib"
    print("scaledmm: compiling the PyTorch ops for torch %s in %s (once)" % (torch.__version__, build),
          file=sys.stderr)
    cpp_extension.load(
        name="scaledmm_torch_ops",
        sources=[str(_PKG / "csrc" / "torch_ops.cpp")],
        extra_include_paths=[str(_PKG / "include")],
        extra_cflags=["-O2"],
        extra_ldflags=["-L%s" % libdir, "-l:libscaledmm.so.0", "-Wl,-rpath,%s" % libdir],
        build_directory=str(build),
        is_python_module=False,
        verbose=False,
    )


_load_ops()
ops = torch.ops.scaledmm
ops._set_backends(_core.SMM_BACKEND_CPU,
                  _core.SMM_BACKEND_ROCM if getattr(torch.version, "hip", None) else _core.SMM_BACKEND_CUDA)


def call_packed(op, *args):
    """op(*args) for an op that takes a PackedB as its second argument
    (scaled_mm_packed, scaled_mm_packed_out, linear_packed); the same
    result and errors.

    Before an op runs, torch looks up __torch_function__ on every argument;
    on a PackedB (a torch.ScriptObject) that lookup raises and catches an
    AttributeError, about 15 us a call (CPU, 2-vCPU EPYC; the unpacked op
    costs 7 us there on a small problem). Where no other argument overrides
    __torch_function__ (torch.overrides.has_torch_function: tensor
    subclasses that override it, fx proxies, an active torch function
    mode), the op is called with subclass overrides disabled, which skips
    those lookups and nothing else; otherwise, and under torch.compile, the
    op is called as it is.
    """
    others = args[:1] + args[2:]   # the PackedB is the second argument of each
    if torch.compiler.is_compiling() or torch._C._has_torch_function(others):
        return op(*args)
    with torch._C.DisableTorchFunctionSubclass():
        return op(*args)


# ---------------------------------------------------------------------- #
# Fake (meta) kernels: shapes and dtypes only, for torch.compile / export #
# ---------------------------------------------------------------------- #
@torch.library.register_fake("scaledmm::scaled_mm")
def _scaled_mm_fake(a, b, scale_a, scale_b, out_dtype, bias=None, azp=None):
    torch._check(a.dim() == 2 and b.dim() == 2, lambda: "scaledmm.scaled_mm: a and b must be 2-D")
    torch._check(a.dtype == torch.int8 and b.dtype == torch.int8,
                 lambda: "scaledmm.scaled_mm: a and b must be int8")
    return a.new_empty((a.shape[0], b.shape[0]), dtype=out_dtype)


@torch.library.register_fake("scaledmm::scaled_mm_out")
def _scaled_mm_out_fake(a, b, scale_a, scale_b, bias, azp, out):
    return None


@torch.library.register_fake("scaledmm::gemm_s8s8s32")
def _gemm_fake(a, b):
    torch._check(a.dim() == 2 and b.dim() == 2, lambda: "scaledmm.gemm_s8s8s32: a and b must be 2-D")
    return a.new_empty((a.shape[0], b.shape[0]), dtype=torch.int32)


@torch.library.register_fake("scaledmm::scaled_epilogue")
def _scaled_epilogue_fake(acc, scale_a, scale_b, out_dtype, bias=None, azp=None, colsum_b=None):
    torch._check(acc.dim() == 2, lambda: "scaledmm.scaled_epilogue: acc must be 2-D")
    torch._check(acc.dtype == torch.int32, lambda: "scaledmm.scaled_epilogue: acc must be int32")
    return acc.new_empty(acc.shape, dtype=out_dtype)


@torch.library.register_fake("scaledmm::quantize_i8")
def _quantize_fake(x, scale=None, azp=None, symmetric=True):
    torch._check(x.dim() == 2, lambda: "scaledmm.quantize_i8: x must be 2-D")
    q = x.new_empty(x.shape, dtype=torch.int8)
    if scale is not None:
        s = scale.new_empty(scale.shape)
        z = azp.new_empty(azp.shape) if azp is not None else x.new_empty((0,), dtype=torch.int32)
    else:
        s = x.new_empty((x.shape[0],), dtype=torch.float32)
        z = x.new_empty((0 if symmetric else x.shape[0],), dtype=torch.int32)
    return q, s, z


@torch.library.register_fake("scaledmm::scaled_mm_packed")
def _scaled_mm_packed_fake(a, b, scale_a, scale_b, out_dtype, bias=None, azp=None):
    """scaled_mm_packed's shapes: a int8 [M, K] and b (a PackedB, or its fake
    object) of K columns on a's device -> an empty [M, b.n()] of out_dtype
    on a's device. Raises (torch._check) when a is not int8 2-D, K differs
    or the devices differ."""
    torch._check(a.dim() == 2, lambda: "scaledmm.scaled_mm_packed: a must be 2-D")
    torch._check(a.dtype == torch.int8, lambda: "scaledmm.scaled_mm_packed: a must be int8")
    torch._check(a.shape[1] == b.k(), lambda: "scaledmm.scaled_mm_packed: K of a differs from b's")
    if a.device.type != "meta":
        torch._check(str(a.device) == b.device(), lambda: "scaledmm.scaled_mm_packed: b was "
                     "packed for %s but a is on %s" % (b.device(), a.device))
    return a.new_empty((a.shape[0], b.n()), dtype=out_dtype)


@torch.library.register_fake("scaledmm::linear_packed")
def _linear_packed_fake(x, b, scale_b, out_dtype, bias=None, x_scale=None, x_azp=None,
                        symmetric=True):
    """linear_packed's shapes: x float [M, K] and b (a PackedB, or its fake
    object) of K columns on x's device -> (out [M, b.n()] of out_dtype,
    q int8 [M, K], scale, azp) as quantize_i8's fake kernel gives them, all
    empty, on x's device. Raises (torch._check) when x is not 2-D float,
    K differs or the devices differ."""
    torch._check(x.dim() == 2, lambda: "scaledmm.linear_packed: x must be 2-D")
    torch._check(x.dtype in (torch.float32, torch.float16, torch.bfloat16),
                 lambda: "scaledmm.linear_packed: x must be float32, float16 or bfloat16")
    torch._check(x.shape[1] == b.k(), lambda: "scaledmm.linear_packed: K of x differs from b's")
    if x.device.type != "meta":
        torch._check(str(x.device) == b.device(), lambda: "scaledmm.linear_packed: b was "
                     "packed for %s but x is on %s" % (b.device(), x.device))
    out = x.new_empty((x.shape[0], b.n()), dtype=out_dtype)
    q, s, z = _quantize_fake(x, x_scale, x_azp, symmetric)
    return out, q, s, z


@torch.library.register_fake("scaledmm::scaled_mm_packed_out")
def _scaled_mm_packed_out_fake(a, b, scale_a, scale_b, bias, azp, out):
    """scaled_mm_packed_out writes out in place and returns nothing."""
    return None


@torch._library.register_fake_class("scaledmm::PackedB")
class _FakePackedB:
    """What torch.compile sees of a PackedB while tracing: its flattened
    state (PackedB.__obj_flatten__: n, k, format, device, backend), no
    packed data. Methods as the real class's."""

    def __init__(self, n: int, k: int, format: str, device: str, backend: str):
        """n, k: the weight's [N, K]; format, device, backend: as the real
        object's methods return them."""
        self._n, self._k, self._format, self._device, self._backend = n, k, format, device, backend

    @classmethod
    def __obj_unflatten__(cls, flattened):
        """The fake object of a real one's __obj_flatten__() pairs."""
        return cls(**dict(flattened))

    def n(self) -> int:
        """N, the packed weight's rows (output features)."""
        return self._n

    def k(self) -> int:
        """K, the packed weight's columns (input features)."""
        return self._k

    def format(self) -> str:
        """The packed layout (smm_packed_b_format)."""
        return self._format

    def device(self) -> str:
        """The device packed for: "cpu" or "cuda:N"."""
        return self._device

    def backend(self) -> str:
        """The library backend packed for ("cpu", "reference", "cuda", "rocm")."""
        return self._backend


class _PackedBDeepcopyNote(logging.Filter):
    """Drops torch's warning that a PackedB cannot be deep-copied, logged
    each time torch.compile makes its fake object. PackedB has no mutating
    method, so the tracer's fallback (keeping the object itself rather
    than a copy) is safe; copying it would duplicate the packed weight."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (isinstance(record.msg, str)
                    and record.msg.startswith("Unable to deepcopy the custom object")
                    and any("scaledmm.PackedB" in str(a) for a in (record.args or ())))


logging.getLogger("torch._library.fake_class_registry").addFilter(_PackedBDeepcopyNote())


# ---------------------------------------------------------------------- #
# Python conveniences                                                     #
# ---------------------------------------------------------------------- #
_backend_generation = 0   # set_cpu_backend calls so far (ScaledMMLinear repacks on a change)


def set_cpu_backend(name: str) -> None:
    """Which library backend runs the ops on CPU tensors: "cpu" (default,
    the blocked OpenMP kernels) or "reference" (the scalar reference). The
    results are the same bits; the reference is slow and meant for tests.
    A PackedB made before the change can no longer be used on CPU tensors
    (scaled_mm_packed raises ValueError); ScaledMMLinear packs its weight
    again. Raises ValueError for another name."""
    global _backend_generation
    code = _core.backend_from_name(name)
    gpu = _core.SMM_BACKEND_ROCM if getattr(torch.version, "hip", None) else _core.SMM_BACKEND_CUDA
    ops._set_backends(code, gpu)
    _backend_generation += 1


def set_num_threads(n: int) -> None:
    """Threads for the ops' work on CPU tensors. 0 (the default): the
    library's OpenMP default (OMP_NUM_THREADS, else every core), fewer on
    problems too small to share; n > 0: n threads. torch.set_num_threads
    does not apply. Results never depend on it."""
    ops._set_num_threads(int(n))


def _out_dtype(op: str, out_dtype: Optional[torch.dtype], out: Optional[torch.Tensor]) -> torch.dtype:
    """The output dtype of scaled_mm / scaled_mm_packed: out_dtype, else
    out's dtype, else float32; TypeError when out_dtype and out disagree."""
    if out is None:
        return torch.float32 if out_dtype is None else out_dtype
    if out_dtype is not None and out_dtype != out.dtype:
        raise TypeError("scaledmm.%s: out has dtype %s but out_dtype is %s"
                        % (op, out.dtype, out_dtype))
    return out.dtype


def scaled_mm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
              out_dtype: Optional[torch.dtype] = None, bias: Optional[torch.Tensor] = None,
              azp: Optional[torch.Tensor] = None, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """C = epilogue(a @ b.T), the w8a8 linear layer (smm_scaled_mm).

    a: int8 [M, K]; b: int8 [N, K] (a checkpoint's [out_features,
    in_features]); scale_a: float32 with 1 (per-tensor) or M (per-token)
    elements; scale_b: float32, 1 (per-tensor) or N (per-channel); bias:
    float32 [N] or None; azp: int32 activation zero points, 1 or M elements,
    or None; out_dtype: torch.float32, float16 or bfloat16 (None: out's
    dtype, else float32); out: an [M, N] tensor of that dtype to write
    into (TypeError when out_dtype names another). All on one device.
    Per element (doc/numerics.md): acc = sum_k a*b (int32, wrapping),
    acc -= azp*colsum(b); t = float(acc)*sb; c = sa*t, fma(sa, t, bias) or
    fma(sa, t, +0) with azp; rounded to out_dtype, NaN canonical.
    """
    out_dtype = _out_dtype("scaled_mm", out_dtype, out)
    if out is not None:
        ops.scaled_mm_out(a, b, scale_a, scale_b, bias, azp, out)
        return out
    return ops.scaled_mm(a, b, scale_a, scale_b, out_dtype, bias, azp)


PackedB = torch.ScriptObject   # the type of pack_b's result (torch.classes.scaledmm.PackedB)


def pack_b(weight: torch.Tensor) -> PackedB:
    """Packs a weight once for scaled_mm_packed (smm_pack_b).

    weight: int8 [N, K] (a checkpoint's [out_features, in_features]), on a
    CPU or CUDA device; its rows may be strided, its last dimension must be
    contiguous. Returns a torch.classes.scaledmm.PackedB holding a packed
    copy (independent of weight, which may then change or be freed) in the
    layout the kernels of weight's device compute from: on CPU that of the
    library's CPU level (about 1 to 3 bytes per element of the weight), on
    a GPU a device copy of the rows. Its methods: n(), k(), format() (the
    packed layout, e.g. "cpu avx512_vnni int8 panels 16 rows x k4 +
    colsums"), device() ("cpu" or "cuda:N", the device it may be used on)
    and backend() (the library backend it was packed for). It cannot be
    pickled or deep-copied; repack the weight instead.
    On CUDA, packing waits for the device and must not run while a CUDA
    graph is being captured. Raises TypeError (weight not int8),
    ValueError (not 2-D, last dimension not contiguous), NotImplementedError
    (a device other than CPU and CUDA, e.g. meta) or RuntimeError (the
    library's error, e.g. out of memory).
    """
    return ops.pack_b(weight)


def scaled_mm_packed(a: torch.Tensor, b: PackedB, scale_a: torch.Tensor, scale_b: torch.Tensor,
                     out_dtype: Optional[torch.dtype] = None, bias: Optional[torch.Tensor] = None,
                     azp: Optional[torch.Tensor] = None,
                     out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """scaled_mm with the weight packed by pack_b: the same bits as
    scaled_mm(a, weight, ...), without the per-call packing work.

    a: int8 [M, K] (rows may be strided, last dimension contiguous) on the
    device b was packed for (b.device()); b: a PackedB of a weight [N, K];
    scale_a: float32, 1 or M elements; scale_b: float32, 1 or N; bias:
    float32 [N] or None; azp: int32, 1 or M elements, or None; out_dtype:
    torch.float32, float16 or bfloat16 (None: out's dtype, else float32);
    out: an [M, N] tensor of that dtype to write into (last dimension
    contiguous). Returns the [M, N] result.
    Raises TypeError (a dtype, out_dtype naming another than out's), ValueError (a shape, K differing from b's,
    a on another device than b, b packed for another backend than the one
    now set for that device, a tensor that is not contiguous where needed)
    or RuntimeError (the library's errors, e.g. out overlapping an input);
    nothing is written then.
    """
    out_dtype = _out_dtype("scaled_mm_packed", out_dtype, out)
    if out is not None:
        call_packed(ops.scaled_mm_packed_out, a, b, scale_a, scale_b, bias, azp, out)
        return out
    return call_packed(ops.scaled_mm_packed, a, b, scale_a, scale_b, out_dtype, bias, azp)


def linear_packed(x: torch.Tensor, b: PackedB, scale_b: torch.Tensor,
                  out_dtype: Optional[torch.dtype] = None, bias: Optional[torch.Tensor] = None,
                  x_scale: Optional[torch.Tensor] = None, x_azp: Optional[torch.Tensor] = None,
                  symmetric: bool = True):
    """The w8a8 linear layer in one call (smm_linear): quantizes x to int8
    and multiplies it by the packed weight with the scales and bias in the
    fused epilogue. Bit for bit the two calls

        q, scale, azp = quantize_i8(x, x_scale, x_azp, symmetric)
        out = scaled_mm_packed(q, b, scale, scale_b, out_dtype, bias, azp)

    (their out, q, scale and azp), without the int8 activations' round
    trip through a separate op.

    x: float32, float16 or bfloat16 [M, K] activations, row-major (rows
    may be strided, the last dimension contiguous), on the device b was
    packed for (b.device()); b: a PackedB of a weight [N, K] (pack_b);
    scale_b: float32 weight scales, 1 (per-tensor) or N (per-channel)
    elements, contiguous; out_dtype: torch.float32, float16 or bfloat16
    (None: x.dtype); bias: float32 [N] (N elements, contiguous) or None.
    Activations: x_scale given (float32, 1 element) is static per-tensor
    quantization, x_azp (int32, 1 element) its zero point (required with
    symmetric=False); x_scale None is dynamic per-token, one scale per row
    (amax / 127), or with symmetric=False (max - min) / 255 and a zero point
    per row. Every tensor on x's device.
    Returns (out [M, N] of out_dtype, row-major; q int8 [M, K]; scale
    float32: a copy of x_scale (static) or [M] (dynamic), in the units of
    x per integer step; azp int32: a copy of x_azp, [M] (dynamic,
    symmetric=False), or None when the quantization is symmetric). On a GPU
    the op allocates q, scale and azp with torch (the library allocates
    no device memory per call) and runs on torch's current stream.
    Raises TypeError (a dtype: x, scale_b, bias, x_scale, x_azp, out_dtype),
    ValueError (x not 2-D or its last dimension not contiguous, K differing
    from b's, scale_b not 1 or N elements, bias not N, x_scale or x_azp not
    one element, a tensor not contiguous, a tensor on another device than
    x, b packed for another device or for another backend than the one now
    set for that device, symmetric=False with x_scale but no x_azp, x_azp
    without x_scale), NotImplementedError (a device other than CPU, CUDA
    and meta; meta tensors give empty results of the shapes above) or
    RuntimeError (the library's errors, e.g. out of memory); nothing is
    written then.
    """
    if out_dtype is None:
        out_dtype = x.dtype
    out, q, s, z = call_packed(ops.linear_packed, x, b, scale_b, out_dtype, bias, x_scale,
                               x_azp, symmetric)
    return out, q, s, (z if (x_azp is not None or not symmetric) else None)


def gemm_s8s8s32(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The raw accumulators a @ b.T as int32 [M, N], wrapping modulo 2^32
    (exact whenever K <= 131071). a: int8 [M, K]; b: int8 [N, K]."""
    return ops.gemm_s8s8s32(a, b)


def scaled_epilogue(acc: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                    out_dtype: torch.dtype = torch.float32, bias: Optional[torch.Tensor] = None,
                    azp: Optional[torch.Tensor] = None,
                    colsum_b: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The epilogue of scaled_mm alone, on int32 accumulators (the library's
    smm_scaled_epilogue; doc/numerics.md, "Epilogue"):

        acc' = acc - azp[m] * colsum_b[n]      (int32, wrapping; with azp)
        out  = the scaled_mm epilogue of acc' with scale_a, scale_b, bias

    Bit for bit scaled_mm(a, b, scale_a, scale_b, out_dtype, bias, azp) when
    acc = gemm_s8s8s32(a, b) and colsum_b = the int32 column sums of b
    (b.sum(dim=1, dtype=torch.int32)), also when acc is the wrapping int32
    sum of the accumulators of slices of K (tensor parallelism:
    scaledmm.distributed, doc/tensor-parallel.md).

    acc: int32 [M, N] (rows may be strided, last dimension contiguous);
    scale_a: float32, 1 (per-tensor) or M (per-token) elements; scale_b:
    float32, 1 or N (per-channel); bias: float32 [N] or None; azp: int32
    activation zero points, 1 or M elements, or None; colsum_b: int32 [N],
    required with azp (ignored without); out_dtype: torch.float32, float16
    or bfloat16. Every tensor on acc's device (CPU or CUDA). Returns out
    [M, N] of out_dtype, row-major.
    Raises TypeError (a dtype), ValueError (a shape or length, a tensor not
    contiguous, a tensor on another device, azp without colsum_b) or
    RuntimeError (the library's errors); nothing is written then.
    """
    return ops.scaled_epilogue(acc, scale_a, scale_b, out_dtype, bias, azp, colsum_b)


def quantize_i8(x: torch.Tensor, scale: Optional[torch.Tensor] = None,
                azp: Optional[torch.Tensor] = None, symmetric: bool = True):
    """Quantizes activations x (float32 / float16 / bfloat16 [M, K]) to int8
    (smm_quantize_i8, the formulas of vLLM's scaled_quant.cu).

    scale given (float32, 1 element): static per-tensor; azp (int32, 1
    element) adds a zero point. scale None: dynamic per-token, one scale per
    row (amax / 127), or with symmetric=False (max - min) / 255 and a zero
    point per row. Returns (q int8 [M, K], scale float32, azp int32 or None).
    """
    q, s, z = ops.quantize_i8(x, scale, azp, symmetric)
    return q, s, (z if (azp is not None or not symmetric) else None)


def current_stream_handle(device: Union[str, torch.device]) -> int:
    """The raw stream handle the ops queue work on for `device` (torch's
    current stream there); 0 for the default stream."""
    return ops._current_stream_handle(torch.device(device))


# ---------------------------------------------------------------------- #
# ScaledMMLinear                                                          #
# ---------------------------------------------------------------------- #
def quantize_weight(weight: torch.Tensor):
    """Per-channel symmetric int8 weights with compressed-tensors' formula,
    the one `scaledmm quantize` writes (doc/accuracy.md), per output row w:
    amax = max(|min(w, 0)|, max(w, 0)); scale = amax / 127.5 (float32, or
    float32's eps when 0); q = round_half_even(clamp(w / scale, -128, 127)).
    weight: float [N, K] (widened to float32 exactly). Returns (q int8
    [N, K], scale float32 [N]) on weight's device. The arithmetic runs on
    the CPU whatever the device: torch's CUDA division by a scalar
    multiplies by its reciprocal, which is not the formula's rounding."""
    w = weight.detach().to("cpu", torch.float32)
    amax = torch.maximum(w.clamp(max=0).amin(dim=1).abs(), w.clamp(min=0).amax(dim=1))
    scale = amax / 127.5
    scale = torch.where(scale == 0, torch.full_like(scale, torch.finfo(torch.float32).eps), scale)
    q = torch.round((w / scale[:, None]).clamp(-128, 127)).to(torch.int8)
    return q.to(weight.device), scale.to(weight.device)


class ScaledMMLinear(torch.nn.Module):
    """A w8a8 Linear: y = dequant(quant(x) @ W_q^T) + bias, through scaledmm.

    Buffers: weight int8 [N, K]; weight_scale float32 [N] (per-channel) or
    [1] (per-tensor); bias float32 [N] or None; input_scale float32 [1] or
    None (None: dynamic per-token activations); input_zero_point int32 [1]
    or None (static asymmetric activations). `symmetric` (dynamic only):
    False quantizes each row with its own zero point.

    forward(x): x float32 / float16 / bfloat16 [..., K]. The activations
    are quantized (dynamic per-token, or static per-tensor) and multiplied
    by the packed int8 weights with the scales and the bias in the fused
    epilogue, in one call (linear_packed, out_dtype = x.dtype: the bits of
    quantize_i8 followed by scaled_mm_packed). Every output
    bit is the numerics contract's, so a row's result does not depend on
    the other rows of the batch. Returns [..., N] of x.dtype.

    Packed weight: the weight is packed once (pack_b) for its device, by
    .to() / .cuda() / .cpu() (any Module._apply) or by the first forward,
    and packed again when it has changed since: moved to another device,
    replaced by another tensor, written in place through torch (its
    version counter moves) or after set_cpu_backend; load_state_dict packs
    the loaded weight at once. Writes the version counter does not see are
    not seen: through weight.data or a NumPy view, or under
    torch.inference_mode (inference tensors have no version counter); call
    pack() after them. The packed copy is not a buffer: state_dict holds
    the int8 weight only, as it always has. Under torch.compile the packed
    weight is used as it is when tracing (no change is looked for, but
    load_state_dict and pack() replace it and the compiled module follows);
    a module never packed before compiling (no forward, no .to()) runs
    quantize_i8 and scaled_mm on the unpacked weight there, with the same
    bits.

    Dtypes: weight_scale, bias and input_scale stay float32 through
    .to(dtype), .half(), .bfloat16() and the like (only moved): the
    contract's epilogue takes float32, and a cast would change the results.
    Inference only: backward through the output raises (the ops have no
    derivative).
    """

    _F32_BUFFERS = ("weight_scale", "bias", "input_scale")

    def __init__(self, weight: torch.Tensor, weight_scale: torch.Tensor,
                 bias: Optional[torch.Tensor] = None, input_scale: Optional[torch.Tensor] = None,
                 input_zero_point: Optional[torch.Tensor] = None, symmetric: bool = True):
        super().__init__()
        if weight.dtype != torch.int8 or weight.dim() != 2:
            raise TypeError("ScaledMMLinear: weight must be int8 [N, K], got %s %s"
                            % (weight.dtype, tuple(weight.shape)))
        n, k = weight.shape
        ws = weight_scale.detach().to(torch.float32).reshape(-1).contiguous()
        if ws.numel() not in (1, n):
            raise ValueError("ScaledMMLinear: weight_scale has %d elements; expected 1 or %d"
                             % (ws.numel(), n))
        self.in_features, self.out_features = k, n
        self.register_buffer("weight", weight.detach().contiguous())
        self.register_buffer("weight_scale", ws)
        self.register_buffer("bias", None if bias is None else
                             bias.detach().to(torch.float32).reshape(-1).contiguous())
        if self.bias is not None and self.bias.numel() != n:
            raise ValueError("ScaledMMLinear: bias has %d elements; expected %d" % (self.bias.numel(), n))
        self.register_buffer("input_scale", None if input_scale is None else
                             input_scale.detach().to(torch.float32).reshape(-1).contiguous())
        if self.input_scale is not None and self.input_scale.numel() != 1:
            raise ValueError("ScaledMMLinear: input_scale must have one element (static per-tensor)")
        self.register_buffer("input_zero_point", None if input_zero_point is None else
                             input_zero_point.detach().to(torch.int32).reshape(-1).contiguous())
        if self.input_zero_point is not None and self.input_scale is None:
            raise ValueError("ScaledMMLinear: input_zero_point needs input_scale (static activations)")
        self.symmetric = bool(symmetric) if input_scale is None else input_zero_point is None
        self._packed = None        # PackedB of weight, or None
        self._packed_key = None    # _weight_key() when _packed was made
        self._packed_ref = None    # a weak reference to the weight tensor packed

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear, symmetric: bool = True,
                    input_scale: Optional[torch.Tensor] = None,
                    input_zero_point: Optional[torch.Tensor] = None) -> "ScaledMMLinear":
        """Quantizes a float nn.Linear: per-channel symmetric int8 weights
        (quantize_weight), the bias widened to float32 exactly, activations
        dynamic per-token (symmetric, or with zero points when
        symmetric=False) unless a static input_scale (and zero point) is
        given. The module keeps the Linear's device."""
        q, s = quantize_weight(linear.weight)
        return cls(q, s, linear.bias, input_scale, input_zero_point, symmetric)

    @classmethod
    def from_compressed_tensors(cls, weight: torch.Tensor, weight_scale: torch.Tensor,
                                bias: Optional[torch.Tensor] = None,
                                input_scale: Optional[torch.Tensor] = None,
                                input_zero_point: Optional[torch.Tensor] = None,
                                symmetric: bool = True) -> "ScaledMMLinear":
        """A layer of a compressed-tensors int8 checkpoint: weight (I8
        [N, K]), weight_scale ([N, 1], [N] or one element), optional bias,
        input_scale (static activations) and input_zero_point (static
        asymmetric); scales and bias are widened to float32 exactly."""
        return cls(weight, weight_scale, bias, input_scale, input_zero_point, symmetric)

    def extra_repr(self) -> str:
        act = "dynamic per-token" if self.input_scale is None else "static per-tensor"
        return "in_features=%d, out_features=%d, bias=%s, activations=%s %s, weights=%s" % (
            self.in_features, self.out_features, self.bias is not None, act,
            "symmetric" if self.symmetric else "asymmetric",
            "per-channel" if self.weight_scale.numel() > 1 or self.out_features == 1 else "per-tensor")

    def _weight_key(self):
        """What the packed weight depends on: the weight's device, address
        and version counter (bumped by in-place writes), and the CPU
        backend's setting (with _packed_ref: which tensor it is)."""
        w = self.weight
        try:
            version = w._version
        except RuntimeError:   # an inference tensor (made under torch.inference_mode)
            version = None
        return (w.device, w.data_ptr(), version, _backend_generation)

    def _packed_stale(self) -> bool:
        """Whether the packed weight (or its absence) no longer matches the
        weight: another key, or another tensor object at the same address
        (a replaced weight whose storage reused the old one's)."""
        ref = self._packed_ref
        return (self._packed_key != self._weight_key()
                or (ref is not None and ref() is not self.weight))

    def pack(self) -> Optional[PackedB]:
        """Packs the weight for its device now (pack_b) and keeps the
        PackedB for forward; returns it. A weight on a device the ops do
        not run on (e.g. meta) is not packed: returns None. Raises what
        pack_b raises."""
        key = self._weight_key()
        if key[0].type not in ("cpu", "cuda"):
            self._packed, self._packed_key, self._packed_ref = None, None, None
            return None
        self._packed = None   # the old packed copy is freed before the new one is made
        self._packed = ops.pack_b(self.weight)
        self._packed_key, self._packed_ref = key, weakref.ref(self.weight)
        return self._packed

    def _apply(self, fn, recurse=True):
        """Module._apply (.to(), .cuda(), .cpu(), ...), keeping the float32
        buffers float32 (a dtype cast only moves them), then packs the
        weight again if it has changed (a weight not on CPU or CUDA is left
        unpacked)."""
        before = {name: self._buffers.get(name) for name in self._F32_BUFFERS}
        result = super()._apply(fn, recurse)
        for name, old in before.items():
            new = self._buffers.get(name)
            if old is not None and new is not None and new.dtype != torch.float32:
                self._buffers[name] = old.to(device=new.device)
        if self._packed_stale():
            self.pack()
        return result

    def _load_from_state_dict(self, *args, **kwargs):
        """Module's loading of this module's entries, then the loaded
        weight packed at once (a weight not on CPU or CUDA is left
        unpacked), so that no forward, compiled or not, uses the old one."""
        super()._load_from_state_dict(*args, **kwargs)
        self.pack()

    def __getstate__(self):
        """The module's state for pickle and copy.deepcopy, without the
        packed weight (not picklable); the copy packs its own."""
        state = self.__dict__.copy()
        state["_packed"], state["_packed_key"], state["_packed_ref"] = None, None, None
        return state

    def __setstate__(self, state):
        """Restores a pickled or copied module (one pickled before packing
        existed included); its weight is packed again when first used."""
        super().__setstate__(state)
        self.__dict__.setdefault("_packed", None)
        self.__dict__.setdefault("_packed_key", None)
        self.__dict__.setdefault("_packed_ref", None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2 = x.reshape(-1, self.in_features)
        # The ops read rows whose last dimension is contiguous (an fx
        # Proxy's strides are unknown: its graph keeps the op's check).
        if not isinstance(x2, torch.fx.Proxy) and x2.stride(-1) != 1:
            x2 = x2.contiguous()
        packed = self._packed
        if not torch.compiler.is_compiling() and self._packed_stale():
            packed = self.pack()
        if packed is None:   # weight not packed (see the class's docstring): the same bits
            q, s, z = ops.quantize_i8(x2, self.input_scale, self.input_zero_point, self.symmetric)
            azp = None if self.symmetric else z
            y = ops.scaled_mm(q, self.weight, s, self.weight_scale, x.dtype, self.bias, azp)
        else:
            y = call_packed(ops.linear_packed, x2, packed, self.weight_scale, x.dtype,
                            self.bias, self.input_scale, self.input_zero_point,
                            self.symmetric)[0]
        return y.reshape(x.shape[:-1] + (self.out_features,))


def replace_linear(model: torch.nn.Module,
                   filter: Union[None, str, Callable[[str, torch.nn.Module], bool]] = None,
                   **kwargs) -> List[str]:
    """Replaces, in place, every torch.nn.Linear of `model` whose qualified
    name passes `filter` (None: all; a string: a regular expression searched
    in the name; a callable: filter(name, module) -> bool) by
    ScaledMMLinear.from_linear(linear, **kwargs). Returns the names
    replaced, in module order."""
    if isinstance(filter, str):
        pattern = re.compile(filter)
        keep = lambda name, mod: pattern.search(name) is not None  # noqa: E731
    elif filter is None:
        keep = lambda name, mod: True  # noqa: E731
    else:
        keep = filter
    targets = [(name, mod) for name, mod in model.named_modules()
               if name and isinstance(mod, torch.nn.Linear) and keep(name, mod)]
    for name, mod in targets:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, ScaledMMLinear.from_linear(mod, **kwargs))
    return [name for name, _ in targets]


__all__ = ["PackedB", "ScaledMMLinear", "call_packed", "current_stream_handle", "gemm_s8s8s32",
           "linear_packed",
           "ops", "pack_b",
           "quantize_i8", "quantize_weight", "replace_linear", "scaled_mm", "scaled_mm_packed",
           "set_cpu_backend", "set_num_threads"]
