"""scaledmm as vLLM's int8 w8a8 linear kernel (a vLLM general plugin).

Installing the scaledmm package registers `register` below under vLLM's
`vllm.general_plugins` entry point; vLLM calls it in every process it
starts. It does nothing unless asked:

  SCALEDMM_VLLM=1          put ScaledmmInt8ScaledMMLinearKernel first in
                           vLLM's int8 kernel order on the CPU, CUDA and
                           ROCm platforms (vLLM's own kernels stay behind it
                           and take over any layer it cannot run);
  VLLM_BATCH_INVARIANT=1   the same, always (whatever SCALEDMM_VLLM says):
                           vLLM has no batch-invariant int8 w8a8 kernel.
  SCALEDMM_VLLM unset or 0, VLLM_BATCH_INVARIANT unset: vLLM's own order is
                           left untouched and scaledmm is not even imported.

vLLM's own mechanisms still apply: VLLM_DISABLED_KERNELS=
ScaledmmInt8ScaledMMLinearKernel removes it again, and --linear-backend
(other than auto) filters it out like any kernel outside that backend.

The kernel runs every int8 layer config vLLM has: static (per-tensor) or
dynamic (per-token) activations, channelwise or per-tensor weights (fused
QKV / gate-up layers with one scale per partition included), symmetric or
asymmetric activations (a zero point; vLLM's azp_adj term is computed by
the library, exactly, from the weights' column sums). Every output bit is
scaledmm's numerics contract (doc/numerics.md), the order of operations of
vLLM's CUTLASS epilogues, so a row's result does not depend on the other
rows of the batch, on the batch size, on tiling or on the backend.

Batch invariance and activation scales: a dynamic *per-tensor* activation
scale is an amax over the whole batch, hence batch-variant by nature. vLLM's
int8 w8a8 configs quantize dynamic activations per token (one scale per
row) and static activations with one calibrated scale, both invariant; the
kernel always quantizes dynamic activations per token, so under
VLLM_BATCH_INVARIANT=1 the activation scales are per-token.

Supported vLLM versions: SUPPORTED_VLLM below (0.32.x, the version the
kernel interface here was written against and tested with). Asking for the
kernel on another version raises RuntimeError saying so, rather than
guessing at a changed interface.
"""
from __future__ import annotations

import logging
import os

SUPPORTED_VLLM = ("0.32",)          # major.minor releases tested
ENV = "SCALEDMM_VLLM"
KERNEL_NAME = "ScaledmmInt8ScaledMMLinearKernel"

_log = logging.getLogger("scaledmm.vllm")


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def batch_invariant() -> bool:
    """Whether vLLM runs in its batch-invariant mode (VLLM_BATCH_INVARIANT)."""
    try:
        import vllm.envs as envs
        return bool(envs.VLLM_BATCH_INVARIANT)
    except Exception:   # an unknown vLLM: read the variable ourselves
        return _flag("VLLM_BATCH_INVARIANT")


def requested() -> bool:
    """Whether the kernel is to be put first: SCALEDMM_VLLM=1, or vLLM's
    batch-invariant mode."""
    return _flag(ENV) or batch_invariant()


def check_version(version: str | None = None) -> str:
    """Returns vLLM's version, or raises RuntimeError when it is not one
    the plugin supports."""
    if version is None:
        import vllm
        version = getattr(vllm, "__version__", "unknown")
    if not any(version == v or version.startswith(v + ".") for v in SUPPORTED_VLLM):
        raise RuntimeError(
            "scaledmm's vLLM plugin supports vLLM %s (x = any patch release); this is "
            "vLLM %s, whose int8 ScaledMMLinearKernel interface it has not been checked "
            "against. Unset %s and VLLM_BATCH_INVARIANT, or install a supported vLLM."
            % (", ".join(v + ".x" for v in SUPPORTED_VLLM), version, ENV))
    return version


def install() -> type:
    """Puts the kernel first in vLLM's int8 kernel lists (CPU, CUDA, ROCm).
    Idempotent. Returns the kernel class."""
    check_version()
    try:
        import vllm.model_executor.kernels.linear as kernels
        from vllm.platforms import PlatformEnum
        table = kernels._POSSIBLE_INT8_KERNELS
    except (ImportError, AttributeError) as e:
        raise RuntimeError("scaledmm's vLLM plugin: this vLLM lacks the int8 kernel table "
                           "it hooks into (%s)" % e) from e
    from .kernel import ScaledmmInt8ScaledMMLinearKernel as K
    for plat in (PlatformEnum.CPU, PlatformEnum.CUDA, PlatformEnum.ROCM):
        lst = table.setdefault(plat, [])
        if K in lst:
            lst.remove(K)
        lst.insert(0, K)
    return K


def uninstall() -> None:
    """Restores vLLM's own int8 kernel order (tests)."""
    import vllm.model_executor.kernels.linear as kernels
    from .kernel import ScaledmmInt8ScaledMMLinearKernel as K
    for lst in kernels._POSSIBLE_INT8_KERNELS.values():
        while K in lst:
            lst.remove(K)


def register() -> None:
    """vLLM's general-plugin entry point (vllm.general_plugins)."""
    if not requested():
        return
    install()
    _log.info("scaledmm: %s is first in vLLM's int8 w8a8 kernel order (%s)", KERNEL_NAME,
              "VLLM_BATCH_INVARIANT=1" if batch_invariant() else "%s=1" % ENV)


__all__ = ["ENV", "KERNEL_NAME", "SUPPORTED_VLLM", "batch_invariant", "check_version", "install",
           "register", "requested", "uninstall"]
