"""``p.data = view`` shares storage, as torch's does: tied weights by assignment.

Autoencoders tie a decoder to its encoder with ``dec.weight.data = enc.weight.data.t()``: in
torch the decoder's weight is then a transposed view of the encoder's storage, so every write to
either (an optimizer's step on each, ``normal_()``, ``load_state_dict``) shows in both, while
each keeps its own gradient. retrograd gave the parameter a copy, so the tie broke at the first
step. Every value here is compared with torch's run of the same program.
"""

import numpy as np
import torch

import retrograd as rg


def _program(lib):
    nn = lib.nn
    seen = []
    x = lib.zeros(2, 3)
    p = nn.Parameter(lib.zeros(3, 2))
    p.data = x.t()  # a view of a plain tensor
    x.add_(1)
    seen.append(p.sum().item())
    with lib.no_grad():
        p.mul_(3)
    seen += [x.sum().item(), p.is_leaf, p.requires_grad]

    enc = nn.Linear(4, 3, bias=False)
    dec = nn.Linear(3, 4, bias=False)
    dec.weight.data = enc.weight.data.t()  # a view outside the graph of another parameter
    with lib.no_grad():
        enc.weight.fill_(0.5)
    seen.append(dec.weight.sum().item())
    enc.weight.data.normal_()
    seen.append(bool((dec.weight.detach() == enc.weight.detach().t()).all()))
    dec.weight.data.zero_()
    seen.append(enc.weight.abs().sum().item())

    optimizer = lib.optim.Adam([enc.weight, dec.weight], lr=0.1)
    with lib.no_grad():
        enc.weight.copy_(lib.tensor(np.arange(12.0).reshape(3, 4) / 10, dtype=lib.float32))
    batch = lib.ones(2, 4)
    for _ in range(3):
        optimizer.zero_grad()
        loss = ((dec(enc(batch)) - batch) ** 2).sum()
        if lib is torch:
            loss.backward()
            optimizer.step()
        else:
            optimizer.step(loss.backward())
        seen.append(loss.item())
    seen.append(bool((dec.weight.detach() == enc.weight.detach().t()).all()))
    state = {k: v.clone() * 0 + 2 for k, v in dec.state_dict().items()}
    dec.load_state_dict(state)
    seen += [enc.weight.sum().item(), dec.weight.is_contiguous()]
    return seen


def test_data_set_to_a_view_shares_the_storage_as_torchs():
    theirs, ours = _program(torch), _program(rg)
    assert len(ours) == len(theirs)
    for k, (a, b) in enumerate(zip(ours, theirs)):
        if isinstance(b, float):
            np.testing.assert_allclose(a, b, rtol=1e-5, err_msg=f"entry {k}")
        else:
            assert a == b, (k, ours, theirs)
