"""Defects found by the real ports of round 77 (``tests/test_real_ports_77b.py``, ``_77c``,
``_77d``).

Fixed by the lead (7 December): Opacus's per-sample gradients pair each call's forward
activations with its backward by a list per module, appended in the forward hook and
``pop()``ped in the full backward hook. That holds because torch fires a module's backward
hooks in the reverse order of its calls (its engine runs the ready node created last first).
retrograd's backward ran its steps by depth only (Burn's order, ``autodiff/runtime.py``'s
``Tape``), nodes of one depth in the order its walk found them: a module called once per time
step of a recurrence on slices of one tensor (Opacus's ``RNNLinear``) has its input hooks at
one depth, which ran in the order of the calls, so ``pop()`` paired the last call's
activations with the first call's gradients. Ties of depth are now broken by the node's id,
newest first (``runtime._run_order``), which gives torch's order per module.
"""

from __future__ import annotations

import numpy as np
import torch

import retrograd as rg


def _hook_events(lib):
    """The gradient sums each full backward hook sees, module by module, in firing order, of
    a three-step recurrence ``state = tanh(ih(h[:, t]) + hh(state))``."""
    rng = np.random.default_rng(77)
    x = rng.standard_normal((4, 3, 5)).astype(np.float32)
    ih, hh = lib.nn.Linear(5, 6), lib.nn.Linear(6, 6, bias=False)
    with lib.no_grad():
        ih.weight.copy_(lib.tensor(np.linspace(-0.5, 0.5, 30, dtype=np.float32).reshape(6, 5)))
        ih.bias.fill_(0.1)
        hh.weight.copy_(lib.tensor(np.linspace(-0.3, 0.4, 36, dtype=np.float32).reshape(6, 6)))
    events = {"ih": [], "hh": []}
    for name, module in (("ih", ih), ("hh", hh)):
        module.register_full_backward_hook(
            lambda m, grad_input, grad_output, name=name: events[name].append(
                float(grad_output[0].sum())
            )
        )
    scale = lib.tensor(1.5, requires_grad=True)
    h = lib.tanh(lib.tensor(x) * scale)
    state = lib.zeros(4, 6)
    for t in range(3):
        state = lib.tanh(ih(h[:, t]) + hh(state))
    (state**2).sum().backward()
    return events


def test_a_modules_full_backward_hooks_fire_in_reverse_call_order():
    theirs, ours = _hook_events(torch), _hook_events(rg)
    assert len(theirs["ih"]) == len(ours["ih"]) == 3
    np.testing.assert_allclose(ours["hh"], theirs["hh"], rtol=1e-5)
    np.testing.assert_allclose(ours["ih"], theirs["ih"], rtol=1e-5)
