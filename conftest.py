"""Names the docstring examples under ``src/`` use without importing them."""

import numpy as np
import pytest

import retrograd as rg
from retrograd import nn
from retrograd.nn import functional as F  # noqa: N812  (PyTorch's idiom)


@pytest.fixture(autouse=True)
def _doctest_names(doctest_namespace):
    doctest_namespace.update(np=np, rg=rg, nn=nn, F=F)
