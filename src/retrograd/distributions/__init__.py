"""torch's ``torch.distributions``: :class:`Categorical`, :class:`Normal`,
:class:`Bernoulli` and :func:`kl_divergence` between two of one family.

Samples come from the generator ``rg.manual_seed`` seeds (not torch's draws); log
probabilities, entropies and KL divergences are torch's formulas, differentiable in the
parameters (``rsample`` too, for ``Normal``).

>>> import retrograd as rg
>>> d = rg.distributions.Categorical(logits=rg.tensor([0.0, 0.0]))
>>> round(d.entropy().item(), 6)
0.693147
"""

from . import bernoulli, categorical, distribution, kl, normal
from .bernoulli import Bernoulli
from .categorical import Categorical
from .distribution import Distribution
from .kl import kl_divergence
from .normal import Normal

__all__ = [
    "Bernoulli",
    "Categorical",
    "Distribution",
    "Normal",
    "bernoulli",
    "categorical",
    "distribution",
    "kl",
    "kl_divergence",
    "normal",
]
