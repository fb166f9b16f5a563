"""Shared helpers of the scaledmm test suite: the seed, random problems,
poisoned outputs and bitwise comparisons.

Every comparison here is on bytes, never with a tolerance: the numerics
contract defines every bit of every result.
"""
from __future__ import annotations

import itertools
import os
import re
import zlib
from typing import Optional

import numpy as np

import scaledmm

BF16 = scaledmm.bfloat16
OUT_DTYPES = ("float32", "float16", "bfloat16")
# (M, N, K): empty problems, M = 1, K = 0, and tails of every tile size.
SHAPES = [(0, 5, 7), (4, 0, 9), (0, 0, 0), (3, 5, 0), (1, 1, 1), (1, 33, 70), (2, 1, 17),
          (7, 13, 64), (16, 16, 65), (31, 47, 33), (65, 70, 67)]
# (scale_a, scale_b, bias, azp) granularities
EPILOGUES = list(itertools.product(("tensor", "token"), ("tensor", "channel"), (False, True),
                                   (None, "tensor", "token")))


def epi_id(e):
    sa, sb, bias, azp = e
    return "sa_%s-sb_%s-%s-azp_%s" % (sa, sb, "bias" if bias else "nobias", azp)

# Poison patterns. For float outputs they are non-canonical NaNs, which the
# library never writes (its NaNs are 0x7FFFFFFF / 0x7FFF), so a poison value
# left in an output is always detectable. Integer outputs use two different
# byte patterns for the output under test and for the reference.
POISON_F32 = 0x7FA5A5A5
POISON_16 = 0x7FA5
POISON_BYTE = 0xA5
REF_POISON_BYTE = 0x5A

SEED_ENV = "SCALEDMM_TEST_SEED"


def parse_seed(text: Optional[str]) -> Optional[int]:
    """The session seed from SCALEDMM_TEST_SEED's text: a decimal or 0x-hex
    integer in [0, 2^64). None (unset or empty) -> None. Anything else
    raises ValueError: a typo must never silently run another seed."""
    if text is None or text.strip() == "":
        return None
    t = text.strip()
    if re.fullmatch(r"[0-9]+", t):
        v = int(t, 10)
    elif re.fullmatch(r"0[xX][0-9a-fA-F]+", t):
        v = int(t, 16)
    else:
        raise ValueError("%s=%r is not a decimal or 0x-hex integer" % (SEED_ENV, text))
    if v >= 1 << 64:
        raise ValueError("%s=%r does not fit in 64 bits" % (SEED_ENV, text))
    return v


def session_seed() -> int:
    """The session seed chosen by conftest.py (pytest_configure)."""
    return int(os.environ["_SCALEDMM_SESSION_SEED"])


def test_rng(nodeid: str) -> np.random.Generator:
    """The generator of one test: a function of the session seed and the
    test's id only, so `SCALEDMM_TEST_SEED=<seed> pytest '<id>'` replays it."""
    return np.random.default_rng([session_seed(), zlib.crc32(nodeid.encode())])


# ---------------------------------------------------------------------- #
# dtypes, poison, bitwise comparison                                      #
# ---------------------------------------------------------------------- #
def np_dtype(name) -> np.dtype:
    """numpy dtype of "float32" / "float16" / "bfloat16" (ml_dtypes)."""
    return BF16 if name in ("bfloat16", BF16) else np.dtype(name)


def cast(x: np.ndarray, dtype) -> np.ndarray:
    """x converted to float32 / float16 / bfloat16 by round-to-nearest-even
    (overflow to +-Inf expected, not warned about)."""
    with np.errstate(over="ignore"):
        return x.astype(np_dtype(dtype))


def poison_value(dtype: np.dtype, ref: bool = False):
    dtype = np.dtype(dtype)
    if dtype == np.float32:
        return np.array([POISON_F32 ^ (0x100 if ref else 0)], np.uint32).view(np.float32)[0]
    if dtype.itemsize == 2 and dtype.kind != "i":
        return np.array([POISON_16 ^ (0x1 if ref else 0)], np.uint16).view(dtype)[0]
    byte = REF_POISON_BYTE if ref else POISON_BYTE
    return np.frombuffer(bytes([byte]) * dtype.itemsize, dtype=dtype)[0]


def poisoned(shape, dtype, ref: bool = False) -> np.ndarray:
    """A new array of `shape` and `dtype` filled with the poison pattern."""
    arr = np.empty(shape, dtype=np_dtype(dtype))
    arr[...] = poison_value(arr.dtype, ref)
    return arr


def bits(x: np.ndarray) -> np.ndarray:
    """The bytes of x (a copy, C order) as uint8 [..., itemsize]."""
    x = np.ascontiguousarray(x)
    return x.view(np.uint8).reshape(x.shape + (x.dtype.itemsize,))


def assert_bits_equal(got: np.ndarray, want: np.ndarray, what: str = "") -> None:
    """got and want have the same dtype, shape and bytes; the message names
    the first differing element with both values in hex."""
    assert isinstance(got, np.ndarray), "%s: got a %s" % (what, type(got).__name__)
    assert got.dtype == want.dtype, "%s: dtype %s, want %s" % (what, got.dtype, want.dtype)
    assert got.shape == want.shape, "%s: shape %s, want %s" % (what, got.shape, want.shape)
    g, w = bits(got), bits(want)
    if np.array_equal(g, w):
        return
    diff = np.argwhere(np.any(g != w, axis=-1))
    first = tuple(int(i) for i in diff[0])
    raise AssertionError("%s: %d of %d elements differ bitwise; first at %s: got %s (%r), "
                         "want %s (%r); seed %s=0x%x" % (
                             what, len(diff), got.size, first, bits(got[first]).tobytes()[::-1].hex(),
                             got[first], bits(want[first]).tobytes()[::-1].hex(), want[first],
                             SEED_ENV, session_seed()))


def assert_no_poison(x: np.ndarray, what: str = "") -> None:
    """No element of a float array holds the poison pattern (every element
    was written)."""
    p = bits(np.array([poison_value(x.dtype)], dtype=x.dtype))[0]
    left = np.all(bits(x) == p, axis=-1)
    assert not left.any(), "%s: %d elements not written, first at %s" % (
        what, int(left.sum()), tuple(int(i) for i in np.argwhere(left)[0]))


def embedded(rng: np.random.Generator, shape, dtype, ref: bool = False, pad=(3, 5)):
    """A view of `shape` inside a larger poisoned buffer (rows padded, so
    its leading dimension exceeds its width, and offset into the buffer).
    Returns (view, buffer)."""
    rows, cols = shape
    extra_cols = int(rng.integers(1, pad[1] + 1))
    r0 = int(rng.integers(0, pad[0] + 1))
    c0 = int(rng.integers(0, extra_cols + 1))
    buf = poisoned((rows + r0 + int(rng.integers(0, pad[0] + 1)), cols + extra_cols), dtype, ref)
    return buf[r0:r0 + rows, c0:c0 + cols], buf


def outside_view_bytes(buf: np.ndarray, view: np.ndarray) -> np.ndarray:
    """The bytes of buf that `view` (a view into buf) does not cover."""
    mask = np.ones(buf.shape, dtype=bool)
    r0 = (view.__array_interface__["data"][0] - buf.__array_interface__["data"][0]) // buf.strides[0]
    c0 = ((view.__array_interface__["data"][0] - buf.__array_interface__["data"][0]) % buf.strides[0]) \
        // buf.itemsize
    mask[r0:r0 + view.shape[0], c0:c0 + view.shape[1]] = False
    return bits(buf)[mask]


# ---------------------------------------------------------------------- #
# random problems                                                         #
# ---------------------------------------------------------------------- #
def rand_i8(rng, shape) -> np.ndarray:
    """int8 of `shape`, uniform over [-128, 127]."""
    return rng.integers(-128, 128, size=shape, dtype=np.int8)


def rand_scales(rng, n) -> np.ndarray:
    """float32 [n]: positive scales spread over 2^-14 .. 2^2."""
    return (2.0 ** rng.uniform(-14, 2, size=n) * rng.uniform(0.5, 1, size=n)).astype(np.float32)


def rand_floats(rng, shape, scale=None) -> np.ndarray:
    """float32 of `shape`: normal values times powers of two from 2^-6 to 2^6."""
    if scale is None:
        scale = 2.0 ** rng.integers(-6, 7)
    return (rng.standard_normal(size=shape) * scale).astype(np.float32)


def make_problem(rng, m, n, k, sa_mode="tensor", sb_mode="channel", bias=False, azp=None):
    """A random scaled_mm problem as a dict of NumPy arrays:
    a int8 [m, k], b int8 [n, k], scale_a float32 [1] ("tensor") or [m]
    ("token"), scale_b float32 [1] ("tensor") or [n] ("channel"), bias
    float32 [n] or None, azp int32 [1] ("tensor"), [m] ("token") or None."""
    p = {"a": rand_i8(rng, (m, k)), "b": rand_i8(rng, (n, k)),
         "scale_a": rand_scales(rng, 1 if sa_mode == "tensor" else m),
         "scale_b": rand_scales(rng, 1 if sb_mode == "tensor" else n),
         "bias": rand_floats(rng, (n,)) if bias else None, "azp": None}
    if azp is not None:
        p["azp"] = rng.integers(-200, 201, size=1 if azp == "tensor" else m, dtype=np.int32)
    return p


def ref_scaled_mm(p, out_dtype) -> np.ndarray:
    """scaled_mm of problem p on the reference backend, into a poisoned
    output (checked fully written)."""
    m, n = p["a"].shape[0], p["b"].shape[0]
    out = poisoned((m, n), out_dtype, ref=True)
    scaledmm.scaled_mm(p["a"], p["b"], p["scale_a"], p["scale_b"], out_dtype=out_dtype,
                       bias=p["bias"], azp=p["azp"], out=out, backend="reference")
    assert_no_poison(out, "reference scaled_mm")
    return out


def ref_gemm(a, b) -> np.ndarray:
    """gemm_s8s8s32 on the reference backend (int32 [M, N])."""
    out = poisoned((a.shape[0], b.shape[0]), np.int32, ref=True)
    return scaledmm.gemm_s8s8s32(a, b, out=out, backend="reference")


def numpy_gemm(a, b) -> np.ndarray:
    """The contract's accumulators in NumPy: exact int64 sums reduced
    modulo 2^32 to int32."""
    acc = a.astype(np.int64) @ b.astype(np.int64).T
    return (acc & 0xFFFFFFFF).astype(np.uint32).view(np.int32)


def special_floats(rng, shape) -> np.ndarray:
    """float32 of `shape` (at least 6 rows, 1 column) mixing normal values
    with NaN, +-Inf, subnormals, signed zeros, huge values, and whole rows
    that are constant, zero, all-NaN or subnormal-only."""
    x = rand_floats(rng, shape)
    m, k = shape
    sub = np.float32(2.0 ** -140)
    pool = np.array([np.nan, np.inf, -np.inf, sub, -sub, 0.0, -0.0, 3e38, -3e38,
                     np.float32(1.5), np.float32(-2.5), np.float32(0.5)], np.float32)
    if m and k:
        mask = rng.random(shape) < 0.15
        x[mask] = rng.choice(pool, size=int(mask.sum()))
        if m >= 6:
            x[0, :] = np.float32(rng.standard_normal())   # constant row
            x[1, :] = 0.0                                 # zero row
            x[2, :] = np.nan                              # all-NaN row
            x[3, :] = sub * rng.integers(1, 50, size=k)    # subnormal-only row
            x[4, :] = rand_floats(rng, (k,), 2.0 ** -130)  # tiny range
            x[5, :] = -0.0
    return x



# ---------------------------------------------------------------------- #
# torch <-> NumPy (bit-preserving)                                        #
# ---------------------------------------------------------------------- #
def to_torch(x, device="cpu"):
    """A torch tensor with x's bits (bfloat16 through ml_dtypes); None -> None."""
    import torch

    if x is None:
        return None
    x = np.ascontiguousarray(x)
    if x.dtype == BF16:
        t = torch.from_numpy(x.view(np.int16).copy()).view(torch.bfloat16)
    else:
        t = torch.from_numpy(x.copy())
    return t.to(device)


def to_numpy(t) -> np.ndarray:
    """A NumPy copy of tensor t with its bits (bfloat16 as ml_dtypes.bfloat16)."""
    import torch

    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        return t.contiguous().view(torch.int16).numpy().view(BF16).copy()
    return t.contiguous().numpy().copy()


def torch_dtype(name):
    import torch

    return {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[name]


def torch_poisoned(shape, dtype, device="cpu"):
    """A tensor of `shape` and torch `dtype` filled with the poison pattern."""
    import torch

    name = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16",
            torch.int32: np.int32, torch.int8: np.int8}[dtype]
    return to_torch(poisoned(shape, name), device)


def torch_bits_equal(got, want) -> bool:
    """Same dtype, shape and bits (tensors, any devices)."""
    return got.dtype == want.dtype and got.shape == want.shape and np.array_equal(
        bits(to_numpy(got)), bits(to_numpy(want)))
