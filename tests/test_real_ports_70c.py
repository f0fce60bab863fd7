"""Real ports, round 70 (the harness: ``tests/real_ports.py``): evolution strategies, two
programs written here, each against torch's run of the same program from the same weights and
draws:

- in the style of OpenAI's evolution-strategies starter and hardmaru/estool (OpenES:
  antithetic Gaussian perturbations of the flattened policy, centered-rank fitness shaping,
  the search gradient handed to a torch optimizer through ``p.grad``), on a batch of point
  masses steered to their goals;
- in the style of the separable natural evolution strategies of evotorch and the NES papers
  (SNES: a diagonal Gaussian search distribution whose mean and log-scale are trained by
  autograd through ``Normal.log_prob`` of the ranked samples, the score-function estimator),
  fitting a small network to a curve with the population evaluated by ``torch.vmap`` of
  ``torch.func.functional_call``.

The OpenES program reaches:

- the policy: an ``nn.Module`` MLP with ``torch.tanh``; the whole population evaluated at
  once from one flat ``(popsize, n_params)`` matrix, unflattened by slices ``flat[:, a:b]``
  and ``reshape(flat.shape[0], *shape)``, applied by ``torch.einsum("pbi,poi->pbo", ...)`` and
  ``torch.baddbmm`` with ``w2.transpose(1, 2)`` and ``unsqueeze(1)`` biases;
- the environment: point masses in batch, ``start.expand(pop, -1, -1)``, ``torch.zeros_like``,
  ``torch.linalg.norm(..., dim=-1)``, rewards accumulated by ``+=``, ``clone`` of the state;
- the search: ``parameters_to_vector(...).detach()``, antithetic noise ``torch.cat([half,
  -half])``, centered ranks by ``x.argsort()`` and ``torch.empty_like(x).scatter_(0, order,
  torch.arange(len(x), dtype=x.dtype))``, the estimate ``torch.mv(epsilon.t(), shaped) /
  (popsize * sigma)`` with an L2 pull, sliced back by ``view_as(p)``;
- the update: the negated estimate installed as ``p.grad = g.clone()`` after ``zero_grad()``,
  ``Adam`` (``betas``) under ``ExponentialLR``, the best ``state_dict`` kept by
  ``copy.deepcopy``; ``optimizer.state_dict()["state"][0]["exp_avg_sq"]``;
- evaluation under ``torch.no_grad()``: the restored policy rolled out through the module,
  ``torch.stack(...).sum(0)``, ``torch.stack(trajectory, dim=1)``, and
  ``vector_to_parameters`` into a fresh policy.

The SNES program reaches: ``from torch.func import functional_call``, ``from
torch.distributions import Normal, kl_divergence``; the population's parameters from one flat
matrix by ``torch.split(flat, sizes, dim=1)`` into a dict of ``reshape(pop, *shape)``,
evaluated by ``torch.vmap(lambda p: functional_call(model, p, (x,)))``; NES utilities by
``torch.clamp(math.log(n / 2 + 1) - torch.log(ranks), min=0)``, assigned through
``shaped[order] = utilities`` after ``torch.argsort(..., descending=True)``; the mean and
log-scale as ``nn.Parameter``s made from ``parameters_to_vector(...).detach().clone()`` and
``torch.full_like``, ``Normal(mu, log_sigma.exp())`` rebuilt each generation, the loss
``-(shaped * search.log_prob(samples).sum(-1)).sum()``, ``entropy()``; ``Adam`` with two
parameter groups under ``MultiStepLR``; ``log_sigma.clamp_(min=...)`` under
``torch.no_grad()``; ``kl_divergence`` of two ``Normal``s both ways; ``vector_to_parameters``
into the model, its ``state_dict`` deep-copied into a fresh ``nn.Sequential``.

The lines changed for the port: the ``import`` lines and the gradient lines (SNES's are the
usual ``grads = loss.backward()`` and ``optimizer.step(grads)``; in OpenES no backward runs
here: the port takes the ``Gradients`` of a zero loss over the parameters and installs the
search gradient by ``p.grad_replace(grads, ...)``, then ``optimizer.step(grads)``).
"""

from __future__ import annotations

from real_ports import (
    assert_records_agree,
    initializer,
    params_of,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (an autouse fixture: every draw seeded)
    state_of,
)

ES_SOURCE = """import copy

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import parameters_to_vector, vector_to_parameters


class Policy(nn.Module):
    def __init__(self, obs_dim=4, hidden=8, act_dim=2):
        super().__init__()
        self.fc1 = nn.Linear(obs_dim, hidden)
        self.fc2 = nn.Linear(hidden, act_dim)

    def forward(self, obs):
        return torch.tanh(self.fc2(torch.tanh(self.fc1(obs))))


class PointMassEnv:
    # a batch of point masses pushed towards their goals, all rolled out at once
    def __init__(self, n_envs, horizon=12, dt=0.2):
        self.n_envs, self.horizon, self.dt = n_envs, horizon, dt

    def reset(self, start, goal):
        self.pos = start.clone()
        self.vel = torch.zeros_like(start)
        self.goal = goal
        return torch.cat([self.pos - self.goal, self.vel], dim=-1)

    def step(self, action):
        self.vel = 0.9 * self.vel + self.dt * action
        self.pos = self.pos + self.dt * self.vel
        dist = torch.linalg.norm(self.pos - self.goal, dim=-1)
        reward = -dist - 0.01 * (action ** 2).sum(-1)
        return torch.cat([self.pos - self.goal, self.vel], dim=-1), reward


def unflatten_population(flat, shapes):
    # (pop, n_params) -> a list of (pop, *shape) tensors, in parameter order
    out, offset = [], 0
    for shape in shapes:
        n = int(np.prod(shape))
        out.append(flat[:, offset:offset + n].reshape(flat.shape[0], *shape))
        offset += n
    return out


def population_forward(weights, obs):
    # every perturbed policy applied to its own batch of states at once
    w1, b1, w2, b2 = weights
    h = torch.tanh(torch.einsum("pbi,poi->pbo", obs, w1) + b1.unsqueeze(1))
    return torch.tanh(torch.baddbmm(b2.unsqueeze(1), h, w2.transpose(1, 2)))


def evaluate_population(flat, shapes, env, start, goal):
    weights = unflatten_population(flat, shapes)
    pop = flat.shape[0]
    obs = env.reset(start.expand(pop, -1, -1), goal.expand(pop, -1, -1))
    total = torch.zeros(pop, start.shape[-2])
    for t in range(env.horizon):
        obs, reward = env.step(population_forward(weights, obs))
        total += reward
    return total.mean(dim=1)


def compute_centered_ranks(x):
    ranks = torch.empty_like(x)
    order = x.argsort()
    ranks.scatter_(0, order, torch.arange(len(x), dtype=x.dtype))
    return ranks / (len(x) - 1) - 0.5


class OpenES:
    def __init__(self, policy, sigma=0.1, popsize=8, weight_decay=0.005):
        self.policy = policy
        self.sigma, self.popsize, self.weight_decay = sigma, popsize, weight_decay
        self.shapes = [tuple(p.shape) for p in policy.parameters()]

    def ask(self):
        theta = parameters_to_vector(self.policy.parameters()).detach()
        half = torch.randn(self.popsize // 2, theta.numel())
        self.epsilon = torch.cat([half, -half], dim=0)  # antithetic pairs
        return theta.unsqueeze(0) + self.sigma * self.epsilon

    def tell(self, fitness):
        theta = parameters_to_vector(self.policy.parameters()).detach()
        shaped = compute_centered_ranks(fitness)
        grad = torch.mv(self.epsilon.t(), shaped) / (self.popsize * self.sigma)
        grad = grad - self.weight_decay * theta  # an L2 pull on the parameters
        return -grad  # the optimizer minimizes


policy = Policy()
initialize(policy)
es = OpenES(policy, sigma=0.1, popsize=8)
optimizer = torch.optim.Adam(policy.parameters(), lr=0.03, betas=(0.9, 0.999))
scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.9)
env = PointMassEnv(n_envs=6)
start = torch.randn(6, 2) * 0.5
goal = torch.randn(6, 2) * 0.5
best_fitness, best_state = -float("inf"), None

for generation in range(8):
    with torch.no_grad():
        solutions = es.ask()
        fitness = evaluate_population(solutions, es.shapes, env, start, goal)
    flat_grad = es.tell(fitness)
    optimizer.zero_grad()
    grad_list = []
    offset = 0
    for p in policy.parameters():
        n = p.numel()
        grad_list.append(flat_grad[offset:offset + n].view_as(p))
        offset += n
    for p, g in zip(policy.parameters(), grad_list):
        p.grad = g.clone()
    optimizer.step()
    scheduler.step()
    with torch.no_grad():
        theta = parameters_to_vector(policy.parameters()).unsqueeze(0)
        mean_fitness = evaluate_population(theta, es.shapes, env, start, goal).item()
    if mean_fitness > best_fitness:
        best_fitness = mean_fitness
        best_state = copy.deepcopy(policy.state_dict())
    record.append([fitness.max().item(), fitness.mean().item(), mean_fitness,
                   scheduler.get_last_lr()[0]])
    record.append(fitness.argsort().tolist())
    record.append(params_of(policy))
    print("gen {} best {:.3f} mean {:.3f} center {:.3f}".format(
        generation, fitness.max().item(), fitness.mean().item(), mean_fitness))

record.append(optimizer.state_dict()["state"][0]["exp_avg_sq"].numpy().copy())
restored = Policy()
restored.load_state_dict(best_state)
restored.eval()
with torch.no_grad():
    # the restored policy rolled out alone, through the module
    obs = env.reset(start, goal)
    rewards, trajectory = [], [env.pos.clone()]
    for t in range(env.horizon):
        obs, reward = env.step(restored(obs))
        rewards.append(reward)
        trajectory.append(env.pos.clone())
    returns = torch.stack(rewards).sum(0)
    record.append([returns.mean().item(), best_fitness,
                   abs(returns.mean().item() - best_fitness) < 1e-4])
    record.append(torch.stack(trajectory, dim=1).numpy().copy())
    vec = parameters_to_vector(restored.parameters())
    shifted = Policy()
    vector_to_parameters(vec * 0.5, shifted.parameters())
    record.append(state_of(shifted))
    record.append(compute_centered_ranks(torch.tensor([3.0, -1.0, 2.0, 0.5])).numpy().copy())
"""

ES_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n"
        "import retrograd.nn.functional as F\n",
    ),
    (
        "    for p, g in zip(policy.parameters(), grad_list):\n"
        "        p.grad = g.clone()\n"
        "    optimizer.step()\n",
        # no backward here: a zero loss's gradients hold the search gradient
        "    es_grads = sum(p.sum() * 0 for p in policy.parameters()).backward()\n"
        "    for p, g in zip(policy.parameters(), grad_list):\n"
        "        p.grad_replace(es_grads, g.clone())\n"
        "    optimizer.step(es_grads)\n",
    ),
]


def test_openai_es_on_point_masses_as_torch(capsys):
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        ES_SOURCE,
        ES_STEPS,
        capsys,
        7003,
        initialize=initializer(),
        params_of=params_of,
        state_of=state_of,
    )
    assert len(theirs) == 3 * 8 + 5
    assert their_log == our_log and their_log.count("\n") == 8
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)


SNES_SOURCE = """import copy

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call
from torch.distributions import Normal, kl_divergence
from torch.nn.utils import parameters_to_vector, vector_to_parameters


model = nn.Sequential(nn.Linear(1, 8), nn.Tanh(), nn.Linear(8, 1))
initialize(model)
names = [name for name, _ in model.named_parameters()]
shapes = [p.shape for p in model.parameters()]
sizes = [p.numel() for p in model.parameters()]

x = torch.linspace(-2.0, 2.0, 16).unsqueeze(-1)
y = torch.sin(1.5 * x) + 0.3 * x


def population_params(flat):
    chunks = torch.split(flat, sizes, dim=1)
    return {n: c.reshape(flat.shape[0], *s) for n, c, s in zip(names, chunks, shapes)}


def fitness_of(flat):
    params = population_params(flat)
    preds = torch.vmap(lambda p: functional_call(model, p, (x,)))(params)
    return -((preds - y.unsqueeze(0)) ** 2).mean(dim=(1, 2))


def nes_utilities(n):
    ranks = torch.arange(1, n + 1, dtype=torch.float32)
    u = torch.clamp(math.log(n / 2 + 1) - torch.log(ranks), min=0)
    return u / u.sum() - 1.0 / n


popsize = 10
mu = nn.Parameter(parameters_to_vector(model.parameters()).detach().clone())
log_sigma = nn.Parameter(torch.full_like(mu, math.log(0.1)))
initial = Normal(mu.detach().clone(), log_sigma.detach().exp())
optimizer = torch.optim.Adam([{"params": [mu], "lr": 0.05},
                              {"params": [log_sigma], "lr": 0.02}])
scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[4], gamma=0.5)
utilities = nes_utilities(popsize)

for generation in range(8):
    search = Normal(mu, log_sigma.exp())
    with torch.no_grad():
        half = torch.randn(popsize // 2, mu.numel())
        eps = torch.cat([half, -half])
        samples = mu + log_sigma.exp() * eps
        fitness = fitness_of(samples)
        order = torch.argsort(fitness, descending=True)
        shaped = torch.zeros_like(fitness)
        shaped[order] = utilities
    # the score-function estimator: autograd of the log-density gives the search gradient
    log_prob = search.log_prob(samples).sum(-1)
    loss = -(shaped * log_prob).sum()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    scheduler.step()
    with torch.no_grad():
        log_sigma.clamp_(min=math.log(1e-3))
        center = fitness_of(mu.detach().unsqueeze(0))
    record.append([fitness.max().item(), fitness.mean().item(), center.item(),
                   loss.item(), search.entropy().sum().item()])
    record.append(order.tolist())
    record.append({"mu": mu.detach().numpy().copy(),
                   "log_sigma": log_sigma.detach().numpy().copy()})
    print("gen {} best {:.4f} center {:.4f} sigma {:.4f}".format(
        generation, fitness.max().item(), center.item(), log_sigma.exp().mean().item()))

with torch.no_grad():
    vector_to_parameters(mu.detach(), model.parameters())
    final = Normal(mu.detach(), log_sigma.detach().exp())
    record.append([kl_divergence(final, initial).sum().item(),
                   kl_divergence(initial, final).sum().item()])
snapshot = copy.deepcopy(model.state_dict())
fresh = nn.Sequential(nn.Linear(1, 8), nn.Tanh(), nn.Linear(8, 1))
fresh.load_state_dict(snapshot)
fresh.eval()
with torch.no_grad():
    test_x = torch.linspace(-2.5, 2.5, 7).unsqueeze(-1)
    record.append(fresh(test_x).squeeze(-1).numpy().copy())
    record.append(F.mse_loss(fresh(x), y).item())
    record.append(state_of(fresh))
"""

SNES_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n"
        "import retrograd.nn.functional as F\n",
    ),
    (
        "    loss.backward()\n    optimizer.step()\n",
        "    grads = loss.backward()\n    optimizer.step(grads)\n",
    ),
]


def test_separable_nes_by_the_score_function_as_torch(capsys):
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        SNES_SOURCE,
        SNES_STEPS,
        capsys,
        7007,
        initialize=initializer(),
        state_of=state_of,
    )
    assert len(theirs) == 3 * 8 + 4
    assert their_log == our_log and their_log.count("\n") == 8
    assert theirs[-6][2] > theirs[0][2]  # the search distribution's centre improved
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
