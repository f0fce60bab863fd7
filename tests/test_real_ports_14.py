# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):

- cleanrl's SAC (``sac_continuous_action.py``): ``register_buffer`` of ``torch.tensor`` of a
  NumPy expression, the squashed Gaussian policy (``Normal(mean, std).rsample()``,
  ``log_prob -= torch.log(self.action_scale * (1 - y_t.pow(2)) + 1e-6)``,
  ``sum(1, keepdim=True)``), twin Q networks over ``torch.cat([x, a], 1)`` with one Adam over
  ``list(qf1.parameters()) + list(qf2.parameters())``, targets under ``no_grad`` with
  ``torch.min``, automatic entropy tuning (``log_alpha = torch.zeros(1, requires_grad=True)``
  with its own Adam, ``-torch.prod(torch.Tensor(shape)).item()``, ``log_alpha.exp().item()``),
  delayed policy updates and the soft target update through ``param.data``;
- the neural style transfer tutorial (pytorch/tutorials ``advanced_source/
  neural_style_tutorial.py``), on a small VGG-shaped ``features`` stack: ``ContentLoss`` and
  ``StyleLoss`` modules keeping ``target.detach()`` and setting ``self.loss`` in ``forward``,
  the gram matrix by ``torch.mm(features, features.t()).div(a * b * c * d)``,
  ``Normalization`` of ``torch.tensor(mean).view(-1, 1, 1)`` (``torch.tensor`` of a tensor),
  the model grown by ``add_module`` while walking ``cnn.children()`` (``nn.ReLU(inplace=False)``
  swapped in), trimmed by ``model[:(i + 1)]``, ``model.requires_grad_(False)``,
  ``input_img.requires_grad_(True)``, ``optim.LBFGS([input_img])`` with a closure that clamps
  the image under ``no_grad``, ``style_score += sl.loss``, ``style_score *= style_weight``
  and a ``run = [0]`` counter;
- the speech recognizer of AssemblyAI's "Building an end-to-end Speech Recognition model in
  PyTorch": ``CNNLayerNorm`` (``transpose(2, 3).contiguous()`` around ``nn.LayerNorm``),
  residual CNN blocks with ``F.gelu`` and ``x += residual``, bidirectional GRUs of which the
  second is built with ``batch_first=i==0`` (``False``: it runs over the batch as time, as the
  original does), ``x.view(sizes[0], sizes[1] * sizes[2], sizes[3])``, ``nn.CTCLoss(blank=28)``
  on ``log_softmax(...).transpose(0, 1)`` with float labels from ``pad_sequence`` of
  ``torch.Tensor`` lists and lengths as Python lists, AdamW under
  ``OneCycleLR(anneal_strategy='linear')``, and the ``GreedyDecoder`` (``index != blank``,
  ``index == args[j - 1]`` on 0-d tensors);
- SimCLR (github.com/sthalles/SimCLR ``simclr.py``, ``utils.py``, ``models/resnet_simclr.py``)
  with a small backbone: the projection head built around ``self.backbone.fc``,
  ``info_nce_loss`` (``torch.cat`` of ``arange``s, ``(labels.unsqueeze(0) ==
  labels.unsqueeze(1)).float()``, ``F.normalize``, ``features.T``, ``torch.eye(n,
  dtype=torch.bool)`` and ``[~mask]`` selections ``view``ed back, ``[labels.bool()]``),
  ``from torch.cuda.amp import GradScaler, autocast`` with both disabled, Adam with
  ``weight_decay``, ``CosineAnnealingLR(T_max=len(train_loader), eta_min=0, last_epoch=-1)``
  and ``accuracy`` by ``topk(maxk, 1, True, True)``, ``correct[:k].reshape(-1).float().sum(0,
  keepdim=True)`` and ``mul_``;
- mixup (facebookresearch/mixup-cifar10 ``train.py``) and CutMix (clovaai/CutMix-PyTorch
  ``train.py``): ``np.random.beta`` scalars times tensors, ``torch.randperm``, ``x[index, :]``,
  ``map(Variable, ...)``, the accuracy sum ``lam * predicted.eq(targets_a.data).cpu().sum().
  float()``, ``adjust_learning_rate`` through ``param_groups``, ``rand_bbox`` with ``np.clip``
  bounds slicing ``input[:, :, bbx1:bbx2, bby1:bby2] = input[rand_index, :, bbx1:bbx2,
  bby1:bby2]``, SGD with momentum and weight decay, and label smoothing;
- PointNet (github.com/fxia22/pointnet.pytorch ``pointnet/model.py`` and
  ``utils/train_classification.py``): ``Conv1d`` of kernel 1 with ``BatchNorm1d``,
  ``torch.max(x, 2, keepdim=True)[0]``, the identity added through
  ``Variable(torch.from_numpy(np.eye(k).flatten().astype(np.float32))).view(1, k * k).repeat(
  batchsize, 1)`` and ``if x.is_cuda``, ``torch.bmm`` by the learned transforms, the segmentation
  head's ``view(-1, 1024, 1).repeat(1, 1, n_pts)``, ``feature_transform_regularizer``
  (``torch.eye(d)[None, :, :]``, ``torch.norm(..., dim=(1, 2))``), ``scheduler.step()`` before
  the epoch's steps, ``classifier = classifier.train()``, ``pred.data.max(1)[1]``;
- the knowledge distillation tutorial (pytorch/tutorials ``beginner_source/
  knowledge_distillation_tutorial.py``): soft targets by ``softmax(teacher_logits / T)`` and
  ``torch.sum(soft_targets * (soft_targets.log() - soft_prob)) / soft_prob.size()[0] * (T**2)``,
  ``nn.CosineEmbeddingLoss`` on ``F.avg_pool1d`` of flattened features with
  ``target=torch.ones(n)``, and the regressor variant's ``MSELoss`` on feature maps.

The defects found:

- ``from torch.cuda.amp import GradScaler, autocast`` failed (``retrograd.cuda`` was a module
  whose ``amp`` was an object, not an importable module);
- ``CosineAnnealingLR(..., last_epoch=-1)`` was refused, and ``StepLR`` had no ``last_epoch``
  either; the other schedulers took ``last_epoch`` and ignored it (a scheduler built to resume
  at epoch 3 started over at 0);
- ``nn.CTCLoss`` refused float targets; torch casts them to int64 (the speech model's labels
  are ``torch.Tensor`` of character indices);
- ``nn.CosineEmbeddingLoss()(a, b, target=...)`` (and ``MarginRankingLoss``,
  ``HingeEmbeddingLoss``) refused torch's ``target`` keyword.

Found, not changed: an infeasible CTC alignment's gradient is 0 here, NaN in torch.
"""

from __future__ import annotations

import types
import warnings

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, both
from test_real_ports_13 import SharedDraws


def _run(monkeypatch, source, step, seed, build, go, float64=False):
    """``go(names, lib, models)`` in torch and in the port with shared draws; the port's
    modules (``build(names)``, a tuple) loaded with torch's initial states. ``float64``: both
    libraries' default dtype float64 (for the wide models trained by Adam, whose first steps
    move every weight by ``lr`` in the direction of its gradient's sign, rounding noise where
    the true gradient is ~0)."""
    records, initial = [], None
    for lib in (torch, rg):
        with monkeypatch.context() as patch:
            if float64:
                previous = lib.get_default_dtype()
                lib.set_default_dtype(lib.float64)
            SharedDraws(seed).patch(patch, lib)
            SharedNormal(seed + 100).patch(patch, lib)
            names = both(source, step)[0 if lib is torch else 1]
            torch.manual_seed(0)
            np.random.seed(seed)
            models = build(names)
            if initial is None:
                initial = [
                    {k: v.detach().numpy().copy() for k, v in m.state_dict().items()}
                    for m in models
                ]
            else:
                for m, state in zip(models, initial):
                    m.load_state_dict({k: rg.tensor(v) for k, v in state.items()})
            try:
                records.append(go(names, lib, models))
            finally:
                if float64:
                    lib.set_default_dtype(previous)
    return records


class SharedNormal:
    """``Normal.rsample`` of a library as ``loc + scale * eps``, ``eps`` from one seeded
    stream for both libraries."""

    def __init__(self, seed):
        self.seed = seed

    def patch(self, monkeypatch, lib):
        rng = np.random.default_rng(self.seed)

        def rsample(self, sample_shape=()):
            eps = lib.tensor(rng.standard_normal(tuple(self.loc.shape)), dtype=self.loc.dtype)
            return self.loc + self.scale * eps

        monkeypatch.setattr(lib.distributions.Normal, "rsample", rsample)


# -- SAC -------------------------------------------------------------------------------------------
SAC_SOURCE = """
import types

LOG_STD_MAX = 2
LOG_STD_MIN = -5


class SoftQNetwork(nn.Module):
    def __init__(self, env):
        super().__init__()
        self.fc1 = nn.Linear(np.array(env.single_observation_space.shape).prod() + np.prod(env.single_action_space.shape), 16)
        self.fc2 = nn.Linear(16, 16)
        self.fc3 = nn.Linear(16, 1)

    def forward(self, x, a):
        x = torch.cat([x, a], 1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        x = self.fc3(x)
        return x


class Actor(nn.Module):
    def __init__(self, env):
        super().__init__()
        self.fc1 = nn.Linear(np.array(env.single_observation_space.shape).prod(), 16)
        self.fc2 = nn.Linear(16, 16)
        self.fc_mean = nn.Linear(16, np.prod(env.single_action_space.shape))
        self.fc_logstd = nn.Linear(16, np.prod(env.single_action_space.shape))
        # action rescaling
        self.register_buffer(
            "action_scale",
            torch.tensor(
                (env.single_action_space.high - env.single_action_space.low) / 2.0,
                dtype=torch.float32,
            ),
        )
        self.register_buffer(
            "action_bias",
            torch.tensor(
                (env.single_action_space.high + env.single_action_space.low) / 2.0,
                dtype=torch.float32,
            ),
        )

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        mean = self.fc_mean(x)
        log_std = self.fc_logstd(x)
        log_std = torch.tanh(log_std)
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1)  # From SpinUp / Denis Yarats

        return mean, log_std

    def get_action(self, x):
        mean, log_std = self(x)
        std = log_std.exp()
        normal = torch.distributions.Normal(mean, std)
        x_t = normal.rsample()  # for reparameterization trick (mean + std * N(0,1))
        y_t = torch.tanh(x_t)
        action = y_t * self.action_scale + self.action_bias
        log_prob = normal.log_prob(x_t)
        # Enforcing Action Bound
        log_prob -= torch.log(self.action_scale * (1 - y_t.pow(2)) + 1e-6)
        log_prob = log_prob.sum(1, keepdim=True)
        mean = torch.tanh(mean) * self.action_scale + self.action_bias
        return action, log_prob, mean


class ReplayBuffer:
    def __init__(self, size, obs_dim, act_dim, rng):
        self.observations = np.zeros((size, obs_dim), np.float32)
        self.next_observations = np.zeros((size, obs_dim), np.float32)
        self.actions = np.zeros((size, act_dim), np.float32)
        self.rewards = np.zeros((size, 1), np.float32)
        self.dones = np.zeros((size, 1), np.float32)
        self.pos, self.rng = 0, rng

    def add(self, obs, next_obs, action, reward, done, infos):
        for i in range(len(obs)):
            self.observations[self.pos] = obs[i]
            self.next_observations[self.pos] = next_obs[i]
            self.actions[self.pos] = action[i]
            self.rewards[self.pos] = reward[i]
            self.dones[self.pos] = done[i]
            self.pos += 1

    def sample(self, batch_size):
        idx = self.rng.integers(0, self.pos, batch_size)
        return types.SimpleNamespace(
            observations=torch.tensor(self.observations[idx]),
            next_observations=torch.tensor(self.next_observations[idx]),
            actions=torch.tensor(self.actions[idx]),
            rewards=torch.tensor(self.rewards[idx]),
            dones=torch.tensor(self.dones[idx]),
        )


def train(args, envs, actor, qf1, qf2, qf1_target, qf2_target):
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")
    records = []
    qf1_target.load_state_dict(qf1.state_dict())
    qf2_target.load_state_dict(qf2.state_dict())
    q_optimizer = optim.Adam(list(qf1.parameters()) + list(qf2.parameters()), lr=args.q_lr)
    actor_optimizer = optim.Adam(list(actor.parameters()), lr=args.policy_lr)

    # Automatic entropy tuning
    if args.autotune:
        target_entropy = -torch.prod(torch.Tensor(envs.single_action_space.shape).to(device)).item()
        log_alpha = torch.zeros(1, requires_grad=True, device=device)
        alpha = log_alpha.exp().item()
        a_optimizer = optim.Adam([log_alpha], lr=args.q_lr)
    else:
        alpha = args.alpha

    rb = ReplayBuffer(args.total_timesteps * envs.num_envs, 3, 2, args.rng)
    obs, _ = envs.reset(seed=args.seed)
    for global_step in range(args.total_timesteps):
        # ALGO LOGIC: put action logic here
        if global_step < args.learning_starts:
            actions = np.array([envs.single_action_space.sample() for _ in range(envs.num_envs)])
        else:
            actions, _, _ = actor.get_action(torch.Tensor(obs).to(device))
            actions = actions.detach().cpu().numpy()

        next_obs, rewards, terminations, truncations, infos = envs.step(actions)
        real_next_obs = next_obs.copy()
        rb.add(obs, real_next_obs, actions, rewards, terminations, infos)
        obs = next_obs

        # ALGO LOGIC: training.
        if global_step > args.learning_starts:
            data = rb.sample(args.batch_size)
            with torch.no_grad():
                next_state_actions, next_state_log_pi, _ = actor.get_action(data.next_observations)
                qf1_next_target = qf1_target(data.next_observations, next_state_actions)
                qf2_next_target = qf2_target(data.next_observations, next_state_actions)
                min_qf_next_target = torch.min(qf1_next_target, qf2_next_target) - alpha * next_state_log_pi
                next_q_value = data.rewards.flatten() + (1 - data.dones.flatten()) * args.gamma * (min_qf_next_target).view(-1)

            qf1_a_values = qf1(data.observations, data.actions).view(-1)
            qf2_a_values = qf2(data.observations, data.actions).view(-1)
            qf1_loss = F.mse_loss(qf1_a_values, next_q_value)
            qf2_loss = F.mse_loss(qf2_a_values, next_q_value)
            qf_loss = qf1_loss + qf2_loss

            # optimize the model
            q_optimizer.zero_grad()
            qf_loss.backward()
            q_optimizer.step()

            if global_step % args.policy_frequency == 0:  # TD 3 Delayed update support
                for _ in range(
                    args.policy_frequency
                ):  # compensate for the delay by doing 'actor_update_interval' instead of 1
                    pi, log_pi, _ = actor.get_action(data.observations)
                    qf1_pi = qf1(data.observations, pi)
                    qf2_pi = qf2(data.observations, pi)
                    min_qf_pi = torch.min(qf1_pi, qf2_pi)
                    actor_loss = ((alpha * log_pi) - min_qf_pi).mean()

                    actor_optimizer.zero_grad()
                    actor_loss.backward()
                    actor_optimizer.step()

                    if args.autotune:
                        with torch.no_grad():
                            _, log_pi, _ = actor.get_action(data.observations)
                        alpha_loss = (-log_alpha.exp() * (log_pi + target_entropy)).mean()

                        a_optimizer.zero_grad()
                        alpha_loss.backward()
                        a_optimizer.step()
                        alpha = log_alpha.exp().item()
                    records.append([actor_loss.item(), alpha])

            # update the target networks
            if global_step % args.target_network_frequency == 0:
                for param, target_param in zip(qf1.parameters(), qf1_target.parameters()):
                    target_param.data.copy_(args.tau * param.data + (1 - args.tau) * target_param.data)
                for param, target_param in zip(qf2.parameters(), qf2_target.parameters()):
                    target_param.data.copy_(args.tau * param.data + (1 - args.tau) * target_param.data)
            records.append([qf1_a_values.mean().item(), qf_loss.item() / 2.0])
    records.append({f"{i}.{n}": p.detach().numpy().copy() for i, m in enumerate((actor, qf1, qf2, qf1_target, qf2_target)) for n, p in m.state_dict().items()})
    return records
"""

SAC_STEP = [
    (
        "            qf_loss.backward()\n            q_optimizer.step()",
        "            q_grads = qf_loss.backward()\n            q_optimizer.step(q_grads)",
    ),
    (
        "                    actor_loss.backward()\n                    actor_optimizer.step()",
        "                    actor_grads = actor_loss.backward()\n                    actor_optimizer.step(actor_grads)",
    ),
    (
        "                        alpha_loss.backward()\n                        a_optimizer.step()",
        "                        a_grads = alpha_loss.backward()\n                        a_optimizer.step(a_grads)",
    ),
]


class PendulumLike:
    """Two copies of a small continuous-control task (observation 3, action 2 in [-2, 2])."""

    def __init__(self, n, seed):
        self.num_envs, self.rng = n, np.random.default_rng(seed)
        space_rng = np.random.default_rng(seed + 1)
        self.single_observation_space = types.SimpleNamespace(shape=(3,))
        self.single_action_space = types.SimpleNamespace(
            shape=(2,),
            high=np.array([2.0, 1.0], np.float32),
            low=np.array([-2.0, -1.0], np.float32),
            sample=lambda: space_rng.uniform(-1.0, 1.0, 2).astype(np.float32),
        )

    def reset(self, seed=None):
        self.state = self.rng.standard_normal((self.num_envs, 3)).astype(np.float32)
        return self.state, {}

    def step(self, actions):
        actions = np.asarray(actions, np.float32)
        self.state = np.tanh(
            0.8 * self.state + 0.3 * np.concatenate([actions, actions[:, :1]], 1)
        ).astype(np.float32)
        reward = -(self.state**2).sum(1) - 0.1 * (actions**2).sum(1)
        done = self.rng.random(self.num_envs) < 0.1
        return self.state, reward.astype(np.float32), done, np.zeros(self.num_envs, bool), {}


@pytest.mark.parametrize("autotune", [True, False])
def test_cleanrl_sac_matches_torch(monkeypatch, autotune):
    args = types.SimpleNamespace(
        cuda=False, seed=1, q_lr=1e-3, policy_lr=3e-4, autotune=autotune, alpha=0.2,
        total_timesteps=8, learning_starts=3, batch_size=6, gamma=0.99, tau=0.05,
        policy_frequency=2, target_network_frequency=1,
    )  # fmt: skip

    def build(names):
        env = PendulumLike(2, 0)
        return (
            names["Actor"](env),
            names["SoftQNetwork"](env),
            names["SoftQNetwork"](env),
            names["SoftQNetwork"](env),
            names["SoftQNetwork"](env),
        )

    def go(names, lib, models):
        args.rng = np.random.default_rng(5)
        return names["train"](args, PendulumLike(2, 0), *models)

    records = _run(monkeypatch, SAC_SOURCE, SAC_STEP, 2, build, go)
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-5)


# -- neural style transfer -------------------------------------------------------------------------
STYLE_SOURCE = """
class ContentLoss(nn.Module):

    def __init__(self, target,):
        super(ContentLoss, self).__init__()
        # we 'detach' the target content from the tree used
        # to dynamically compute the gradient: this is a stated value,
        # not a variable. Otherwise the forward method of the criterion
        # will throw an error.
        self.target = target.detach()

    def forward(self, input):
        self.loss = F.mse_loss(input, self.target)
        return input

def gram_matrix(input):
    a, b, c, d = input.size()  # a=batch size(=1)
    # b=number of feature maps
    # (c,d)=dimensions of a f. map (N=c*d)

    features = input.view(a * b, c * d)  # resize F_XL into \\hat F_XL

    G = torch.mm(features, features.t())  # compute the gram product

    # we 'normalize' the values of the gram matrix
    # by dividing by the number of element in each feature maps.
    return G.div(a * b * c * d)

class StyleLoss(nn.Module):

    def __init__(self, target_feature):
        super(StyleLoss, self).__init__()
        self.target = gram_matrix(target_feature).detach()

    def forward(self, input):
        G = gram_matrix(input)
        self.loss = F.mse_loss(G, self.target)
        return input

cnn_normalization_mean = torch.tensor([0.485, 0.456, 0.406])
cnn_normalization_std = torch.tensor([0.229, 0.224, 0.225])

# create a module to normalize input image so we can easily put it in a
# ``nn.Sequential``
class Normalization(nn.Module):
    def __init__(self, mean, std):
        super(Normalization, self).__init__()
        # .view the mean and std to make them [C x 1 x 1] so that they can
        # directly work with image Tensor of shape [B x C x H x W].
        # B is batch size. C is number of channels. H is height and W is width.
        self.mean = torch.tensor(mean).view(-1, 1, 1)
        self.std = torch.tensor(std).view(-1, 1, 1)

    def forward(self, img):
        # normalize ``img``
        return (img - self.mean) / self.std

# desired depth layers to compute style/content losses :
content_layers_default = ['conv_4']
style_layers_default = ['conv_1', 'conv_2', 'conv_3', 'conv_4', 'conv_5']

def get_style_model_and_losses(cnn, normalization_mean, normalization_std,
                               style_img, content_img,
                               content_layers=content_layers_default,
                               style_layers=style_layers_default):
    # normalization module
    normalization = Normalization(normalization_mean, normalization_std)

    # just in order to have an iterable access to or list of content/style
    # losses
    content_losses = []
    style_losses = []

    # assuming that ``cnn`` is a ``nn.Sequential``, so we make a new ``nn.Sequential``
    # to put in modules that are supposed to be activated sequentially
    model = nn.Sequential(normalization)

    i = 0  # increment every time we see a conv
    for layer in cnn.children():
        if isinstance(layer, nn.Conv2d):
            i += 1
            name = 'conv_{}'.format(i)
        elif isinstance(layer, nn.ReLU):
            name = 'relu_{}'.format(i)
            # The in-place version doesn't play very nicely with the ``ContentLoss``
            # and ``StyleLoss`` we insert below. So we replace with out-of-place
            # ones here.
            layer = nn.ReLU(inplace=False)
        elif isinstance(layer, nn.MaxPool2d):
            name = 'pool_{}'.format(i)
        elif isinstance(layer, nn.BatchNorm2d):
            name = 'bn_{}'.format(i)
        else:
            raise RuntimeError('Unrecognized layer: {}'.format(layer.__class__.__name__))

        model.add_module(name, layer)

        if name in content_layers:
            # add content loss:
            target = model(content_img).detach()
            content_loss = ContentLoss(target)
            model.add_module("content_loss_{}".format(i), content_loss)
            content_losses.append(content_loss)

        if name in style_layers:
            # add style loss:
            target_feature = model(style_img).detach()
            style_loss = StyleLoss(target_feature)
            model.add_module("style_loss_{}".format(i), style_loss)
            style_losses.append(style_loss)

    # now we trim off the layers after the last content and style losses
    for i in range(len(model) - 1, -1, -1):
        if isinstance(model[i], ContentLoss) or isinstance(model[i], StyleLoss):
            break

    model = model[:(i + 1)]

    return model, style_losses, content_losses

def get_input_optimizer(input_img):
    # this line to show that input is a parameter that requires a gradient
    optimizer = optim.LBFGS([input_img])
    return optimizer

def run_style_transfer(cnn, normalization_mean, normalization_std,
                       content_img, style_img, input_img, num_steps=300,
                       style_weight=1000000, content_weight=1):
    \"\"\"Run the style transfer.\"\"\"
    print('Building the style transfer model..')
    model, style_losses, content_losses = get_style_model_and_losses(cnn,
        normalization_mean, normalization_std, style_img, content_img)

    # We want to optimize the input and not the model parameters so we
    # update all the requires_grad fields accordingly
    input_img.requires_grad_(True)
    # We also put the model in evaluation mode, so that specific layers
    # such as dropout or batch normalization layers behave correctly.
    model.eval()
    model.requires_grad_(False)

    optimizer = get_input_optimizer(input_img)

    print('Optimizing..')
    run = [0]
    scores = []
    while run[0] <= num_steps:

        def closure():
            # correct the values of updated input image
            with torch.no_grad():
                input_img.clamp_(0, 1)

            optimizer.zero_grad()
            model(input_img)
            style_score = 0
            content_score = 0

            for sl in style_losses:
                style_score += sl.loss
            for cl in content_losses:
                content_score += cl.loss

            style_score *= style_weight
            content_score *= content_weight

            loss = style_score + content_score
            loss.backward()

            run[0] += 1
            if run[0] % 50 == 0:
                print("run {}:".format(run))
                print('Style Loss : {:4f} Content Loss: {:4f}'.format(
                    style_score.item(), content_score.item()))
                print()
            scores.append(style_score.item())
            scores.append(content_score.item())

            return style_score + content_score

        optimizer.step(closure)

    # a last correction...
    with torch.no_grad():
        input_img.clamp_(0, 1)

    return input_img, scores, len(model)

def features():
    return nn.Sequential(
        nn.Conv2d(3, 8, kernel_size=3, padding=1), nn.ReLU(inplace=True),
        nn.Conv2d(8, 8, kernel_size=3, padding=1), nn.ReLU(inplace=True),
        nn.MaxPool2d(kernel_size=2, stride=2),
        nn.Conv2d(8, 12, kernel_size=3, padding=1), nn.ReLU(inplace=True),
        nn.Conv2d(12, 12, kernel_size=3, padding=1), nn.ReLU(inplace=True),
        nn.MaxPool2d(kernel_size=2, stride=2),
        nn.Conv2d(12, 16, kernel_size=3, padding=1), nn.ReLU(inplace=True),
        nn.Conv2d(16, 16, kernel_size=3, padding=1), nn.ReLU(inplace=True),
    )

def main(cnn, content, style):
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    content_img = torch.tensor(content, dtype=torch.float32)
    style_img = torch.tensor(style, dtype=torch.float32)
    input_img = content_img.clone()
    output, scores, depth = run_style_transfer(cnn.eval(), cnn_normalization_mean, cnn_normalization_std,
                                content_img, style_img, input_img, num_steps=4)
    return [scores, depth, output.detach().numpy().copy()]
"""

STYLE_STEP = [
    ("            loss.backward()\n", "            grads = loss.backward()\n"),
    (
        "            return style_score + content_score\n",
        "            return style_score + content_score, grads\n",
    ),
]


def test_neural_style_transfer_with_lbfgs_on_the_image_matches_torch(monkeypatch):
    rng = np.random.default_rng(3)
    content, style = rng.uniform(0, 1, (1, 3, 12, 12)), rng.uniform(0, 1, (1, 3, 12, 12))
    records = _run(
        monkeypatch,
        STYLE_SOURCE,
        STYLE_STEP,
        3,
        lambda names: (names["features"](),),
        lambda names, lib, models: names["main"](models[0], content, style),
    )
    assert records[0][1] == records[1][1] == 18  # trimmed after the last loss (conv_5's)
    assert_records_agree(records[1], records[0], rtol=2e-3, atol=2e-4)


# -- speech recognition with CTC -------------------------------------------------------------------
SPEECH_SOURCE = """
class TextTransform:
    \"\"\"Maps characters to integers and vice versa\"\"\"
    def __init__(self):
        char_map_str = \"\"\"
        ' 0
        <SPACE> 1
        a 2
        b 3
        c 4
        d 5
        e 6
        f 7
        g 8
        h 9
        i 10
        j 11
        k 12
        l 13
        m 14
        n 15
        o 16
        p 17
        q 18
        r 19
        s 20
        t 21
        u 22
        v 23
        w 24
        x 25
        y 26
        z 27
        \"\"\"
        self.char_map = {}
        self.index_map = {}
        for line in char_map_str.strip().split('\\n'):
            ch, index = line.split()
            self.char_map[ch] = int(index)
            self.index_map[int(index)] = ch
        self.index_map[1] = ' '

    def text_to_int(self, text):
        \"\"\" Use a character map and convert text to an integer sequence \"\"\"
        int_sequence = []
        for c in text:
            if c == ' ':
                ch = self.char_map['<SPACE>']
            else:
                ch = self.char_map[c]
            int_sequence.append(ch)
        return int_sequence

    def int_to_text(self, labels):
        \"\"\" Use a character map and convert integer labels to an text sequence \"\"\"
        string = []
        for i in labels:
            string.append(self.index_map[i])
        return ''.join(string).replace('<SPACE>', ' ')

text_transform = TextTransform()

def data_processing(data, data_type="train"):
    spectrograms = []
    labels = []
    input_lengths = []
    label_lengths = []
    for (waveform, _, utterance, _, _, _) in data:
        spec = waveform.squeeze(0).transpose(0, 1)
        spectrograms.append(spec)
        label = torch.Tensor(text_transform.text_to_int(utterance.lower()))
        labels.append(label)
        input_lengths.append(spec.shape[0]//2)
        label_lengths.append(len(label))

    spectrograms = nn.utils.rnn.pad_sequence(spectrograms, batch_first=True).unsqueeze(1).transpose(2, 3)
    labels = nn.utils.rnn.pad_sequence(labels, batch_first=True)

    return spectrograms, labels, input_lengths, label_lengths

def GreedyDecoder(output, labels, label_lengths, blank_label=28, collapse_repeated=True):
    arg_maxes = torch.argmax(output, dim=2)
    decodes = []
    targets = []
    for i, args in enumerate(arg_maxes):
        decode = []
        targets.append(text_transform.int_to_text(labels[i][:label_lengths[i]].tolist()))
        for j, index in enumerate(args):
            if index != blank_label:
                if collapse_repeated and j != 0 and index == args[j -1]:
                    continue
                decode.append(index.item())
        decodes.append(text_transform.int_to_text(decode))
    return decodes, targets

class CNNLayerNorm(nn.Module):
    \"\"\"Layer normalization built for cnns input\"\"\"
    def __init__(self, n_feats):
        super(CNNLayerNorm, self).__init__()
        self.layer_norm = nn.LayerNorm(n_feats)

    def forward(self, x):
        # x (batch, channel, feature, time)
        x = x.transpose(2, 3).contiguous() # (batch, channel, time, feature)
        x = self.layer_norm(x)
        return x.transpose(2, 3).contiguous() # (batch, channel, feature, time)

class ResidualCNN(nn.Module):
    \"\"\"Residual CNN inspired by https://arxiv.org/pdf/1603.05027.pdf
        except with layer norm instead of batch norm
    \"\"\"
    def __init__(self, in_channels, out_channels, kernel, stride, dropout, n_feats):
        super(ResidualCNN, self).__init__()

        self.cnn1 = nn.Conv2d(in_channels, out_channels, kernel, stride, padding=kernel//2)
        self.cnn2 = nn.Conv2d(out_channels, out_channels, kernel, stride, padding=kernel//2)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.layer_norm1 = CNNLayerNorm(n_feats)
        self.layer_norm2 = CNNLayerNorm(n_feats)

    def forward(self, x):
        residual = x  # (batch, channel, feature, time)
        x = self.layer_norm1(x)
        x = F.gelu(x)
        x = self.dropout1(x)
        x = self.cnn1(x)
        x = self.layer_norm2(x)
        x = F.gelu(x)
        x = self.dropout2(x)
        x = self.cnn2(x)
        x += residual
        return x # (batch, channel, feature, time)

class BidirectionalGRU(nn.Module):

    def __init__(self, rnn_dim, hidden_size, dropout, batch_first):
        super(BidirectionalGRU, self).__init__()

        self.BiGRU = nn.GRU(
            input_size=rnn_dim, hidden_size=hidden_size,
            num_layers=1, batch_first=batch_first, bidirectional=True)
        self.layer_norm = nn.LayerNorm(rnn_dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        x = self.layer_norm(x)
        x = F.gelu(x)
        x, _ = self.BiGRU(x)
        x = self.dropout(x)
        return x

class SpeechRecognitionModel(nn.Module):

    def __init__(self, n_cnn_layers, n_rnn_layers, rnn_dim, n_class, n_feats, stride=2, dropout=0.1):
        super(SpeechRecognitionModel, self).__init__()
        n_feats = n_feats//2
        self.cnn = nn.Conv2d(1, 32, 3, stride=stride, padding=3//2)  # cnn for extracting heirachal features

        # n residual cnn layers with filter size of 32
        self.rescnn_layers = nn.Sequential(*[
            ResidualCNN(32, 32, kernel=3, stride=1, dropout=dropout, n_feats=n_feats)
            for _ in range(n_cnn_layers)
        ])
        self.fully_connected = nn.Linear(n_feats*32, rnn_dim)
        self.birnn_layers = nn.Sequential(*[
            BidirectionalGRU(rnn_dim=rnn_dim if i==0 else rnn_dim*2,
                             hidden_size=rnn_dim, dropout=dropout, batch_first=i==0)
            for i in range(n_rnn_layers)
        ])
        self.classifier = nn.Sequential(
            nn.Linear(rnn_dim*2, rnn_dim),  # birnn returns rnn_dim*2
            nn.GELU(),
            nn.Dropout(dropout),
            nn.Linear(rnn_dim, n_class)
        )

    def forward(self, x):
        x = self.cnn(x)
        x = self.rescnn_layers(x)
        sizes = x.size()
        x = x.view(sizes[0], sizes[1] * sizes[2], sizes[3])  # (batch, feature, time)
        x = x.transpose(1, 2) # (batch, time, feature)
        x = self.fully_connected(x)
        x = self.birnn_layers(x)
        x = self.classifier(x)
        return x

class IterMeter(object):
    \"\"\"keeps track of total iterations\"\"\"
    def __init__(self):
        self.val = 0

    def step(self):
        self.val += 1

    def get(self):
        return self.val

def train(model, device, train_loader, criterion, optimizer, scheduler, epoch, iter_meter, records):
    model.train()
    data_len = len(train_loader.dataset)
    for batch_idx, _data in enumerate(train_loader):
        spectrograms, labels, input_lengths, label_lengths = _data
        spectrograms, labels = spectrograms.to(device), labels.to(device)

        optimizer.zero_grad()

        output = model(spectrograms)  # (batch, time, n_class)
        output = F.log_softmax(output, dim=2)
        output = output.transpose(0, 1) # (time, batch, n_class)

        loss = criterion(output, labels, input_lengths, label_lengths)
        loss.backward()

        records.append([loss.item(), scheduler.get_last_lr()[0]])

        optimizer.step()
        scheduler.step()
        iter_meter.step()

def test(model, device, test_loader, criterion, epoch, records):
    model.eval()
    test_loss = 0
    test_cer, test_wer = [], []
    with torch.no_grad():
        for i, _data in enumerate(test_loader):
            spectrograms, labels, input_lengths, label_lengths = _data
            spectrograms, labels = spectrograms.to(device), labels.to(device)

            output = model(spectrograms)  # (batch, time, n_class)
            output = F.log_softmax(output, dim=2)
            output = output.transpose(0, 1) # (time, batch, n_class)

            loss = criterion(output, labels, input_lengths, label_lengths)
            test_loss += loss.item() / len(test_loader)

            decoded_preds, decoded_targets = GreedyDecoder(output.transpose(0, 1), labels, label_lengths)
            records.append(decoded_preds)
            records.append(decoded_targets)
    records.append(test_loss)

def main(model, dataset, records, learning_rate=5e-4, batch_size=2, epochs=2):
    hparams = {
        "n_cnn_layers": 1,
        "n_rnn_layers": 2,
        "rnn_dim": 8,
        "n_class": 29,
        "n_feats": 8,
        "stride":2,
        "dropout": 0.1,
        "learning_rate": learning_rate,
        "batch_size": batch_size,
        "epochs": epochs
    }
    device = torch.device("cpu")
    train_loader = torch.utils.data.DataLoader(dataset=dataset,
                                batch_size=hparams['batch_size'],
                                shuffle=False,
                                collate_fn=lambda x: data_processing(x, 'train'))
    test_loader = torch.utils.data.DataLoader(dataset=dataset[:2],
                                batch_size=hparams['batch_size'],
                                shuffle=False,
                                collate_fn=lambda x: data_processing(x, 'valid'))
    optimizer = optim.AdamW(model.parameters(), hparams['learning_rate'])
    criterion = nn.CTCLoss(blank=28).to(device)
    scheduler = optim.lr_scheduler.OneCycleLR(optimizer, max_lr=hparams['learning_rate'],
                                            steps_per_epoch=int(len(train_loader)),
                                            epochs=hparams['epochs'],
                                            anneal_strategy='linear')

    iter_meter = IterMeter()
    for epoch in range(1, epochs + 1):
        train(model, device, train_loader, criterion, optimizer, scheduler, epoch, iter_meter, records)
        test(model, device, test_loader, criterion, epoch, records)
    records.append({n: p.detach().numpy().copy() for n, p in model.named_parameters()})
    return records
"""

SPEECH_STEP = [
    ("        loss.backward()\n", "        grads = loss.backward()\n"),
    ("        optimizer.step()\n", "        optimizer.step(grads)\n"),
]


def test_ctc_speech_recognizer_matches_torch(monkeypatch):
    rng = np.random.default_rng(9)
    # each feasible: at least as many frames after the stride as labels (torch's loss of an
    # infeasible one is inf, and its gradient NaN)
    words = ["yes", "no", "go go", "hi", "ok"]
    spectrograms = [rng.standard_normal((1, 8, t)) for t in (14, 10, 16, 8, 12)]

    def go(names, lib, models):
        dataset = [
            (lib.tensor(s, dtype=lib.float32), 16000, w, 0, 0, 0)
            for w, s in zip(words, spectrograms)
        ]
        return names["main"](models[0], dataset, [])

    records = _run(
        monkeypatch,
        SPEECH_SOURCE,
        SPEECH_STEP,
        4,
        lambda names: (names["SpeechRecognitionModel"](1, 2, 8, 29, 8, 2, 0.1),),
        go,
    )
    # cnn1's bias is constant over the features CNNLayerNorm then normalizes: its true
    # gradient is 0, so AdamW's steps follow the rounding noise
    skip = ["rescnn_layers.0.cnn1.bias"]
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-5, skip=skip)


# -- SimCLR ----------------------------------------------------------------------------------------
SIMCLR_SOURCE = """
from torch.cuda.amp import GradScaler, autocast

class BaseSimCLRException(Exception):
    \"\"\"Base exception\"\"\"

class InvalidBackboneError(BaseSimCLRException):
    \"\"\"Raised when the choice of backbone Convnet is invalid.\"\"\"

class TinyResNet(nn.Module):
    def __init__(self, num_classes):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.relu = nn.ReLU(inplace=True)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(8, num_classes)
    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)

class ResNetSimCLR(nn.Module):

    def __init__(self, base_model, out_dim):
        super(ResNetSimCLR, self).__init__()
        self.resnet_dict = {"resnet18": TinyResNet(num_classes=out_dim)}

        self.backbone = self._get_basemodel(base_model)
        dim_mlp = self.backbone.fc.in_features

        # add mlp projection head
        self.backbone.fc = nn.Sequential(nn.Linear(dim_mlp, dim_mlp), nn.ReLU(), self.backbone.fc)

    def _get_basemodel(self, model_name):
        try:
            model = self.resnet_dict[model_name]
        except KeyError:
            raise InvalidBackboneError(
                "Invalid backbone architecture. Check the config file and pass one of: resnet18 or resnet50")
        else:
            return model

    def forward(self, x):
        return self.backbone(x)

def accuracy(output, target, topk=(1,)):
    \"\"\"Computes the accuracy over the k top predictions for the specified values of k\"\"\"
    with torch.no_grad():
        maxk = max(topk)
        batch_size = target.size(0)

        _, pred = output.topk(maxk, 1, True, True)
        pred = pred.t()
        correct = pred.eq(target.view(1, -1).expand_as(pred))

        res = []
        for k in topk:
            correct_k = correct[:k].reshape(-1).float().sum(0, keepdim=True)
            res.append(correct_k.mul_(100.0 / batch_size))
        return res

class SimCLR(object):

    def __init__(self, *args, **kwargs):
        self.args = kwargs['args']
        self.model = kwargs['model'].to(self.args.device)
        self.optimizer = kwargs['optimizer']
        self.scheduler = kwargs['scheduler']
        self.criterion = torch.nn.CrossEntropyLoss().to(self.args.device)

    def info_nce_loss(self, features):

        labels = torch.cat([torch.arange(self.args.batch_size) for i in range(self.args.n_views)], dim=0)
        labels = (labels.unsqueeze(0) == labels.unsqueeze(1)).float()
        labels = labels.to(self.args.device)

        features = F.normalize(features, dim=1)

        similarity_matrix = torch.matmul(features, features.T)
        # assert similarity_matrix.shape == (
        #     self.args.n_views * self.args.batch_size, self.args.n_views * self.args.batch_size)
        # assert similarity_matrix.shape == labels.shape

        # discard the main diagonal from both: labels and similarities matrix
        mask = torch.eye(labels.shape[0], dtype=torch.bool).to(self.args.device)
        labels = labels[~mask].view(labels.shape[0], -1)
        similarity_matrix = similarity_matrix[~mask].view(similarity_matrix.shape[0], -1)
        # assert similarity_matrix.shape == labels.shape

        # select and combine multiple positives
        positives = similarity_matrix[labels.bool()].view(labels.shape[0], -1)

        # select only the negatives the negatives
        negatives = similarity_matrix[~labels.bool()].view(similarity_matrix.shape[0], -1)

        logits = torch.cat([positives, negatives], dim=1)
        labels = torch.zeros(logits.shape[0], dtype=torch.long).to(self.args.device)

        logits = logits / self.args.temperature
        return logits, labels

    def train(self, train_loader):

        scaler = GradScaler(enabled=self.args.fp16_precision)
        records = []

        n_iter = 0

        for epoch_counter in range(self.args.epochs):
            for images, _ in train_loader:
                images = torch.cat(images, dim=0)

                images = images.to(self.args.device)

                with autocast(enabled=self.args.fp16_precision):
                    features = self.model(images)
                    logits, labels = self.info_nce_loss(features)
                    loss = self.criterion(logits, labels)

                self.optimizer.zero_grad()

                scaler.scale(loss).backward()

                scaler.step(self.optimizer)
                scaler.update()

                if n_iter % self.args.log_every_n_steps == 0:
                    top1, top5 = accuracy(logits, labels, topk=(1, 5))
                    records.append([loss.item(), top1[0].item(), top5[0].item(), self.scheduler.get_last_lr()[0]])

                n_iter += 1

            # warmup for the first 10 epochs
            if epoch_counter >= 1:
                self.scheduler.step()
        records.append({n: p.detach().numpy().copy() for n, p in self.model.state_dict().items()})
        return records

def main(model, train_loader, args):
    optimizer = torch.optim.Adam(model.parameters(), args.lr, weight_decay=args.weight_decay)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=len(train_loader), eta_min=0,
                                                           last_epoch=-1)
    simclr = SimCLR(model=model, optimizer=optimizer, scheduler=scheduler, args=args)
    return simclr.train(train_loader)
"""

SIMCLR_STEP = [
    (
        "                scaler.scale(loss).backward()\n\n                scaler.step(self.optimizer)",
        "                grads = scaler.scale(loss).backward()\n\n                scaler.step(self.optimizer, grads)",
    ),
]


def test_simclr_info_nce_training_matches_torch(monkeypatch):
    args = types.SimpleNamespace(
        device="cpu", batch_size=4, n_views=2, temperature=0.07, fp16_precision=False,
        epochs=3, log_every_n_steps=1, lr=3e-3, weight_decay=1e-4,
    )  # fmt: skip
    rng = np.random.default_rng(6)
    images = rng.standard_normal((2, 4, 3, 6, 6))
    noise = 0.1 * rng.standard_normal((2, 2, 4, 3, 6, 6))

    def go(names, lib, models):
        loader = [
            ([lib.tensor(images[b] + noise[b, v], dtype=lib.float32) for v in range(2)], None)
            for b in range(2)
        ]
        return names["main"](models[0], loader, args)

    records = _run(
        monkeypatch,
        SIMCLR_SOURCE,
        SIMCLR_STEP,
        6,
        lambda names: (names["ResNetSimCLR"]("resnet18", 6),),
        go,
    )
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-5)


def test_torch_cuda_amp_names_import_as_torch_s():
    from retrograd.cuda.amp import GradScaler, autocast

    scaler = GradScaler(enabled=False)
    loss = rg.tensor(2.0, requires_grad=True) * 3.0
    assert scaler.scale(loss) is loss  # disabled: the identity, as torch's
    with autocast(enabled=False):
        assert (rg.ones(2) * 2).dtype == rg.float32
    assert rg.cuda.amp.GradScaler is GradScaler


# -- mixup and CutMix ------------------------------------------------------------------------------
MIXUP_SOURCE = """
from torch.autograd import Variable

class Net(nn.Module):
    def __init__(self, num_classes=4):
        super(Net, self).__init__()
        self.conv = nn.Conv2d(3, 6, 3, padding=1)
        self.bn = nn.BatchNorm2d(6)
        self.fc = nn.Linear(6 * 4 * 4, num_classes)
    def forward(self, x):
        out = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
        out = out.view(out.size(0), -1)
        return self.fc(out)

def mixup_data(x, y, alpha=1.0, use_cuda=True):
    '''Returns mixed inputs, pairs of targets, and lambda'''
    if alpha > 0:
        lam = np.random.beta(alpha, alpha)
    else:
        lam = 1

    batch_size = x.size()[0]
    if use_cuda:
        index = torch.randperm(batch_size).cuda()
    else:
        index = torch.randperm(batch_size)

    mixed_x = lam * x + (1 - lam) * x[index, :]
    y_a, y_b = y, y[index]
    return mixed_x, y_a, y_b, lam

def mixup_criterion(criterion, pred, y_a, y_b, lam):
    return lam * criterion(pred, y_a) + (1 - lam) * criterion(pred, y_b)

def rand_bbox(size, lam):
    W = size[2]
    H = size[3]
    cut_rat = np.sqrt(1. - lam)
    cut_w = int(W * cut_rat)
    cut_h = int(H * cut_rat)

    # uniform
    cx = np.random.randint(W)
    cy = np.random.randint(H)

    bbx1 = np.clip(cx - cut_w // 2, 0, W)
    bby1 = np.clip(cy - cut_h // 2, 0, H)
    bbx2 = np.clip(cx + cut_w // 2, 0, W)
    bby2 = np.clip(cy + cut_h // 2, 0, H)

    return bbx1, bby1, bbx2, bby2

def train_mixup(net, trainloader, optimizer, criterion, args, use_cuda=False):
    net.train()
    train_loss = 0
    reg_loss = 0
    correct = 0
    total = 0
    for batch_idx, (inputs, targets) in enumerate(trainloader):
        if use_cuda:
            inputs, targets = inputs.cuda(), targets.cuda()

        inputs, targets_a, targets_b, lam = mixup_data(inputs, targets,
                                                       args.alpha, use_cuda)
        inputs, targets_a, targets_b = map(Variable, (inputs,
                                                      targets_a, targets_b))
        outputs = net(inputs)
        loss = mixup_criterion(criterion, outputs, targets_a, targets_b, lam)
        train_loss += loss.item()
        _, predicted = torch.max(outputs.data, 1)
        total += targets.size(0)
        correct += (lam * predicted.eq(targets_a.data).cpu().sum().float()
                    + (1 - lam) * predicted.eq(targets_b.data).cpu().sum().float())

        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return (train_loss/(batch_idx + 1), reg_loss/(batch_idx + 1), (100.*correct/total).item())

def train_cutmix(train_loader, model, criterion, optimizer, args):
    model.train()
    losses = []
    for i, (input, target) in enumerate(train_loader):
        input = input.clone()
        r = np.random.rand(1)
        if args.beta > 0 and r < args.cutmix_prob:
            # generate mixed sample
            lam = np.random.beta(args.beta, args.beta)
            rand_index = torch.randperm(input.size()[0])
            target_a = target
            target_b = target[rand_index]
            bbx1, bby1, bbx2, bby2 = rand_bbox(input.size(), lam)
            input[:, :, bbx1:bbx2, bby1:bby2] = input[rand_index, :, bbx1:bbx2, bby1:bby2]
            # adjust lambda to exactly match pixel ratio
            lam = 1 - ((bbx2 - bbx1) * (bby2 - bby1) / (input.size()[-1] * input.size()[-2]))
            # compute output
            output = model(input)
            loss = criterion(output, target_a) * lam + criterion(output, target_b) * (1. - lam)
        else:
            # compute output
            output = model(input)
            loss = criterion(output, target)

        losses.append(loss.item())
        # compute gradient and do SGD step
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return losses

def adjust_learning_rate(optimizer, epoch, args):
    \"\"\"decrease the learning rate at 100 and 150 epoch\"\"\"
    lr = args.lr
    if epoch >= 1:
        lr /= 10
    if epoch >= 2:
        lr /= 10
    for param_group in optimizer.param_groups:
        param_group['lr'] = lr

def main(net, trainloader, args):
    criterion = nn.CrossEntropyLoss(label_smoothing=args.smoothing)
    optimizer = optim.SGD(net.parameters(), lr=args.lr, momentum=0.9,
                          weight_decay=args.decay)
    records = []
    for epoch in range(3):
        records.append(list(train_mixup(net, trainloader, optimizer, criterion, args)))
        records.append(train_cutmix(trainloader, net, criterion, optimizer, args))
        adjust_learning_rate(optimizer, epoch, args)
    records.append({n: p.detach().numpy().copy() for n, p in net.state_dict().items()})
    return records
"""

MIXUP_STEP = [
    (
        "        optimizer.zero_grad()\n        loss.backward()\n        optimizer.step()\n    return (train_loss",
        "        optimizer.zero_grad()\n        grads = loss.backward()\n        optimizer.step(grads)\n    return (train_loss",
    ),
    (
        "        optimizer.zero_grad()\n        loss.backward()\n        optimizer.step()\n    return losses",
        "        optimizer.zero_grad()\n        grads = loss.backward()\n        optimizer.step(grads)\n    return losses",
    ),
]


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_mixup_and_cutmix_training_matches_torch(monkeypatch, smoothing):
    args = types.SimpleNamespace(
        alpha=1.0, beta=1.0, cutmix_prob=0.7, lr=0.1, decay=1e-4, smoothing=smoothing
    )
    rng = np.random.default_rng(8)
    x, y = rng.standard_normal((12, 3, 8, 8)), rng.integers(0, 4, 12)

    def go(names, lib, models):
        loader = [
            (lib.tensor(x[i : i + 4], dtype=lib.float32), lib.tensor(y[i : i + 4]))
            for i in range(0, 12, 4)
        ]
        return names["main"](models[0], loader, args)

    records = _run(monkeypatch, MIXUP_SOURCE, MIXUP_STEP, 7, lambda names: (names["Net"](),), go)
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-5)


# -- PointNet --------------------------------------------------------------------------------------
POINTNET_SOURCE = """
from torch.autograd import Variable

class STN3d(nn.Module):
    def __init__(self):
        super(STN3d, self).__init__()
        self.conv1 = torch.nn.Conv1d(3, 64, 1)
        self.conv2 = torch.nn.Conv1d(64, 128, 1)
        self.conv3 = torch.nn.Conv1d(128, 1024, 1)
        self.fc1 = nn.Linear(1024, 512)
        self.fc2 = nn.Linear(512, 256)
        self.fc3 = nn.Linear(256, 9)
        self.relu = nn.ReLU()

        self.bn1 = nn.BatchNorm1d(64)
        self.bn2 = nn.BatchNorm1d(128)
        self.bn3 = nn.BatchNorm1d(1024)
        self.bn4 = nn.BatchNorm1d(512)
        self.bn5 = nn.BatchNorm1d(256)


    def forward(self, x):
        batchsize = x.size()[0]
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        x = F.relu(self.bn3(self.conv3(x)))
        x = torch.max(x, 2, keepdim=True)[0]
        x = x.view(-1, 1024)

        x = F.relu(self.bn4(self.fc1(x)))
        x = F.relu(self.bn5(self.fc2(x)))
        x = self.fc3(x)

        iden = Variable(torch.from_numpy(np.array([1,0,0,0,1,0,0,0,1]).astype(np.float32))).view(1,9).repeat(batchsize,1)
        if x.is_cuda:
            iden = iden.cuda()
        x = x + iden
        x = x.view(-1, 3, 3)
        return x


class STNkd(nn.Module):
    def __init__(self, k=64):
        super(STNkd, self).__init__()
        self.conv1 = torch.nn.Conv1d(k, 64, 1)
        self.conv2 = torch.nn.Conv1d(64, 128, 1)
        self.conv3 = torch.nn.Conv1d(128, 1024, 1)
        self.fc1 = nn.Linear(1024, 512)
        self.fc2 = nn.Linear(512, 256)
        self.fc3 = nn.Linear(256, k*k)
        self.relu = nn.ReLU()

        self.bn1 = nn.BatchNorm1d(64)
        self.bn2 = nn.BatchNorm1d(128)
        self.bn3 = nn.BatchNorm1d(1024)
        self.bn4 = nn.BatchNorm1d(512)
        self.bn5 = nn.BatchNorm1d(256)

        self.k = k

    def forward(self, x):
        batchsize = x.size()[0]
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        x = F.relu(self.bn3(self.conv3(x)))
        x = torch.max(x, 2, keepdim=True)[0]
        x = x.view(-1, 1024)

        x = F.relu(self.bn4(self.fc1(x)))
        x = F.relu(self.bn5(self.fc2(x)))
        x = self.fc3(x)

        iden = Variable(torch.from_numpy(np.eye(self.k).flatten().astype(np.float32))).view(1,self.k*self.k).repeat(batchsize,1)
        if x.is_cuda:
            iden = iden.cuda()
        x = x + iden
        x = x.view(-1, self.k, self.k)
        return x

class PointNetfeat(nn.Module):
    def __init__(self, global_feat = True, feature_transform = False):
        super(PointNetfeat, self).__init__()
        self.stn = STN3d()
        self.conv1 = torch.nn.Conv1d(3, 64, 1)
        self.conv2 = torch.nn.Conv1d(64, 128, 1)
        self.conv3 = torch.nn.Conv1d(128, 1024, 1)
        self.bn1 = nn.BatchNorm1d(64)
        self.bn2 = nn.BatchNorm1d(128)
        self.bn3 = nn.BatchNorm1d(1024)
        self.global_feat = global_feat
        self.feature_transform = feature_transform
        if self.feature_transform:
            self.fstn = STNkd(k=64)

    def forward(self, x):
        n_pts = x.size()[2]
        trans = self.stn(x)
        x = x.transpose(2, 1)
        x = torch.bmm(x, trans)
        x = x.transpose(2, 1)
        x = F.relu(self.bn1(self.conv1(x)))

        if self.feature_transform:
            trans_feat = self.fstn(x)
            x = x.transpose(2,1)
            x = torch.bmm(x, trans_feat)
            x = x.transpose(2,1)
        else:
            trans_feat = None

        pointfeat = x
        x = F.relu(self.bn2(self.conv2(x)))
        x = self.bn3(self.conv3(x))
        x = torch.max(x, 2, keepdim=True)[0]
        x = x.view(-1, 1024)
        if self.global_feat:
            return x, trans, trans_feat
        else:
            x = x.view(-1, 1024, 1).repeat(1, 1, n_pts)
            return torch.cat([x, pointfeat], 1), trans, trans_feat

class PointNetCls(nn.Module):
    def __init__(self, k=2, feature_transform=False):
        super(PointNetCls, self).__init__()
        self.feature_transform = feature_transform
        self.feat = PointNetfeat(global_feat=True, feature_transform=feature_transform)
        self.fc1 = nn.Linear(1024, 512)
        self.fc2 = nn.Linear(512, 256)
        self.fc3 = nn.Linear(256, k)
        self.dropout = nn.Dropout(p=0.3)
        self.bn1 = nn.BatchNorm1d(512)
        self.bn2 = nn.BatchNorm1d(256)
        self.relu = nn.ReLU()

    def forward(self, x):
        x, trans, trans_feat = self.feat(x)
        x = F.relu(self.bn1(self.fc1(x)))
        x = F.relu(self.bn2(self.dropout(self.fc2(x))))
        x = self.fc3(x)
        return F.log_softmax(x, dim=1), trans, trans_feat

class PointNetDenseCls(nn.Module):
    def __init__(self, k = 2, feature_transform=False):
        super(PointNetDenseCls, self).__init__()
        self.k = k
        self.feature_transform=feature_transform
        self.feat = PointNetfeat(global_feat=False, feature_transform=feature_transform)
        self.conv1 = torch.nn.Conv1d(1088, 512, 1)
        self.conv2 = torch.nn.Conv1d(512, 256, 1)
        self.conv3 = torch.nn.Conv1d(256, 128, 1)
        self.conv4 = torch.nn.Conv1d(128, self.k, 1)
        self.bn1 = nn.BatchNorm1d(512)
        self.bn2 = nn.BatchNorm1d(256)
        self.bn3 = nn.BatchNorm1d(128)

    def forward(self, x):
        batchsize = x.size()[0]
        n_pts = x.size()[2]
        x, trans, trans_feat = self.feat(x)
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        x = F.relu(self.bn3(self.conv3(x)))
        x = self.conv4(x)
        x = x.transpose(2,1).contiguous()
        x = F.log_softmax(x.view(-1,self.k), dim=-1)
        x = x.view(batchsize, n_pts, self.k)
        return x, trans, trans_feat

def feature_transform_regularizer(trans):
    d = trans.size()[1]
    batchsize = trans.size()[0]
    I = torch.eye(d)[None, :, :]
    if trans.is_cuda:
        I = I.cuda()
    loss = torch.mean(torch.norm(torch.bmm(trans, trans.transpose(2,1)) - I, dim=(1,2)))
    return loss

def train_classification(classifier, dataloader, opt):
    optimizer = optim.Adam(classifier.parameters(), lr=0.001, betas=(0.9, 0.999))
    scheduler = optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    num_batch = len(dataloader)
    records = []
    for epoch in range(opt.nepoch):
        scheduler.step()
        for i, data in enumerate(dataloader, 0):
            points, target = data
            target = target[:, 0]
            points = points.transpose(2, 1)
            optimizer.zero_grad()
            classifier = classifier.train()
            pred, trans, trans_feat = classifier(points)
            loss = F.nll_loss(pred, target)
            if opt.feature_transform:
                loss += feature_transform_regularizer(trans_feat) * 0.001
            loss.backward()
            optimizer.step()
            pred_choice = pred.data.max(1)[1]
            correct = pred_choice.eq(target.data).cpu().sum()
            print('[%d: %d/%d] train loss: %f accuracy: %f' % (epoch, i, num_batch, loss.item(), correct.item() / float(opt.batchSize)))
            records.append([loss.item(), correct.item()])
    classifier = classifier.eval()
    points, target = dataloader[0]
    pred, _, _ = classifier(points.transpose(2, 1))
    records.append(pred.detach().numpy().copy())
    records.append({n: p.detach().numpy().copy() for n, p in classifier.named_parameters() if n.startswith("fc") or n.endswith("fc3.weight")})
    return records

def train_segmentation(classifier, dataloader, opt):
    optimizer = optim.Adam(classifier.parameters(), lr=0.001, betas=(0.9, 0.999))
    records = []
    for i, data in enumerate(dataloader, 0):
        points, target = data
        points = points.transpose(2, 1)
        optimizer.zero_grad()
        classifier = classifier.train()
        pred, trans, trans_feat = classifier(points)
        pred = pred.view(-1, opt.num_classes)
        target = target.view(-1, 1)[:, 0] - 1
        loss = F.nll_loss(pred, target)
        if opt.feature_transform:
            loss += feature_transform_regularizer(trans_feat) * 0.001
        loss.backward()
        optimizer.step()
        pred_choice = pred.data.max(1)[1]
        correct = pred_choice.eq(target.data).cpu().sum()
        records.append([loss.item(), correct.item()])
    records.append({n: p.detach().numpy().copy() for n, p in classifier.named_parameters() if n.startswith("conv")})
    return records
"""

POINTNET_STEP = [
    (
        "            loss.backward()\n            optimizer.step()\n            pred_choice",
        "            grads = loss.backward()\n            optimizer.step(grads)\n            pred_choice",
    ),
    (
        "        loss.backward()\n        optimizer.step()\n        pred_choice",
        "        grads = loss.backward()\n        optimizer.step(grads)\n        pred_choice",
    ),
]


@pytest.mark.parametrize("task", ["classification", "segmentation"])
def test_pointnet_with_feature_transform_matches_torch(monkeypatch, capsys, task):
    opt = types.SimpleNamespace(nepoch=1, batchSize=4, feature_transform=True, num_classes=3)
    rng = np.random.default_rng(10)
    points = rng.standard_normal((8, 16, 3))
    labels = rng.integers(0, 2, (8, 1)) if task == "classification" else rng.integers(1, 4, (8, 16))

    def go(names, lib, models):
        loader = [(lib.tensor(points[i : i + 4]), lib.tensor(labels[i : i + 4])) for i in (0, 4)]
        return names[f"train_{task}"](models[0], loader, opt)

    build = (
        (lambda names: (names["PointNetCls"](k=2, feature_transform=True),))
        if task == "classification"
        else (lambda names: (names["PointNetDenseCls"](k=3, feature_transform=True),))
    )
    records = _run(monkeypatch, POINTNET_SOURCE, POINTNET_STEP, 11, build, go, float64=True)
    assert_records_agree(records[1], records[0], rtol=1e-6, atol=1e-7)


# -- knowledge distillation ------------------------------------------------------------------------
DISTILL_SOURCE = """
class DeepNN(nn.Module):
    def __init__(self, num_classes=10):
        super(DeepNN, self).__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.Conv2d(16, 8, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(kernel_size=2, stride=2),
            nn.Conv2d(8, 8, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.Conv2d(8, 8, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(kernel_size=2, stride=2),
        )
        self.classifier = nn.Sequential(
            nn.Linear(128, 32),
            nn.ReLU(),
            nn.Dropout(0.1),
            nn.Linear(32, num_classes)
        )

    def forward(self, x):
        x = self.features(x)
        x = torch.flatten(x, 1)
        x = self.classifier(x)
        return x

class LightNN(nn.Module):
    def __init__(self, num_classes=10):
        super(LightNN, self).__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 4, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(kernel_size=2, stride=2),
            nn.Conv2d(4, 4, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(kernel_size=2, stride=2),
        )
        self.classifier = nn.Sequential(
            nn.Linear(64, 16),
            nn.ReLU(),
            nn.Dropout(0.1),
            nn.Linear(16, num_classes)
        )

    def forward(self, x):
        x = self.features(x)
        x = torch.flatten(x, 1)
        x = self.classifier(x)
        return x

class ModifiedDeepNNCosine(DeepNN):
    def forward(self, x):
        x = self.features(x)
        flattened_conv_output = torch.flatten(x, 1)
        x = self.classifier(flattened_conv_output)
        flattened_conv_output_after_pooling = torch.nn.functional.avg_pool1d(flattened_conv_output, 2)
        return x, flattened_conv_output_after_pooling

class ModifiedLightNNCosine(LightNN):
    def forward(self, x):
        x = self.features(x)
        flattened_conv_output = torch.flatten(x, 1)
        x = self.classifier(flattened_conv_output)
        return x, flattened_conv_output

class ModifiedDeepNNRegressor(DeepNN):
    def forward(self, x):
        x = self.features(x)
        conv_feature_map = x
        x = torch.flatten(x, 1)
        x = self.classifier(x)
        return x, conv_feature_map

class ModifiedLightNNRegressor(LightNN):
    def __init__(self, num_classes=10):
        super(ModifiedLightNNRegressor, self).__init__(num_classes)
        # Include an extra regressor (in our case linear)
        self.regressor = nn.Sequential(
            nn.Conv2d(4, 8, kernel_size=3, padding=1)
        )

    def forward(self, x):
        x = self.features(x)
        regressor_output = self.regressor(x)
        x = torch.flatten(x, 1)
        x = self.classifier(x)
        return x, regressor_output

def train_knowledge_distillation(teacher, student, train_loader, epochs, learning_rate, T, soft_target_loss_weight, ce_loss_weight, device):
    ce_loss = nn.CrossEntropyLoss()
    optimizer = optim.Adam(student.parameters(), lr=learning_rate)
    losses = []

    teacher.eval()  # Teacher set to evaluation mode
    student.train() # Student to train mode

    for epoch in range(epochs):
        running_loss = 0.0
        for inputs, labels in train_loader:
            inputs, labels = inputs.to(device), labels.to(device)

            optimizer.zero_grad()

            # Forward pass with the teacher model - do not save gradients here as we do not change the teacher's weights
            with torch.no_grad():
                teacher_logits = teacher(inputs)

            # Forward pass with the student model
            student_logits = student(inputs)

            #Soften the student logits by applying softmax first and log() second
            soft_targets = nn.functional.softmax(teacher_logits / T, dim=-1)
            soft_prob = nn.functional.log_softmax(student_logits / T, dim=-1)

            # Calculate the soft targets loss. Scaled by T**2 as suggested by the authors of the paper "Distilling the knowledge in a neural network"
            soft_targets_loss = torch.sum(soft_targets * (soft_targets.log() - soft_prob)) / soft_prob.size()[0] * (T**2)

            # Calculate the true label loss
            label_loss = ce_loss(student_logits, labels)

            # Weighted sum of the two losses
            loss = soft_target_loss_weight * soft_targets_loss + ce_loss_weight * label_loss

            loss.backward()
            optimizer.step()

            running_loss += loss.item()

        print(f"Epoch {epoch+1}/{epochs}, Loss: {running_loss / len(train_loader)}")
        losses.append(running_loss / len(train_loader))
    return losses

def train_cosine_loss(teacher, student, train_loader, epochs, learning_rate, hidden_rep_loss_weight, ce_loss_weight, device):
    ce_loss = nn.CrossEntropyLoss()
    cosine_loss = nn.CosineEmbeddingLoss()
    optimizer = optim.Adam(student.parameters(), lr=learning_rate)
    losses = []

    teacher.to(device)
    student.to(device)
    teacher.eval()  # Teacher set to evaluation mode
    student.train() # Student to train mode

    for epoch in range(epochs):
        running_loss = 0.0
        for inputs, labels in train_loader:
            inputs, labels = inputs.to(device), labels.to(device)

            optimizer.zero_grad()

            # Forward pass with the teacher model and keep only the hidden representation
            with torch.no_grad():
                _, teacher_hidden_representation = teacher(inputs)

            # Forward pass with the student model
            student_logits, student_hidden_representation = student(inputs)

            # Calculate the cosine loss. Target is a vector of ones. From the loss formula above we can see that is the case where loss minimization leads to cosine similarity increase.
            hidden_rep_loss = cosine_loss(student_hidden_representation, teacher_hidden_representation, target=torch.ones(inputs.size(0)).to(device))

            # Calculate the true label loss
            label_loss = ce_loss(student_logits, labels)

            # Weighted sum of the two losses
            loss = hidden_rep_loss_weight * hidden_rep_loss + ce_loss_weight * label_loss

            loss.backward()
            optimizer.step()

            running_loss += loss.item()

        print(f"Epoch {epoch+1}/{epochs}, Loss: {running_loss / len(train_loader)}")
        losses.append(running_loss / len(train_loader))
    return losses

def train_mse_loss(teacher, student, train_loader, epochs, learning_rate, feature_map_weight, ce_loss_weight, device):
    ce_loss = nn.CrossEntropyLoss()
    mse_loss = nn.MSELoss()
    optimizer = optim.Adam(student.parameters(), lr=learning_rate)
    losses = []

    teacher.to(device)
    student.to(device)
    teacher.eval()  # Teacher set to evaluation mode
    student.train() # Student to train mode

    for epoch in range(epochs):
        running_loss = 0.0
        for inputs, labels in train_loader:
            inputs, labels = inputs.to(device), labels.to(device)

            optimizer.zero_grad()

            # Again ignore teacher logits
            with torch.no_grad():
                _, teacher_feature_map = teacher(inputs)

            # Forward pass with the student model
            student_logits, regressor_feature_map = student(inputs)

            # Calculate the loss
            hidden_rep_loss = mse_loss(regressor_feature_map, teacher_feature_map)

            # Calculate the true label loss
            label_loss = ce_loss(student_logits, labels)

            # Weighted sum of the two losses
            loss = feature_map_weight * hidden_rep_loss + ce_loss_weight * label_loss

            loss.backward()
            optimizer.step()

            running_loss += loss.item()

        print(f"Epoch {epoch+1}/{epochs}, Loss: {running_loss / len(train_loader)}")
        losses.append(running_loss / len(train_loader))
    return losses

def main(kind, teacher, student, train_loader):
    device = torch.device("cpu")
    if kind == "soft_targets":
        losses = train_knowledge_distillation(teacher=teacher, student=student, train_loader=train_loader, epochs=2, learning_rate=0.001, T=2, soft_target_loss_weight=0.25, ce_loss_weight=0.75, device=device)
    elif kind == "cosine":
        losses = train_cosine_loss(teacher=teacher, student=student, train_loader=train_loader, epochs=2, learning_rate=0.001, hidden_rep_loss_weight=0.25, ce_loss_weight=0.75, device=device)
    else:
        losses = train_mse_loss(teacher=teacher, student=student, train_loader=train_loader, epochs=2, learning_rate=0.001, feature_map_weight=0.25, ce_loss_weight=0.75, device=device)
    return [losses, {n: p.detach().numpy().copy() for n, p in student.named_parameters()}]
"""

DISTILL_STEP = [
    (
        "            loss.backward()\n            optimizer.step()\n",
        "            grads = loss.backward()\n            optimizer.step(grads)\n",
    )
]

DISTILL_MODELS = {
    "soft_targets": ("DeepNN", "LightNN"),
    "cosine": ("ModifiedDeepNNCosine", "ModifiedLightNNCosine"),
    "regressor": ("ModifiedDeepNNRegressor", "ModifiedLightNNRegressor"),
}


@pytest.mark.parametrize("kind", list(DISTILL_MODELS))
def test_knowledge_distillation_tutorial_matches_torch(monkeypatch, capsys, kind):
    rng = np.random.default_rng(12)
    x, y = rng.standard_normal((8, 3, 16, 16)), rng.integers(0, 10, 8)
    teacher_name, student_name = DISTILL_MODELS[kind]

    def go(names, lib, models):
        loader = [
            (lib.tensor(x[i : i + 4], dtype=lib.float32), lib.tensor(y[i : i + 4])) for i in (0, 4)
        ]
        return names["main"](kind, *models, loader)

    records = _run(
        monkeypatch,
        DISTILL_SOURCE,
        DISTILL_STEP,
        13,
        lambda names: (names[teacher_name](num_classes=10), names[student_name](num_classes=10)),
        go,
    )
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-5)


# -- the defects found -----------------------------------------------------------------------------
SCHEDULERS = {
    "StepLR": lambda lr, o, e: lr.StepLR(o, 2, 0.5, last_epoch=e),
    "CosineAnnealingLR": lambda lr, o, e: lr.CosineAnnealingLR(o, T_max=6, eta_min=0, last_epoch=e),
    "LambdaLR": lambda lr, o, e: lr.LambdaLR(o, lambda k: 0.8**k, last_epoch=e),
    "MultiStepLR": lambda lr, o, e: lr.MultiStepLR(o, [2, 4], 0.5, last_epoch=e),
    "ExponentialLR": lambda lr, o, e: lr.ExponentialLR(o, 0.9, last_epoch=e),
    "LinearLR": lambda lr, o, e: lr.LinearLR(o, 0.5, 1.0, 4, last_epoch=e),
    "ConstantLR": lambda lr, o, e: lr.ConstantLR(o, 0.5, 4, last_epoch=e),
    "PolynomialLR": lambda lr, o, e: lr.PolynomialLR(o, 6, 2.0, last_epoch=e),
}


@pytest.mark.parametrize("name", list(SCHEDULERS))
def test_a_scheduler_built_with_last_epoch_resumes_where_torch_s_does(name):
    """Three steps, then a new optimizer holding the third step's rate (as a loaded optimizer
    state holds it, with ``initial_lr``) and a scheduler built with ``last_epoch=2`` (its
    construction steps it to 3): the rates go on as in the uninterrupted run, in both
    libraries."""
    runs = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's, on scheduler steps without optimizer steps
        for lib in (torch, rg):
            schedule = SCHEDULERS[name]
            optimizer = lib.optim.SGD([lib.nn.Parameter(lib.ones(1))], lr=1.0)
            scheduler = schedule(lib.optim.lr_scheduler, optimizer, -1)
            rates = []
            for _ in range(3):
                scheduler.step()
                rates.append(optimizer.param_groups[0]["lr"])
            resumed = lib.optim.SGD([lib.nn.Parameter(lib.ones(1))], lr=rates[-1])
            resumed.param_groups[0]["initial_lr"] = 1.0
            later = schedule(lib.optim.lr_scheduler, resumed, 2)  # built after epoch 2's step
            rates.append(later.last_epoch)
            for _ in range(3):
                later.step()
                scheduler.step()
                rates += [resumed.param_groups[0]["lr"], optimizer.param_groups[0]["lr"]]
            runs.append(rates)
    np.testing.assert_allclose(runs[1], runs[0], rtol=1e-12)
    np.testing.assert_allclose(runs[1][4::2], runs[1][5::2], rtol=1e-12)


def test_ctc_loss_takes_float_targets_as_torch_casts_them():
    log_probs = np.random.default_rng(0).standard_normal((6, 2, 5))
    values = []
    for lib in (torch, rg):
        lp = lib.tensor(log_probs).log_softmax(2)
        floats = lib.nn.CTCLoss(blank=4)(
            lp, lib.tensor([[1.0, 2.0, 2.0], [3.0, 0.0, 0.0]]), [6, 5], [3, 1]
        )
        ints = lib.nn.functional.ctc_loss(
            lp, lib.tensor([[1, 2, 2], [3, 0, 0]]), [6, 5], [3, 1], blank=4
        )
        truncated = lib.nn.functional.ctc_loss(
            lp[:, :1], lib.tensor([[1.7, 2.2, 2.9]]), [6], [3], blank=4
        )
        values.append([floats.item(), ints.item(), truncated.item()])
    np.testing.assert_allclose(values[1], values[0], rtol=1e-12)
    assert values[1][0] == values[1][1]


def test_margin_losses_take_torch_s_keywords():
    rng = np.random.default_rng(1)
    a, b, t = (
        rng.standard_normal((4, 3)),
        rng.standard_normal((4, 3)),
        np.array([1.0, -1.0, 1.0, -1.0]),
    )
    values = []
    for lib in (torch, rg):
        x1, x2, target = lib.tensor(a), lib.tensor(b), lib.tensor(t)
        values.append(
            [
                lib.nn.CosineEmbeddingLoss(margin=0.1)(x1, x2, target=target).item(),
                lib.nn.CosineEmbeddingLoss()(input1=x1, input2=x2, target=target).item(),
                lib.nn.MarginRankingLoss(margin=0.2)(x1[:, 0], x2[:, 0], target=target).item(),
                lib.nn.HingeEmbeddingLoss()(x1[:, 0], target=target).item(),
            ]
        )
    np.testing.assert_allclose(values[1], values[0], rtol=1e-12)
