"""torch 2.13 names that real scripts call, against torch: a tensor's memory identity
(``data_ptr``, ``storage_offset``, ``untyped_storage``: equal where torch's are, so that tied
weights dedupe), Tensor methods (``hardshrink``, ``prelu``, ``adjoint``, ``float_power_``, the
``unsafe_*`` splits, ``new_empty_strided``, ``nonzero_static``, ``as_subclass``, ``output_nr``),
torch's top-level functional forms (ATen's argument orders and int reductions), function forms,
process-wide flags, ``torch.cpu``, ``torch.return_types``, ``torch.version``,
``torch.random.default_generator``, ``torch.testing.make_tensor``, ``torch.linalg.LinAlgError``,
``torch.func.linearize``, ``torch.backends``' flag namespaces and ``torch.cuda``'s queries."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import retrograd as rg
from retrograd.errors import (
    ArgumentTypeError,
    DTypeError,
    InvalidArgumentError,
    RetrogradError,
    ShapeError,
)


def _np(t):
    if isinstance(t, rg.Tensor):
        return np.asarray(t.tolist())
    return t.detach().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)


def _pair(*shape, seed=0, positive=False):
    """The same float64 values as a torch leaf and a retrograd leaf, both requiring grad."""
    values = np.random.default_rng(seed).standard_normal(shape)
    if positive:
        values = np.abs(values) + 0.5
    theirs = torch.tensor(values, requires_grad=True)
    ours = rg.tensor(values).require_grad()
    return ours, theirs


def _same(got, expected, rtol=1e-10, atol=1e-12):
    np.testing.assert_allclose(_np(got), _np(expected), rtol=rtol, atol=atol)


def _same_grads(loss_ours, loss_theirs, ours, theirs):
    grads = loss_ours.backward()
    loss_theirs.backward()
    for mine, their in zip(ours, theirs):
        got = mine.grad(grads)
        if their.grad is None:  # no gradient reaches it in torch: none, or zeros, here
            assert got is None or not _np(got).any()
        else:
            _same(got, their.grad)


# -- memory identity ---------------------------------------------------------------------------
def _views(t):
    return {
        "self": t,
        "slice": t[1:],
        "row": t[2],
        "column": t[:, 1],
        "step": t[::2, 1:],
        "t": t.t(),
        "view": t.view(-1),
        "detach": t.detach(),
        "narrow": t.narrow(1, 2, 2),
        "chunk1": t.chunk(2, 0)[1],
        "split1": t.split([1, 4], 1)[1],
        "diagonal": t.diagonal(1),
        "unsqueeze": t[1:].unsqueeze(0),
    }


def test_storage_offset_and_data_ptr_differences_as_torchs():
    theirs = torch.arange(20.0).reshape(4, 5)
    ours = rg.arange(20.0).reshape(4, 5)
    their_views, our_views = _views(theirs), _views(ours)
    for name, their_view in their_views.items():
        our_view = our_views[name]
        assert our_view.storage_offset() == their_view.storage_offset(), name
        assert our_view.data_ptr() - ours.data_ptr() == their_view.data_ptr() - theirs.data_ptr(), (
            name
        )
        assert our_view.untyped_storage().data_ptr() == ours.data_ptr(), name
        assert our_view.untyped_storage().nbytes() == their_view.untyped_storage().nbytes()
        assert len(our_view.storage()) == len(their_view.storage()) == 20
    assert isinstance(ours.data_ptr(), int) and ours.data_ptr() > 0


def test_data_ptr_tells_tied_weights_from_copies_as_torchs_does():
    def tied_names(model, ptr):
        seen, tied = {}, []
        for name, p in model.state_dict(keep_vars=True).items():
            key = ptr(p)
            if key in seen:
                tied.append((seen[key], name))
            seen.setdefault(key, name)
        return tied

    their_model = torch.nn.Sequential(torch.nn.Embedding(5, 3), torch.nn.Linear(3, 5))
    their_model[1].weight = their_model[0].weight
    our_model = rg.nn.Sequential(rg.nn.Embedding(5, 3), rg.nn.Linear(3, 5))
    our_model[1].weight = our_model[0].weight
    for ptr in (lambda p: p.data_ptr(), lambda p: p.untyped_storage().data_ptr()):
        assert (
            tied_names(our_model, ptr) == tied_names(their_model, ptr) == [("0.weight", "1.weight")]
        )
    x = rg.ones(3)
    assert x.clone().data_ptr() != x.data_ptr()
    assert rg.ones(3).data_ptr() != rg.ones(3).data_ptr()
    assert x.untyped_storage() == x[1:].untyped_storage()
    assert x.untyped_storage() != x.clone().untyped_storage()
    # a copy of a tensor is a storage of its own
    import copy

    assert copy.deepcopy(x).data_ptr() != x.data_ptr()


def test_storage_identity_queries_as_torchs():
    theirs, ours = torch.ones(2, 3), rg.ones(2, 3)
    for their_other, our_other in (
        (theirs, ours),
        (theirs.view(2, 3), ours.view(2, 3)),
        (theirs.t(), ours.t()),
        (theirs.detach(), ours.detach()),
        (theirs[1:], ours[1:]),
        (theirs.clone(), ours.clone()),
    ):
        assert our_other.is_set_to(ours) == their_other.is_set_to(theirs)
        assert our_other.const_data_ptr() == our_other.data_ptr()
    assert rg.is_storage(ours.untyped_storage()) and rg.is_storage(ours.storage())
    assert not rg.is_storage(ours) and not torch.is_storage(theirs)
    assert isinstance(ours.untyped_storage(), rg.UntypedStorage)
    assert isinstance(ours.storage(), rg.TypedStorage)


def test_identity_queries_as_torchs():
    ours, theirs = rg.ones(2, 3), torch.ones(2, 3)
    assert ours.is_shared() is theirs.is_shared() is False
    assert ours.is_inference() is theirs.is_inference() is False
    assert ours.name is theirs.name is None
    our_leaf, their_leaf = _pair(6, 2)
    their_pieces = (their_leaf * 1).split(2)
    our_pieces = (our_leaf * 1).split(2)
    assert [p.output_nr for p in our_pieces] == [p.output_nr for p in their_pieces] == [0, 1, 2]
    assert [p.output_nr for p in (our_leaf * 1).unbind(1)] == [0, 1]
    assert [p.output_nr for p in (our_leaf * 1).chunk(3)] == [0, 1, 2]
    assert [p.output_nr for p in rg.ones(4).split(2)] == [
        p.output_nr for p in torch.ones(4).split(2)
    ]
    assert our_leaf.output_nr == their_leaf.output_nr == 0


# -- Tensor methods ----------------------------------------------------------------------------
def test_hardshrink_and_prelu_methods_values_and_gradients_as_torchs():
    ours, theirs = _pair(3, 4)
    our_w, their_w = _pair(4, seed=1)
    got = ours.hardshrink(0.7) * 2 + ours.prelu(our_w)
    expected = theirs.hardshrink(0.7) * 2 + theirs.prelu(their_w)
    _same(got, expected)
    _same_grads(got.sum(), expected.sum(), [ours, our_w], [theirs, their_w])
    _same(ours.hardshrink(), theirs.hardshrink())


def test_adjoint_and_float_power_in_place_as_torchs():
    ours, theirs = _pair(2, 3, 4)
    adjoint = ours.adjoint()
    assert adjoint.shape == tuple(theirs.adjoint().shape) == (2, 4, 3)
    _same(adjoint, theirs.adjoint())
    _same(rg.adjoint(ours), torch.adjoint(theirs))
    assert adjoint.data_ptr() == ours.data_ptr()  # a view, as torch's
    with pytest.raises(ShapeError, match="adjoint"):
        rg.ones(3).adjoint()
    with pytest.raises(RuntimeError):
        torch.ones(3).adjoint()
    our_base = rg.tensor([1.5, 2.0, 3.0], dtype=rg.float64)
    their_base = torch.tensor([1.5, 2.0, 3.0], dtype=torch.float64)
    assert our_base.float_power_(2.5) is our_base
    _same(our_base, their_base.float_power_(2.5))
    _same(
        our_base.float_power_(rg.tensor([1, 2, 0])),
        their_base.float_power_(torch.tensor([1, 2, 0])),
    )
    with pytest.raises(DTypeError, match="float_power_"):
        rg.ones(2).float_power_(2)
    with pytest.raises(RuntimeError):
        torch.ones(2).float_power_(2)


def test_unsafe_splits_as_torchs():
    ours, theirs = _pair(5, 4)
    cases = [
        (lambda t: t.unsafe_chunk(2), lambda t: t.unsafe_chunk(2)),
        (lambda t: t.unsafe_chunk(3, 1), lambda t: t.unsafe_chunk(3, 1)),
        (lambda t: t.unsafe_split(2), lambda t: t.unsafe_split(2)),
        (lambda t: t.unsafe_split(3, dim=1), lambda t: t.unsafe_split(3, dim=1)),
        (lambda t: t.unsafe_split_with_sizes([2, 3]), lambda t: t.unsafe_split_with_sizes([2, 3])),
        (lambda t: rg.unsafe_chunk(t, 2, 1), lambda t: torch.unsafe_chunk(t, 2, 1)),
        (lambda t: rg.unsafe_split(t, 3), lambda t: torch.unsafe_split(t, 3)),
        (
            lambda t: rg.unsafe_split_with_sizes(t, [3, 1], 1),
            lambda t: torch.unsafe_split_with_sizes(t, [3, 1], 1),
        ),
    ]
    for mine, theirs_fn in cases:
        got, expected = mine(ours), theirs_fn(theirs)
        assert isinstance(got, tuple) and len(got) == len(expected)
        for a, b in zip(got, expected):
            _same(a, b)
    pieces = ours.unsafe_split(2)
    loss = pieces[0].sum() * 2 + (pieces[2] ** 2).sum()
    their_pieces = theirs.unsafe_split(2)
    _same_grads(loss, their_pieces[0].sum() * 2 + (their_pieces[2] ** 2).sum(), [ours], [theirs])
    with pytest.raises(ArgumentTypeError, match="unsafe_split_with_sizes"):
        ours.unsafe_split_with_sizes(2)
    with pytest.raises(TypeError):
        theirs.unsafe_split([2, 3])
    with pytest.raises(ArgumentTypeError, match="unsafe_split"):
        ours.unsafe_split([2, 3])


def test_new_empty_strided_and_empty_strided_lay_out_as_torchs():
    base = rg.ones(2, dtype=rg.float32)
    for size, stride in (
        ((2, 3), (1, 2)),
        ((3, 4), (4, 1)),
        ((2, 2, 2), (1, 4, 2)),
        ((0, 3), (3, 1)),
    ):
        expected = torch.ones(2).new_empty_strided(size, stride, dtype=torch.float64)
        got = base.new_empty_strided(size, stride, dtype=rg.float64)
        assert got.shape == tuple(expected.shape) and got.stride() == expected.stride()
        assert got.dtype == rg.float64
        expected = torch.empty_strided(size, stride)
        got = rg.empty_strided(size, stride)
        assert got.shape == tuple(expected.shape) and got.stride() == expected.stride()
        assert got.dtype == rg.float32
    assert base.new_empty_strided((2,), (1,), requires_grad=True).requires_grad
    with pytest.raises(ShapeError, match="empty_strided"):
        rg.empty_strided((2, 3), (1,))


def test_nonzero_static_as_torchs():
    values = [[1, 0, 2], [0, 0, 3]]
    for size, fill in ((2, -1), (3, -1), (6, 7), (0, -1)):
        expected = torch.nonzero_static(torch.tensor(values), size=size, fill_value=fill)
        got = rg.tensor(values).nonzero_static(size=size, fill_value=fill)
        assert got.dtype == rg.int64 and got.shape == tuple(expected.shape)
        assert got.tolist() == expected.tolist()
        assert rg.nonzero_static(rg.tensor(values), size=size, fill_value=fill).tolist() == (
            expected.tolist()
        )
    with pytest.raises(ShapeError, match="nonzero_static"):
        rg.ones(2).nonzero_static(size=-1)


def test_as_subclass_aliases_and_keeps_the_graph_as_torchs():
    class Mine(rg.Tensor):
        pass

    ours, theirs = _pair(3)
    view = ours.as_subclass(Mine)
    assert type(view) is Mine and view.requires_grad
    assert view.data_ptr() == ours.data_ptr()
    their_view = theirs.as_subclass(torch.Tensor)
    _same_grads((view * view).sum(), (their_view * their_view).sum(), [ours], [theirs])
    with pytest.raises(ArgumentTypeError, match="as_subclass"):
        ours.as_subclass(int)


# -- torch's top-level functional forms --------------------------------------------------------
def test_normalization_forms_take_atens_argument_order():
    ours, theirs = _pair(4, 3, 5)
    our_w, their_w = _pair(3, seed=1, positive=True)
    our_b, their_b = _pair(3, seed=2)
    mean, var = np.zeros(3), np.ones(3) * 2.0
    got = rg.batch_norm(
        ours, our_w, our_b, rg.tensor(mean), rg.tensor(var), False, 0.1, 1e-5, False
    )
    expected = torch.batch_norm(
        theirs, their_w, their_b, torch.tensor(mean), torch.tensor(var), False, 0.1, 1e-5, False
    )
    _same(got, expected)
    got2 = rg.instance_norm(ours, our_w, our_b, None, None, True, 0.1, 1e-5, False)
    expected2 = torch.instance_norm(theirs, their_w, their_b, None, None, True, 0.1, 1e-5, False)
    _same(got2, expected2)
    _same_grads(
        (got * got2).sum(),
        (expected * expected2).sum(),
        [ours, our_w, our_b],
        [theirs, their_w, their_b],
    )


def test_loss_forms_take_int_reductions_as_torchs():
    ours, theirs = _pair(4, 3)
    other, their_other = _pair(4, 3, seed=1)
    rng = np.random.default_rng(3)
    probs = rng.uniform(0.1, 0.9, (4, 3))
    signs = np.array([1.0, -1.0, 1.0, -1.0])
    counts = rng.integers(0, 4, (4, 3)).astype(np.float64)
    cases = [
        (
            lambda x, y, r: rg.binary_cross_entropy_with_logits(
                x, rg.tensor(probs), None, rg.tensor([1.0, 2.0, 0.5]), r
            ),
            lambda x, y, r: torch.binary_cross_entropy_with_logits(
                x, torch.tensor(probs), None, torch.tensor([1.0, 2.0, 0.5]), r
            ),
        ),
        (
            lambda x, y, r: rg.kl_div(x, rg.tensor(probs), r, log_target=False),
            lambda x, y, r: torch.kl_div(x, torch.tensor(probs), r, log_target=False),
        ),
        (
            lambda x, y, r: rg.poisson_nll_loss(x, rg.tensor(counts), True, True, 1e-8, r),
            lambda x, y, r: torch.poisson_nll_loss(x, torch.tensor(counts), True, True, 1e-8, r),
        ),
        (
            lambda x, y, r: rg.triplet_margin_loss(x, y, x * 0.5, 1.0, 2.0, 1e-6, True, r),
            lambda x, y, r: torch.triplet_margin_loss(x, y, x * 0.5, 1.0, 2.0, 1e-6, True, r),
        ),
        (
            lambda x, y, r: rg.margin_ranking_loss(x[:, 0], y[:, 0], rg.tensor(signs), 0.2, r),
            lambda x, y, r: torch.margin_ranking_loss(
                x[:, 0], y[:, 0], torch.tensor(signs), 0.2, r
            ),
        ),
        (
            lambda x, y, r: rg.hinge_embedding_loss(x, rg.tensor(np.sign(probs - 0.5)), 0.8, r),
            lambda x, y, r: torch.hinge_embedding_loss(
                x, torch.tensor(np.sign(probs - 0.5)), 0.8, r
            ),
        ),
        (
            lambda x, y, r: rg.cosine_embedding_loss(x, y, rg.tensor(signs), 0.1, r),
            lambda x, y, r: torch.cosine_embedding_loss(x, y, torch.tensor(signs), 0.1, r),
        ),
    ]
    for mine, their_fn in cases:
        for reduction in (0, 1, 2):
            got = mine(ours, other, reduction)
            expected = their_fn(theirs, their_other, reduction)
            assert got.shape == tuple(expected.shape)
            _same(got, expected)
        _same_grads(
            mine(ours, other, 1) * 3,
            their_fn(theirs, their_other, 1) * 3,
            [ours, other],
            [theirs, their_other],
        )
        theirs.grad = their_other.grad = None
    with pytest.raises(InvalidArgumentError, match="kl_div"):
        rg.kl_div(ours, ours, 3)


def test_ctc_loss_form_as_torchs():
    rng = np.random.default_rng(4)
    logits = rng.standard_normal((6, 2, 4))
    targets = np.array([[1, 2, 1], [3, 1, 0]])
    for reduction in (0, 1, 2):
        # torch's gradient is right through log_softmax (its kernel's assumption), so the
        # gradients are compared at the logits
        ours = rg.tensor(logits).require_grad()
        theirs = torch.tensor(logits, requires_grad=True)
        got = rg.ctc_loss(
            ours.log_softmax(-1), rg.tensor(targets), [6, 5], [3, 2], 0, reduction, False
        )
        expected = torch.ctc_loss(
            theirs.log_softmax(-1), torch.tensor(targets), [6, 5], [3, 2], 0, reduction, False
        )
        _same(got, expected, rtol=1e-9)
        _same_grads(got.sum(), expected.sum(), [ours], [theirs])


def test_constant_pad_convolution_and_grid_sampler_forms_as_torchs():
    ours, theirs = _pair(2, 3, 5, 5)
    got = rg.constant_pad_nd(ours, [1, 2, 0, 1], 0.5)
    expected = torch.constant_pad_nd(theirs, [1, 2, 0, 1], 0.5)
    _same(got, expected)
    our_w, their_w = _pair(4, 3, 3, 3, seed=1)
    our_b, their_b = _pair(4, seed=2)
    conv = rg.convolution(ours, our_w, our_b, [2, 1], [1, 0], [1, 1], False, [0, 0], 1)
    their_conv = torch.convolution(
        theirs, their_w, their_b, [2, 1], [1, 0], [1, 1], False, [0, 0], 1
    )
    _same(conv, their_conv)
    our_tw, their_tw = _pair(3, 2, 2, seed=3)
    flat, their_flat = ours[:, :, 0], theirs[:, :, 0]
    transposed = rg.convolution(flat, our_tw, None, [2], [1], [1], True, [1], 1)
    their_transposed = torch.convolution(their_flat, their_tw, None, [2], [1], [1], True, [1], 1)
    _same(transposed, their_transposed)
    grid_np = np.random.default_rng(5).uniform(-1.1, 1.1, (2, 4, 3, 2))
    our_grid, their_grid = rg.tensor(grid_np), torch.tensor(grid_np)
    for interpolation, padding, corners in ((0, 0, False), (1, 1, True), (0, 2, True)):
        sampled = rg.grid_sampler(ours, our_grid, interpolation, padding, corners)
        their_sampled = torch.grid_sampler(theirs, their_grid, interpolation, padding, corners)
        _same(sampled, their_sampled)
    loss = conv.sum() + (transposed**2).sum() + got.sum() + sampled.sum()
    their_loss = (
        their_conv.sum() + (their_transposed**2).sum() + expected.sum() + their_sampled.sum()
    )
    _same_grads(loss, their_loss, [ours, our_w, our_tw], [theirs, their_w, their_tw])
    with pytest.raises(InvalidArgumentError, match="grid_sampler"):
        rg.grid_sampler(ours, our_grid, 5, 0, False)


def test_in_place_activation_and_dropout_forms_as_torchs():
    values = np.linspace(-2.0, 2.0, 8).reshape(2, 4)
    for name, args in (("selu_", ()), ("celu_", (0.7,)), ("threshold_", (0.3, -1.0))):
        ours, theirs = rg.tensor(values), torch.tensor(values)
        assert getattr(rg, name)(ours, *args) is ours
        getattr(torch, name)(theirs, *args)
        _same(ours, theirs)
    ours, theirs = rg.tensor(values), torch.tensor(values)
    _same(rg.rrelu(ours, 0.1, 0.3, False), torch.rrelu(theirs, 0.1, 0.3, False))
    ours_in = rg.tensor(values)
    _same(rg.rrelu_(ours_in, 0.1, 0.3, False), torch.rrelu_(torch.tensor(values), 0.1, 0.3, False))
    _same(ours_in, torch.rrelu(torch.tensor(values), 0.1, 0.3, False))
    for name in ("dropout_", "alpha_dropout_", "feature_dropout_", "feature_alpha_dropout_"):
        ours = rg.tensor(values)
        assert getattr(rg, name)(ours, 0.5, False) is ours
        _same(ours, values)
    ours = rg.tensor(values)
    rg.dropout_(ours, 1.0, True)
    _same(ours, np.zeros_like(values))
    rg.manual_seed(0)
    big = rg.ones(6, 5, 4)
    dropped = rg.feature_dropout(big, 0.5, True)
    per_channel = _np(dropped).reshape(6, 5, 4)
    assert set(np.unique(per_channel)) <= {0.0, 2.0}
    assert (per_channel == per_channel[..., :1]).all()  # whole [n, c] slices
    assert 0 < (per_channel[..., 0] == 0).sum() < 30
    _same(rg.feature_dropout(rg.tensor(values), 0.3, False), values)
    with pytest.raises(ShapeError, match="feature_dropout"):
        rg.feature_dropout(rg.ones(3), 0.5, True)


def test_norm_forms_as_torchs():
    ours, theirs = _pair(3, 4, 5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = [
            (rg.norm_except_dim(ours, 2, 1), torch.norm_except_dim(theirs, 2, 1)),
            (rg.norm_except_dim(ours, 3, 0), torch.norm_except_dim(theirs, 3, 0)),
            (rg.norm_except_dim(ours, 2, -1), torch.norm_except_dim(theirs, 2, -1)),
            (rg.frobenius_norm(ours, [1, 2]), torch.frobenius_norm(theirs, [1, 2])),
            (rg.frobenius_norm(ours, (0,), True), torch.frobenius_norm(theirs, (0,), True)),
            (rg.nuclear_norm(ours[0]), torch.nuclear_norm(theirs[0])),
            (rg.nuclear_norm(ours, [1, 2], True), torch.nuclear_norm(theirs, [1, 2], True)),
            (rg.nuclear_norm(ours), torch.nuclear_norm(theirs)),  # the last two dims, batched
        ]
    total, their_total = 0, 0
    for got, expected in cases:
        assert got.shape == tuple(expected.shape)
        _same(got, expected)
        total, their_total = total + got.sum(), their_total + expected.sum()
    _same_grads(total, their_total, [ours], [theirs])
    with pytest.raises(ShapeError, match="frobenius_norm"):
        rg.frobenius_norm(ours, [0, 1, 2])
    with pytest.raises(ShapeError, match="nuclear_norm"):
        rg.nuclear_norm(ours[0, 0])


def test_fill_resize_as_and_device_queries_as_torchs():
    ours, theirs = _pair(2, 3)
    our_value = rg.tensor(2.5, dtype=rg.float64).require_grad()
    their_value = torch.tensor(2.5, dtype=torch.float64, requires_grad=True)
    got, expected = rg.fill(ours, our_value), torch.fill(theirs, their_value)
    _same(got, expected)
    grads = (got * 3).sum().backward()
    (expected * 3).sum().backward()
    _same(our_value.grad(grads), their_value.grad)
    assert ours.grad(grads) is None or not _np(ours.grad(grads)).any()
    assert (
        rg.fill(rg.ones(2, dtype=rg.int64), 2.7).tolist()
        == torch.fill(torch.ones(2, dtype=torch.int64), 2.7).tolist()
    )
    target = rg.arange(6.0)
    assert rg.resize_as_(target, rg.ones(2, 2)) is target and target.tolist() == [[0, 1], [2, 3]]
    assert rg.get_device(rg.ones(2)) == torch.get_device(torch.ones(2)) == -1
    assert rg.is_inference(rg.ones(2)) is torch.is_inference(torch.ones(2)) is False


def test_binomial_draws_counts_of_their_probabilities():
    rg.manual_seed(0)
    count = rg.full((4000,), 10.0)
    prob = rg.tensor([0.2, 0.7]).repeat(2000)
    draws = rg.binomial(count, prob)
    assert draws.dtype == rg.float32 and draws.shape == (4000,)
    values = _np(draws)
    assert (values == np.round(values)).all() and values.min() >= 0 and values.max() <= 10
    assert abs(values[0::2].mean() - 2.0) < 0.15 and abs(values[1::2].mean() - 7.0) < 0.15
    with pytest.raises(DTypeError, match="binomial"):
        rg.binomial(rg.tensor([10, 5]), rg.tensor([0.5, 0.2]))
    with pytest.raises(ValueError):
        torch.binomial(torch.tensor([10, 5]), torch.tensor([0.5, 0.2]))


def test_histogramdd_as_torchs():
    points = np.array([[0.0, 1.0], [1.0, 0.0], [2.0, 2.0], [0.5, 1.5], [1.2, 0.3]])
    weights = np.array([1.0, 2.0, 3.0, 4.0, 0.5], dtype=np.float32)
    cases = [
        ({"bins": [2, 3]}, {"bins": [2, 3]}),
        ({"bins": 2, "range": [0.0, 2.0, 0.0, 4.0], "density": True},) * 2,
        (
            {
                "bins": [rg.tensor([0.0, 1.0, 3.0]), rg.tensor([0.0, 2.0])],
                "weight": rg.tensor(weights),
            },
            {
                "bins": [torch.tensor([0.0, 1.0, 3.0]), torch.tensor([0.0, 2.0])],
                "weight": torch.tensor(weights),
            },
        ),
    ]
    for our_kwargs, their_kwargs in cases:
        got = rg.histogramdd(rg.tensor(points, dtype=rg.float32), **our_kwargs)
        expected = torch.histogramdd(torch.tensor(points, dtype=torch.float32), **their_kwargs)
        assert isinstance(got, rg.return_types.histogramdd) and got._fields == ("hist", "bin_edges")
        _same(got.hist, expected.hist, rtol=1e-6)
        assert got.hist.dtype == rg.float32
        assert len(got.bin_edges) == len(expected.bin_edges)
        for a, b in zip(got.bin_edges, expected.bin_edges):
            _same(a, b, rtol=1e-6)
    with pytest.raises(ShapeError, match="histogramdd"):
        rg.histogramdd(rg.ones(3), 2)
    with pytest.raises(DTypeError, match="histogramdd"):
        rg.histogramdd(rg.ones(3, 2), 2, weight=rg.ones(3, dtype=rg.float64))


def test_low_rank_factorizations_reconstruct_and_differentiate(monkeypatch):
    rng = np.random.default_rng(6)
    low_rank = rng.standard_normal((7, 3)) @ rng.standard_normal((3, 5))
    ours = rg.tensor(low_rank).require_grad()
    u, s, v = rg.svd_lowrank(ours, q=3)
    their_u, their_s, their_v = torch.svd_lowrank(torch.tensor(low_rank), q=3)
    assert (u.shape, s.shape, v.shape) == (
        tuple(their_u.shape),
        tuple(their_s.shape),
        tuple(their_v.shape),
    )
    _same(s, np.linalg.svd(low_rank, compute_uv=False)[:3], rtol=1e-9)
    _same(u @ rg.diag_embed(s) @ v.mT, low_rank, atol=1e-10)
    assert rg.svd_lowrank(ours)[1].shape == tuple(
        torch.svd_lowrank(torch.tensor(low_rank))[1].shape
    )
    grads = s.sum().backward()  # the nuclear norm's gradient: U V^T
    full_u, _, full_vh = np.linalg.svd(low_rank, full_matrices=False)
    _same(ours.grad(grads), full_u[:, :3] @ full_vh[:3], atol=1e-9)
    data = rng.standard_normal((10, 4)) * np.array([3.0, 1.0, 0.5, 0.1])
    # torch's method is randomized: given the same Gaussian sketch (both draw it by their
    # package's ``randn``, looked up when called), the same approximation as torch's
    sketch = rng.standard_normal((4, 2))
    monkeypatch.setattr(rg, "randn", lambda *size, dtype=None, **_: rg.tensor(sketch, dtype=dtype))
    monkeypatch.setattr(
        torch, "randn", lambda *size, dtype=None, **_: torch.tensor(sketch, dtype=dtype)
    )
    u, s, v = rg.pca_lowrank(rg.tensor(data), q=2, niter=1)
    their_u, their_s, their_v = torch.pca_lowrank(torch.tensor(data), q=2, niter=1)
    _same(s, their_s.numpy(), rtol=1e-9)
    _same(u @ rg.diag_embed(s) @ v.mT, (their_u @ torch.diag_embed(their_s) @ their_v.mT).numpy())
    centered = data - data.mean(0)
    _, exact_s, exact_vh = np.linalg.svd(centered, full_matrices=False)
    assert abs(float(s[1]) - exact_s[1]) > 1e-9  # an approximation after one iteration
    # the subspace iterations converge to the exact principal components, up to sign
    u, s, v = rg.pca_lowrank(rg.tensor(data), q=2, niter=20)
    _same(s, exact_s[:2], rtol=1e-9)
    np.testing.assert_allclose(np.abs(_np(v)), np.abs(exact_vh[:2].T), rtol=1e-8, atol=1e-10)
    _same(u @ rg.diag_embed(s) @ v.mT, centered @ exact_vh[:2].T @ exact_vh[:2], atol=1e-10)
    monkeypatch.undo()
    torch.manual_seed(0)
    assert rg.pca_lowrank(rg.tensor(data))[0].shape == tuple(
        torch.pca_lowrank(torch.tensor(data))[0].shape
    )
    with pytest.raises(InvalidArgumentError, match="pca_lowrank"):
        rg.pca_lowrank(rg.tensor(data), q=9)


# -- interchange -------------------------------------------------------------------------------
def test_frombuffer_as_torchs():
    raw = bytearray(np.arange(6, dtype=np.float32).tobytes())
    for kwargs in ({}, {"count": 2, "offset": 8}, {"count": 3}):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected = torch.frombuffer(raw, dtype=torch.float32, **kwargs)
        got = rg.frombuffer(raw, dtype=rg.float32, **kwargs)
        assert got.dtype == rg.float32 and got.tolist() == expected.tolist()
    assert rg.frombuffer(b"\x01\x00\x02\x00", dtype=rg.int16).tolist() == [1, 2]
    with pytest.raises(InvalidArgumentError, match="frombuffer"):
        rg.frombuffer(raw, dtype=rg.float32, count=7)


def test_dlpack_round_trips_with_numpy_and_torch():
    array = np.arange(6, dtype=np.int32).reshape(2, 3)
    got = rg.from_dlpack(array)
    assert got.dtype == rg.int32 and got.tolist() == array.tolist()
    theirs = torch.arange(4.0, dtype=torch.float64)
    got = rg.from_dlpack(theirs)
    assert got.dtype == rg.float64 and got.tolist() == theirs.tolist()
    capsule = rg.to_dlpack(rg.tensor([[1.5, 2.5]]))
    back = torch.from_dlpack(capsule)
    assert back.tolist() == [[1.5, 2.5]] and back.dtype == torch.float32
    assert rg.from_dlpack(rg.to_dlpack(rg.tensor([1, 2]))).tolist() == [1, 2]
    # a retrograd tensor is a producer too
    ours = rg.tensor([[1.0, 2.0]], dtype=rg.float64)
    assert torch.from_dlpack(ours).tolist() == [[1.0, 2.0]]
    assert torch.from_dlpack(ours).dtype == torch.float64
    assert np.from_dlpack(ours).tolist() == [[1.0, 2.0]]
    with pytest.raises(DTypeError, match="from_dlpack"):
        rg.from_dlpack([1, 2])


# -- process-wide flags ------------------------------------------------------------------------
def test_inference_anomaly_warn_always_and_determinism_flags_as_torchs():
    assert rg.is_inference_mode_enabled() is torch.is_inference_mode_enabled() is False
    with rg.inference_mode(), torch.inference_mode():
        assert rg.is_inference_mode_enabled() is torch.is_inference_mode_enabled() is True
        with rg.inference_mode(False), torch.inference_mode(False):
            assert rg.is_inference_mode_enabled() is torch.is_inference_mode_enabled() is False
        assert rg.is_inference_mode_enabled() is True
    assert rg.autograd.is_inference_mode_enabled() is False
    try:
        rg.set_anomaly_enabled(True)
        assert rg.is_anomaly_enabled() and rg.is_anomaly_check_nan_enabled()
        rg.set_anomaly_enabled(True, False)
        assert not rg.is_anomaly_check_nan_enabled()
    finally:
        rg.set_anomaly_enabled(False)
    assert not rg.is_anomaly_enabled()
    try:
        rg.set_warn_always(True)
        assert rg.is_warn_always_enabled()
    finally:
        rg.set_warn_always(False)
    assert rg.is_warn_always_enabled() is torch.is_warn_always_enabled() is False
    # torch's answers for each mode (torch.set_deterministic_debug_mode imports its compiler
    # stack, seconds of CPU, so they are written out): (debug mode, enabled, warn_only)
    assert rg.get_deterministic_debug_mode() == torch.get_deterministic_debug_mode() == 0
    try:
        for mode, expected in (
            ("warn", (1, True, True)),
            ("error", (2, True, False)),
            (0, (0, False, False)),
            (1, (1, True, True)),
            (2, (2, True, False)),
            ("default", (0, False, False)),
        ):
            rg.set_deterministic_debug_mode(mode)
            assert (
                rg.get_deterministic_debug_mode(),
                rg.are_deterministic_algorithms_enabled(),
                rg.is_deterministic_algorithms_warn_only_enabled(),
            ) == expected
    finally:
        rg.use_deterministic_algorithms(False)
    with pytest.raises(InvalidArgumentError, match="set_deterministic_debug_mode"):
        rg.set_deterministic_debug_mode("loud")
    with pytest.raises(InvalidArgumentError, match="set_deterministic_debug_mode"):
        rg.set_deterministic_debug_mode(5)


def test_set_default_tensor_type_as_torchs():
    try:
        for our_type, their_type in (
            ("torch.DoubleTensor", "torch.DoubleTensor"),
            (rg.FloatTensor, torch.FloatTensor),
            (rg.DoubleTensor, torch.DoubleTensor),
        ):
            with pytest.warns(UserWarning, match="deprecated"):
                rg.set_default_tensor_type(our_type)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.set_default_tensor_type(their_type)
            assert str(rg.get_default_dtype()) == str(torch.get_default_dtype()).split(".")[1]
            assert rg.tensor([1.5]).dtype == rg.get_default_dtype()
        with pytest.raises(TypeError), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.set_default_tensor_type(torch.LongTensor)
        with pytest.raises(DTypeError, match="set_default_tensor_type"), pytest.warns(UserWarning):
            rg.set_default_tensor_type(rg.LongTensor)
        if not torch.cuda.is_available():
            with (
                pytest.raises(InvalidArgumentError, match=r"set_default_tensor_type: torch\.cuda"),
                pytest.warns(UserWarning),
            ):
                rg.set_default_tensor_type("torch.cuda.FloatTensor")
    finally:
        rg.set_default_dtype(rg.float32)
        torch.set_default_dtype(torch.float32)
    assert rg.get_default_dtype() == rg.float32


def test_autocast_state_names_as_torchs():
    try:
        rg.set_autocast_dtype("cpu", rg.float16)
        assert rg.get_autocast_dtype("cpu") == rg.float16
        with pytest.warns(DeprecationWarning):
            rg.set_autocast_gpu_dtype(rg.bfloat16)
        assert rg.get_autocast_dtype("cuda") == rg.bfloat16
    finally:
        rg.set_autocast_dtype("cpu", rg.bfloat16)
        rg.set_autocast_dtype("cuda", rg.float16)
    with pytest.warns(DeprecationWarning):
        assert str(rg.get_autocast_ipu_dtype()) == str(torch.float16).replace("torch.", "")
    with pytest.warns(DeprecationWarning):
        assert rg.is_autocast_xla_enabled() is False
    try:  # torch's low-level switch: on for the CPU in this thread, as torch's
        rg.set_autocast_enabled("cpu", True)
        assert rg.is_autocast_enabled("cpu") is True
        assert rg.is_autocast_enabled("cuda") is False
    finally:
        rg.set_autocast_enabled("cpu", False)
    rg.set_autocast_enabled(False)
    assert rg.is_autocast_enabled("cpu") is False
    assert rg.is_autocast_cache_enabled() is torch.is_autocast_cache_enabled() is True
    try:
        rg.set_autocast_cache_enabled(False)
        assert rg.is_autocast_cache_enabled() is False
    finally:
        rg.set_autocast_cache_enabled(True)
    rg.clear_autocast_cache()
    depth = rg.autocast_increment_nesting()
    assert rg.autocast_decrement_nesting() == depth - 1
    with pytest.raises(InvalidArgumentError, match="set_autocast_dtype"):
        rg.set_autocast_dtype("tpu", rg.float16)


# -- namespaces --------------------------------------------------------------------------------
def test_cpu_namespace_as_torchs():
    assert rg.cpu.is_available() is torch.cpu.is_available() is True
    assert rg.cpu.device_count() == torch.cpu.device_count() == 1
    assert rg.cpu.current_device() == torch.cpu.current_device() == "cpu"
    assert rg.cpu.synchronize() is None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with rg.cpu.amp.autocast(dtype=rg.bfloat16) as region:
            assert region.device_type == "cpu"
    assert rg.cpu.amp.GradScaler is rg.amp.GradScaler is rg.GradScaler


def test_return_types_are_the_classes_of_ops_results():
    t = rg.tensor([[3.0, 1.0], [0.0, 2.0]])
    for name, result in (
        ("max", t.max(1)),
        ("min", rg.min(t, 0)),
        ("sort", t.sort(1)),
        ("topk", t.topk(1)),
        ("kthvalue", t.kthvalue(1, 1)),
        ("median", t.median(1)),
        ("mode", t.mode(1)),
        ("aminmax", t.aminmax()),
        ("cummax", t.cummax(0)),
        ("slogdet", t.slogdet()),
        ("linalg_eigh", rg.linalg.eigh(t @ t.T)),
        ("linalg_qr", rg.linalg.qr(t)),
    ):
        assert isinstance(result, getattr(rg.return_types, name)), name
        assert hasattr(torch.return_types, name)
    assert not isinstance(t.max(1), rg.return_types.min)


def test_version_names():
    assert rg.version.cuda is None and torch.version.cuda is None
    assert rg.__version__ == rg.version.__version__
    version = rg.torch_version.TorchVersion("2.13.0+cpu")
    assert version >= "2.1" and version > (2, 9) and version < "2.13.1" and version == "2.13"
    assert (version >= "2.1") == (torch.torch_version.TorchVersion("2.13.0+cpu") >= "2.1")
    assert rg.newaxis is torch.newaxis is None


def test_default_generator_is_the_global_stream():
    assert rg.random.default_generator is rg.default_generator
    rg.default_generator.manual_seed(5)
    first = rg.rand(4).tolist()
    assert rg.default_generator.initial_seed() == 5
    rg.manual_seed(5)
    assert rg.rand(4, generator=rg.default_generator).tolist() == first
    state = rg.default_generator.get_state()
    after = rg.randn(3).tolist()
    rg.default_generator.set_state(state)
    assert rg.randn(3).tolist() == after
    data = rg.utils.data.TensorDataset(rg.arange(10.0))
    rg.manual_seed(1)
    drawn = rg.utils.data.random_split(data, [7, 3], generator=rg.default_generator)
    rg.manual_seed(1)
    assert list(drawn[1].indices) == list(rg.utils.data.random_split(data, [7, 3])[1].indices)
    assert rg.random.thread_safe_generator() is torch.random.thread_safe_generator() is None
    assert rg.thread_safe_generator() is None


def test_make_tensor_as_torchs():
    rg.manual_seed(0)
    for dtype, low, high in (
        (rg.float32, -9, 9),
        (rg.float64, 1.0, 2.0),
        (rg.int64, -9, 9),
        (rg.int32, 0, 3),
        (rg.uint8, 0, 9),
    ):
        made = rg.testing.make_tensor(
            (50,),
            dtype=dtype,
            device="cpu",
            low=None if low == -9 else low,
            high=None if low == -9 else high,
        )
        values = _np(made)
        assert made.dtype == dtype and made.shape == (50,)
        assert values.min() >= low and values.max() <= high
    assert rg.testing.make_tensor(3, 4, dtype=rg.bool).dtype == rg.bool
    made = rg.testing.make_tensor(3, 4, dtype=rg.float64, noncontiguous=True, requires_grad=True)
    expected = torch.testing.make_tensor(
        3, 4, dtype=torch.float64, device="cpu", noncontiguous=True
    )
    assert made.is_contiguous() is expected.is_contiguous() is False and made.requires_grad
    assert (
        _np(rg.testing.make_tensor(40, dtype=rg.int64, low=0, high=2, exclude_zero=True)).min() == 1
    )
    with pytest.raises(InvalidArgumentError, match="make_tensor"):
        rg.testing.make_tensor(2, dtype=rg.int64, requires_grad=True)
    with pytest.raises(InvalidArgumentError, match="make_tensor"):
        rg.testing.make_tensor(2, dtype=rg.float32, low=3, high=1)


def test_autograd_and_amp_flags_as_torchs():
    assert rg.amp.is_autocast_available("cpu") is torch.amp.is_autocast_available("cpu") is True
    assert rg.amp.is_autocast_available("meta") is torch.amp.is_autocast_available("meta") is False
    with pytest.raises(InvalidArgumentError, match="is_autocast_available"):
        rg.amp.is_autocast_available("tpu")
    ag = rg.autograd
    assert ag.is_multithreading_enabled() is torch.autograd.is_multithreading_enabled() is True
    with ag.set_multithreading_enabled(False), torch.autograd.set_multithreading_enabled(False):
        assert ag.is_multithreading_enabled() is torch.autograd.is_multithreading_enabled() is False
    assert ag.is_multithreading_enabled() is True
    assert ag.is_view_replay_enabled() is torch.autograd.is_view_replay_enabled() is False


def test_linalg_errors_are_linalg_errors_of_the_hierarchy():
    not_definite = [[1.0, 2.0], [2.0, 1.0]]
    for ours, theirs in (
        (
            lambda: rg.linalg.cholesky(rg.tensor(not_definite)),
            lambda: torch.linalg.cholesky(torch.tensor(not_definite)),
        ),
        (lambda: rg.linalg.inv(rg.zeros(2, 2)), lambda: torch.linalg.inv(torch.zeros(2, 2))),
        (
            lambda: rg.linalg.solve(rg.zeros(2, 2), rg.ones(2)),
            lambda: torch.linalg.solve(torch.zeros(2, 2), torch.ones(2)),
        ),
        (lambda: rg.tensor(not_definite).cholesky(), lambda: torch.tensor(not_definite).cholesky()),
    ):
        with pytest.raises(torch.linalg.LinAlgError):
            theirs()
        with pytest.raises(rg.linalg.LinAlgError) as caught:
            ours()
        assert isinstance(caught.value, RuntimeError) and isinstance(caught.value, RetrogradError)
        assert isinstance(caught.value, InvalidArgumentError)
    assert issubclass(rg.linalg.LinAlgError, RuntimeError)


def test_func_linearize_and_batch_norm_replacement_as_torchs():
    ours, theirs = _pair(3)

    def their_fn(x):
        return torch.sin(x) * x

    out, jvp_fn = rg.func.linearize(lambda x: rg.sin(x) * x, ours)
    # torch.func.linearize traces with torch.fx (seconds of imports); its values are
    # torch.autograd.functional.jvp's at the same point
    _same(out, their_fn(theirs.detach()))
    for seed in (1, 2):
        tangent = np.random.default_rng(seed).standard_normal(3)
        _, expected = torch.autograd.functional.jvp(
            their_fn, theirs.detach(), torch.tensor(tangent)
        )
        _same(jvp_fn(rg.tensor(tangent)), expected)
    model = rg.nn.Sequential(rg.nn.Linear(2, 3), rg.nn.BatchNorm1d(3), rg.nn.BatchNorm2d(3))
    their_model = torch.nn.Sequential(
        torch.nn.Linear(2, 3), torch.nn.BatchNorm1d(3), torch.nn.BatchNorm2d(3)
    )
    assert rg.func.replace_all_batch_norm_modules_(model) is model
    torch.func.replace_all_batch_norm_modules_(their_model)
    assert list(model.state_dict()) == list(their_model.state_dict())
    for ours_bn, theirs_bn in zip(list(model)[1:], list(their_model)[1:]):
        assert ours_bn.running_mean is None and ours_bn.track_running_stats is False
        assert theirs_bn.running_mean is None and theirs_bn.track_running_stats is False


def test_backends_flag_namespaces_as_torchs():
    import retrograd.backends.mha as mha
    import retrograd.backends.quantized as quantized

    assert rg.backends.cpu.get_cpu_capability() in ("AVX512", "AVX2", "DEFAULT")
    assert isinstance(torch.backends.cpu.get_cpu_capability(), str)
    assert rg.backends.mkl.is_available() is False
    with rg.backends.mkl.verbose(rg.backends.mkl.VERBOSE_ON):
        pass
    assert mha is rg.backends.mha and mha.get_fastpath_enabled() is True
    try:
        mha.set_fastpath_enabled(False)
        assert rg.backends.mha.get_fastpath_enabled() is False
    finally:
        mha.set_fastpath_enabled(True)
    assert quantized.engine == torch.backends.quantized.engine
    assert quantized.supported_engines == torch.backends.quantized.supported_engines


@pytest.mark.skipif(torch.cuda.is_available(), reason="torch's CPU build's answers")
def test_cuda_queries_answer_as_torchs_cpu_build():
    assert rg.cuda.get_rng_state_all() == torch.cuda.get_rng_state_all() == []
    rg.cuda.set_rng_state_all([])
    rg.cuda.set_rng_state(rg.zeros(4, dtype=rg.uint8))
    assert dict(rg.cuda.memory_stats()) == dict(torch.cuda.memory_stats()) == {}
    assert rg.cuda.memory_stats_as_nested_dict() == torch.cuda.memory_stats_as_nested_dict()
    assert rg.cuda.memory_cached() == torch.cuda.memory_cached() == 0
    assert rg.cuda.max_memory_cached() == torch.cuda.max_memory_cached() == 0
    assert rg.cuda.get_arch_list() == torch.cuda.get_arch_list() == []
    assert rg.cuda.get_gencode_flags() == torch.cuda.get_gencode_flags() == ""
    assert rg.cuda.is_initialized() is torch.cuda.is_initialized() is False
    assert rg.cuda.is_tf32_supported() is torch.cuda.is_tf32_supported() is False
    assert rg.cuda.has_half is torch.cuda.has_half
    assert rg.cuda.OutOfMemoryError is rg.OutOfMemoryError
    for name, args in (
        ("get_device_properties", (0,)),
        ("get_device_name", ()),
        ("get_device_capability", ()),
        ("mem_get_info", ()),
        ("memory_summary", ()),
        ("reset_accumulated_memory_stats", ()),
        ("reset_max_memory_allocated", ()),
        ("get_rng_state", ()),
        ("init", ()),
        ("set_per_process_memory_fraction", (0.5,)),
        ("can_device_access_peer", (0, 1)),
    ):
        with pytest.raises(InvalidArgumentError, match=f"cuda.{name}: no CUDA device"):
            getattr(rg.cuda, name)(*args)


@pytest.mark.skipif(torch.cuda.is_available(), reason="torch's CPU build's answers")
def test_cuda_stream_and_device_contexts_as_torchs_cpu_build():
    with rg.cuda.stream(None), torch.cuda.stream(None):
        pass
    with rg.cuda.device_of(rg.ones(1)), torch.cuda.device_of(torch.ones(1)):
        pass
    with rg.cuda.device(-1):
        pass
    for name, call in (
        ("Event", lambda: rg.cuda.Event(enable_timing=True)),
        ("Stream", lambda: rg.cuda.Stream()),
        ("current_stream", lambda: rg.cuda.current_stream()),
        ("default_stream", lambda: rg.cuda.default_stream()),
    ):
        with pytest.raises(InvalidArgumentError, match=f"cuda.{name}: no CUDA device"):
            call()
    with pytest.raises(RuntimeError):
        torch.cuda.Event(enable_timing=True)
    with (
        pytest.raises(InvalidArgumentError, match=r"cuda\.device: no CUDA device"),
        rg.cuda.device(0),
    ):
        pass
