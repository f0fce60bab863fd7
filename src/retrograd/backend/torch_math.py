"""The torch backend's kernels of :mod:`.protocol_math`: torch's own operators."""

from __future__ import annotations

import math

import torch

from .protocol import COMPLEX_SEEN, singular_matrix
from .protocol_math import not_positive_definite

__all__ = ["TorchMathKernels"]


class TorchMathKernels:
    """The special functions and bit operations on torch tensors."""

    lgamma = staticmethod(torch.lgamma)
    digamma = staticmethod(torch.digamma)
    i0 = staticmethod(torch.i0)
    i1 = staticmethod(torch.special.i1)
    erfc = staticmethod(torch.erfc)
    fmod = staticmethod(torch.fmod)
    floor_divide = staticmethod(torch.floor_divide)
    nextafter = staticmethod(torch.nextafter)
    gcd = staticmethod(torch.gcd)
    lcm = staticmethod(torch.lcm)
    bitwise_and = staticmethod(torch.bitwise_and)
    bitwise_or = staticmethod(torch.bitwise_or)
    bitwise_xor = staticmethod(torch.bitwise_xor)
    bitwise_not = staticmethod(torch.bitwise_not)
    bitwise_left_shift = staticmethod(torch.bitwise_left_shift)
    bitwise_right_shift = staticmethod(torch.bitwise_right_shift)
    signbit = staticmethod(torch.signbit)

    @staticmethod
    def frexp_exponent(x):
        return torch.frexp(x).exponent.to(torch.int64)

    i0e = staticmethod(torch.special.i0e)
    i1e = staticmethod(torch.special.i1e)
    erfcx = staticmethod(torch.special.erfcx)
    ndtr = staticmethod(torch.special.ndtr)
    log_ndtr = staticmethod(torch.special.log_ndtr)
    ndtri = staticmethod(torch.special.ndtri)
    entr = staticmethod(torch.special.entr)
    xlog1py = staticmethod(torch.special.xlog1py)
    xlogy = staticmethod(torch.special.xlogy)
    zeta = staticmethod(torch.special.zeta)
    gammainc = staticmethod(torch.special.gammainc)
    gammaincc = staticmethod(torch.special.gammaincc)

    def bessel_function(self, x, kind):
        return getattr(torch.special, kind)(x)

    def orthogonal_polynomial(self, x, n, kind):
        return getattr(torch.special, kind)(x, n)

    def polygamma(self, x, n):
        return torch.polygamma(n, x)

    def cholesky(self, x):
        out, info = torch.linalg.cholesky_ex(x)
        if x.device.type == "cpu" and bool(info.any()):
            failed = info.reshape(-1).nonzero()[0].item()  # LAPACK's info: the minor's order
            order = int(info.reshape(-1)[failed])
            raise not_positive_definite(tuple(x.shape), failed, order)
        return out

    def solve(self, a, b):
        out, info = torch.linalg.solve_ex(a, b)
        if a.device.type == "cpu" and bool(info.any()):
            raise singular_matrix("solve", tuple(a.shape))
        return out

    def slogdet(self, x):
        sign, logabsdet = torch.linalg.slogdet(x)
        return logabsdet, sign

    def linalg_eigh(self, x, upper):
        values, vectors = torch.linalg.eigh(x, UPLO="U" if upper else "L")
        return torch.cat([vectors, values.unsqueeze(-1)], dim=-1)

    def linalg_eig(self, x):
        COMPLEX_SEEN[0] = True
        values, vectors = torch.linalg.eig(x)
        return torch.cat([vectors, values.unsqueeze(-1)], dim=-1)

    def linalg_svd(self, x, full_matrices):
        u, s, vh = torch.linalg.svd(x, full_matrices=full_matrices)
        return _flat_cat([u, s, vh], x.shape[:-2])

    def linalg_qr(self, x, mode):
        q, r = torch.linalg.qr(x, mode=mode)
        return _flat_cat([r] if mode == "r" else [q, r], x.shape[:-2])

    def matrix_exp(self, x):
        return torch.linalg.matrix_exp(x)


def _flat_cat(parts, batch):
    """``parts`` with their matrix dims flattened, side by side along one last dim."""
    # (each part's flat size spelled out: a -1 cannot be inferred from an empty batch)
    batch = tuple(batch)
    return torch.cat(
        [p.reshape(batch + (math.prod(p.shape[len(batch) :]),)) for p in parts], dim=-1
    )
