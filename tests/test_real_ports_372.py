# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
flow matching as atong01/conditional-flow-matching (torchcfm) writes it, 8 Gaussians to moons,
small, against torch's run of the same code from the same weights and draws:
``torchcfm/conditional_flow_matching.py`` (``pad_t_like_x``, ``ConditionalFlowMatcher``, the
exact-OT, target (Lipman), Schrodinger-bridge and variance-preserving matchers; the docstrings
cut short), ``torchcfm/optimal_transport.py`` (``OTPlanSampler`` and ``wasserstein``),
``torchcfm/models/models.py`` (``MLP`` of SELUs and ``GradModel``) and ``torchcfm/utils.py``
(``torch_wrapper`` and ``SDE``), trained by the README's loop (plain CFM and each matcher), the
SF2M notebook's loop (a flow and a score network, ``compute_lambda`` and ``return_noise=True``)
and an action-matching variant through ``GradModel``; then sampled: the flow by Euler steps of
``torch_wrapper`` (torchdyn's ``NeuralODE(..., solver="euler")`` as a stand-in) and the SDE by
Euler-Maruyama (``torchsde.sdeint(..., method="euler")`` as a stand-in), each scored by
``wasserstein``.

What it exercises: ``torch.rand(x0.shape[0]).type_as(x0)``, ``t.reshape(-1, *([1] * (x.dim() -
1)))``, ``isinstance(t, float)``, ``torch.cos(math.pi / 2 * t)``, ``self.sigma *
torch.sqrt(t * (1 - t))``; the OT plan from ``torch.cdist(x0, x1) ** 2`` and ``M.detach().cpu()
.numpy()``, ``np.random.choice`` over the flattened plan and ``x0[i], x1[j]`` indexed by NumPy
integer arrays; ``GradModel``'s ``x.requires_grad_(True)`` and ``torch.autograd.grad(torch.sum(
self.action(x)), x, create_graph=True)[0][:, :-1]`` trained through the second derivative;
``t.repeat(x.shape[0])[:, None]`` of a 0-d time, ``len(t.shape) == len(y.shape)``,
``torch.ones_like(t) * torch.ones_like(y)``.

Stand-ins: ``ot`` (POT) is a small module of ``unif``, ``emd`` and ``emd2`` (the exact plan of
two uniform batches of one size is an assignment: scipy's ``linear_sum_assignment``); the
samplers ``sample_8gaussians``/``sample_moons`` draw their points from NumPy's seeded stream
(``torch.distributions`` and ``torch.multinomial`` would draw from each library's own
generator); torchdyn and torchsde are the Euler loops below. The lines changed for the port:
the ``import`` lines and the gradient lines (``grads = loss.backward()``,
``optimizer.step(grads)``).
"""

from __future__ import annotations

import types

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment

from real_ports import assert_records_agree, initializer, runs_with_draws

TORCHCFM_SOURCE = '''
import math
from functools import partial
from typing import Optional

import numpy as np
import torch

# -- torchcfm/optimal_transport.py -----------------------------------------------------------------
class OTPlanSampler:
    """OTPlanSampler implements sampling coordinates according to an OT plan (wrt squared Euclidean
    cost) with different implementations of the plan calculation."""

    def __init__(
        self,
        method: str,
        reg: float = 0.05,
        reg_m: float = 1.0,
        normalize_cost=False,
        **kwargs,
    ):
        # ot_fn should take (a, b, M) as arguments where a, b are marginals and
        # M is a cost matrix
        if method == "exact":
            self.ot_fn = pot.emd
        elif method == "sinkhorn":
            self.ot_fn = partial(pot.sinkhorn, reg=reg)
        elif method == "unbalanced":
            self.ot_fn = partial(pot.unbalanced.sinkhorn_knopp_unbalanced, reg=reg, reg_m=reg_m)
        elif method == "partial":
            self.ot_fn = partial(pot.partial.entropic_partial_wasserstein, reg=reg)
        else:
            raise ValueError(f"Unknown method: {method}")
        self.reg = reg
        self.reg_m = reg_m
        self.normalize_cost = normalize_cost
        self.kwargs = kwargs

    def get_map(self, x0, x1):
        """Compute the OT plan (wrt squared Euclidean cost) between a source and a target
        minibatch."""
        a, b = pot.unif(x0.shape[0]), pot.unif(x1.shape[0])
        if x0.dim() > 2:
            x0 = x0.reshape(x0.shape[0], -1)
        if x1.dim() > 2:
            x1 = x1.reshape(x1.shape[0], -1)
        x1 = x1.reshape(x1.shape[0], -1)
        M = torch.cdist(x0, x1) ** 2
        if self.normalize_cost:
            M = M / M.max()  # should not be normalized when using minibatches
        p = self.ot_fn(a, b, M.detach().cpu().numpy())
        if not np.all(np.isfinite(p)):
            print("ERROR: p is not finite")
            print(p)
            print("Cost mean, max", M.mean(), M.max())
            print(x0, x1)
        return p

    def sample_map(self, pi, batch_size):
        r"""Draw source and target samples from pi  $(x,z) \\sim \\pi$"""
        p = pi.flatten()
        p = p / p.sum()
        choices = np.random.choice(pi.shape[0] * pi.shape[1], p=p, size=batch_size)
        return np.divmod(choices, pi.shape[1])

    def sample_plan(self, x0, x1):
        r"""Compute the OT plan $\\pi$ (wrt squared Euclidean cost) between a source and a target
        minibatch and draw source and target samples from pi $(x,z) \\sim \\pi$"""
        pi = self.get_map(x0, x1)
        i, j = self.sample_map(pi, x0.shape[0])
        return x0[i], x1[j]


def wasserstein(
    x0: torch.Tensor,
    x1: torch.Tensor,
    method: Optional[str] = None,
    reg: float = 0.05,
    power: int = 2,
    **kwargs,
) -> float:
    """Compute the Wasserstein (1 or 2) distance (wrt Euclidean cost) between a source and a target
    distributions."""
    assert power == 1 or power == 2
    # ot_fn should take (a, b, M) as arguments where a, b are marginals and
    # M is a cost matrix
    if method == "exact" or method is None:
        ot_fn = pot.emd2
    elif method == "sinkhorn":
        ot_fn = partial(pot.sinkhorn2, reg=reg)
    else:
        raise ValueError(f"Unknown method: {method}")

    a, b = pot.unif(x0.shape[0]), pot.unif(x1.shape[0])
    if x0.dim() > 2:
        x0 = x0.reshape(x0.shape[0], -1)
    if x1.dim() > 2:
        x1 = x1.reshape(x1.shape[0], -1)
    M = torch.cdist(x0, x1)
    if power == 2:
        M = M**2
    ret = ot_fn(a, b, M.detach().cpu().numpy(), numItermax=1e7)
    if power == 2:
        ret = math.sqrt(ret)
    return ret

# -- torchcfm/conditional_flow_matching.py ---------------------------------------------------------
def pad_t_like_x(t, x):
    """Function to reshape the time vector t by the number of dimensions of x."""
    if isinstance(t, float):
        return t
    return t.reshape(-1, *([1] * (x.dim() - 1)))


class ConditionalFlowMatcher:
    """Base class for conditional flow matching methods."""

    def __init__(self, sigma: float = 0.0):
        self.sigma = sigma

    def compute_mu_t(self, x0, x1, t):
        t = pad_t_like_x(t, x0)
        return t * x1 + (1 - t) * x0

    def compute_sigma_t(self, t):
        del t
        return self.sigma

    def sample_xt(self, x0, x1, t, epsilon):
        mu_t = self.compute_mu_t(x0, x1, t)
        sigma_t = self.compute_sigma_t(t)
        sigma_t = pad_t_like_x(sigma_t, x0)
        return mu_t + sigma_t * epsilon

    def compute_conditional_flow(self, x0, x1, t, xt):
        del t, xt
        return x1 - x0

    def sample_noise_like(self, x):
        return torch.randn_like(x)

    def sample_location_and_conditional_flow(self, x0, x1, return_noise=False):
        t = torch.rand(x0.shape[0]).type_as(x0)
        eps = self.sample_noise_like(x0)
        xt = self.sample_xt(x0, x1, t, eps)
        ut = self.compute_conditional_flow(x0, x1, t, xt)
        if return_noise:
            return t, xt, ut, eps
        else:
            return t, xt, ut

    def compute_lambda(self, t):
        sigma_t = self.compute_sigma_t(t)
        return 2 * sigma_t / (self.sigma**2 + 1e-8)


class ExactOptimalTransportConditionalFlowMatcher(ConditionalFlowMatcher):
    def __init__(self, sigma: float = 0.0):
        self.sigma = sigma
        self.ot_sampler = OTPlanSampler(method="exact")

    def sample_location_and_conditional_flow(self, x0, x1, return_noise=False):
        x0, x1 = self.ot_sampler.sample_plan(x0, x1)
        return super().sample_location_and_conditional_flow(x0, x1, return_noise)


class TargetConditionalFlowMatcher(ConditionalFlowMatcher):
    def compute_mu_t(self, x0, x1, t):
        del x0
        t = pad_t_like_x(t, x1)
        return t * x1

    def compute_sigma_t(self, t):
        return 1 - (1 - self.sigma) * t

    def compute_conditional_flow(self, x0, x1, t, xt):
        del x0
        t = pad_t_like_x(t, x1)
        return (x1 - (1 - self.sigma) * xt) / (1 - (1 - self.sigma) * t)


class SchrodingerBridgeConditionalFlowMatcher(ConditionalFlowMatcher):
    def __init__(self, sigma: float = 1.0, ot_method="exact"):
        self.sigma = sigma
        self.ot_method = ot_method
        self.ot_sampler = OTPlanSampler(method=ot_method, reg=2 * self.sigma**2)

    def compute_sigma_t(self, t):
        return self.sigma * torch.sqrt(t * (1 - t))

    def compute_conditional_flow(self, x0, x1, t, xt):
        t = pad_t_like_x(t, x0)
        mu_t = self.compute_mu_t(x0, x1, t)
        sigma_t_prime_over_sigma_t = (1 - 2 * t) / (2 * t * (1 - t) + 1e-8)
        ut = sigma_t_prime_over_sigma_t * (xt - mu_t) + x1 - x0
        return ut

    def sample_location_and_conditional_flow(self, x0, x1, return_noise=False):
        x0, x1 = self.ot_sampler.sample_plan(x0, x1)
        return super().sample_location_and_conditional_flow(x0, x1, return_noise)


class VariancePreservingConditionalFlowMatcher(ConditionalFlowMatcher):
    def compute_mu_t(self, x0, x1, t):
        t = pad_t_like_x(t, x0)
        return torch.cos(math.pi / 2 * t) * x0 + torch.sin(math.pi / 2 * t) * x1

    def compute_conditional_flow(self, x0, x1, t, xt):
        del xt
        t = pad_t_like_x(t, x0)
        return math.pi / 2 * (torch.cos(math.pi / 2 * t) * x1 - torch.sin(math.pi / 2 * t) * x0)

# -- torchcfm/models/models.py ---------------------------------------------------------------------
class MLP(torch.nn.Module):
    def __init__(self, dim, out_dim=None, w=64, time_varying=False):
        super().__init__()
        self.time_varying = time_varying
        if out_dim is None:
            out_dim = dim
        self.net = torch.nn.Sequential(
            torch.nn.Linear(dim + (1 if time_varying else 0), w),
            torch.nn.SELU(),
            torch.nn.Linear(w, w),
            torch.nn.SELU(),
            torch.nn.Linear(w, w),
            torch.nn.SELU(),
            torch.nn.Linear(w, out_dim),
        )

    def forward(self, x):
        return self.net(x)


class GradModel(torch.nn.Module):
    def __init__(self, action):
        super().__init__()
        self.action = action

    def forward(self, x):
        x = x.requires_grad_(True)
        grad = torch.autograd.grad(torch.sum(self.action(x)), x, create_graph=True)[0]
        return grad[:, :-1]

# -- torchcfm/utils.py -----------------------------------------------------------------------------
class torch_wrapper(torch.nn.Module):
    """Wraps model to torchdyn compatible format."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, t, x):
        return self.model(torch.cat([x, t.repeat(x.shape[0])[:, None]], 1))


class SDE(torch.nn.Module):
    noise_type = "diagonal"
    sde_type = "ito"

    def __init__(self, ode_drift, score, reverse=False):
        super().__init__()
        self.drift = ode_drift
        self.score = score
        self.reverse = reverse

    # Drift
    def f(self, t, y):
        if self.reverse:
            t = 1 - t
        if len(t.shape) == len(y.shape):
            x = torch.cat([y, t], 1)
        else:
            x = torch.cat([y, t.repeat(y.shape[0])[:, None]], 1)
        if self.reverse:
            return -self.drift(x) + self.score(x)
        return self.drift(x) + self.score(x)

    # Diffusion
    def g(self, t, y):
        return torch.ones_like(t) * torch.ones_like(y)

# -- stand-ins for torchdyn's NeuralODE(solver="euler").trajectory and torchsde.sdeint(method="euler")
def euler_trajectory(vector_field, x, t_span):
    traj = [x]
    for t0, t1 in zip(t_span[:-1], t_span[1:]):
        x = x + (t1 - t0) * vector_field(t0, x)
        traj.append(x)
    return torch.stack(traj)


def sdeint_euler(sde, y0, ts, dt):
    ys = [y0]
    y = y0
    for t0, t1 in zip(ts[:-1], ts[1:]):
        t = t0
        while t < t1 - 1e-6:
            h = min(dt, float(t1 - t))
            y = y + sde.f(t, y) * h + sde.g(t, y) * math.sqrt(h) * torch.randn_like(y)
            t = t + h
        ys.append(y)
    return torch.stack(ys)

# -- the README's and the SF2M notebook's loops, small ---------------------------------------------
sigma = 0.1
dim = 2
batch_size = 32
x_eval = sample_moons(64)

for Matcher in (ConditionalFlowMatcher, ExactOptimalTransportConditionalFlowMatcher,
                TargetConditionalFlowMatcher, VariancePreservingConditionalFlowMatcher):
    model = MLP(dim=dim, time_varying=True, w=32)
    initialize(model)
    optimizer = torch.optim.Adam(model.parameters())
    FM = Matcher(sigma=sigma)
    for k in range(4):
        optimizer.zero_grad()
        x0 = sample_8gaussians(batch_size)
        x1 = sample_moons(batch_size)
        t, xt, ut = FM.sample_location_and_conditional_flow(x0, x1)
        vt = model(torch.cat([xt, t[:, None]], dim=-1))
        loss = torch.mean((vt - ut) ** 2)
        loss.backward()
        optimizer.step()
        record.append(loss.item())
    with torch.no_grad():
        traj = euler_trajectory(torch_wrapper(model), sample_8gaussians(64), torch.linspace(0, 1, 6))
    record.append(traj.numpy())
    record.append(wasserstein(traj[-1], x_eval))
    record.append({k: v.detach().numpy() for k, v in model.state_dict().items()})

# SF2M: a flow and a score network under the Schrodinger-bridge matcher
model = MLP(dim=dim, time_varying=True, w=32)
score_model = MLP(dim=dim, time_varying=True, w=32)
initialize(model)
initialize(score_model)
optimizer = torch.optim.Adam(list(model.parameters()) + list(score_model.parameters()), 1e-3)
FM = SchrodingerBridgeConditionalFlowMatcher(sigma=sigma, ot_method="exact")
for k in range(4):
    optimizer.zero_grad()
    x0 = sample_8gaussians(batch_size)
    x1 = sample_moons(batch_size)
    t, xt, ut, eps = FM.sample_location_and_conditional_flow(x0, x1, return_noise=True)
    lambda_t = FM.compute_lambda(t)
    vt = model(torch.cat([xt, t[:, None]], dim=-1))
    st = score_model(torch.cat([xt, t[:, None]], dim=-1))
    flow_loss = torch.mean((vt - ut) ** 2)
    score_loss = torch.mean((lambda_t[:, None] * st + eps) ** 2)
    loss = flow_loss + score_loss
    loss.backward()
    optimizer.step()
    record.append([flow_loss.item(), score_loss.item()])
with torch.no_grad():
    sde_traj = sdeint_euler(SDE(model, score_model), sample_8gaussians(64), torch.linspace(0, 1, 3), dt=0.25)
    drift_batched_t = SDE(model, score_model, reverse=True).f(torch.full((64, 1), 0.25), sample_moons(64))
record.append(sde_traj.numpy())
record.append(drift_batched_t.numpy())
record.append(wasserstein(sde_traj[-1], x_eval, power=1))

# action matching: the vector field is the input gradient of a scalar action
action = MLP(dim=dim, out_dim=1, time_varying=True, w=32)
initialize(action)
grad_model = GradModel(action)
optimizer = torch.optim.Adam(grad_model.parameters(), 1e-2)
FM = ConditionalFlowMatcher(sigma=sigma)
for k in range(4):
    optimizer.zero_grad()
    x0 = sample_8gaussians(batch_size)
    x1 = sample_moons(batch_size)
    t, xt, ut = FM.sample_location_and_conditional_flow(x0, x1)
    vt = grad_model(torch.cat([xt, t[:, None]], dim=-1))
    loss = torch.mean((vt - ut) ** 2)
    loss.backward()
    optimizer.step()
    record.append(loss.item())
record.append({k: v.detach().numpy() for k, v in action.state_dict().items()})
'''

TORCHCFM_STEPS = [
    ("import numpy as np\nimport torch\n", "import numpy as np\nimport retrograd as torch\n"),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
    (
        "    loss.backward()\n    optimizer.step()\n",
        "    grads = loss.backward()\n    optimizer.step(grads)\n",
    ),
]


def ot_stand_in():
    """The part of POT (``import ot as pot``) that the exact sampler and ``wasserstein`` use."""

    def emd(a, b, cost, **_):
        rows, cols = linear_sum_assignment(cost)
        plan = np.zeros_like(cost, dtype=np.float64)
        plan[rows, cols] = a[rows]
        return plan

    def emd2(a, b, cost, **kwargs):
        return float((emd(a, b, cost) * cost).sum())

    return types.SimpleNamespace(unif=lambda n: np.ones(n) / n, emd=emd, emd2=emd2)


def make_sample_8gaussians(lib):
    centers = np.array(
        [(1, 0), (-1, 0), (0, 1), (0, -1)]
        + [(a / np.sqrt(2), b / np.sqrt(2)) for a in (1, -1) for b in (1, -1)]
    )

    def sample_8gaussians(n):  # utils.py's eight_normal_sample(n, 2, scale=5, var=0.1)
        which = np.random.randint(0, 8, n)
        noise = np.random.standard_normal((n, 2)) * np.sqrt(np.sqrt(0.1))
        return lib.tensor(centers[which] * 5 + noise, dtype=lib.float32)

    return sample_8gaussians


def make_sample_moons(lib):
    def sample_moons(n):  # utils.py's generate_moons(n, noise=0.2)[0] * 3 - 1
        angle = np.random.uniform(0, np.pi, n)
        upper = np.random.randint(0, 2, n).astype(bool)
        x = np.where(upper, np.cos(angle), 1 - np.cos(angle))
        y = np.where(upper, np.sin(angle), 0.5 - np.sin(angle))
        points = np.stack([x, y], 1) + np.random.standard_normal((n, 2)) * 0.2
        return lib.tensor(points * 3 - 1, dtype=lib.float32)

    return sample_moons


def test_torchcfm_matchers_sf2m_and_action_matching_train_and_sample_as_torch(capsys):
    torch.manual_seed(372)
    records, logs = runs_with_draws(
        TORCHCFM_SOURCE,
        TORCHCFM_STEPS,
        capsys,
        372,
        initialize=initializer(),
        pot=ot_stand_in(),
        make_sample_8gaussians=make_sample_8gaussians,
        make_sample_moons=make_sample_moons,
    )
    theirs, ours = records
    assert logs[1] == logs[0] == ""
    assert len(theirs) == 4 * 7 + 4 + 3 + 4 + 1
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
