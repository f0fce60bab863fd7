"""torch's ``torch.version``: the build's facts that scripts read (``torch.version.cuda`` is
``None`` on a build without CUDA, as retrograd's: its GPU work goes through torch)."""

from __future__ import annotations

from .torch_version import TorchVersion

__all__ = ["__version__", "cuda", "debug", "git_version", "hip", "rocm", "xpu"]

__version__ = TorchVersion("0.1.0")
cuda = None
hip = None
rocm = None
xpu = None
debug = False
git_version = "unknown"
