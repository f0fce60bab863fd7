"""The torch backend's kernels of :mod:`.protocol_math`: torch's own operators."""

from __future__ import annotations

import torch

__all__ = ["TorchMathKernels"]


class TorchMathKernels:
    """The special functions and bit operations on torch tensors."""

    lgamma = staticmethod(torch.lgamma)
    digamma = staticmethod(torch.digamma)
    i0 = staticmethod(torch.i0)
    i1 = staticmethod(torch.special.i1)
    erfc = staticmethod(torch.erfc)
    fmod = staticmethod(torch.fmod)
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

    def polygamma(self, x, n):
        return torch.polygamma(n, x)

    def slogdet(self, x):
        sign, logabsdet = torch.linalg.slogdet(x)
        return logabsdet, sign
