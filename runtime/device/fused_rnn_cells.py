"""CPU stand-ins for the fused CUDA-only kernels that torch picks for a device.

On a non-CPU device the C++ RNN code calls the fused LSTM/GRU cells, which a
CPU build has no kernel for. These compute the same math on plain CPU tensors
(the simulated device unwraps before calling them); the autograd formulas of
the fused ops stay torch's own, so the backward kernels are needed too.
"""

from __future__ import annotations

import torch


def lstm_cell(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    gates = input_gates + hidden_gates
    if input_bias is not None:
        gates = gates + input_bias + hidden_bias
    i, f, g, o = gates.chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * cx + i * g
    hy = o * cy.tanh()
    workspace = torch.cat((i, f, g, o), 1)
    return hy, cy, workspace


def lstm_cell_backward(grad_hy, grad_cy, cx, cy, workspace, has_bias):
    i, f, g, o = workspace.chunk(4, 1)
    tanh_cy = cy.tanh()
    gcx = torch.zeros_like(cy) if grad_cy is None else grad_cy.clone()
    go = torch.zeros_like(cy)
    if grad_hy is not None:
        gcx = gcx + grad_hy * o * (1 - tanh_cy * tanh_cy)
        go = grad_hy * tanh_cy * o * (1 - o)
    gi = gcx * g * i * (1 - i)
    gf = gcx * cx * f * (1 - f)
    gg = gcx * i * (1 - g * g)
    grad_gates = torch.cat((gi, gf, gg, go), 1)
    grad_cx = gcx * f
    grad_bias = grad_gates.sum(0) if has_bias else None
    return grad_gates, grad_cx, grad_bias


def gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    if input_bias is not None:
        input_gates = input_gates + input_bias
        hidden_gates = hidden_gates + hidden_bias
    ir, iz, in_ = input_gates.chunk(3, 1)
    hr, hz, hn = hidden_gates.chunk(3, 1)
    r = (ir + hr).sigmoid()
    z = (iz + hz).sigmoid()
    n = (in_ + r * hn).tanh()
    hy = n + z * (hx - n)
    workspace = torch.cat((r, z, n, hx, hn), 1)
    return hy, workspace


def gru_cell_backward(grad_hy, workspace, has_bias):
    r, z, n, hx, hn = workspace.chunk(5, 1)
    grad_hx = grad_hy * z
    gz = grad_hy * (hx - n) * z * (1 - z)
    gn = grad_hy * (1 - z) * (1 - n * n)
    gr = gn * hn * r * (1 - r)
    grad_input = torch.cat((gr, gz, gn), 1)
    grad_hidden = torch.cat((gr, gz, gn * r), 1)
    if has_bias:
        return grad_input, grad_hidden, grad_hx, grad_input.sum(0), grad_hidden.sum(0)
    return grad_input, grad_hidden, grad_hx, None, None
