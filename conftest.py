"""Names the docstring examples under ``src/`` use without importing them."""

import importlib.util

import numpy as np
import pytest

import retrograd as rg
from retrograd import nn
from retrograd.nn import functional as F  # noqa: N812  (PyTorch's idiom)

# retrograd's einops glue imports einops (the dev extra installs it); where einops is absent its
# two modules, which hold no examples, are not imported for doctests
collect_ignore = (
    []
    if importlib.util.find_spec("einops")
    else ["src/retrograd/einops/backend.py", "src/retrograd/einops/layers.py"]
)


@pytest.fixture(autouse=True)
def _doctest_names(doctest_namespace):
    doctest_namespace.update(np=np, rg=rg, nn=nn, F=F)
