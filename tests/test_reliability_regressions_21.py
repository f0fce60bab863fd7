"""Round 21 of the reliability work: one regression per defect the sweep
(``test_reliability_sweep_21.py``) and its probes found; each fails on the code before the fix.

Expected values and errors come from torch (the same program run there), or from math where
torch's own behaviour is the defect (said at the test)."""

from __future__ import annotations

import operator

import numpy as np
import pytest
import torch

import retrograd as rg
import retrograd.nn.functional as F  # noqa: N812

#: a size no machine holds (past any 48-bit address space, so NumPy refuses it on every OS,
#: whatever its overcommit): a broadcast of [N, 1] and [1, N] is 4e16 bytes of float32
HUGE = 10**8


# == results no machine holds: the backends' allocation errors ===================================
@pytest.mark.parametrize(
    "call",
    [
        lambda lib: lib.ones(1, 1).expand(HUGE, 1) + lib.ones(1, 1).expand(1, HUGE),
        lambda lib: lib.ones(1, 1).expand(HUGE, 1) * lib.ones(1, 1).expand(1, HUGE),
        lambda lib: lib.ones(1, 1).expand(HUGE, HUGE).exp(),
        lambda lib: lib.ones(1, 1).expand(HUGE, 1) > lib.ones(1, 1).expand(1, HUGE),
    ],
)
def test_an_elementwise_result_too_large_is_out_of_memory(call):
    # NumPy's bare MemoryError ("Unable to allocate 36.4 PiB") and torch's allocator's bare
    # RuntimeError passed through every elementwise kernel; creation functions and modules
    # already said rg.OutOfMemoryError naming the op.
    with pytest.raises(RuntimeError, match="allocate"):
        call(torch)
    with pytest.raises(rg.OutOfMemoryError, match=r"(add|exp|gt|greater|mul).*\[100000000, 1"):
        call(rg)
    assert (rg.ones(2, 1) + rg.ones(1, 2)).tolist() == [[2.0, 2.0], [2.0, 2.0]]


# == backward(inputs=...) ========================================================================
def test_backward_with_empty_inputs_is_refused():
    # It returned gradients holding nothing (every gradient dropped, silently); torch refuses.
    x = torch.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="cannot be empty"):
        (x * x).sum().backward(inputs=[])
    ours = rg.ones(2).require_grad()
    loss = (ours * ours).sum()
    with pytest.raises(rg.AutodiffError, match="backward: the inputs argument cannot be empty"):
        loss.backward(inputs=[])
    with pytest.raises(rg.AutodiffError, match=r"autograd\.backward: the inputs argument"):
        rg.autograd.backward([loss], inputs=[])
    assert ours.grad(loss.backward()).tolist() == [2.0, 2.0]  # the graph is still whole


def test_backward_toward_a_tensor_that_does_not_require_grad_is_refused():
    # It returned gradients without one for the tensor (nor anything else); torch refuses.
    x, w = torch.ones(2, requires_grad=True), torch.ones(2)
    with pytest.raises(RuntimeError, match="requires_grad=False"):
        (x * w).sum().backward(inputs=[w])
    ours, weight = rg.ones(2).require_grad(), rg.tensor([3.0, 4.0])
    loss = (ours * weight).sum()
    with pytest.raises(rg.AutodiffError, match=r"inputs\[1\] \(\[2\] float32\) does not require"):
        loss.backward(inputs=[ours, weight])
    assert ours.grad(loss.backward(inputs=[ours])).tolist() == [3.0, 4.0]


# == __index__ ===================================================================================
def test_index_of_a_tensor_of_several_elements_is_a_type_error():
    # A ShapeError (a ValueError): Python's fallbacks that follow a TypeError did not run, so
    # bytes(t) of an int tensor failed where torch's gives the bytes.
    assert bytes(torch.tensor([1, 2])) == b"\x01\x02"
    assert bytes(rg.tensor([1, 2])) == b"\x01\x02"
    with pytest.raises(TypeError, match="single element"):
        operator.index(torch.tensor([1, 2]))
    with pytest.raises(rg.DTypeError, match=r"__index__: .* got a \[2\] int64 tensor"):
        operator.index(rg.tensor([1, 2]))


def test_index_of_a_bool_tensor_is_its_int():
    # Refused ("only int64 tensors"); torch's bool tensor is an index, as Python's bool is.
    assert operator.index(torch.tensor(True)) == 1
    assert operator.index(rg.tensor(True)) == 1
    assert ["a", "b"][rg.tensor([True])] == "b"


# == adaptive pools at empty sizes ===============================================================
@pytest.mark.parametrize(
    "fn, shape, size",
    [
        ("adaptive_avg_pool1d", (1, 3, 0), 2),
        ("adaptive_avg_pool2d", (1, 1, 0, 4), 2),
        ("adaptive_avg_pool2d", (1, 3, 2, 0), (2, 1)),
        ("adaptive_avg_pool3d", (1, 1, 0, 4, 4), 2),
        ("adaptive_avg_pool2d", (4, 0, 4), 2),
    ],
)
def test_adaptive_avg_pool_of_an_empty_window_is_refused(fn, shape, size):
    # It gave NaN for every cell (the mean of nothing); torch refuses unless the output is
    # one cell (its mean fast path, NaN, which retrograd keeps).
    with pytest.raises(RuntimeError, match="non-zero size"):
        getattr(torch.nn.functional, fn)(torch.ones(shape), size)
    with pytest.raises(rg.ShapeError, match=rf"{fn}: .*non-zero sizes.*got \[[0-9, ]*0"):
        getattr(F, fn)(rg.ones(shape), size)


@pytest.mark.parametrize(
    "fn, shape, size",
    [
        ("adaptive_max_pool1d", (1, 1, 4), 0),
        ("adaptive_max_pool2d", (1, 1, 4, 4), 0),
        ("adaptive_max_pool2d", (2, 4, 4), (0, 2)),
        ("adaptive_max_pool3d", (1, 1, 4, 4, 4), 0),
    ],
)
def test_adaptive_max_pool_to_zero_cells_is_empty(fn, shape, size):
    # Refused ("output_size must be positive ints") where torch (and our adaptive average
    # pool) gives the empty result.
    theirs, their_indices = getattr(torch.nn.functional, fn)(torch.ones(shape), size, True)
    x = rg.ones(shape).require_grad()
    ours, indices = getattr(F, fn)(x, size, return_indices=True)
    assert ours.shape == tuple(theirs.shape) and indices.shape == tuple(their_indices.shape)
    assert indices.dtype == rg.int64
    gradient = x.grad(getattr(F, fn)(x, size).sum().backward())
    np.testing.assert_array_equal(gradient.numpy(), np.zeros(shape, np.float32))


# == sizes given as 0-d int tensors ==============================================================
@pytest.mark.parametrize(
    "call",
    [
        lambda lib, n: lib.ones(6).view(n, -1),
        lambda lib, n: lib.ones(6).reshape(n, 2),
        lambda lib, n: lib.ones(1, 1).expand(n, n),
        lambda lib, n: lib.ones(1).repeat(n),
        lambda lib, n: lib.ones(1).new_zeros(n),
    ],
)
def test_a_0d_int_tensor_is_a_size(call):
    # Refused ("expected a shape (ints or one sequence of ints), got (tensor(3), -1)"): a
    # ported ``x.view(n, -1)`` with ``n = lengths.max()`` failed; torch takes its __index__.
    theirs = call(torch, torch.tensor(3))
    ours = call(rg, rg.tensor(3))
    assert ours.shape == tuple(theirs.shape)
    with pytest.raises(rg.DTypeError, match="must be an int"):
        call(rg, rg.tensor(3.0))  # a float tensor is no size (torch: a TypeError)
