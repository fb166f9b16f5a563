"""ScaledmmInt8ScaledMMLinearKernel: vLLM's Int8ScaledMMLinearKernel on scaledmm.

Imported by scaledmm.vllm.install() (the plugin), never by scaledmm itself:
it needs vLLM. See scaledmm/vllm/__init__.py for when vLLM picks it.

Per layer, process_weights_after_loading lays the checkpoint out once for
the library: the int8 weight stays [N, K] row-major (vLLM's own kernels
transpose it) and is packed once for the kernels of its device
(torch.ops.scaledmm.pack_b, kept as layer._scaledmm_packed), scales and
bias become float32 vectors, static activation parameters become one
float32 scale and one int32 zero point. apply_weights then makes one call,
torch.ops.scaledmm.linear_packed: the activations' quantization (vLLM's
scaled_quant.cu formulas: dynamic per-token, or static per-tensor), int32
accumulation, the zero-point correction -azp * colsum(W) and the fused
float32 epilogue of vLLM's CUTLASS ScaledEpilogueBias / ...Azp; the bits of
quantize_i8 followed by scaled_mm with the unpacked weight. Output in the
activations' dtype.
"""
from __future__ import annotations

from typing import Optional

import torch
from vllm.model_executor.kernels.linear.scaled_mm.ScaledMMLinearKernel import (
    Int8ScaledMMLinearKernel,
    Int8ScaledMMLinearLayerConfig,
)
from vllm.platforms import current_platform

_ops = None
_ops_error: Optional[str] = None
_smm_torch = None   # scaledmm.torch, once loaded


def _load_ops():
    """torch.ops.scaledmm, compiled against this torch on first use (cached)."""
    global _ops, _ops_error, _smm_torch
    if _ops is None and _ops_error is None:
        try:
            from .. import torch as smm_torch
            _ops = smm_torch.ops
            _smm_torch = smm_torch
        except Exception as e:  # no compiler, wrong torch, ...: vLLM picks another kernel
            _ops_error = "%s: %s" % (type(e).__name__, e)
    return _ops


def _backend_name() -> Optional[str]:
    if current_platform.is_cpu():
        return "cpu"
    if current_platform.is_rocm():
        return "rocm"
    if current_platform.is_cuda():
        return "cuda"
    return None


def _set_param(layer: torch.nn.Module, name: str, value: Optional[torch.Tensor]) -> None:
    """Replaces layer.<name> by a frozen Parameter holding `value` (or None)."""
    if value is not None:
        value = torch.nn.Parameter(value, requires_grad=False)
    if name in layer._parameters:
        layer._parameters[name] = value
        return
    if hasattr(layer, name):
        delattr(layer, name)
    layer.register_parameter(name, value)


class ScaledmmInt8ScaledMMLinearKernel(Int8ScaledMMLinearKernel):
    """int8 w8a8 linear layers on scaledmm (CPU, CUDA, ROCm); bit-exact to the
    numerics contract, so batch-invariant."""

    @classmethod
    def is_supported(cls, compute_capability: Optional[int] = None):
        backend = _backend_name()
        if backend is None:
            return False, "requires the CPU, CUDA or ROCm platform"
        if _load_ops() is None:
            return False, "scaledmm's PyTorch ops cannot be loaded (%s)" % _ops_error
        from .. import _core
        ok, why = _core.backend_available(_core.backend_from_name(backend))
        if not ok:
            return False, "scaledmm's %s backend is not available here: %s" % (backend, why)
        return True, None

    @classmethod
    def can_implement(cls, c):
        if not isinstance(c, Int8ScaledMMLinearLayerConfig):
            return False, "implements int8 w8a8 layers only, not %s" % type(c).__name__
        for field in ("is_static_input_scheme", "is_channelwise", "input_symmetric"):
            if not isinstance(getattr(c, field, None), bool):
                return False, "the layer config has no boolean %r" % field
        return True, None

    # ------------------------------------------------------------------ #
    def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
        """Lays a loaded layer out for scaledmm, once: weight int8 [N, K]
        made contiguous and packed (pack_b, on its device) into
        layer._scaledmm_packed; weight scales float32 [N] or [1]; static
        input scale float32 [1] and zero point int32 [1] (or None); the
        bias as float32 [N] in layer._scaledmm_bias. Raises ValueError for
        a weight that is not int8 [N, K] or scales that do not match it,
        and what pack_b raises."""
        w_name, ws_name, is_name, zp_name, adj_name = self.layer_param_names
        c = self.config
        weight = getattr(layer, w_name)
        if weight.dtype != torch.int8 or weight.dim() != 2:
            raise ValueError("scaledmm: layer weight must be int8 [N, K], got %s %s"
                             % (weight.dtype, tuple(weight.shape)))
        n = weight.shape[0]
        _set_param(layer, w_name, weight.data.contiguous())
        # Packed once, on the weight's device, before any CUDA graph capture;
        # the int8 weight stays the layer's parameter.
        layer._scaledmm_packed = _load_ops().pack_b(getattr(layer, w_name))
        layer._scaledmm_packed_generation = _smm_torch._backend_generation

        # Weight scales: [N, 1] channelwise; per-tensor: one per logical
        # partition (fused QKV / gate-up), widened to per-channel only when
        # the partitions' scales differ (the epilogue is the same formula).
        ws = getattr(layer, ws_name).data.to(torch.float32).reshape(-1)
        if c.is_channelwise:
            if ws.numel() != n:
                raise ValueError("scaledmm: %d channel scales for %d output channels" % (ws.numel(), n))
        elif ws.numel() > 1:
            if bool((ws == ws[0]).all()):
                ws = ws[:1]
            else:
                widths = list(getattr(layer, "logical_widths", []) or [])
                if len(widths) != ws.numel() or sum(widths) != n:
                    raise ValueError("scaledmm: %d per-tensor scales do not match the layer's "
                                     "partitions %s" % (ws.numel(), widths))
                ws = torch.repeat_interleave(ws, torch.tensor(widths, device=ws.device))
        _set_param(layer, ws_name, ws.contiguous())

        # Static activations: one scale (the largest of the partitions', as
        # vLLM does), and for asymmetric ones one zero point; several
        # partitions' (scale, zero point) pairs are merged into the range
        # that covers them all, as vLLM's kernels do.
        scale, azp = None, None
        if c.is_static_input_scheme:
            s = getattr(layer, is_name).data.to(torch.float32).reshape(-1)
            if c.input_symmetric:
                scale = s.max().reshape(1)
            else:
                z = getattr(layer, zp_name).data.to(torch.int32).reshape(-1)
                if s.numel() == 1 and z.numel() == 1:
                    scale, azp = s.clone(), z.clone()
                else:
                    lo, hi = torch.iinfo(torch.int8).min, torch.iinfo(torch.int8).max
                    rmax = (s * (hi - z)).max()
                    rmin = (s * (lo - z)).min()
                    scale = ((rmax - rmin) / (hi - lo)).reshape(1)
                    azp = (lo - rmin / scale).round().to(torch.int32).reshape(1)
        _set_param(layer, is_name, scale)
        _set_param(layer, zp_name, azp)
        # vLLM's azp_adj (the weights' column sums, times a static zero point)
        # is computed inside the library from the weights, in int32 exactly
        # as the contract says; no copy is kept.
        _set_param(layer, adj_name, None)

        bias = getattr(layer, "bias", None)
        layer._scaledmm_bias = (None if bias is None
                                else bias.data.to(torch.float32).reshape(-1).contiguous())
        self._symmetric = c.input_symmetric

    def apply_weights(self, layer: torch.nn.Module, x: torch.Tensor,
                      bias: Optional[torch.Tensor] = None) -> torch.Tensor:
        """y = layer(x): x float32 / float16 / bfloat16 [..., K] quantized
        and multiplied by the packed weight with the scales and bias in the
        fused epilogue, in one call (linear_packed; quantize_i8 then
        scaled_mm on the int8 weight, the same bits, after set_cpu_backend
        changed the backend since packing).
        Returns [..., N] of x's dtype."""
        ops = _ops
        w, ws, i_s, i_zp, _ = self._get_layer_params(layer)
        k = w.shape[1]
        x2 = x.reshape(-1, k)
        if x2.dim() == 2 and x2.shape[0] > 1 and x2.stride(1) != 1:
            x2 = x2.contiguous()
        if bias is None:
            b32 = None
        elif bias is getattr(layer, "bias", None):
            b32 = layer._scaledmm_bias
        else:
            b32 = bias.to(torch.float32).reshape(-1).contiguous()
        if layer._scaledmm_packed_generation == _smm_torch._backend_generation:
            y = _smm_torch.call_packed(ops.linear_packed, x2, layer._scaledmm_packed, ws,
                                       x.dtype, b32, i_s, i_zp, self._symmetric)[0]
        else:   # set_cpu_backend changed the backend since packing: the same bits unpacked
            q, s, z = ops.quantize_i8(x2, i_s, i_zp, self._symmetric)
            azp = None if self._symmetric else z
            y = ops.scaled_mm(q, w, s, ws, x.dtype, b32, azp)
        return y.reshape(*x.shape[:-1], w.shape[0])
