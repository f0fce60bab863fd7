# ruff: noqa: E501  (the programs are kept as their authors wrote them: long lines)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
k-means as subhadarship/kmeans_pytorch writes it (``initialize`` by ``np.random.choice``,
``pairwise_distance`` by broadcasting, the ``torch.nonzero(choice_cluster == index)`` /
``torch.index_select`` centre update, the ``center_shift`` stop), and a Gaussian mixture fitted
by EM as ldeecke/gmm-torch writes it (``GaussianMixture`` with full covariances: the
``torch.inverse`` precision, the log-determinant from ``torch.linalg.cholesky`` written row by
row into ``torch.empty``, ``torch.logsumexp`` responsibilities, the M step's outer products, the
``self.mu.data = ...`` updates and the revert-on-no-improvement rule), seeded by the k-means
centres, against torch's run of the same code on the same points. Cut down: 3 clusters of 2-D
points, a few EM rounds; ``tqdm`` left out.

What it exercises: ``X[indices]`` by a NumPy index array; ``torch.argmin(dis, dim=1)``;
``torch.nonzero(...).squeeze()``; ``torch.sqrt(torch.sum((a - b) ** 2, dim=1))``;
``torch.nn.Parameter(..., requires_grad=False)`` and ``torch.Tensor(1, k, 1).fill_`` on a
parameter; ``torch.inverse`` and ``torch.linalg.cholesky`` of a ``(1, k, d, d)`` batch;
``log_det[k] = ...`` into an empty tensor; ``np.log`` mixed with tensors; ``torch.isinf`` /
``torch.isnan`` of a 0-d tensor; ``predict`` by ``torch.max(..., 1)[1].type(torch.LongTensor)``;
``bic``.

The lines changed: the ``import`` lines only (no gradients are taken).
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, runs_with_draws


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    rg.seed(0)


KMEANS_GMM_SOURCE = """
import numpy as np
import torch
from math import pi


def initialize(X, num_clusters):
    num_samples = len(X)
    indices = np.random.choice(num_samples, num_clusters, replace=False)
    initial_state = X[indices]
    return initial_state


def pairwise_distance(data1, data2, device=torch.device('cpu')):
    data1, data2 = data1.to(device), data2.to(device)
    # N*1*M
    A = data1.unsqueeze(dim=1)
    # 1*N*M
    B = data2.unsqueeze(dim=0)
    dis = (A - B) ** 2.0
    # return N*N matrix for pairwise distance
    dis = dis.sum(dim=-1).squeeze()
    return dis


def kmeans(X, num_clusters, distance='euclidean', tol=1e-4, device=torch.device('cpu')):
    print(f'running k-means on {device}..')
    if distance == 'euclidean':
        pairwise_distance_function = pairwise_distance
    else:
        raise NotImplementedError
    X = X.float()
    X = X.to(device)
    initial_state = initialize(X, num_clusters)
    iteration = 0
    while True:
        dis = pairwise_distance_function(X, initial_state)
        choice_cluster = torch.argmin(dis, dim=1)
        initial_state_pre = initial_state.clone()
        for index in range(num_clusters):
            selected = torch.nonzero(choice_cluster == index).squeeze().to(device)
            selected = torch.index_select(X, 0, selected)
            initial_state[index] = selected.mean(dim=0)
        center_shift = torch.sum(
            torch.sqrt(
                torch.sum((initial_state - initial_state_pre) ** 2, dim=1)
            ))
        iteration = iteration + 1
        print(f'iteration={iteration}, center_shift={center_shift ** 2:0.6f}, tol={tol:0.4f}')
        record.append(float(center_shift ** 2))
        if center_shift ** 2 < tol:
            break
    return choice_cluster.cpu(), initial_state.cpu()


def calculate_matmul_n_times(n_components, mat_a, mat_b):
    res = torch.zeros(mat_a.shape).to(mat_a.device)
    for i in range(n_components):
        mat_a_i = mat_a[:, i, :, :].squeeze(-2)
        mat_b_i = mat_b[0, i, :, :].squeeze()
        res[:, i, :, :] = mat_a_i.mm(mat_b_i).unsqueeze(1)
    return res


def calculate_matmul(mat_a, mat_b):
    assert mat_a.shape[-2] == 1 and mat_b.shape[-1] == 1
    return torch.sum(mat_a.squeeze(-2) * mat_b.squeeze(-1), dim=2, keepdim=True)


class GaussianMixture(torch.nn.Module):
    def __init__(self, n_components, n_features, covariance_type="full", eps=1.e-6, init_params="kmeans", mu_init=None, var_init=None):
        super(GaussianMixture, self).__init__()
        self.n_components = n_components
        self.n_features = n_features
        self.mu_init = mu_init
        self.var_init = var_init
        self.eps = eps
        self.log_likelihood = -np.inf
        self.covariance_type = covariance_type
        self.init_params = init_params
        assert self.covariance_type in ["full", "diag"]
        self._init_params()

    def _init_params(self):
        if self.mu_init is not None:
            assert self.mu_init.size() == (1, self.n_components, self.n_features)
            self.mu = torch.nn.Parameter(self.mu_init, requires_grad=False)
        else:
            self.mu = torch.nn.Parameter(torch.randn(1, self.n_components, self.n_features), requires_grad=False)
        if self.covariance_type == "diag":
            self.var = torch.nn.Parameter(torch.ones(1, self.n_components, self.n_features), requires_grad=False)
        elif self.covariance_type == "full":
            self.var = torch.nn.Parameter(
                torch.eye(self.n_features).reshape(1, 1, self.n_features, self.n_features).repeat(1, self.n_components, 1, 1),
                requires_grad=False
            )
        self.pi = torch.nn.Parameter(torch.Tensor(1, self.n_components, 1), requires_grad=False).fill_(1. / self.n_components)
        self.params_fitted = False

    def check_size(self, x):
        if len(x.size()) == 2:
            x = x.unsqueeze(1)
        return x

    def bic(self, x):
        x = self.check_size(x)
        n = x.shape[0]
        free_params = self.n_features * self.n_components + self.n_features + self.n_components - 1
        bic = -2. * self.__score(x, as_average=False).mean() * n + free_params * np.log(n)
        return bic

    def fit(self, x, delta=1e-3, n_iter=100, warm_start=False):
        if not warm_start and self.params_fitted:
            self._init_params()
        x = self.check_size(x)
        i = 0
        j = np.inf
        while (i <= n_iter) and (j >= delta):
            log_likelihood_old = self.log_likelihood
            mu_old = self.mu
            var_old = self.var
            self.__em(x)
            self.log_likelihood = self.__score(x)
            if torch.isinf(self.log_likelihood.abs()) or torch.isnan(self.log_likelihood):
                raise RuntimeError("unbounded log-likelihood")
            i += 1
            j = self.log_likelihood - log_likelihood_old
            record.append(self.log_likelihood.item())
            if j <= delta:
                self.__update_mu(mu_old)
                self.__update_var(var_old)
        self.params_fitted = True

    def predict(self, x, probs=False):
        x = self.check_size(x)
        weighted_log_prob = self._estimate_log_prob(x) + torch.log(self.pi)
        if probs:
            p_k = torch.exp(weighted_log_prob)
            return torch.squeeze(p_k / (p_k.sum(1, keepdim=True)))
        else:
            return torch.squeeze(torch.max(weighted_log_prob, 1)[1].type(torch.LongTensor))

    def _estimate_log_prob(self, x):
        x = self.check_size(x)
        if self.covariance_type == "full":
            mu = self.mu
            var = self.var
            precision = torch.inverse(var)
            d = x.shape[-1]
            log_2pi = d * np.log(2. * pi)
            log_det = self._calculate_log_det(precision)
            x_mu_T = (x - mu).unsqueeze(-2)
            x_mu = (x - mu).unsqueeze(-1)
            x_mu_T_precision = calculate_matmul_n_times(self.n_components, x_mu_T, precision)
            x_mu_T_precision_x_mu = calculate_matmul(x_mu_T_precision, x_mu)
            return -.5 * (log_2pi - log_det + x_mu_T_precision_x_mu)
        elif self.covariance_type == "diag":
            mu = self.mu
            prec = torch.rsqrt(self.var)
            log_p = torch.sum((mu * mu + x * x - 2 * x * mu) * (prec ** 2), dim=2, keepdim=True)
            log_det = torch.sum(torch.log(prec), dim=2, keepdim=True)
            return -.5 * (self.n_features * np.log(2. * pi) + log_p) + log_det

    def _calculate_log_det(self, var):
        log_det = torch.empty(size=(self.n_components,)).to(var.device)
        for k in range(self.n_components):
            log_det[k] = 2 * torch.log(torch.diagonal(torch.linalg.cholesky(var[0, k]))).sum()
        return log_det.unsqueeze(-1)

    def _e_step(self, x):
        x = self.check_size(x)
        weighted_log_prob = self._estimate_log_prob(x) + torch.log(self.pi)
        log_prob_norm = torch.logsumexp(weighted_log_prob, dim=1, keepdim=True)
        log_resp = weighted_log_prob - log_prob_norm
        return torch.mean(log_prob_norm), log_resp

    def _m_step(self, x, log_resp):
        x = self.check_size(x)
        resp = torch.exp(log_resp)
        pi = torch.sum(resp, dim=0, keepdim=True) + self.eps
        mu = torch.sum(resp * x, dim=0, keepdim=True) / pi
        if self.covariance_type == "full":
            eps = (torch.eye(self.n_features) * self.eps).to(x.device)
            var = torch.sum((x - mu).unsqueeze(-1).matmul((x - mu).unsqueeze(-2)) * resp.unsqueeze(-1), dim=0,
                            keepdim=True) / torch.sum(resp, dim=0, keepdim=True).unsqueeze(-1) + eps
        elif self.covariance_type == "diag":
            x2 = (resp * x * x).sum(0, keepdim=True) / pi
            mu2 = mu * mu
            xmu = (resp * mu * x).sum(0, keepdim=True) / pi
            var = x2 - 2 * xmu + mu2 + self.eps
        pi = pi / x.shape[0]
        return pi, mu, var

    def __em(self, x):
        _, log_resp = self._e_step(x)
        pi, mu, var = self._m_step(x, log_resp)
        self.__update_pi(pi)
        self.__update_mu(mu)
        self.__update_var(var)

    def __score(self, x, as_average=True):
        weighted_log_prob = self._estimate_log_prob(x) + torch.log(self.pi)
        per_sample_score = torch.logsumexp(weighted_log_prob, dim=1)
        if as_average:
            return per_sample_score.mean()
        else:
            return torch.squeeze(per_sample_score)

    def __update_mu(self, mu):
        assert mu.size() in [(self.n_components, self.n_features), (1, self.n_components, self.n_features)]
        if mu.size() == (self.n_components, self.n_features):
            self.mu = mu.unsqueeze(0)
        elif mu.size() == (1, self.n_components, self.n_features):
            self.mu.data = mu

    def __update_var(self, var):
        if self.covariance_type == "full":
            if var.size() == (self.n_components, self.n_features, self.n_features):
                self.var = var.unsqueeze(0)
            elif var.size() == (1, self.n_components, self.n_features, self.n_features):
                self.var.data = var
        elif self.covariance_type == "diag":
            if var.size() == (self.n_components, self.n_features):
                self.var = var.unsqueeze(0)
            elif var.size() == (1, self.n_components, self.n_features):
                self.var.data = var

    def __update_pi(self, pi):
        assert pi.size() in [(1, self.n_components, 1)]
        self.pi.data = pi


x = torch.from_numpy(points).float()
cluster_ids_x, cluster_centers = kmeans(X=x, num_clusters=3, distance='euclidean', device=torch.device('cpu'))
record.append(cluster_ids_x.numpy().tolist())
record.append(cluster_centers.numpy())

for covariance_type in ("full", "diag"):
    model = GaussianMixture(3, 2, covariance_type=covariance_type, mu_init=cluster_centers.unsqueeze(0))
    model.fit(x, n_iter=6)
    record.append(model.mu.data.numpy())
    record.append(model.var.data.numpy())
    record.append(model.pi.data.numpy())
    record.append(model.predict(x).numpy().tolist())
    record.append(model.predict(x, probs=True).numpy())
    record.append(float(model.bic(x)))
"""

KMEANS_GMM_STEPS = [("import torch\nfrom math", "import retrograd as torch\nfrom math")]


def test_kmeans_pytorch_then_gmm_torch_em_as_torch(capsys):
    rng = np.random.default_rng(27101)
    centres = np.array([[0.0, 0.0], [3.0, 0.5], [0.5, 3.0]])
    points = np.concatenate([c + 0.6 * rng.standard_normal((20, 2)) for c in centres])
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        KMEANS_GMM_SOURCE, KMEANS_GMM_STEPS, capsys, 27101, points=points
    )
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
    # the float32 centre shifts agree to rounding, compared in the records
    assert our_log.split("center_shift")[0] == their_log.split("center_shift")[0]
    assert [line.split(",")[0] for line in our_log.splitlines()] == [
        line.split(",")[0] for line in their_log.splitlines()
    ]
    assert "iteration=4" in their_log
