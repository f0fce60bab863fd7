"""Real ports, continued (the harness: ``tests/real_ports.py``): a program written here in the
style of pytorch/examples' polynomial regression (``regression/main.py``).

- a cubic's coefficients recovered by one ``nn.Linear``: hidden coefficients drawn by
  ``torch.randn(DEGREE, 1) * 3``, the features by ``torch.cat`` of a list of ``x ** k``
  columns, targets by ``x.mm(coeffs) + offset.item()``, a loop over ``itertools.count(1)``
  with ``model.zero_grad()``, ``F.smooth_l1_loss``, a hand-written SGD step
  ``p.data.add_(-lr * p.grad)`` and the stopping test ``if loss < tolerance: break``; the
  fitted and true polynomials printed by ``'{:+.3f}'.format(c)`` of the 0-d tensors that
  ``enumerate`` of a ``view(-1)`` yields and of ``bias[0]``.

Regressions guarded: ``format`` of 0-d tensors with a format spec, ``.item()`` of a
one-element tensor in arithmetic, in-place ``data.add_`` of a tensor product.
The draws of ``torch.randn`` are one seeded stream both runs read (the harness's
``WithDraws``), in float64. Only the gradient lines differ.
"""

from __future__ import annotations

from itertools import count

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import WithDraws, assert_records_agree, port

FIT_SOURCE = """
DEGREE = 3
coeffs = torch.randn(DEGREE, 1) * 3
offset = torch.randn(1) * 3


def powers(t):
    # one column per power: the fit stays a linear problem
    column = t.unsqueeze(1)
    return torch.cat([column ** k for k in range(1, DEGREE + 1)], 1)


def sample(n=24):
    features = powers(torch.randn(n))
    return features, features.mm(coeffs) + offset.item()


def describe(weights, bias):
    terms = ['{:+.3f}*t^{}'.format(c, k) for k, c in enumerate(weights, start=1)]
    return ' '.join(terms) + ' {:+.3f}'.format(bias[0])


model = torch.nn.Linear(DEGREE, 1)
initialize(model)
lr, tolerance = 0.05, 2e-3

for step in count(1):
    inputs, targets = sample()
    model.zero_grad()
    objective = F.smooth_l1_loss(model(inputs), targets)
    value = objective.item()
    record.append(value)
    objective.backward()
    for p in model.parameters():
        p.data.add_(-lr * p.grad)
    if value < tolerance or step == 400:
        break

print('stopped at step {} with loss {:.5f}'.format(step, value))
print('fit:  ' + describe(model.weight.view(-1), model.bias))
print('true: ' + describe(coeffs.view(-1), offset))
"""

FIT_STEP = [
    ("    objective.backward()", "    grads = objective.backward()"),
    ("p.data.add_(-lr * p.grad)", "p.data.add_(-lr * p.grad(grads))"),
]


@pytest.fixture
def float64():
    previous, our_previous = torch.get_default_dtype(), rg.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    rg.set_default_dtype(rg.float64)
    yield
    torch.set_default_dtype(previous)
    rg.set_default_dtype(our_previous)


def test_polynomial_fit_matches_torch(capsys, float64):
    # in float64: the printed coefficients are rounded to three places after a few hundred
    # steps, where float32's rounding could move the last digit
    records, logs, state = [], [], {}
    for lib in (torch, rg):

        def initialize(model):
            if not state:
                state.update({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})
            else:
                model.load_state_dict({k: rg.tensor(v) for k, v in state.items()})

        torch.manual_seed(0)
        record = []
        library = WithDraws(lib, 47)
        draw = library.randn
        library.randn = lambda *size, draw=draw, lib=lib: draw(*size, dtype=lib.float64)
        names = {
            "torch": library,
            "F": lib.nn.functional,
            "count": count,
            "np": np,
            "record": record,
            "initialize": initialize,
        }
        source = FIT_SOURCE if lib is torch else port(FIT_SOURCE, FIT_STEP)
        exec(compile(source, f"<{lib.__name__} polynomial fit>", "exec"), names)
        record.append(
            {k: v.detach().numpy().copy() for k, v in names["model"].state_dict().items()}
        )
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert "*t^3 " in logs[0] and len(records[0]) > 10
    assert logs[1] == logs[0]
    assert_records_agree(records[1], records[0], rtol=1e-5, atol=1e-7)
