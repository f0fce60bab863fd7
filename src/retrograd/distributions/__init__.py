"""torch's ``torch.distributions``: the families RL policies, VAEs, Bayesian layers and
normalizing flows use, :func:`kl_divergence` with :func:`register_kl`, ``constraints`` and
``transforms``.

Samples come from the generator ``rg.manual_seed`` seeds (not torch's draws); log
probabilities, entropies, moments, cdf/icdf and KL divergences are torch's formulas,
differentiable in the parameters, and ``rsample`` is reparameterized wherever torch's is
(implicitly for the gamma family). With ``validate_args`` (the default) bad parameters and
values outside the support raise ``rg.InvalidArgumentError`` naming the distribution.

>>> import retrograd as rg
>>> d = rg.distributions.Categorical(logits=rg.tensor([0.0, 0.0]))
>>> round(d.entropy().item(), 6)
0.693147
"""

from . import (
    bernoulli,
    categorical,
    constraints,
    continuous,
    discrete,
    distribution,
    gamma,
    kl,
    mixture,
    multivariate_normal,
    normal,
    transformed,
    transforms,
)
from .bernoulli import Bernoulli
from .categorical import Categorical
from .continuous import Cauchy, Exponential, Gumbel, HalfNormal, Laplace, LogNormal, Uniform
from .discrete import Binomial, Geometric, OneHotCategorical, Poisson
from .distribution import Distribution
from .gamma import Beta, Chi2, Dirichlet, Gamma, StudentT
from .kl import kl_divergence, register_kl
from .mixture import MixtureSameFamily
from .multivariate_normal import Independent, MultivariateNormal
from .normal import Normal
from .transformed import (
    ExpRelaxedCategorical,
    LogitRelaxedBernoulli,
    RelaxedBernoulli,
    RelaxedOneHotCategorical,
    TransformedDistribution,
)
from .transforms import (
    AbsTransform,
    AffineTransform,
    ComposeTransform,
    ExpTransform,
    PowerTransform,
    SigmoidTransform,
    SoftmaxTransform,
    TanhTransform,
    Transform,
)

__all__ = [
    "AbsTransform",
    "AffineTransform",
    "Bernoulli",
    "Beta",
    "Binomial",
    "Categorical",
    "Cauchy",
    "Chi2",
    "ComposeTransform",
    "Dirichlet",
    "Distribution",
    "ExpRelaxedCategorical",
    "ExpTransform",
    "Exponential",
    "Gamma",
    "Geometric",
    "Gumbel",
    "HalfNormal",
    "Independent",
    "Laplace",
    "LogNormal",
    "LogitRelaxedBernoulli",
    "MixtureSameFamily",
    "MultivariateNormal",
    "Normal",
    "OneHotCategorical",
    "Poisson",
    "PowerTransform",
    "RelaxedBernoulli",
    "RelaxedOneHotCategorical",
    "SigmoidTransform",
    "SoftmaxTransform",
    "StudentT",
    "TanhTransform",
    "Transform",
    "TransformedDistribution",
    "Uniform",
    "bernoulli",
    "categorical",
    "constraints",
    "continuous",
    "discrete",
    "distribution",
    "gamma",
    "kl",
    "kl_divergence",
    "mixture",
    "multivariate_normal",
    "normal",
    "register_kl",
    "transformed",
    "transforms",
]
