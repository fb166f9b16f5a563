"""The NumPy API: scaledmm's calls on host arrays, with no torch needed.

Every number follows the numerics contract (doc/numerics.md of the
repository): results are bit-for-bit those of the C library's reference
backend, on every backend and thread count.

Layout conventions (those of include/scaledmm.h):
  a   int8 [M, K] activations, b int8 [N, K] weights (the checkpoint's
      [out_features, in_features] layout), c [M, N].
  A 2-D array is passed through its leading dimension: its last axis must
  be contiguous (stride = one element) and its rows evenly spaced, at least
  a row apart; any other view (a transposed one, negative or zero strides)
  is rejected with a message naming the argument. Pass
  ``np.ascontiguousarray(x)`` to copy such a view first.
On any error the call raises scaledmm.Error (status, status_name, message)
and writes nothing.
"""
from __future__ import annotations

import threading
from typing import Optional, Tuple, Union

import numpy as np

from . import _core
from ._core import Error, PackedB

try:  # bfloat16 arrays for NumPy
    import ml_dtypes as _ml_dtypes

    bfloat16 = np.dtype(_ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - ml_dtypes is a dependency
    bfloat16 = None

_BACKENDS = ("auto", "reference", "cpu", "rocm", "cuda")


def _invalid(message: str) -> Error:
    e = Error("%s: %s" % (_core.strerror(_core.SMM_ERR_INVALID_ARG), message))
    e.status = _core.SMM_ERR_INVALID_ARG
    e.status_name = _core.strerror(_core.SMM_ERR_INVALID_ARG)
    e.message = message
    return e


# The names _float_dtype takes, and the dtype each names.
_FLOAT_NAMES = {"float32": "float32", "f32": "float32", "float16": "float16", "f16": "float16",
                "half": "float16", "bfloat16": "bfloat16", "bf16": "bfloat16"}


def _float_dtype(dtype, what: str) -> Tuple[np.dtype, int]:
    """A float32 / float16 / bfloat16 dtype (a dtype or its name) -> (np.dtype, SMM_DTYPE_*)."""
    try:
        name = dtype if isinstance(dtype, str) and dtype in _FLOAT_NAMES else np.dtype(dtype).name
    except TypeError:   # not a dtype numpy knows ("bfloat16" without ml_dtypes, "foo")
        name = dtype if isinstance(dtype, str) else None
    kind = _FLOAT_NAMES.get(name)
    if kind == "float32":
        return np.dtype(np.float32), _core.SMM_DTYPE_F32
    if kind == "float16":
        return np.dtype(np.float16), _core.SMM_DTYPE_F16
    if kind == "bfloat16":
        if bfloat16 is None:
            raise _invalid("%s: bfloat16 needs the ml_dtypes package" % what)
        return bfloat16, _core.SMM_DTYPE_BF16
    raise _invalid("%s: dtype %s is not float32, float16 or bfloat16" % (what, name or dtype))


def _addr(arr: np.ndarray) -> int:
    return arr.__array_interface__["data"][0]


def _matrix(name: str, arr, dtype: np.dtype, shape=None, writeable=False) -> Tuple[int, int]:
    """Checks a 2-D array and returns (address, leading dimension in elements)."""
    if not isinstance(arr, np.ndarray):
        raise _invalid("%s: expected a numpy.ndarray, got %s" % (name, type(arr).__name__))
    if arr.dtype != dtype:
        raise _invalid("%s: dtype %s, expected %s" % (name, arr.dtype, dtype))
    if arr.ndim != 2:
        raise _invalid("%s: %d dimensions, expected 2" % (name, arr.ndim))
    if shape is not None and tuple(arr.shape) != tuple(shape):
        raise _invalid("%s: shape %s, expected %s" % (name, tuple(arr.shape), tuple(shape)))
    if writeable and not arr.flags.writeable:
        raise _invalid("%s: the array is read-only" % name)
    rows, cols = arr.shape
    item = arr.itemsize
    if rows == 0 or cols == 0:
        return _addr(arr), max(cols, 1)
    s0, s1 = arr.strides
    if cols > 1 and s1 != item:
        raise _invalid("%s: the last axis is not contiguous (strides %s for %d-byte elements); "
                       "a transposed or strided view cannot be given as a leading dimension: "
                       "pass numpy.ascontiguousarray(%s)" % (name, arr.strides, item, name))
    if rows == 1:
        return _addr(arr), cols
    if s0 <= 0 or s0 % item:
        raise _invalid("%s: row stride %d bytes is not a positive multiple of the element size %d"
                       % (name, s0, item))
    ld = s0 // item
    if ld < cols:
        raise _invalid("%s: rows overlap (leading dimension %d < %d columns)" % (name, ld, cols))
    return _addr(arr), ld


def _vector(name: str, v, dtype, lengths) -> Tuple[np.ndarray, int]:
    """A per-tensor or per-row vector: a Python number or an array of `dtype`
    with one of `lengths` elements (any shape, e.g. [M, 1]). Returns a
    contiguous 1-D array (kept alive by the caller) and its length."""
    if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool):
        if np.dtype(dtype).kind == "i":
            info = np.iinfo(dtype)
            if isinstance(v, (float, np.floating)) or not info.min <= v <= info.max:
                raise _invalid("%s: %r is not an %s" % (name, v, np.dtype(dtype)))
        arr = np.array([v], dtype=dtype)   # a Python float rounds to float32 here
    elif isinstance(v, np.ndarray):
        if v.dtype != dtype:
            raise _invalid("%s: dtype %s, expected %s" % (name, v.dtype, np.dtype(dtype)))
        # contiguous and aligned to its element (a view at an odd offset is copied)
        arr = np.require(np.ascontiguousarray(v).reshape(-1), requirements=("C", "A"))
    else:
        raise _invalid("%s: expected a number or a numpy.ndarray, got %s" % (name, type(v).__name__))
    if arr.size not in lengths:
        raise _invalid("%s: %d elements, expected %s" % (
            name, arr.size, " or ".join(str(n) for n in sorted(set(lengths)))))
    return arr, arr.size


def _operand_b(b, k: int):
    """B of a matrix multiplication with K = k: a PackedB or an int8 [N, K]
    array. Returns (packed or None, address, ldb, N)."""
    if isinstance(b, PackedB):
        if b.k != k:
            raise _invalid("b: packed K (%d) differs from a's K (%d)" % (b.k, k))
        return b, 0, 0, b.n
    pb, ldb = _matrix("b", b, np.dtype(np.int8))
    if b.shape[1] != k:
        raise _invalid("b: shape %s, expected [N, %d] (K of a)" % (tuple(b.shape), k))
    return None, pb, ldb, b.shape[0]


def _backend_code(backend) -> int:
    if isinstance(backend, int) and not isinstance(backend, bool):
        if not -2 ** 31 <= backend < 2 ** 31:
            raise _invalid("backend: %d is not a backend" % backend)
        return backend
    if not isinstance(backend, str):
        raise _invalid("backend: expected a name (%s), got %r" % (", ".join(_BACKENDS), backend))
    return _core.backend_from_name(backend)


def _check_out(out, shape, dtype, name="out"):
    if out is None:
        return np.empty(shape, dtype=dtype)
    _matrix(name, out, dtype, shape=shape, writeable=True)
    return out


class Context:
    """A scaledmm context on one host backend (smm_context_create).

    backend: "auto" (the fastest host backend; the SMM_BACKEND environment
    variable overrides it), "cpu" or "reference". The GPU backends take
    device memory, which NumPy arrays are not: use the torch ops
    (scaledmm.torch) for GPU tensors. num_threads: threads for CPU work,
    0 = OpenMP's default; results never depend on it.
    Raises scaledmm.Error (SMM_ERR_NOT_AVAILABLE, SMM_ERR_INVALID_ARG).
    A context is not for concurrent use by several threads: give each
    thread its own (the module-level functions do).
    """

    def __init__(self, backend: Union[str, int] = "auto", num_threads: int = 0):
        code = _backend_code(backend)
        self._ctx = _core.Context(code)
        if self._ctx.backend() in (_core.SMM_BACKEND_CUDA, _core.SMM_BACKEND_ROCM):
            got = _core.backend_name(self._ctx.backend())
            self._ctx = None
            raise _invalid("backend %s: NumPy arrays are host memory; the GPU backends take "
                           "device memory (use scaledmm.torch on GPU tensors)" % got)
        if num_threads:
            self._ctx.set_num_threads(int(num_threads))

    @property
    def backend(self) -> str:
        """The concrete backend's name ("cpu", "reference")."""
        return _core.backend_name(self._ctx.backend())

    @property
    def num_threads(self) -> int:
        """Threads for CPU work (0 = OpenMP's default)."""
        return self._ctx.num_threads()

    @num_threads.setter
    def num_threads(self, n: int) -> None:
        self._ctx.set_num_threads(int(n))

    def __repr__(self) -> str:
        return "scaledmm.Context(backend=%r, num_threads=%d)" % (self.backend, self.num_threads)

    # ------------------------------------------------------------------
    def scaled_mm(self, a: np.ndarray, b, scale_a, scale_b, out_dtype=None,
                  bias: Optional[np.ndarray] = None, azp=None,
                  out: Optional[np.ndarray] = None) -> np.ndarray:
        """C = epilogue(A @ B^T), the w8a8 linear layer (smm_scaled_mm).

        a: int8 [M, K]; b: int8 [N, K] (or a PackedB from pack_b);
        scale_a: float32, 1 (per-tensor) or M (per-token) elements;
        scale_b: float32, 1 (per-tensor) or N (per-channel) elements;
        bias: float32 [N] or None; azp: int32 activation zero points,
        1 or M elements, or None; out_dtype: "float32", "float16" or
        "bfloat16" (ml_dtypes.bfloat16 arrays), or a numpy dtype of one of
        them; None: out's dtype, else float32; out: an [M, N] array of
        out_dtype to write into (else one is allocated; an out_dtype naming
        another dtype than out's is an error).
        Per element (doc/numerics.md): acc = sum_k a*b (int32, wrapping),
        acc -= azp*colsum(b); t = float(acc)*sb; c = sa*t, fma(sa,t,bias)
        or fma(sa,t,+0) with azp; rounded to out_dtype, NaN canonical.
        Returns out. Raises scaledmm.Error (nothing written).
        """
        if out is not None and not isinstance(out, np.ndarray):
            raise _invalid("out: expected a numpy.ndarray, got %s" % type(out).__name__)
        if out is None:
            dt, code = _float_dtype("float32" if out_dtype is None else out_dtype, "out_dtype")
        else:
            dt, code = _float_dtype(out.dtype, "out")
            if out_dtype is not None and _float_dtype(out_dtype, "out_dtype")[0] != dt:
                raise _invalid("out_dtype: %s, but out has dtype %s" % (out_dtype, out.dtype))
        pa, lda = _matrix("a", a, np.dtype(np.int8))
        m, k = a.shape
        packed = None
        packed, pb, ldb, n = _operand_b(b, k)
        sa, sa_len = _vector("scale_a", scale_a, np.float32, (1, m))
        sb, sb_len = _vector("scale_b", scale_b, np.float32, (1, n))
        bias_arr, pbias = None, 0
        if bias is not None:
            bias_arr, _ = _vector("bias", bias, np.float32, (n,))
            pbias = _addr(bias_arr)
        azp_arr, pazp, azp_len = None, 0, 0
        if azp is not None:
            azp_arr, azp_len = _vector("azp", azp, np.int32, (1, m))
            pazp = _addr(azp_arr)
        c = _check_out(out, (m, n), dt)
        pc, ldc = _matrix("out", c, dt)
        self._ctx.scaled_mm(m, n, k, pa, lda, pb, ldb, _addr(sa), sa_len, _addr(sb), sb_len,
                            pbias, pazp, azp_len, pc, ldc, code, packed)
        return c

    def gemm_s8s8s32(self, a: np.ndarray, b, out: Optional[np.ndarray] = None) -> np.ndarray:
        """The raw accumulators C = A @ B^T (smm_gemm_s8s8s32).

        a: int8 [M, K]; b: int8 [N, K] or a PackedB; out: int32 [M, N] or
        None. Sums are int32, wrapping modulo 2^32 (exact whenever
        K <= 131071). Returns out. Raises scaledmm.Error (nothing written).
        """
        pa, lda = _matrix("a", a, np.dtype(np.int8))
        m, k = a.shape
        packed, pb, ldb, n = _operand_b(b, k)
        c = _check_out(out, (m, n), np.dtype(np.int32))
        pc, ldc = _matrix("out", c, np.dtype(np.int32))
        if packed is not None:
            self._ctx.gemm_s8s8s32_packed(m, n, k, pa, lda, packed, pc, ldc)
        else:
            self._ctx.gemm_s8s8s32(m, n, k, pa, lda, pb, ldb, pc, ldc)
        return c

    def pack_b(self, b: np.ndarray) -> PackedB:
        """Packs weights b (int8 [N, K]) once for this context's backend
        (smm_pack_b). Pass the result as `b` of scaled_mm / gemm_s8s8s32 on a
        context of the same backend and CPU level: results are bit-for-bit
        those of the unpacked b. The packed copy is independent of b.
        Raises scaledmm.Error."""
        pb, ldb = _matrix("b", b, np.dtype(np.int8))
        n, k = b.shape
        return self._ctx.pack_b(n, k, pb, ldb)

    def quantize_i8(self, x: np.ndarray, scale=None, azp=None, symmetric: bool = True,
                    out: Optional[np.ndarray] = None):
        """Quantizes activations x (float32 / float16 / bfloat16 [M, K]) to int8
        (smm_quantize_i8; formulas of vLLM's scaled_quant.cu, doc/numerics.md).

        Static per-tensor (scale given: one float32): q = rne_sat_i8(x / s),
        or with azp (one int32 zero point) q = sat_i8(rne_sat_i32(x * fl(1/s)) + z).
        Dynamic per-token (scale None): one scale per row, amax/127
        (symmetric=True), or (max-min)/255 with a zero point per row
        (symmetric=False; degenerate rows fall back to symmetric, azp 0).
        out: an int8 [M, K] array to write q into, or None.
        Returns (q, scale, azp): scale float32 [1] (static) or [M]; azp
        int32 [1] / [M], or None when symmetric.
        Raises scaledmm.Error (nothing written).
        """
        if not isinstance(x, np.ndarray):
            raise _invalid("x: expected a numpy.ndarray, got %s" % type(x).__name__)
        xdt, xcode = _float_dtype(x.dtype, "x")
        px, ldx = _matrix("x", x, xdt)
        m, k = x.shape
        q = _check_out(out, (m, k), np.dtype(np.int8))
        pq, ldq = _matrix("out", q, np.dtype(np.int8))
        if scale is not None:
            if not symmetric and azp is None:
                raise _invalid("azp: static asymmetric quantization needs the zero point")
            s, _ = _vector("scale", scale, np.float32, (1,))
            z = None
            if azp is not None:
                z, _ = _vector("azp", azp, np.int32, (1,))
            self._ctx.quantize_i8(m, k, px, xcode, ldx, pq, ldq, _addr(s),
                                  0 if z is None else _addr(z), _core.SMM_QUANT_STATIC_PER_TENSOR)
            return q, s, z
        if azp is not None:
            raise _invalid("azp: dynamic quantization produces the zero points; pass "
                           "symmetric=False instead of azp")
        s = np.empty(m, dtype=np.float32)
        z = None if symmetric else np.empty(m, dtype=np.int32)
        self._ctx.quantize_i8(m, k, px, xcode, ldx, pq, ldq, _addr(s),
                              0 if z is None else _addr(z), _core.SMM_QUANT_DYNAMIC_PER_TOKEN)
        return q, s, z


_local = threading.local()


def context(backend: Union[str, int] = "auto") -> Context:
    """This thread's default Context on `backend` (created on first use)."""
    cache = getattr(_local, "contexts", None)
    if cache is None:
        cache = _local.contexts = {}
    key = _backend_code(backend)
    ctx = cache.get(key)
    if ctx is None:
        ctx = cache[key] = Context(key)
    return ctx


def scaled_mm(a, b, scale_a, scale_b, out_dtype=None, bias=None, azp=None, out=None,
              backend="auto"):
    """Context.scaled_mm on this thread's default context of `backend`."""
    return context(backend).scaled_mm(a, b, scale_a, scale_b, out_dtype, bias, azp, out)


def gemm_s8s8s32(a, b, out=None, backend="auto"):
    """Context.gemm_s8s8s32 on this thread's default context of `backend`."""
    return context(backend).gemm_s8s8s32(a, b, out)


def quantize_i8(x, scale=None, azp=None, symmetric=True, out=None, backend="auto"):
    """Context.quantize_i8 on this thread's default context of `backend`."""
    return context(backend).quantize_i8(x, scale, azp, symmetric, out)


def pack_b(b, backend="auto") -> PackedB:
    """Context.pack_b on this thread's default context of `backend`."""
    return context(backend).pack_b(b)


def info() -> dict:
    """What the loaded library is and can do here: version, contract
    version, CPU name and features, the CPU kernel levels this CPU runs and
    the one a cpu context runs, every backend with whether it can run and
    why, and the backend AUTO picks."""
    backends = {}
    for name in _BACKENDS[1:]:
        ok, why = _core.backend_available(_core.backend_from_name(name))
        backends[name] = {"available": ok, "reason": why}
    return {
        "version": _core.version(),
        "contract_version": _core.contract_version(),
        "cpu_name": _core.cpu_name(),
        "cpu_features": _core.cpu_features().split(),
        "cpu_levels": _core.cpu_levels(0),
        "cpu_level_chosen": _core.cpu_level_chosen(),
        "backends": backends,
        "auto": _core.backend_name(_core.backend_auto()),
    }
