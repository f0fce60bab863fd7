"""Scaled dot-product attention on the torch inner backend with operands whose last dim is not
of unit stride.

The torch backend runs torch's fused CPU kernel (``_scaled_dot_product_flash_attention_for_cpu``
and its backward), which reads each row as contiguous; torch's public
``scaled_dot_product_attention`` makes the operands so before calling it, and until 7 December
the backend did not: a query computed as ``linalg.pinv(a).mT`` (torch lays out ``pinv``'s
result column-major, so its transpose has rows of stride 3) gave garbage values, and through
``create_graph`` a Hessian 4x off torch's (found by ``test_random_programs_43``'s Hessians).
On the NumPy backend the same calls are the reference the tests compare with, through torch.
"""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
from backends import inner_backend

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(5)
A, B = RNG.standard_normal((2, 2, 3, 4)), RNG.standard_normal((2, 2, 3, 4))
W = RNG.standard_normal((2, 3, 4))


def _queries(lib, a):
    return {
        "pinv(a).mT": lib.linalg.pinv(a).mT,
        "a.mT.mT of a transposed copy": (a.mT * 2.0).mT,
        "a.transpose(-1, -2) of a [.., 4, 3] leaf": a.reshape(2, 4, 3).transpose(-1, -2),
    }


@pytest.mark.parametrize("case", range(3))
def test_attention_of_a_query_with_strided_rows_is_torchs(case):
    values = []
    for lib in (torch, rg):
        a, b = lib.tensor(A[0], requires_grad=True), lib.tensor(B[0], requires_grad=True)
        q = list(_queries(lib, a).values())[case]
        out = lib.nn.functional.scaled_dot_product_attention(q, b, b * 0.5)
        grads = lib.autograd.grad((out * lib.tensor(W)).sum(), (a, b))
        values.append([t.detach().numpy() for t in (out, *grads)])
    for ours, theirs in zip(values[1], values[0]):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-13)


def test_the_hessian_of_attention_through_pinv_is_torchs():
    def program(lib):
        def scalar(a, b):
            q = lib.linalg.pinv(a).mT
            out = lib.nn.functional.scaled_dot_product_attention(q, b, b)
            return (out * lib.tensor(W)).sum()

        blocks = lib.autograd.functional.hessian(scalar, (lib.tensor(A[1]), lib.tensor(B[1])))
        return [h.detach().numpy() for row in blocks for h in row]

    theirs = program(torch)
    with rg.use_backend(rg.Autodiff(inner_backend())):
        ours = program(rg)
    for mine, torchs in zip(ours, theirs):
        np.testing.assert_allclose(mine, torchs, rtol=1e-9, atol=1e-11)
