"""Random programs over ``rg.distributions`` compared with ``torch.distributions`` (round 51):
random broadcasting parameter shapes, batch/event shapes, sample shapes, log_prob at draws
and outside the support (validate_args on and off), entropy and moments, cdf/icdf, expand,
Independent, float32 and float64, float64 gradients in the parameters, kl_divergence for
registered pairs, transforms through TransformedDistribution and rsample's gradient (the
quantile-fixed derivative ``-dF/dtheta / f``). Expected values come from torch."""

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")


def _pos(rs, shape):
    return rs.uniform(0.5, 2.5, shape)


def _real(rs, shape):
    return rs.normal(size=shape)


def _unit(rs, shape):
    return rs.uniform(0.1, 0.9, shape)


FAMILIES = {
    "Normal": [("loc", _real), ("scale", _pos)],
    "Laplace": [("loc", _real), ("scale", _pos)],
    "Gumbel": [("loc", _real), ("scale", _pos)],
    "LogNormal": [("loc", _real), ("scale", _pos)],
    "HalfCauchy": [("scale", _pos)],
    "Exponential": [("rate", _pos)],
    "Gamma": [("concentration", _pos), ("rate", _pos)],
    "Beta": [("concentration1", _pos), ("concentration0", _pos)],
    "StudentT": [("df", _pos), ("loc", _real), ("scale", _pos)],
    "Weibull": [("scale", _pos), ("concentration", _pos)],
    "VonMises": [("loc", _real), ("concentration", _pos)],
    "Bernoulli": [("logits", _real)],
    "Geometric": [("probs", _unit)],
    "Poisson": [("rate", _pos)],
    "NegativeBinomial": [("total_count", _pos), ("probs", _unit)],
    "ContinuousBernoulli": [("logits", _real)],
    "Categorical": [("probs", lambda rs, s: rs.uniform(0.1, 1, s + (3,)))],
    "Dirichlet": [("concentration", lambda rs, s: rs.uniform(0.5, 2, s + (3,)))],
}
SHAPES = [(), (3,), (2, 3), (2, 1), (1, 3)]


def _draw_params(rs, name):
    shapes = [SHAPES[rs.integers(len(SHAPES))] for _ in FAMILIES[name]]
    try:
        np.broadcast_shapes(*shapes)
    except ValueError:
        shapes = [s if i == 0 else () for i, s in enumerate(shapes)]
    return {key: draw(rs, shape) for (key, draw), shape in zip(FAMILIES[name], shapes)}


def _build(lib, name, params, dtype, validate_args=None):
    made = {
        key: lib.tensor(value.astype(dtype)).requires_grad_(True) for key, value in params.items()
    }
    return getattr(lib.distributions, name)(**made, validate_args=validate_args), made


def _np(t):
    return np.asarray(t.detach().numpy(), dtype=np.float64)


def _check(got, want, what, dtype):
    assert tuple(got.shape) == tuple(want.shape), what
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1], what
    tol = dict(rtol=2e-4, atol=2e-5) if dtype == "float32" else dict(rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(_np(got), _np(want), **tol, err_msg=what)


def _grads_agree(got, want, params_rg, params_t, what):
    weights = np.cos(np.arange(want.numel())).reshape(tuple(want.shape))
    keys = list(params_t)
    grads_t = torch.autograd.grad(
        (want * torch.tensor(weights)).sum(), [params_t[k] for k in keys],
        allow_unused=True, retain_graph=True,
    )  # fmt: skip
    grads_rg = rg.autograd.grad(
        (got * rg.tensor(weights)).sum(), [params_rg[k] for k in keys],
        allow_unused=True, retain_graph=True,
    )  # fmt: skip
    for key, g_rg, g_t in zip(keys, grads_rg, grads_t):
        if g_t is None:
            assert g_rg is None or not _np(g_rg).any(), (what, key)
            continue
        assert g_rg is not None, (what, key)
        np.testing.assert_allclose(
            _np(g_rg), _np(g_t), rtol=1e-6, atol=1e-9, err_msg=f"{what} {key}"
        )


@pytest.mark.parametrize("seed", range(3))
def test_random_families_against_torch(seed):
    rs = np.random.default_rng(5100 + seed)
    torch.manual_seed(seed)
    rg.manual_seed(seed)
    for name in FAMILIES:
        params = _draw_params(rs, name)
        dtype = "float64" if rs.integers(3) else "float32"
        d_t, p_t = _build(torch, name, params, dtype)
        d_rg, p_rg = _build(rg, name, params, dtype)
        what = f"{name}({', '.join(f'{k}{v.shape}' for k, v in params.items())}) {dtype}"
        assert tuple(d_rg.batch_shape) == tuple(d_t.batch_shape), what
        assert tuple(d_rg.event_shape) == tuple(d_t.event_shape), what
        assert d_rg.has_rsample == d_t.has_rsample, what
        sample_shape = [(), (2,), (2, 1)][rs.integers(3)]
        drawn = d_rg.sample(sample_shape)  # (a draw of ours must lie in torch's support)
        x_t = d_t.sample(sample_shape)
        assert tuple(drawn.shape) == tuple(x_t.shape), what
        assert str(drawn.dtype).split(".")[-1] == str(x_t.dtype).split(".")[-1], what
        assert bool(d_t.support.check(torch.tensor(drawn.numpy())).all()), what
        x_rg = rg.tensor(x_t.numpy())
        computed = {"log_prob": (d_rg.log_prob(x_rg), d_t.log_prob(x_t))}
        for attr in ("mean", "variance", "mode", "entropy"):
            try:
                want = getattr(d_t, attr)
                want = want() if attr == "entropy" else want
            except NotImplementedError:  # (then ours raises it too)
                with pytest.raises(NotImplementedError):
                    getattr(d_rg, attr)() if attr == "entropy" else getattr(d_rg, attr)
                continue
            got = getattr(d_rg, attr)
            computed[attr] = (got() if attr == "entropy" else got, want)
        for what_attr, (got, want) in computed.items():
            _check(got, want, f"{what} {what_attr}", dtype)
            finite = bool(torch.isfinite(want).all())
            if dtype == "float64" and want.requires_grad and finite:
                _grads_agree(got, want, p_rg, p_t, f"{what} {what_attr}")
        bigger = (2, *d_t.batch_shape)
        expanded_rg, expanded_t = d_rg.expand(bigger), d_t.expand(bigger)
        assert tuple(expanded_rg.batch_shape) == bigger, what
        x2 = expanded_t.sample()
        _check(expanded_rg.log_prob(rg.tensor(x2.numpy())), expanded_t.log_prob(x2), what, dtype)
        if d_t.batch_shape:
            ind_rg, ind_t = (
                rg.distributions.Independent(d_rg, 1),
                torch.distributions.Independent(d_t, 1),
            )
            assert tuple(ind_rg.event_shape) == tuple(ind_t.event_shape), what
            _check(ind_rg.log_prob(x_rg), ind_t.log_prob(x_t), f"{what} Independent", dtype)
        _out_of_support_agrees(name, params, dtype, d_rg, d_t, x_t, what)


def _out_of_support_agrees(name, params, dtype, d_rg, d_t, x_t, what):
    for bad in (-1.5, 0.5, 7.0):
        value_t = torch.full(tuple(x_t.shape), bad, dtype=x_t.dtype)
        if bool(d_t.support.check(value_t).all()):
            continue
        with pytest.raises(ValueError):
            d_t.log_prob(value_t)
        with pytest.raises(rg.InvalidArgumentError, match=name):
            d_rg.log_prob(rg.tensor(value_t.numpy()))
        off_t, _ = _build(torch, name, params, dtype, validate_args=False)
        off_rg, _ = _build(rg, name, params, dtype, validate_args=False)
        try:
            want = off_t.log_prob(value_t)
        except (RuntimeError, IndexError):  # (torch's gather refuses index -1: ours too)
            with pytest.raises(rg.RetrogradError, match=name):
                off_rg.log_prob(rg.tensor(value_t.numpy()))
            continue
        _check(off_rg.log_prob(rg.tensor(value_t.numpy())), want, what, dtype)
    assert np.isfinite(_np(d_rg.log_prob(rg.tensor(x_t.numpy())))).any(), what  # still usable


@pytest.mark.parametrize(
    "name", ["Normal", "Laplace", "Gumbel", "LogNormal", "Exponential", "Weibull", "HalfCauchy"]
)
def test_rsample_gradient_is_the_quantile_fixed_derivative(name):
    """For a draw x of a 1-D continuous family, d x / d theta at fixed noise is
    ``-(dF(x; theta)/d theta) / f(x; theta)``, computed here with torch's cdf and log_prob."""
    rs = np.random.default_rng(51)
    rg.manual_seed(51)
    params = {key: draw(rs, (2, 3)) for key, draw in FAMILIES[name]}
    d_rg, p_rg = _build(rg, name, params, "float64")
    x = d_rg.rsample()
    keys = list(p_rg)
    got = rg.autograd.grad(x.sum(), [p_rg[k] for k in keys])
    d_t, p_t = _build(torch, name, params, "float64")
    x_t = torch.tensor(x.detach().numpy())
    density = d_t.log_prob(x_t).exp().detach()
    want = torch.autograd.grad(d_t.cdf(x_t).sum(), [p_t[k] for k in keys])
    for key, g_rg, g_t in zip(keys, got, want):
        np.testing.assert_allclose(
            _np(g_rg), _np(-g_t / density), rtol=1e-6, atol=1e-9, err_msg=key
        )


KL_PAIRS = [
    ("Normal", "Normal"),
    ("Gamma", "Gamma"),
    ("Beta", "Beta"),
    ("Exponential", "Gamma"),
    ("Laplace", "Normal"),
    ("Bernoulli", "Bernoulli"),
    ("Poisson", "Poisson"),
    ("Categorical", "Categorical"),
    ("Dirichlet", "Dirichlet"),
    ("Geometric", "Geometric"),
    ("Gumbel", "Normal"),
    ("ContinuousBernoulli", "ContinuousBernoulli"),
]


def test_kl_divergence_of_random_registered_pairs():
    rs = np.random.default_rng(5151)
    for p_name, q_name in KL_PAIRS:
        batch = [(), (2,), (2, 3)][rs.integers(3)]
        p_params = {key: draw(rs, batch) for key, draw in FAMILIES[p_name]}
        # (torch's Bernoulli KL indexes a mask that does not broadcast: same batch there)
        q_batch = batch if p_name == "Bernoulli" else batch[1:]
        q_params = {key: draw(rs, q_batch) for key, draw in FAMILIES[q_name]}
        (p_t, pp_t), (q_t, qp_t) = (
            _build(torch, n, v, "float64") for n, v in ((p_name, p_params), (q_name, q_params))
        )
        (p_rg, pp_rg), (q_rg, qp_rg) = (
            _build(rg, n, v, "float64") for n, v in ((p_name, p_params), (q_name, q_params))
        )
        want = torch.distributions.kl_divergence(p_t, q_t)
        got = rg.distributions.kl_divergence(p_rg, q_rg)
        what = f"KL({p_name}{batch} || {q_name})"
        _check(got, want, what, "float64")
        both_t = {**{"p" + k: v for k, v in pp_t.items()}, **{"q" + k: v for k, v in qp_t.items()}}
        both_rg = {
            **{"p" + k: v for k, v in pp_rg.items()},
            **{"q" + k: v for k, v in qp_rg.items()},
        }
        _grads_agree(got, want, both_rg, both_t, what)
    # an unregistered pair raises NotImplementedError, as torch's
    for lib in (torch, rg):
        with pytest.raises(NotImplementedError):
            lib.distributions.kl_divergence(
                lib.distributions.Poisson(lib.tensor(1.0)), lib.distributions.Beta(1.0, 2.0)
            )


def _chains(lib, loc, scale):
    t = lib.distributions.transforms
    return [
        ([t.ExpTransform()], 0),
        ([t.SigmoidTransform(), t.AffineTransform(loc, scale)], 0),
        ([t.TanhTransform()], 0),
        ([t.ComposeTransform([t.AffineTransform(loc, scale), t.ExpTransform()])], 0),
        ([t.StickBreakingTransform()], 1),
        ([t.AffineTransform(loc, scale, event_dim=1), t.SoftmaxTransform()], 1),
        ([t.ComposeTransform([t.AffineTransform(loc, scale), t.StickBreakingTransform()])], 1),
    ]


@pytest.mark.parametrize("seed", range(2))
def test_transformed_distributions_against_torch(seed):
    rs = np.random.default_rng(5200 + seed)
    batch = [(), (2,), (2, 3)][rs.integers(3)]
    x_np = rs.normal(size=batch + (3,)) * 0.8
    loc_np, scale_np = rs.normal(size=3), rs.uniform(0.5, 2, 3) * rs.choice([-1, 1], 3)
    for index in range(len(_chains(torch, 0.0, 1.0))):
        results, y_np = [], None
        for lib in (rg, torch):
            lib.manual_seed(seed)
            loc = lib.tensor(loc_np).requires_grad_(True)
            scale = lib.tensor(scale_np).requires_grad_(True)
            chain, event_dims = _chains(lib, loc, scale)[index]
            base = lib.distributions.Normal(lib.tensor(x_np * 0.1), lib.ones(*batch, 3).double())
            if event_dims:
                base = lib.distributions.Independent(base, 1)
            td = lib.distributions.TransformedDistribution(base, chain)
            drawn = td.rsample((2,))
            if y_np is None:
                y_np = drawn.detach().numpy()  # (both libraries evaluate at our draw)
            shapes = (tuple(td.batch_shape), tuple(td.event_shape), tuple(drawn.shape))
            got = {}
            if index != 5:  # (Softmax has no log-det-Jacobian, in torch either)
                y = lib.tensor(y_np)
                got["log_prob"] = td.log_prob(y)
                if index in (1, 3, 6):  # (the chains that read scale)
                    (got["grad scale"],) = lib.autograd.grad(
                        got["log_prob"].sum(), scale, retain_graph=True
                    )
                if not event_dims:
                    got["cdf"] = td.cdf(y)
            results.append((shapes, got))
        (shapes, got), (w_shapes, want) = results
        assert shapes == w_shapes, index
        assert set(got) == set(want), index
        for key, value in want.items():
            if value is None:
                assert got[key] is None or not _np(got[key]).any(), (index, key)
            else:
                _check(got[key], value, f"chain {index} {key}", "float64")
