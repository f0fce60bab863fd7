"""torch's ``torch.ao`` names that a float model holds before quantization: the stubs of
:mod:`.quantization` and ``ao.nn.quantized.FloatFunctional`` (:mod:`retrograd.nn.quantized`).
retrograd has no quantized kernels: these are the identity and floating-point operations
that torch's are until a model is converted.

>>> import retrograd as rg
>>> rg.ao.quantization.QuantStub()(rg.tensor([1.0, 2.0])).tolist()
[1.0, 2.0]
"""

from __future__ import annotations

from . import nn, quantization

__all__ = ["nn", "quantization"]
