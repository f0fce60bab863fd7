"""Names the docstring examples under ``src/`` use without importing them."""

import importlib.util
import logging

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


def pytest_configure(config):
    """A handler on the root logger for the whole session, in place of pytest's logging plugin
    (off in pyproject's addopts), which held one there around every test: ``logging.warning``
    and ``logging.basicConfig`` in the ported scripts find the root logger configured, as they
    did then, rather than attaching a stream or a file to it for the rest of the process.
    Records are dropped, as the plugin's were for a test that passed."""
    if not logging.getLogger().handlers:
        logging.getLogger().addHandler(logging.NullHandler())


@pytest.fixture(autouse=True)
def _doctest_names(doctest_namespace):
    doctest_namespace.update(np=np, rg=rg, nn=nn, F=F)
