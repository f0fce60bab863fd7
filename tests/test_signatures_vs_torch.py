"""The signature audit (tests/signature_audit.py) against torch 2.13: every mismatch of
parameter names, kinds and defaults between torch's public callables and retrograd's is in
the allowlist below (each with its reason), and no allowlisted entry is stale.

``python tests/signature_audit.py`` prints the full report."""

from __future__ import annotations

import inspect

import pytest

from signature_audit import Mismatch, audit, compare

_CLIP = "API.md section 5: gradients are a value (Burn's design): the first argument is the "
_CLIP += "Gradients; torch's form (parameters first) raises an AutodiffError saying what to write"
_COMPILE = "torch.compile's dynamo/inductor knobs: compile is a no-op wrapper here (API.md)"
_DOCS_NAMES = (
    "torch's docs name it A/B and its parser input/b; retrograd takes the documented names "
    "(positional calls, the common form, work in both)"
)
_FFT2 = "None is (-2, -1) for the 2-d transforms (made by the n-d ones' generator)"
_PARSER_REFUSES = (
    "torch's docstring lists it, its parser refuses it (new_tensor() got an unexpected "
    "keyword argument): retrograd refuses it too"
)
_FOUND = "positional-only in torch's C binding: its name is no keyword there either"

#: (name, kind, parameter) -> why the difference stays
ALLOWLIST: dict[tuple[str, str, str], str] = {
    ("Tensor.new_empty_strided", "keyword-only", "requires_grad"): (
        "torch's parser refuses it positionally too (new_empty_strided() takes 2 positional "
        "arguments); only its docstring lists it positionally"
    ),
    ("Tensor.new_tensor", "missing", "layout"): _PARSER_REFUSES,
    ("Tensor.new_tensor", "missing", "pin_memory"): _PARSER_REFUSES,
    ("Tensor.take", "order", "indices"): (
        "take(index) positionally as torch; the keyword 'indices' is accepted as well"
    ),
    ("fft.fft2", "default", "dim"): _FFT2,
    ("fft.ifft2", "default", "dim"): _FFT2,
    ("fft.rfft2", "default", "dim"): _FFT2,
    ("fft.irfft2", "default", "dim"): _FFT2,
    ("linalg.lstsq", "missing", "b"): _DOCS_NAMES,
    ("linalg.lstsq", "missing", "input"): _DOCS_NAMES,
    ("linalg.norm", "missing", "input"): _DOCS_NAMES,
    ("nn.UninitializedParameter", "missing", "device"): (
        "lazy modules materialize their parameters on the tensor API's own backend/device"
    ),
    ("nn.UninitializedParameter", "missing", "dtype"): (
        "lazy modules materialize their parameters in the first input's dtype"
    ),
    ("nn.UninitializedParameter", "order", "requires_grad"): (
        "retrograd's Parameter takes data first; nothing constructs an UninitializedParameter "
        "by hand in the ported corpus"
    ),
    ("nn.utils.clip_grad_norm", "order", "parameters"): _CLIP,
    ("nn.utils.clip_grad_norm_", "order", "parameters"): _CLIP,
    ("nn.utils.clip_grad_value_", "order", "parameters"): _CLIP,
    ("nn.utils.clip_grads_with_norm_", "order", "parameters"): _CLIP,
    ("optim.RMSprop", "keyword-only", "maximize"): (
        "the tenth positional argument, after torch's capturable and foreach, which "
        "retrograd takes as keyword flags (**flags)"
    ),
    ("torch.asarray", "default", "requires_grad"): (
        "torch's None is 'False' for anything but a tensor that requires grad, which asarray "
        "gives as it is either way"
    ),
    ("torch.compile", "default", "backend"): _COMPILE,
    ("torch.compile", "missing", "isolate_recompiles"): _COMPILE,
    ("torch.compile", "missing", "name"): _COMPILE,
    ("torch.compile", "missing", "recompile_limit"): _COMPILE,
    ("torch.compile", "missing", "shapes_spec"): _COMPILE,
    ("torch.from_numpy", "missing", "ndarray"): _FOUND,
    ("torch.set_num_threads", "missing", "int"): _FOUND,
    ("torch.set_num_interop_threads", "missing", "int"): _FOUND,
    ("torch.save", "default", "pickle_module"): "None is the pickle module (rg.save's default)",
    ("torch.save", "missing", "_disable_byteorder_record"): "a private flag of torch's zip writer",
    ("torch.tril_indices", "default", "dtype"): "None is int64, as torch's torch.long",
    ("torch.triu_indices", "default", "dtype"): "None is int64, as torch's torch.long",
}


@pytest.fixture(scope="module")
def report():
    return audit()


def test_every_mismatch_is_allowlisted(report) -> None:
    unexpected = [str(m) for m in report.mismatches if m.key() not in ALLOWLIST]
    assert not unexpected, "\n".join(unexpected)


def test_no_allowlist_entry_is_stale(report) -> None:
    found = {m.key() for m in report.mismatches}
    assert not [key for key in ALLOWLIST if key not in found]


def test_the_audit_reaches_the_surface(report) -> None:
    """Most shared names are checked (a parser broken by a torch upgrade would otherwise
    pass the test above by checking nothing)."""
    assert len(report.checked) > 1400
    assert len(report.unverifiable) < 200
    for name in ("torch.cat", "Tensor.float", "F.pad", "nn.Linear", "optim.AdamW", "fft.fft"):
        assert name in report.checked


def _signature(text: str) -> inspect.Signature:
    namespace: dict = {}
    exec(f"def f{text}: pass", namespace)
    return inspect.signature(namespace["f"])


@pytest.mark.parametrize(
    ("theirs", "ours", "expected"),
    [
        ("(input, *, alpha=1, out=None)", "(input, *, out=None)", ("missing", "alpha")),
        ("(input, dim=-1)", "(input, dim=0)", ("default", "dim")),
        ("(input, dim=-1)", "(input, dim)", ("required", "dim")),
        ("(input, dim)", "(input, *, dim)", ("keyword-only", "dim")),
        ("(input, other)", "(input, other, /)", ("positional-only", "input")),
        ("(input, index, src)", "(input, src, index)", ("order", "index")),
    ],
)
def test_the_audit_finds_each_kind(theirs: str, ours: str, expected: tuple[str, str]) -> None:
    found, checked = compare("f", _signature(theirs), _signature(ours))
    assert checked
    assert [(m.kind, m.parameter) for m in found][:1] == [expected]


def test_the_audit_accepts_the_same_signature() -> None:
    signature = _signature("(input, dim=None, keepdim=False, *, dtype=None, out=None)")
    assert compare("f", signature, signature) == ([], True)
    assert isinstance(Mismatch("f", "missing", "x", ""), Mismatch)
