"""The fused LSTM and GRU cells torch's recurrent layers call on a GPU, for sim.

For a device other than the CPU (CUDA, XPU, PrivateUse1), ``nn.LSTM`` and ``nn.GRU`` compute each step's
gates with matmuls and hand them to ``_thnn_fused_lstm_cell`` / ``_thnn_fused_gru_cell``, whose kernels exist
for CUDA only: the CPU has none for the fallback to run. These compute what CUDA's kernels
(``aten/src/ATen/native/cuda/RNN.cu``) compute, with sim's own ops, the workspace laid out as CUDA's so the
backward kernels read it back: LSTM ``[input, forget, cell, output]`` gates activated; GRU ``[reset, input,
new, hx, hidden new]``. Half and bfloat16 are computed in float32, as CUDA's accumulation type.
"""
from __future__ import annotations

import torch
from torch import Tensor

aten = torch.ops.aten


def _as(t: Tensor, dtype: torch.dtype) -> Tensor:
    # aten's ops, not Tensor.to / torch.cat: sim's kernels never go through the translation layer's wrappers
    return t if t.dtype == dtype else aten._to_copy.default(t, dtype=dtype)


def _wide(t: Tensor) -> Tensor:
    return _as(t, torch.float32) if t.dtype in (torch.float16, torch.bfloat16) else t


def _cat(parts: list[Tensor], dtype: torch.dtype) -> Tensor:
    return _as(aten.cat.default(parts, 1), dtype)


def _gates(input_gates: Tensor, hidden_gates: Tensor, input_bias: Tensor | None, hidden_bias: Tensor | None,
           count: int) -> list[Tensor]:
    """``input + hidden (+ both biases)``, split into ``count`` gates."""
    gates = _wide(input_gates) + _wide(hidden_gates)
    if input_bias is not None and hidden_bias is not None:
        gates = gates + _wide(input_bias) + _wide(hidden_bias)
    return list(gates.chunk(count, 1))


def lstm_cell(input_gates: Tensor, hidden_gates: Tensor, cx: Tensor, input_bias: Tensor | None = None,
              hidden_bias: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    with torch._C._AutoDispatchBelowADInplaceOrView():
        i, f, g, o = _gates(input_gates, hidden_gates, input_bias, hidden_bias, 4)
        i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
        cy = f * _wide(cx) + i * g
        hy = o * cy.tanh()
        dtype = input_gates.dtype
        return _as(hy, dtype), _as(cy, dtype), _cat([i, f, g, o], dtype)


def lstm_cell_backward(grad_hy: Tensor | None, grad_cy: Tensor | None, cx: Tensor, cy: Tensor, workspace: Tensor,
                       has_bias: bool) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
    if grad_hy is None and grad_cy is None:
        return None, None, None
    with torch._C._AutoDispatchBelowADInplaceOrView():
        i, f, g, o = _wide(workspace).chunk(4, 1)
        tanh_cy = _wide(cy).tanh()
        grad_h = _wide(grad_hy) if grad_hy is not None else aten.zeros_like.default(tanh_cy)
        grad_o = grad_h * tanh_cy * (1 - o) * o
        grad_c = grad_h * o * (1 - tanh_cy * tanh_cy)
        if grad_cy is not None:
            grad_c = grad_c + _wide(grad_cy)
        grad_i = grad_c * g * (1 - i) * i
        grad_f = grad_c * _wide(cx) * (1 - f) * f
        grad_g = grad_c * i * (1 - g * g)
        dtype = workspace.dtype
        grad_gates = _cat([grad_i, grad_f, grad_g, grad_o], dtype)
        grad_cx = _as(grad_c * f, dtype)
        return grad_gates, grad_cx, grad_gates.sum(0) if has_bias else None


def gru_cell(input_gates: Tensor, hidden_gates: Tensor, hx: Tensor, input_bias: Tensor | None = None,
             hidden_bias: Tensor | None = None) -> tuple[Tensor, Tensor]:
    with torch._C._AutoDispatchBelowADInplaceOrView():
        in_r, in_i, in_n = _wide(input_gates).chunk(3, 1)
        hid_r, hid_i, hid_n = _wide(hidden_gates).chunk(3, 1)
        if input_bias is not None and hidden_bias is not None:
            b_r, b_i, b_n = _wide(input_bias).chunk(3)
            c_r, c_i, c_n = _wide(hidden_bias).chunk(3)
            in_r, in_i, in_n = in_r + b_r, in_i + b_i, in_n + b_n
            hid_r, hid_i, hid_n = hid_r + c_r, hid_i + c_i, hid_n + c_n
        r = (in_r + hid_r).sigmoid()
        i = (in_i + hid_i).sigmoid()
        n = (in_n + hid_n * r).tanh()
        h = _wide(hx)
        hy = n + i * (h - n)
        dtype = input_gates.dtype
        return _as(hy, dtype), _cat([r, i, n, h, hid_n], dtype)


def gru_cell_backward(grad_hy: Tensor, workspace: Tensor, has_bias: bool
                      ) -> tuple[Tensor, Tensor, Tensor, Tensor | None, Tensor | None]:
    with torch._C._AutoDispatchBelowADInplaceOrView():
        r, i, n, h, hid_n = _wide(workspace).chunk(5, 1)
        grad = _wide(grad_hy)
        grad_i = grad * (h - n) * (1 - i) * i
        grad_h = grad * i
        grad_in_n = grad * (1 - i) * (1 - n * n)
        grad_hid_n = grad_in_n * r
        grad_r = grad_in_n * hid_n * (1 - r) * r
        dtype = workspace.dtype
        grad_input = _cat([grad_r, grad_i, grad_in_n], dtype)
        grad_hidden = _cat([grad_r, grad_i, grad_hid_n], dtype)
        biases = (grad_input.sum(0), grad_hidden.sum(0)) if has_bias else (None, None)
        return grad_input, grad_hidden, _as(grad_h, dtype), *biases


KERNELS = {
    "_thnn_fused_lstm_cell": lstm_cell,
    "_thnn_fused_lstm_cell_backward_impl": lstm_cell_backward,
    "_thnn_fused_gru_cell": gru_cell,
    "_thnn_fused_gru_cell_backward": gru_cell_backward,
}
