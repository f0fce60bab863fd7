"""Regressions found by the audio and sequence ports of ``tests/test_real_ports_201.py``:
``torch.jit.isinstance`` (torchaudio's ``_get_spec_norms`` branches on it),
``torch._C._log_api_usage_once`` (torchaudio's and torchvision's modules call it in
``__init__``), and the legacy ``reduction='elementwise_mean'`` that torch still reads as
``'mean'`` (kaituoxu's Listen-Attend-Spell passes it)."""

from __future__ import annotations

import warnings
from typing import Any, Dict, List, Optional, Tuple, Union  # noqa: UP035 (torch's spellings)

import numpy as np
import pytest
import torch

import retrograd as rg

CHECKS = [
    ("frame_length", str),
    (True, str),
    (True, bool),
    (3, (str, int)),
    ([1, 2], List[int]),  # noqa: UP006
    ([1, "a"], List[int]),  # noqa: UP006
    ([[1], [2, 3]], List[List[int]]),  # noqa: UP006
    ({"a": [1.0]}, Dict[str, List[float]]),  # noqa: UP006
    ({"a": 1}, Dict[str, str]),  # noqa: UP006
    ({1: "a"}, Dict[str, str]),  # noqa: UP006
    ((1, "a"), Tuple[int, str]),  # noqa: UP006
    ((1, 2), Tuple[int, str]),  # noqa: UP006
    ((1,), Tuple[int, str]),  # noqa: UP006
    (None, Optional[int]),  # noqa: UP045
    (2, Optional[int]),  # noqa: UP045
    ("x", Optional[int]),  # noqa: UP045
    (2.0, Union[str, float]),  # noqa: UP007
    ([1], list[int]),
    ({"k": (1, 2.0)}, dict[str, tuple[int, float]]),
    (2, int | str),
    (b"x", int | str),
    (1.0, int),
    (True, int),
]


@pytest.mark.parametrize(("value", "target"), CHECKS)
def test_jit_isinstance_answers_as_torchs(value: Any, target: Any) -> None:
    assert rg.jit.isinstance(value, target) is torch.jit.isinstance(value, target)


def test_jit_isinstance_of_a_tensor_and_of_a_list_of_tensors() -> None:
    ours = [rg.ones(2), rg.zeros(1)]
    assert rg.jit.isinstance(ours, List[rg.Tensor])  # noqa: UP006
    assert not rg.jit.isinstance(ours + [1.0], List[rg.Tensor])  # noqa: UP006
    assert rg.jit.isinstance({"w": rg.ones(1)}, Dict[str, rg.Tensor])  # noqa: UP006


def test_jit_isinstance_warns_that_an_empty_container_matches_any_element_type() -> None:
    with pytest.warns(UserWarning, match="inner type of a container is lost"):
        assert torch.jit.isinstance([], List[str])  # noqa: UP006
    with pytest.warns(UserWarning, match="inner type of a container is lost"):
        assert rg.jit.isinstance([], List[str])  # noqa: UP006
    with pytest.warns(UserWarning, match="inner type of a container is lost"):
        assert rg.jit.isinstance({}, Dict[str, int])  # noqa: UP006


def test_jit_isinstance_refuses_a_bare_container_and_a_non_type() -> None:
    for bare in (list, dict, tuple, List, Dict):  # noqa: UP006
        with pytest.raises(RuntimeError):
            torch.jit.isinstance([1], bare)
        with pytest.raises(rg.InvalidArgumentError, match="contained type"):
            rg.jit.isinstance([1], bare)
    with pytest.raises(rg.DTypeError, match=r"jit\.isinstance: the second argument"):
        rg.jit.isinstance(1, 3)
    with pytest.raises(rg.DTypeError, match=r"jit\.isinstance: the second argument"):
        rg.jit.isinstance(1, [int])
    assert rg.jit.isinstance(1, (str, int))  # still usable after the refusals


def test_log_api_usage_once_records_nothing_and_wants_a_name() -> None:
    assert rg._C._log_api_usage_once("torchaudio.transforms.Spectrogram") is None
    with pytest.raises(TypeError):
        torch._C._log_api_usage_once(3)
    with pytest.raises(rg.DTypeError, match="_log_api_usage_once"):
        rg._C._log_api_usage_once(3)


def _pair(values: np.ndarray) -> tuple[Any, Any]:
    return rg.tensor(values, requires_grad=True), torch.tensor(values, requires_grad=True)


@pytest.mark.parametrize(
    "loss_name", ["cross_entropy", "nll_loss", "l1_loss", "mse_loss", "smooth_l1_loss"]
)
def test_elementwise_mean_reduction_is_the_mean_with_torchs_warning(loss_name: str) -> None:
    rng = np.random.default_rng(3701)
    logits = rng.standard_normal((4, 3))
    ours, theirs = _pair(logits)
    if loss_name in ("cross_entropy", "nll_loss"):
        labels = np.array([0, 2, -1, 1])
        our_target, their_target = rg.tensor(labels), torch.tensor(labels)
        extra = {"ignore_index": -1}
    else:
        values = rng.standard_normal((4, 3))
        our_target, their_target = rg.tensor(values), torch.tensor(values)
        extra = {}
    with pytest.warns(UserWarning, match="elementwise_mean' is deprecated"):
        expected = getattr(torch.nn.functional, loss_name)(
            theirs, their_target, reduction="elementwise_mean", **extra
        )
    with pytest.warns(UserWarning, match="elementwise_mean' is deprecated"):
        got = getattr(rg.nn.functional, loss_name)(
            ours, our_target, reduction="elementwise_mean", **extra
        )
    np.testing.assert_allclose(got.item(), expected.item(), rtol=1e-12)
    expected.backward()
    np.testing.assert_allclose(
        ours.grad(got.backward()).numpy(), theirs.grad.numpy(), rtol=1e-12, atol=1e-15
    )


def test_a_loss_module_built_with_elementwise_mean_means_as_torchs() -> None:
    rng = np.random.default_rng(3702)
    logits, labels = rng.standard_normal((5, 4)), np.array([3, 0, 1, 1, 2])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        theirs = torch.nn.CrossEntropyLoss(reduction="elementwise_mean")
        ours = rg.nn.CrossEntropyLoss(reduction="elementwise_mean")
        expected = theirs(torch.tensor(logits), torch.tensor(labels)).item()
        got = ours(rg.tensor(logits), rg.tensor(labels)).item()
    np.testing.assert_allclose(got, expected, rtol=1e-12)


def test_other_reductions_are_still_refused_by_name() -> None:
    with pytest.raises(rg.InvalidArgumentError, match="reduction must be 'mean', 'sum' or 'none'"):
        rg.nn.functional.mse_loss(rg.ones(2), rg.zeros(2), reduction="average")


def test_onnx_operators_shape_as_tensor_and_reshape_as_torchs() -> None:
    import retrograd.onnx.operators as operators

    values = np.arange(6.0).reshape(2, 3)
    ours, theirs = (
        operators.shape_as_tensor(rg.tensor(values)),
        torch._shape_as_tensor(torch.tensor(values)),
    )
    assert ours.tolist() == theirs.tolist() and str(ours.dtype) == "int64"
    assert not operators.shape_as_tensor(rg.tensor(values, requires_grad=True)).requires_grad
    bsz, seq_len = ours[0], ours[1]  # fairseq's sizes: 0-d tensors given to view
    assert rg.ones(6, 2).view(bsz, seq_len, -1).shape == (2, 3, 2)
    for shape in ([3, 2], [3, -1], [6]):
        got = operators.reshape_from_tensor_shape(rg.tensor(values), rg.tensor(shape))
        expected = torch._reshape_from_tensor(torch.tensor(values), torch.tensor(shape))
        np.testing.assert_array_equal(got.numpy(), expected.numpy())
    with pytest.raises(rg.DTypeError, match="shape_as_tensor: expected a Tensor"):
        operators.shape_as_tensor(3)
    with pytest.raises(rg.ShapeError, match="1-d integer tensor"):
        operators.reshape_from_tensor_shape(rg.tensor(values), rg.tensor([3.0, 2.0]))
    with pytest.raises(rg.ShapeError):
        operators.reshape_from_tensor_shape(rg.tensor(values), rg.tensor([4, 2]))


def _both(fn_name: str, *args: Any, out: Any, **kwargs: Any) -> tuple[Any, Any]:
    """``fn_name`` called with ``out=`` in both libraries (``out`` made by a function of the
    library), returning both ``out`` tensors after the call."""
    results = []
    for lib in (torch, rg):
        converted = [lib.tensor(a) if isinstance(a, np.ndarray) else a for a in args]
        target = out(lib)
        returned = getattr(lib, fn_name)(*converted, out=target, **kwargs)
        assert returned is target
        results.append(target)
    return results[0], results[1]


def test_out_of_gather_index_select_masked_select_and_arithmetic_writes_the_buffer() -> None:
    a = np.array([[3, 1, 2], [0, 5, 4]])
    index = np.array([[2, 0], [1, 1]])
    cases = [
        ("gather", (a, 1, index), lambda lib: lib.zeros(2, 2, dtype=lib.int64), {}),
        ("gather", (a, 1, index), lambda lib: lib.zeros(7, dtype=lib.int64), {}),  # resized
        (
            "index_select",
            (a, 0, np.array([1, 0, 1])),
            lambda lib: lib.zeros(3, 3, dtype=lib.int64),
            {},
        ),
        ("masked_select", (a, a > 2), lambda lib: lib.zeros(1, dtype=lib.int64), {}),
        ("add", (a, 1), lambda lib: lib.zeros(2, 3), {}),  # int result cast into float
        ("div", (a, 2), lambda lib: lib.zeros(2, 3, dtype=lib.int64), {"rounding_mode": "trunc"}),
        ("mul", (a.astype(np.float32), 0.5), lambda lib: lib.zeros(2, 3), {}),
    ]
    for name, args, out, kwargs in cases:
        theirs, ours = _both(name, *args, out=out, **kwargs)
        assert str(ours.dtype) == str(theirs.dtype).removeprefix("torch."), name
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy(), err_msg=name)


def test_out_into_a_view_writes_through_to_its_base_as_fairseqs_beam_buffers() -> None:
    cand = np.array([[7, 8, 9, 6], [5, 4, 3, 2]])
    hypos = np.array([[2, 0], [3, 1]])
    buffers = []
    for lib in (torch, rg):
        tokens = lib.zeros(4, 3, dtype=lib.int64)
        lib.gather(lib.tensor(cand), 1, lib.tensor(hypos), out=tokens.view(2, 2, -1)[:, :, 1])
        buffers.append(tokens.numpy())
    np.testing.assert_array_equal(buffers[1], buffers[0])


def test_out_refusals_name_the_fault_as_torchs_do() -> None:
    a = rg.tensor([[3, 1, 2], [0, 5, 4]])
    with pytest.raises(rg.DTypeError, match="gather: expected the out tensor to have dtype int64"):
        rg.gather(a, 1, rg.tensor([[0], [1]]), out=rg.zeros(2, 1))
    with pytest.raises(rg.DTypeError, match="can't be cast to the desired output type int64"):
        rg.add(a.float(), 1, out=rg.zeros(2, 3, dtype=rg.int64))
    with pytest.raises(rg.AutodiffError, match="don't support automatic differentiation"):
        rg.gather(a.float().requires_grad_(), 1, rg.tensor([[0], [1]]), out=rg.zeros(2, 1))
    with pytest.raises(rg.InvalidArgumentError, match="out= is not supported"):
        rg.flip(a, [0], out=rg.zeros(2, 3, dtype=rg.int64))  # (torch's flip takes no out=)
    assert rg.gather(a, 1, rg.tensor([[0], [1]])).tolist() == [[3], [5]]  # still usable


def test_out_pairs_of_topk_and_sort_as_fairseqs_old_search_writes_them() -> None:
    lprobs = np.array([[-1.5, -0.2, -3.0, -0.7], [-0.1, -2.0, -0.4, -1.0]], dtype=np.float32)
    pairs = []
    for lib in (torch, rg):
        scores_buf, indices_buf = lib.zeros(1), lib.zeros(1, dtype=lib.int64)  # resized
        returned = lib.topk(lib.tensor(lprobs), k=3, dim=1, out=(scores_buf, indices_buf))
        assert returned[0] is scores_buf and returned.indices is indices_buf
        values, order = lib.zeros(2, 4), lib.zeros(2, 4, dtype=lib.int64)
        lib.sort(lib.tensor(lprobs), dim=1, descending=True, out=(values, order))
        pairs.append([t.numpy() for t in (scores_buf, indices_buf, values, order)])
    for ours, theirs in zip(pairs[1], pairs[0]):
        np.testing.assert_array_equal(ours, theirs)
    with pytest.raises(rg.DTypeError, match="out must be a tuple of 2 tensors"):
        rg.topk(rg.tensor(lprobs), 2, out=rg.zeros(2, 2))
    with pytest.raises(rg.DTypeError, match="topk: expected the out tensor to have dtype int64"):
        rg.topk(rg.tensor(lprobs), 2, out=(rg.zeros(2, 2), rg.zeros(2, 2, dtype=rg.int32)))
