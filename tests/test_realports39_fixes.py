"""Regression tests for the defects the ports of ``tests/test_real_ports_221.py`` onward found
(probabilistic and scientific programs), each checked against torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg

# each family with two parameter sets, as (name, args): batches of two, float64, so that the
# closed forms are checked against torch's to rounding
FAMILIES = {
    "Bernoulli": [([0.3, 0.7],), ([0.6, 0.2],)],
    "Beta": [([2.0, 0.7], [3.0, 1.5]), ([1.5, 4.0], [0.8, 2.0])],
    "Binomial": [(5, [0.3, 0.7]), (5, [0.6, 0.2])],
    "ContinuousBernoulli": [([0.3, 0.8],), ([0.6, 0.2],)],
    "Exponential": [([2.0, 0.5],), ([1.0, 3.0],)],
    "Gamma": [([2.0, 3.0], [1.0, 0.5]), ([1.5, 2.0], [2.0, 1.0])],
    "Gumbel": [([1.0, -0.5], [2.0, 0.7]), ([0.0, 0.3], [1.0, 1.5])],
    "Laplace": [([0.0, 1.0], [1.0, 2.0]), ([1.0, -1.0], [2.0, 0.5])],
    "Normal": [([0.0, 1.0], [1.0, 2.0]), ([0.5, -1.0], [1.5, 0.7])],
    "Pareto": [([1.0, 0.5], [3.0, 2.5]), ([0.5, 0.2], [2.0, 1.5])],
    "Poisson": [([2.0, 0.5],), ([3.0, 1.0],)],
    "Uniform": [([0.2, 0.1], [0.7, 0.9]), ([-1.0, 0.0], [2.0, 1.5])],
}

# every pair torch registers between two of these families
PAIRS = sorted(
    (p.__name__, q.__name__)
    for p, q in torch.distributions.kl._KL_REGISTRY
    if p.__name__ in FAMILIES and q.__name__ in FAMILIES
)


def _make(lib, name, args, grad=False):
    tensors = [
        lib.tensor(a, dtype=lib.float64, requires_grad=grad) if isinstance(a, list) else a
        for a in args
    ]
    family = getattr(lib.distributions, name)
    if name in ("Bernoulli", "ContinuousBernoulli"):
        return family(probs=tensors[0]), tensors
    if name == "Binomial":
        return family(total_count=tensors[0], probs=tensors[1]), tensors
    return family(*tensors), tensors


@pytest.mark.parametrize(("p_name", "q_name"), PAIRS)
def test_kl_divergence_between_families_as_torchs(p_name, q_name):
    """Before: some 40 of torch's registered pairs (Beta-Normal, Uniform-Gamma, Gumbel-Normal,
    Pareto-Exponential, the infinite ones...) raised NotImplementedError; each is torch's
    closed form now, value and gradient."""
    for which in range(2):
        values, grads = [], []
        for lib in (torch, rg):
            p, p_params = _make(lib, p_name, FAMILIES[p_name][which], grad=True)
            q, q_params = _make(lib, q_name, FAMILIES[q_name][1 - which], grad=True)
            kl = lib.distributions.kl_divergence(p, q)
            values.append(np.asarray(kl.detach().numpy()))
            leaves = [t for t in p_params + q_params if hasattr(t, "requires_grad")]
            finite = lib.isfinite(kl)
            if bool(finite.all()) and kl.requires_grad:
                g = lib.autograd.grad(kl.sum(), leaves, allow_unused=True)
                grads.append([None if x is None else np.asarray(x.numpy()) for x in g])
            else:
                grads.append(None)
        np.testing.assert_allclose(values[1], values[0], rtol=1e-9, atol=1e-12)
        assert values[1].shape == values[0].shape
        if grads[0] is not None:
            assert grads[1] is not None
            for mine, theirs in zip(grads[1], grads[0], strict=True):
                if theirs is None:
                    assert mine is None or not np.any(mine)
                else:
                    np.testing.assert_allclose(mine, theirs, rtol=1e-6, atol=1e-10)


def _transforms_of(lib):
    tf = lib.distributions.transforms
    return [
        tf.ExpTransform(),
        tf.AffineTransform(0.5, 2.0),
        tf.PowerTransform(2.0),
        tf.ComposeTransform([tf.AffineTransform(0.5, 2.0), tf.ExpTransform()]),
        tf.IndependentTransform(tf.SigmoidTransform(), 1),
        tf.ReshapeTransform((2, 3), (6,)),
        tf.StackTransform([tf.ExpTransform(), tf.AffineTransform(1.0, 3.0)], dim=0),
        tf.CatTransform([tf.ExpTransform(), tf.AffineTransform(1.0, 3.0)], dim=0, lengths=[1, 1]),
        tf.CumulativeDistributionTransform(lib.distributions.Normal(0.0, 1.0)),
        tf.ExpTransform().inv,
    ]


@pytest.mark.parametrize("index", range(10))
def test_transforms_with_cache_as_torchs(index):
    """Before: ``Transform.with_cache`` was missing (an ``AttributeError``); now each
    transform gives itself back at the same cache size, else an equal transform that keeps
    its last ``(x, y)`` (calling it twice on one input gives the same output object, and its
    inverse gives back the input), as torch's."""
    x_np = np.abs(np.random.default_rng(index).standard_normal((2, 3))) + 0.1
    equal = []
    for lib in (torch, rg):
        transform = _transforms_of(lib)[index]
        assert transform.with_cache(0) is transform
        cached = transform.with_cache()
        assert cached is not transform and cached.with_cache(1) is cached
        assert type(cached) is type(transform)
        equal.append(cached == transform)
        x = lib.tensor(x_np)
        y = cached(x)
        np.testing.assert_allclose(y.numpy(), transform(x).numpy(), rtol=1e-12)
        assert cached(x) is y
        assert cached.inv(y) is x
        assert transform.inv(transform(x)) is not x
    assert equal[1] == equal[0]


def test_a_transform_of_ones_own_with_cache_as_torchs():
    for lib in (torch, rg):
        dists = lib.distributions

        class Flip(dists.Transform):
            bijective = True

            def _call(self, x):
                return x.flip(-1)

            def _inverse(self, y):
                return y.flip(-1)

        class Scaled(Flip):
            def __init__(self, factor):
                super().__init__()
                self.factor = factor

        cached = Flip().with_cache(1)
        assert type(cached) is Flip
        x = lib.tensor([1.0, 2.0])
        assert cached.inv(cached(x)) is x
        with pytest.raises(NotImplementedError, match="with_cache"):
            Scaled(2.0).with_cache(1)


def test_compose_log_abs_det_jacobian_reads_the_given_y_as_torchs():
    """Before: ``ComposeTransform.log_abs_det_jacobian(x, y)`` recomputed its last part's
    output from ``x``, ignoring ``y`` (an IAF or MAF hands the cached ``y``); torch's reads
    ``y`` for the last part."""
    results = []
    for lib in (torch, rg):
        tf = lib.distributions.transforms
        x = lib.tensor([0.5, 1.5], dtype=lib.float64, requires_grad=True)
        y = lib.tensor([3.0, 7.0], dtype=lib.float64, requires_grad=True)
        compose = tf.ComposeTransform([tf.AffineTransform(1.0, 2.0), tf.PowerTransform(3.0)])
        value = compose.log_abs_det_jacobian(x, y)
        grads = lib.autograd.grad(value.sum(), [x, y])
        results.append([value.detach().numpy(), *(g.numpy() for g in grads)])
    for mine, theirs in zip(results[1], results[0], strict=True):
        np.testing.assert_allclose(mine, theirs, rtol=1e-12)


def test_compose_with_cache_caches_its_parts_as_torchs():
    for lib in (torch, rg):
        tf = lib.distributions.transforms
        compose = tf.ComposeTransform(
            [tf.AffineTransform(1.0, 2.0), tf.ExpTransform()], cache_size=1
        )
        assert all(part._cache_size == 1 for part in compose.parts)


def test_less_than_constraint_and_its_bijection_as_torchs():
    """Before: ``constraints.less_than`` was missing (an ``AttributeError``), and so
    ``biject_to``/``transform_to`` of it; now torch's ``exp`` then ``upper - y``."""
    u_np = np.array([[0.3, -1.2, 2.0], [0.1, 0.2, 0.3]])
    results = []
    for lib in (torch, rg):
        cons, dists = lib.distributions.constraints, lib.distributions
        u = lib.tensor(u_np, requires_grad=True)
        t = dists.biject_to(cons.less_than(1.0))
        y = t(u)
        ladj = t.log_abs_det_jacobian(u, y)
        (g,) = lib.autograd.grad((y * y).sum() + ladj.sum(), [u])
        upper = lib.tensor([0.0, 1.0, 2.0], dtype=lib.float64)
        results.append(
            [
                y,
                t.inv(y),
                ladj,
                g,
                dists.transform_to(cons.less_than(upper))(u),
                cons.less_than(1.0).check(y),
            ]
        )
        assert repr(cons.less_than(1.0)) == "LessThan(upper_bound=1.0)"
    for mine, theirs in zip(results[1], results[0], strict=True):
        np.testing.assert_allclose(mine.detach().numpy(), theirs.detach().numpy(), rtol=1e-12)


def test_matrix_constraints_as_torchs():
    """Before: ``lower_triangular``, ``symmetric`` and ``positive_semidefinite`` were
    missing."""
    batch = np.array([[[2.0, 0.5], [0.5, 1.0]], [[1.0, 2.0], [2.0, 1.0]], [[1.0, 1.0], [1.0, 1.0]]])
    lower = np.array([[[1.0, 0.0], [3.0, -1.0]], [[1.0, 1e-3], [0.0, 1.0]]])
    for name, value in [
        ("symmetric", batch),
        ("positive_semidefinite", batch),
        ("lower_triangular", lower),
        ("symmetric", lower),
    ]:
        checks = [
            getattr(lib.distributions.constraints, name).check(lib.tensor(value)).numpy()
            for lib in (torch, rg)
        ]
        np.testing.assert_array_equal(checks[1], checks[0], err_msg=name)
        assert getattr(rg.distributions.constraints, name).event_dim == 2


def _shifted_distribution(lib):
    """A distribution of one's own in torch's manner: a support depending on a parameter, a
    parameter with a dependent constraint, a lazily computed derived parameter."""
    constraints = lib.distributions.constraints
    lazy_property = lib.distributions.utils.lazy_property

    class Shifted(lib.distributions.Distribution):
        arg_constraints = {  # noqa: RUF012  (torch's layout)
            "low": constraints.dependent(is_discrete=False, event_dim=0),
            "scale": constraints.positive,
        }

        def __init__(self, low, scale, validate_args=None):
            self.low, self.scale = low, scale
            super().__init__(low.shape, validate_args=validate_args)

        @constraints.dependent_property(is_discrete=False, event_dim=0)
        def support(self):
            return constraints.greater_than(self.low)

        @lazy_property
        def doubled_scale(self):
            return self.scale * 2

        def log_prob(self, x):
            if self._validate_args:
                self._validate_sample(x)
            return -(x - self.low) / self.scale - self.scale.log()

    return Shifted


def test_dependent_constraints_and_properties_as_torchs():
    """Before: ``constraints.dependent``, ``dependent_property`` and ``is_dependent`` were
    missing, so a distribution of one's own written as torch's are (a support built from the
    parameters, a parameter whose constraint depends on another) failed; and the supports of
    ``Uniform``, ``Binomial``... were plain properties, not dependent on the class."""
    outcomes = []
    for lib in (torch, rg):
        dists = lib.distributions
        cons = dists.constraints

        Shifted = _shifted_distribution(lib)  # noqa: N806

        scale = lib.tensor([1.0, 2.0], requires_grad=True)
        d = Shifted(lib.zeros(2), scale, validate_args=True)
        with lib.no_grad():
            doubled = d.doubled_scale  # read first under no_grad: still differentiable
        (g,) = lib.autograd.grad(doubled.sum(), [scale])
        with pytest.raises(ValueError):
            d.log_prob(lib.tensor([-1.0, 1.0]))
        with pytest.raises(ValueError):
            Shifted(lib.zeros(2), lib.tensor([1.0, -1.0]), validate_args=True)
        with pytest.raises(ValueError):
            cons.dependent.check(lib.zeros(1))
        with pytest.raises(NotImplementedError):
            _ = cons.dependent.event_dim
        outcomes.append(
            [
                d.log_prob(lib.tensor([1.0, 1.0])).detach().numpy().tolist(),
                g.numpy().tolist(),
                "doubled_scale" in d.__dict__,
                Shifted.support.event_dim,
                cons.is_dependent(Shifted.support),
                cons.is_dependent(cons.real),
                cons.dependent(is_discrete=True, event_dim=1).event_dim,
                [
                    cons.is_dependent(getattr(dists, name).support)
                    for name in (
                        "Uniform",
                        "Binomial",
                        "Categorical",
                        "Multinomial",
                        "Pareto",
                        "Independent",
                        "MixtureSameFamily",
                        "TransformedDistribution",
                        "Normal",
                        "Beta",
                    )
                ],
                dists.Uniform.support.is_discrete,
                dists.Multinomial.support.event_dim,
                dists.Uniform(0.0, 2.0).support.upper_bound.item(),
            ]
        )
    assert outcomes[1] == outcomes[0]


def test_mixture_same_family_support_as_torchs():
    """The support of a ``MixtureSameFamily`` is torch's ``MixtureSameFamilyConstraint`` of
    its components' (it was the components' own)."""
    reports = []
    for lib in (torch, rg):
        dists = lib.distributions
        components = dists.Independent(dists.Normal(lib.zeros(2, 3), lib.ones(2, 3)), 1)
        support = dists.MixtureSameFamily(
            dists.Categorical(logits=lib.zeros(2)), components
        ).support
        value = lib.tensor([[1.0, float("nan"), 0.0], [1.0, 2.0, 3.0]])
        reports.append(
            [repr(support), support.event_dim, support.is_discrete, support.check(value).tolist()]
        )
        assert isinstance(support, dists.constraints.MixtureSameFamilyConstraint)
    assert reports[1] == reports[0]


def test_tril_matrix_vec_round_trip_as_torchs():
    """Before: ``distributions.utils.tril_matrix_to_vec``/``vec_to_tril_matrix`` were
    missing; gradients flow through both."""
    m_np = np.arange(18.0).reshape(2, 3, 3)
    for diag in (0, -1, 1):
        results = []
        for lib in (torch, rg):
            utils = lib.distributions.utils
            m = lib.tensor(m_np, requires_grad=True)
            vec = utils.tril_matrix_to_vec(m, diag)
            back = utils.vec_to_tril_matrix(vec * 2, diag)
            (g,) = lib.autograd.grad((back * back).sum(), [m])
            results.append([vec.detach().numpy(), back.detach().numpy(), g.numpy()])
        for mine, theirs in zip(results[1], results[0], strict=True):
            np.testing.assert_array_equal(mine, theirs)
    with pytest.raises(rg.ShapeError, match="vec_to_tril_matrix"):
        rg.distributions.utils.vec_to_tril_matrix(rg.zeros(5))
    with pytest.raises(rg.InvalidArgumentError, match="diag"):
        rg.distributions.utils.tril_matrix_to_vec(rg.zeros(3, 3), 3)
    assert rg.distributions.identity_transform(rg.tensor([1.0])).tolist() == [1.0]


@pytest.mark.parametrize(
    "spelled",
    [
        "nonnegative_integer",
        "positive_integer",
        "greater_than(1.0)",
        "greater_than_eq(1.0)",
        "interval(0.0, 2.0)",
        "half_open_interval(0.0, 2.0)",
        "integer_interval(0, 3)",
        "independent(constraints.real, 2)",
    ],
)
def test_constraint_reprs_as_torchs(spelled):
    """Before: the integer and half-open intervals and the integer half lines printed as
    their bases (``Interval``, ``GreaterThanEq``): an error naming a ``Categorical``'s
    support named the wrong constraint."""
    reprs = []
    for lib in (torch, rg):
        constraints = lib.distributions.constraints
        reprs.append(repr(eval(f"constraints.{spelled}", {"constraints": constraints})))
    assert reprs[1] == reprs[0]
