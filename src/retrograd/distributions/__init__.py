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
    constraint_registry,
    constraints,
    continuous,
    continuous_bernoulli,
    discrete,
    distribution,
    exp_family,
    gamma,
    kl,
    lkj_cholesky,
    lowrank_multivariate_normal,
    mixture,
    multivariate_normal,
    normal,
    transformed,
    transformed_families,
    transforms,
    von_mises,
    wishart,
)
from .bernoulli import Bernoulli
from .categorical import Categorical
from .constraint_registry import biject_to, transform_to
from .continuous import (
    Cauchy,
    Exponential,
    GeneralizedPareto,
    Gumbel,
    HalfNormal,
    Laplace,
    LogNormal,
    Uniform,
)
from .continuous_bernoulli import ContinuousBernoulli
from .discrete import (
    Binomial,
    Geometric,
    Multinomial,
    NegativeBinomial,
    OneHotCategorical,
    OneHotCategoricalStraightThrough,
    Poisson,
)
from .distribution import Distribution
from .exp_family import ExponentialFamily
from .gamma import Beta, Chi2, Dirichlet, FisherSnedecor, Gamma, StudentT
from .kl import kl_divergence, register_kl
from .lkj_cholesky import LKJCholesky
from .lowrank_multivariate_normal import LowRankMultivariateNormal
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
from .transformed_families import (
    HalfCauchy,
    InverseGamma,
    Kumaraswamy,
    LogisticNormal,
    Pareto,
    Weibull,
)
from .transforms import (
    AbsTransform,
    AffineTransform,
    CatTransform,
    ComposeTransform,
    CorrCholeskyTransform,
    CumulativeDistributionTransform,
    ExpTransform,
    IndependentTransform,
    LowerCholeskyTransform,
    PositiveDefiniteTransform,
    PowerTransform,
    ReshapeTransform,
    SigmoidTransform,
    SoftmaxTransform,
    SoftplusTransform,
    StackTransform,
    StickBreakingTransform,
    TanhTransform,
    Transform,
    identity_transform,
)
from .von_mises import VonMises
from .wishart import Wishart

__all__ = [
    "AbsTransform",
    "AffineTransform",
    "Bernoulli",
    "Beta",
    "Binomial",
    "CatTransform",
    "Categorical",
    "Cauchy",
    "Chi2",
    "ComposeTransform",
    "ContinuousBernoulli",
    "CorrCholeskyTransform",
    "CumulativeDistributionTransform",
    "Dirichlet",
    "Distribution",
    "ExpRelaxedCategorical",
    "ExpTransform",
    "Exponential",
    "ExponentialFamily",
    "FisherSnedecor",
    "Gamma",
    "GeneralizedPareto",
    "Geometric",
    "Gumbel",
    "HalfCauchy",
    "HalfNormal",
    "Independent",
    "IndependentTransform",
    "InverseGamma",
    "Kumaraswamy",
    "LKJCholesky",
    "Laplace",
    "LogNormal",
    "LogisticNormal",
    "LogitRelaxedBernoulli",
    "LowRankMultivariateNormal",
    "LowerCholeskyTransform",
    "MixtureSameFamily",
    "Multinomial",
    "MultivariateNormal",
    "NegativeBinomial",
    "Normal",
    "OneHotCategorical",
    "OneHotCategoricalStraightThrough",
    "Pareto",
    "Poisson",
    "PositiveDefiniteTransform",
    "PowerTransform",
    "RelaxedBernoulli",
    "RelaxedOneHotCategorical",
    "ReshapeTransform",
    "SigmoidTransform",
    "SoftmaxTransform",
    "SoftplusTransform",
    "StackTransform",
    "StickBreakingTransform",
    "StudentT",
    "TanhTransform",
    "Transform",
    "TransformedDistribution",
    "Uniform",
    "VonMises",
    "Weibull",
    "Wishart",
    "bernoulli",
    "biject_to",
    "categorical",
    "constraint_registry",
    "constraints",
    "continuous",
    "continuous_bernoulli",
    "discrete",
    "distribution",
    "exp_family",
    "gamma",
    "identity_transform",
    "kl",
    "kl_divergence",
    "lkj_cholesky",
    "lowrank_multivariate_normal",
    "mixture",
    "multivariate_normal",
    "normal",
    "register_kl",
    "transform_to",
    "transformed",
    "transformed_families",
    "transforms",
    "von_mises",
    "wishart",
]

#: the methods of each distribution whose bad arguments (a str for a value, a list for a
#: shape) get the hierarchy's errors naming the class and method (errors.guard)
_GUARDED_METHODS = ("__init__", "sample", "rsample", "sample_n", "log_prob", "entropy",
                    "cdf", "icdf", "expand", "enumerate_support", "perplexity")  # fmt: skip
#: wrappers of other distributions and transforms, which may be the user's: their methods'
#: exceptions pass unchanged (their constructors are still checked)
_UNGUARDED_METHODS = ("TransformedDistribution", "MixtureSameFamily", "Independent")


def _guard_distributions() -> None:
    from ..errors import guard_methods

    classes = [(name, globals().get(name)) for name in __all__]
    guard_methods(
        [
            (name, cls)
            for name, cls in classes
            if isinstance(cls, type)
            and issubclass(cls, Distribution)
            # bases: they run inside their subclasses' guards
            and cls not in (Distribution, ExponentialFamily)
        ],
        _GUARDED_METHODS,
        lambda name, method: name if method == "__init__" else f"{name}.{method}",
        _UNGUARDED_METHODS,
    )


_guard_distributions()
