"""Real ports, round 75 (the harness: ``tests/real_ports.py``): differentiable Kalman filtering,
a program written here in the style of the PyTorch state-space modelling code that fits a
linear-Gaussian model by gradient ascent on the innovations' marginal likelihood, of a
continuous-discrete model whose drift is discretised exactly, and of the backprop Kalman filter
(Haarnoja et al.: an encoder producing pseudo-measurements and their heteroscedastic noise,
trained through the filter against the latent truth), with a Rauch-Tung-Striebel smoother; four
configurations (``joseph``, ``standard``, ``continuous``, ``bkf``), each run under torch and,
ported, under retrograd from the same weights and draws, every record compared.

It reaches:

- the data: a damped oscillator stepped by ``x @ A.T`` plus ``torch.randn`` noise, observed
  through a mixing matrix, ``torch.stack(..., dim=1)`` of the steps;
- the parameters: a Cholesky factor of the process noise built by ``torch.tril_indices(n, n,
  offset=-1)``, an index assignment ``L[rows, cols] = offdiag`` of a parameter into a zeros
  matrix, ``torch.diag_embed(F.softplus(...))``; the observation noise ``torch.diag(torch.exp(
  ...))``; ``register_buffer`` for the prior; the continuous model's drift ``A`` discretised by
  ``torch.linalg.matrix_exp`` and its noise by Van Loan's method (``torch.matrix_exp`` of a
  block matrix built by nested ``torch.cat``, ``.mT``, blocks sliced out by ``V[:n, n:]``), a
  ``@property`` standing in for a deleted ``nn.Parameter``;
- the filter: ``expand(B, n)`` and ``expand(B, n, n).clone()`` of the prior,
  ``torch.einsum("ij,bj->bi", ...)`` for the prediction, batched ``@`` against unbatched
  matrices, the innovation covariance symmetrised by ``transpose(-1, -2)``,
  ``torch.linalg.cholesky``, the gain by ``torch.cholesky_solve`` of a transposed right-hand
  side, the Joseph-form and the standard covariance updates, per-step heteroscedastic noise
  ``torch.diag_embed(R_t[:, t])``, the Gaussian log-likelihood written out through
  ``torch.linalg.solve_triangular(upper=False)`` and ``torch.log(torch.diagonal(L, dim1=-2,
  dim2=-1))``, ``ys.new_zeros(B)``;
- the RTS smoother under ``torch.no_grad()``: ``torch.linalg.solve`` of batched covariances for
  the smoother gain, a backward loop with ``list.insert(0, ...)``; the library's own
  ``torch.distributions.MultivariateNormal(..., covariance_matrix=S).log_prob`` beside the
  written-out likelihood, ``torch.linalg.slogdet``;
- training: ``Adam`` over the parameters of two modules, ``clip_grad_norm_(max_norm=...)``,
  ``StepLR`` (``get_last_lr()`` recorded), ``F.mse_loss`` against the latent truth for the
  backprop Kalman filter; a checkpoint of ``{"ssm", "optimizer"}`` through ``torch.save`` and
  ``torch.load``, the optimizer state's ``exp_avg`` and a restored model's likelihood recorded.

The lines changed for the port: the ``import`` lines and the gradient lines (``grads =
loss.backward()``, ``clip_grad_norm_(grads, ...)``, ``optimizer.step(grads)``).
"""

from __future__ import annotations

import pytest

from real_ports import (
    assert_records_agree,
    initializer,
    params_of,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (an autouse fixture: every draw seeded)
)

KALMAN_SOURCE = """import io
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def simulate(batch, steps, dt=0.1):
    # a damped oscillator (position, velocity) observed through a noisy position and a
    # noisy mixture, the latent truth kept for the supervised variant
    A = torch.tensor([[1.0, dt], [-0.4 * dt, 1.0 - 0.1 * dt]])
    C = torch.tensor([[1.0, 0.0], [0.5, 0.5]])
    x = torch.randn(batch, 2)
    states, observations = [], []
    for _ in range(steps):
        x = x @ A.T + 0.05 * torch.randn(batch, 2)
        states.append(x)
        observations.append(x @ C.T + 0.2 * torch.randn(batch, 2))
    return torch.stack(states, dim=1), torch.stack(observations, dim=1)


def tril_from_params(diag, offdiag, n):
    L = torch.zeros(n, n, dtype=diag.dtype)
    rows, cols = torch.tril_indices(n, n, offset=-1)
    L[rows, cols] = offdiag
    return L + torch.diag_embed(F.softplus(diag) + 1e-4)


class LinearGaussianSSM(nn.Module):
    def __init__(self, state_dim=2, obs_dim=2):
        super().__init__()
        self.n, self.m = state_dim, obs_dim
        self.F = nn.Parameter(torch.eye(state_dim) + 0.01 * torch.ones(state_dim, state_dim))
        self.H = nn.Parameter(torch.eye(obs_dim, state_dim))
        self.q_diag = nn.Parameter(torch.full((state_dim,), -2.0))
        self.q_offdiag = nn.Parameter(torch.zeros(state_dim * (state_dim - 1) // 2))
        self.log_r = nn.Parameter(torch.full((obs_dim,), -1.0))
        self.register_buffer("x0", torch.zeros(state_dim))
        self.register_buffer("P0", torch.eye(state_dim))

    def noise(self):
        Lq = tril_from_params(self.q_diag, self.q_offdiag, self.n)
        Q = Lq @ Lq.transpose(-1, -2)
        R = torch.diag(torch.exp(self.log_r))
        return Q, R

    def transition(self):
        return self.F, self.noise()[0]


class ContinuousDiscreteSSM(LinearGaussianSSM):
    # the latent dynamics as a drift matrix in continuous time, discretised exactly for the
    # step dt: F = expm(A dt), and the process noise by Van Loan's block exponential

    def __init__(self, state_dim=2, obs_dim=2, dt=0.1):
        super().__init__(state_dim, obs_dim)
        self.dt = dt
        self.A = nn.Parameter(torch.tensor([[0.0, 1.0], [-0.5, -0.1]]))
        del self.F

    @property
    def F(self):
        return torch.linalg.matrix_exp(self.A * self.dt)

    def transition(self):
        n = self.n
        Lq = tril_from_params(self.q_diag, self.q_offdiag, n)
        Qc = Lq @ Lq.mT
        block = torch.cat([torch.cat([-self.A, Qc], dim=1),
                           torch.cat([torch.zeros(n, n), self.A.T], dim=1)], dim=0)
        V = torch.matrix_exp(block * self.dt)
        F_d = V[n:, n:].T
        Q = F_d @ V[:n, n:]
        return F_d, 0.5 * (Q + Q.T)

    def noise(self):
        _, Q = self.transition()
        return Q, torch.diag(torch.exp(self.log_r))


class Encoder(nn.Module):
    # the backprop Kalman filter's observation model: a network mapping a raw observation to a
    # pseudo-measurement and its heteroscedastic (diagonal) noise

    def __init__(self, obs_dim, z_dim, hidden=16):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(obs_dim, hidden), nn.Tanh(), nn.Linear(hidden, hidden),
                                 nn.Tanh())
        self.z = nn.Linear(hidden, z_dim)
        self.r = nn.Linear(hidden, z_dim)

    def forward(self, y):
        h = self.net(y)
        return self.z(h), F.softplus(self.r(h)) + 1e-3


def kalman_filter(ssm, ys, R_t=None, joseph=True):
    B, T, _ = ys.shape
    Q, R = ssm.noise()
    F_d, Q = ssm.transition()
    n = ssm.n
    I = torch.eye(n)
    x = ssm.x0.expand(B, n)
    P = ssm.P0.expand(B, n, n).clone()
    means, covs, preds, log_lik = [], [], [], ys.new_zeros(B)
    for t in range(T):
        # predict
        x = torch.einsum("ij,bj->bi", F_d, x)
        P = F_d @ P @ F_d.T + Q
        preds.append((x, P))
        # innovation
        R_now = R if R_t is None else torch.diag_embed(R_t[:, t])
        y_hat = x @ ssm.H.T
        S = ssm.H @ P @ ssm.H.transpose(0, 1) + R_now
        S = 0.5 * (S + S.transpose(-1, -2))
        L = torch.linalg.cholesky(S)
        innov = ys[:, t] - y_hat
        # gain: K = P H^T S^-1, solved against the Cholesky factor
        PHt = P @ ssm.H.T
        K = torch.cholesky_solve(PHt.transpose(-1, -2), L).transpose(-1, -2)
        x = x + (K @ innov.unsqueeze(-1)).squeeze(-1)
        if joseph:
            A = I - K @ ssm.H
            P = A @ P @ A.transpose(-1, -2) + K @ R_now @ K.transpose(-1, -2)
        else:
            P = P - K @ S @ K.transpose(-1, -2)
        # the innovation's log-likelihood, written out
        w = torch.linalg.solve_triangular(L, innov.unsqueeze(-1), upper=False).squeeze(-1)
        half_logdet = torch.log(torch.diagonal(L, dim1=-2, dim2=-1)).sum(-1)
        log_lik = log_lik - 0.5 * (w ** 2).sum(-1) - half_logdet - 0.5 * ys.shape[-1] * math.log(
            2 * math.pi)
        means.append(x)
        covs.append(P)
    return torch.stack(means, 1), torch.stack(covs, 1), preds, log_lik


def rts_smoother(ssm, means, covs, preds):
    T = means.shape[1]
    xs, Ps = [means[:, -1]], [covs[:, -1]]
    for t in range(T - 2, -1, -1):
        x_pred, P_pred = preds[t + 1]
        # J = P_t F^T P_pred^-1 without an inverse: solve P_pred J^T = F P_t
        J = torch.linalg.solve(P_pred, ssm.F @ covs[:, t]).transpose(-1, -2)
        x = means[:, t] + (J @ (xs[0] - x_pred).unsqueeze(-1)).squeeze(-1)
        P = covs[:, t] + J @ (Ps[0] - P_pred) @ J.transpose(-1, -2)
        xs.insert(0, x)
        Ps.insert(0, P)
    return torch.stack(xs, 1), torch.stack(Ps, 1)


states, ys = simulate(6, 8)
val_states, val_ys = simulate(3, 8)

SSM = ContinuousDiscreteSSM if MODE == "continuous" else LinearGaussianSSM
ssm = SSM()
initialize(ssm)
encoder = None
parameters = list(ssm.parameters())
if MODE == "bkf":
    encoder = Encoder(2, 2)
    initialize(encoder)
    parameters += list(encoder.parameters())
optimizer = torch.optim.Adam(parameters, lr=0.03)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)


def objective(ys, states):
    if MODE == "bkf":
        z, r = encoder(ys.reshape(-1, 2))
        means, covs, preds, log_lik = kalman_filter(ssm, z.view(ys.shape), r.view(ys.shape))
        return F.mse_loss(means, states), log_lik, means
    means, covs, preds, log_lik = kalman_filter(ssm, ys, joseph=MODE != "standard")
    return -log_lik.mean() / ys.shape[1], log_lik, means


for step in range(5):
    ssm.train()
    loss, log_lik, _ = objective(ys, states)
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(parameters, max_norm=10.0)
    optimizer.step()
    scheduler.step()
    record.append([loss.item(), log_lik.sum().item(), scheduler.get_last_lr()[0]])
    record.append(params_of(ssm) if encoder is None else params_of(ssm, encoder))
    print(f"step {step}: loss {loss.item():.3f}")

ssm.eval()
with torch.no_grad():
    loss, log_lik, filtered = objective(val_ys, val_states)
    record.append(loss.item())
    record.append(log_lik.numpy().copy())
    Q, R = ssm.noise()
    record.append(Q.numpy().copy())
    if MODE != "bkf":
        means, covs, preds, _ = kalman_filter(ssm, val_ys)
        smoothed, smoothed_covs = rts_smoother(ssm, means, covs, preds)
        record.append(smoothed.numpy().copy())
        record.append(torch.diagonal(smoothed_covs, dim1=-2, dim2=-1).numpy().copy())
        # the library's own Gaussian agrees with the written-out likelihood
        x_pred, P_pred = preds[0]
        S = ssm.H @ P_pred @ ssm.H.T + R
        dist = torch.distributions.MultivariateNormal(x_pred @ ssm.H.T, covariance_matrix=S)
        record.append(dist.log_prob(val_ys[:, 0]).numpy().copy())
        rmse = torch.sqrt(((smoothed - val_states) ** 2).mean()).item()
        record.append([rmse, torch.linalg.slogdet(smoothed_covs[:, -1])[1].sum().item()])
    else:
        record.append(filtered.numpy().copy())

buffer = io.BytesIO()
torch.save({"ssm": ssm.state_dict(), "optimizer": optimizer.state_dict()}, buffer)
buffer.seek(0)
checkpoint = torch.load(buffer)
restored = SSM()
restored.load_state_dict(checkpoint["ssm"])
with torch.no_grad():
    _, _, _, restored_ll = kalman_filter(restored, val_ys) if MODE != "bkf" else (
        None, None, None, torch.zeros(1))
    record.append(restored_ll.numpy().copy())
    record.append(checkpoint["optimizer"]["state"][0]["exp_avg"].numpy().copy())
"""

KALMAN_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n"
        "import retrograd.nn.functional as F\n",
    ),
    (
        "    loss.backward()\n"
        "    torch.nn.utils.clip_grad_norm_(parameters, max_norm=10.0)\n"
        "    optimizer.step()\n",
        "    grads = loss.backward()\n"
        "    torch.nn.utils.clip_grad_norm_(grads, parameters, max_norm=10.0)\n"
        "    optimizer.step(grads)\n",
    ),
]


@pytest.mark.parametrize("mode", ["joseph", "standard", "continuous", "bkf"])
def test_kalman_filter_as_torch(capsys, mode):
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        KALMAN_SOURCE,
        KALMAN_STEPS,
        capsys,
        7502,
        initialize=initializer(),
        params_of=params_of,
        MODE=mode,
    )
    assert len(theirs) == 2 * 5 + (6 if mode == "bkf" else 9)
    assert theirs[8][0] < theirs[0][0]  # training lowered the loss
    assert their_log == our_log and their_log.count("\n") == 5
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
