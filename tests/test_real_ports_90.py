# ruff: noqa: E501, W291, W293  (the programs are kept as their authors wrote them: long lines, trailing blanks)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
game-playing networks, text classification and graph embeddings, each trained a few steps
against torch's run of the same code from the same weights and draws.

- the AlphaZero policy-value network as junxiaosong/AlphaZero_Gomoku writes it
  (``policy_value_net_pytorch.py`` and ``train.py``'s ``TrainPipeline``), a 6x6 board:
  ``set_learning_rate`` over ``optimizer.param_groups``, ``F.log_softmax`` without ``dim``
  and ``F.tanh``, ``Variable(torch.FloatTensor(state_batch))`` of a list of NumPy boards,
  ``log_act_probs.data.numpy()``, the loss ``F.mse_loss(value.view(-1), winner_batch) -
  torch.mean(torch.sum(mcts_probs*log_act_probs, 1))`` with the L2 penalty as Adam's
  ``weight_decay``, the entropy, ``get_equi_data``'s rotations and flips, ``policy_update``'s
  KL early stop and ``lr_multiplier``; the model saved by ``torch.save(net_params,
  model_file)`` and loaded into a new pipeline (``model_file=``) whose ``policy_value_fn``
  reads ``Variable(torch.from_numpy(current_state)).float()`` and ``value.data[0][0]``.
- MuZero's pieces as werner-duvaud/muzero-general writes them (``models.py``, ``trainer.py``,
  ``self_play.py``): ``AbstractNetwork(ABC, torch.nn.Module)``,
  ``MuZeroFullyConnectedNetwork`` of ``torch.nn.DataParallel(mlp(...))`` parts, the hidden
  states min-max normalized (``encoded_state.min(1, keepdim=True)[0]``, ``scale[scale <
  1e-5] += 1e-5``), the one-hot action by ``scatter_``, ``initial_inference``'s
  ``torch.log(torch.zeros(1, n).scatter(1, ..., 1.0).repeat(len(observation), 1))``,
  ``support_to_scalar``/``scalar_to_support`` (``logits.scatter_`` twice, ``masked_fill_``
  of the upper bin), ``Trainer.update_weights`` scaling gradients by
  ``hidden_state.register_hook(lambda grad: grad * 0.5)`` and by hooks on the per-step
  losses (``lambda grad: grad / gradient_scale_batch[:, i]``, late-bound ``i`` as written),
  or, in a second run, by the pseudocode's ``scale_gradient`` (``tensor * scale +
  tensor.detach() * (1 - scale)``); the PER weights, ``update_lr``, Adam and SGD;
  the checkpoint of ``copy.deepcopy(dict_to_cpu(optimizer.state_dict()))`` and the
  weights resumed by a new ``Trainer``; and ``MCTS.run`` with Dirichlet noise,
  ``Node.expand``'s ``torch.softmax(torch.tensor([policy_logits[0][a] for a in actions]),
  dim=0)`` of 0-d tensors, ``MinMaxStats`` and ``select_action``. The scalars decoded by
  ``support_to_scalar`` amplify float32 rounding (its inverse transform subtracts nearly
  equal numbers): those are compared at 1e-3.
- TextCNN as Shawn1993/cnn-text-classification-pytorch writes it (``model.py``, ``train.py``'s
  ``train``/``eval``/``predict``/``save`` and ``main.py``'s argument fixes), the torchtext
  iterators replaced by lists of batches: ``nn.Conv2d(Ci, Co, (K, D))`` over ``x.unsqueeze(1)``,
  ``F.max_pool1d(i, i.size(2)).squeeze(2)``, ``feature.t_(), target.sub_(1)`` in place,
  ``F.cross_entropy(logit, target, size_average=False)``, ``torch.max(logit, 1)[1].view(
  target.size()).data == target.data``, a 0-d tensor formatted by ``'{:.4f}'.format(...)``,
  the best model saved by ``torch.save(model.state_dict(), ...)`` and loaded back; with
  ``static`` embeddings (``self.embed.weight.requires_grad = False``) too. The logs are
  compared, the printed index tensor's ``dtype=int64`` aside (retrograd's printing names
  every dtype, by design).
- node2vec as PyTorch Geometric writes it (``torch_geometric/nn/models/node2vec.py`` and
  ``examples/node2vec.py``): ``Embedding(num_nodes, embedding_dim, sparse=True)`` trained by
  ``torch.optim.SparseAdam(list(model.parameters()), lr=0.01)`` over the ``DataLoader(range(
  num_nodes), collate_fn=self.sample)`` of positive walks and ``torch.randint`` negatives
  (``rw[:, j:j + self.context_size]`` windows), the loss of ``self.embedding(start).view(...)``
  against ``self.embedding(rest.view(-1)).view(...)``. The walks (``torch_cluster``'s
  ``random_walk`` with ``p = q = 1``) come from a NumPy stand-in, the CSR pointers from
  ``torch.bincount(row, minlength=n).cumsum(0)``. retrograd's gradients are dense and its
  ``SparseAdam`` steps the rows they reach, which are the rows torch's sparse gradient holds.

The lines changed: the ``import`` lines and the gradient lines (``grads = loss.backward()``,
``optimizer.step(grads)``).
"""

from __future__ import annotations

import contextlib
import copy
import io
import os
import random
import re
import types
from collections import deque

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import SharedDraws, assert_records_agree, initializer, params_of, port, run_source


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    rg.seed(0)


# -- AlphaZero_Gomoku -----------------------------------------------------------------------------
ALPHAZERO_SOURCE = '''
import random

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
import torch.nn.functional as F
from torch.autograd import Variable


# -- policy_value_net_pytorch.py --
def set_learning_rate(optimizer, lr):
    """Sets the learning rate to the given value"""
    for param_group in optimizer.param_groups:
        param_group['lr'] = lr


class Net(nn.Module):
    """policy-value network module"""
    def __init__(self, board_width, board_height):
        super(Net, self).__init__()

        self.board_width = board_width
        self.board_height = board_height
        # common layers
        self.conv1 = nn.Conv2d(4, 32, kernel_size=3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, kernel_size=3, padding=1)
        self.conv3 = nn.Conv2d(64, 128, kernel_size=3, padding=1)
        # action policy layers
        self.act_conv1 = nn.Conv2d(128, 4, kernel_size=1)
        self.act_fc1 = nn.Linear(4*board_width*board_height,
                                 board_width*board_height)
        # state value layers
        self.val_conv1 = nn.Conv2d(128, 2, kernel_size=1)
        self.val_fc1 = nn.Linear(2*board_width*board_height, 64)
        self.val_fc2 = nn.Linear(64, 1)

    def forward(self, state_input):
        # common layers
        x = F.relu(self.conv1(state_input))
        x = F.relu(self.conv2(x))
        x = F.relu(self.conv3(x))
        # action policy layers
        x_act = F.relu(self.act_conv1(x))
        x_act = x_act.view(-1, 4*self.board_width*self.board_height)
        x_act = F.log_softmax(self.act_fc1(x_act))
        # state value layers
        x_val = F.relu(self.val_conv1(x))
        x_val = x_val.view(-1, 2*self.board_width*self.board_height)
        x_val = F.relu(self.val_fc1(x_val))
        x_val = F.tanh(self.val_fc2(x_val))
        return x_act, x_val


class PolicyValueNet():
    """policy-value network """
    def __init__(self, board_width, board_height,
                 model_file=None, use_gpu=False):
        self.use_gpu = use_gpu
        self.board_width = board_width
        self.board_height = board_height
        self.l2_const = 1e-4  # coef of l2 penalty
        # the policy value net module
        if self.use_gpu:
            self.policy_value_net = Net(board_width, board_height).cuda()
        else:
            self.policy_value_net = Net(board_width, board_height)
        self.optimizer = optim.Adam(self.policy_value_net.parameters(),
                                    weight_decay=self.l2_const)

        if model_file:
            net_params = torch.load(model_file)
            self.policy_value_net.load_state_dict(net_params)

    def policy_value(self, state_batch):
        """
        input: a batch of states
        output: a batch of action probabilities and state values
        """
        if self.use_gpu:
            state_batch = Variable(torch.FloatTensor(state_batch).cuda())
            log_act_probs, value = self.policy_value_net(state_batch)
            act_probs = np.exp(log_act_probs.data.cpu().numpy())
            return act_probs, value.data.cpu().numpy()
        else:
            state_batch = Variable(torch.FloatTensor(state_batch))
            log_act_probs, value = self.policy_value_net(state_batch)
            act_probs = np.exp(log_act_probs.data.numpy())
            return act_probs, value.data.numpy()

    def policy_value_fn(self, board):
        """
        input: board
        output: a list of (action, probability) tuples for each available
        action and the score of the board state
        """
        legal_positions = board.availables
        current_state = np.ascontiguousarray(board.current_state().reshape(
                -1, 4, self.board_width, self.board_height))
        if self.use_gpu:
            log_act_probs, value = self.policy_value_net(
                    Variable(torch.from_numpy(current_state)).cuda().float())
            act_probs = np.exp(log_act_probs.data.cpu().numpy().flatten())
        else:
            log_act_probs, value = self.policy_value_net(
                    Variable(torch.from_numpy(current_state)).float())
            act_probs = np.exp(log_act_probs.data.numpy().flatten())
        act_probs = zip(legal_positions, act_probs[legal_positions])
        value = value.data[0][0]
        return act_probs, value

    def train_step(self, state_batch, mcts_probs, winner_batch, lr):
        """perform a training step"""
        # wrap in Variable
        if self.use_gpu:
            state_batch = Variable(torch.FloatTensor(state_batch).cuda())
            mcts_probs = Variable(torch.FloatTensor(mcts_probs).cuda())
            winner_batch = Variable(torch.FloatTensor(winner_batch).cuda())
        else:
            state_batch = Variable(torch.FloatTensor(state_batch))
            mcts_probs = Variable(torch.FloatTensor(mcts_probs))
            winner_batch = Variable(torch.FloatTensor(winner_batch))

        # zero the parameter gradients
        self.optimizer.zero_grad()
        # set learning rate
        set_learning_rate(self.optimizer, lr)

        # forward
        log_act_probs, value = self.policy_value_net(state_batch)
        # define the loss = (z - v)^2 - pi^T * log(p) + c||theta||^2
        # Note: the L2 penalty is incorporated in optimizer
        value_loss = F.mse_loss(value.view(-1), winner_batch)
        policy_loss = -torch.mean(torch.sum(mcts_probs*log_act_probs, 1))
        loss = value_loss + policy_loss
        # backward and optimize
        loss.backward()
        self.optimizer.step()
        # calc policy entropy, for monitoring only
        entropy = -torch.mean(
                torch.sum(torch.exp(log_act_probs) * log_act_probs, 1)
                )
        return loss.item(), entropy.item()

    def get_policy_param(self):
        net_params = self.policy_value_net.state_dict()
        return net_params

    def save_model(self, model_file):
        """ save model params to file """
        net_params = self.get_policy_param()  # get model params
        torch.save(net_params, model_file)


# -- train.py's TrainPipeline, the parts that train the network --
class TrainPipeline():
    def __init__(self, init_model=None):
        # params of the board and the game
        self.board_width = 6
        self.board_height = 6
        # training params
        self.learn_rate = 2e-3
        self.lr_multiplier = 1.0  # adaptively adjust the learning rate based on KL
        self.batch_size = 8  # mini-batch size for training
        self.data_buffer = deque(maxlen=10000)
        self.epochs = 2  # num of train_steps for each update
        self.kl_targ = 0.02
        if init_model:
            # start training from an initial policy-value net
            self.policy_value_net = PolicyValueNet(self.board_width,
                                                   self.board_height,
                                                   model_file=init_model)
        else:
            # start training from a new policy-value net
            self.policy_value_net = PolicyValueNet(self.board_width,
                                                   self.board_height)

    def get_equi_data(self, play_data):
        """augment the data set by rotation and flipping
        play_data: [(state, mcts_prob, winner_z), ..., ...]
        """
        extend_data = []
        for state, mcts_porb, winner in play_data:
            for i in [1, 2, 3, 4]:
                # rotate counterclockwise
                equi_state = np.array([np.rot90(s, i) for s in state])
                equi_mcts_prob = np.rot90(np.flipud(
                    mcts_porb.reshape(self.board_height, self.board_width)), i)
                extend_data.append((equi_state,
                                    np.flipud(equi_mcts_prob).flatten(),
                                    winner))
                # flip horizontally
                equi_state = np.array([np.fliplr(s) for s in equi_state])
                equi_mcts_prob = np.fliplr(equi_mcts_prob)
                extend_data.append((equi_state,
                                    np.flipud(equi_mcts_prob).flatten(),
                                    winner))
        return extend_data

    def policy_update(self):
        """update the policy-value net"""
        mini_batch = random.sample(self.data_buffer, self.batch_size)
        state_batch = [data[0] for data in mini_batch]
        mcts_probs_batch = [data[1] for data in mini_batch]
        winner_batch = [data[2] for data in mini_batch]
        old_probs, old_v = self.policy_value_net.policy_value(state_batch)
        for i in range(self.epochs):
            loss, entropy = self.policy_value_net.train_step(
                    state_batch,
                    mcts_probs_batch,
                    winner_batch,
                    self.learn_rate*self.lr_multiplier)
            new_probs, new_v = self.policy_value_net.policy_value(state_batch)
            kl = np.mean(np.sum(old_probs * (
                    np.log(old_probs + 1e-10) - np.log(new_probs + 1e-10)),
                    axis=1)
            )
            if kl > self.kl_targ * 4:  # early stopping if D_KL diverges badly
                break
        # adaptively adjust the learning rate
        if kl > self.kl_targ * 2 and self.lr_multiplier > 0.1:
            self.lr_multiplier /= 1.5
        elif kl < self.kl_targ / 2 and self.lr_multiplier < 10:
            self.lr_multiplier *= 1.5

        explained_var_old = (1 -
                             np.var(np.array(winner_batch) - old_v.flatten()) /
                             np.var(np.array(winner_batch)))
        explained_var_new = (1 -
                             np.var(np.array(winner_batch) - new_v.flatten()) /
                             np.var(np.array(winner_batch)))
        print(("kl:{:.5f},"
               "lr_multiplier:{:.3f},"
               "loss:{},"
               "entropy:{},"
               "explained_var_old:{:.3f},"
               "explained_var_new:{:.3f}"
               ).format(kl,
                        self.lr_multiplier,
                        loss,
                        entropy,
                        explained_var_old,
                        explained_var_new))
        record.append([kl, self.lr_multiplier, loss, entropy, explained_var_old, explained_var_new])
        return loss, entropy


# -- the loop, written for the test: self-play games stand in as recorded data --
training_pipeline = TrainPipeline()
initialize(training_pipeline.policy_value_net.policy_value_net)
for play_data in games:
    play_data = training_pipeline.get_equi_data(play_data)
    training_pipeline.data_buffer.extend(play_data)
    if len(training_pipeline.data_buffer) > training_pipeline.batch_size:
        loss, entropy = training_pipeline.policy_update()
    record.append(params_of(training_pipeline.policy_value_net.policy_value_net))

model_file = os.path.join(save_dir, 'current_policy.model')
training_pipeline.policy_value_net.save_model(model_file)
restored = TrainPipeline(init_model=model_file)
act_probs, value = restored.policy_value_net.policy_value_fn(board)
act_probs = list(act_probs)
record.append([a for a, _ in act_probs])
record.append([p for _, p in act_probs])
record.append(value.item())
record.append(restored.policy_value_net.optimizer.param_groups[0]['lr'])
record.append(training_pipeline.policy_value_net.optimizer.param_groups[0]['lr'])
'''

ALPHAZERO_STEPS = [
    (
        "\nimport torch\nimport torch.nn as nn\nimport torch.optim as optim\nimport torch.nn.functional as F\n",
        "\nimport retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.optim as optim\nimport retrograd.nn.functional as F\n",
    ),
    (
        "        loss.backward()\n        self.optimizer.step()\n",
        "        grads = loss.backward()\n        self.optimizer.step(grads)\n",
    ),
]


class _Board:
    """What ``policy_value_fn`` reads of the game's ``Board``: ``availables`` and
    ``current_state()`` (4 planes, here a flipped view: a negative-stride array)."""

    def __init__(self, rng):
        self.state = (rng.uniform(size=(4, 6, 6)) < 0.2).astype(np.float64)
        empty = np.flatnonzero(self.state[0].reshape(-1) == 0)
        self.availables = [int(m) for m in empty][:10]

    def current_state(self):
        return self.state[:, ::-1, :]


def test_alphazero_policy_value_net_trains_as_torch(tmp_path):
    rng = np.random.default_rng(8905)
    games = [
        [
            (
                (rng.uniform(size=(4, 6, 6)) < 0.3).astype(np.float64),
                rng.dirichlet(np.ones(36)),
                float(rng.choice([-1.0, 1.0])),
            )
            for _ in range(2)
        ]
        for _ in range(2)
    ]
    board = _Board(rng)
    initialize = initializer()
    records, logs = [], []
    for lib in (torch, rg):
        record = []
        random.seed(5)  # random.sample of the data buffer
        text = (
            ALPHAZERO_SOURCE
            if lib is torch
            else port(ALPHAZERO_SOURCE, ALPHAZERO_STEPS).replace("from torch.", "from retrograd.")
        )
        save_dir = tmp_path / lib.__name__
        save_dir.mkdir()
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            run_source(
                text,
                lib,
                record=record,
                games=games,
                board=board,
                deque=deque,
                os=os,
                save_dir=str(save_dir),
                initialize=initialize,
                params_of=params_of,
            )
        records.append(record)
        logs.append(out.getvalue())
    theirs, ours = records
    assert logs[0].count("kl:") == logs[1].count("kl:") == 2
    assert theirs[-2:] == [0.001, 0.003]  # Adam's default lr; learn_rate * lr_multiplier
    # Adam steps the weights of near-zero gradients (dead ReLUs) by rounding noise: atol of
    # 2% of a step
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-4)


# -- muzero-general -------------------------------------------------------------------------------
MUZERO_SOURCE = '''
import math
from abc import ABC, abstractmethod

import numpy
import torch


# -- models.py --
class AbstractNetwork(ABC, torch.nn.Module):
    def __init__(self):
        super().__init__()
        pass

    @abstractmethod
    def initial_inference(self, observation):
        pass

    @abstractmethod
    def recurrent_inference(self, encoded_state, action):
        pass

    def get_weights(self):
        return dict_to_cpu(self.state_dict())

    def set_weights(self, weights):
        self.load_state_dict(weights)


class MuZeroFullyConnectedNetwork(AbstractNetwork):
    def __init__(
        self,
        observation_shape,
        stacked_observations,
        action_space_size,
        encoding_size,
        fc_reward_layers,
        fc_value_layers,
        fc_policy_layers,
        fc_representation_layers,
        fc_dynamics_layers,
        support_size,
    ):
        super().__init__()
        self.action_space_size = action_space_size
        self.full_support_size = 2 * support_size + 1

        self.representation_network = torch.nn.DataParallel(
            mlp(
                observation_shape[0]
                * observation_shape[1]
                * observation_shape[2]
                * (stacked_observations + 1)
                + stacked_observations * observation_shape[1] * observation_shape[2],
                fc_representation_layers,
                encoding_size,
            )
        )

        self.dynamics_encoded_state_network = torch.nn.DataParallel(
            mlp(
                encoding_size + self.action_space_size,
                fc_dynamics_layers,
                encoding_size,
            )
        )
        self.dynamics_reward_network = torch.nn.DataParallel(
            mlp(encoding_size, fc_reward_layers, self.full_support_size)
        )

        self.prediction_policy_network = torch.nn.DataParallel(
            mlp(encoding_size, fc_policy_layers, self.action_space_size)
        )
        self.prediction_value_network = torch.nn.DataParallel(
            mlp(encoding_size, fc_value_layers, self.full_support_size)
        )

    def prediction(self, encoded_state):
        policy_logits = self.prediction_policy_network(encoded_state)
        value = self.prediction_value_network(encoded_state)
        return policy_logits, value

    def representation(self, observation):
        encoded_state = self.representation_network(
            observation.view(observation.shape[0], -1)
        )
        # Scale encoded state between [0, 1] (See appendix paper Training)
        min_encoded_state = encoded_state.min(1, keepdim=True)[0]
        max_encoded_state = encoded_state.max(1, keepdim=True)[0]
        scale_encoded_state = max_encoded_state - min_encoded_state
        scale_encoded_state[scale_encoded_state < 1e-5] += 1e-5
        encoded_state_normalized = (
            encoded_state - min_encoded_state
        ) / scale_encoded_state
        return encoded_state_normalized

    def dynamics(self, encoded_state, action):
        # Stack encoded_state with a game specific one hot encoded action (See paper appendix Network Architecture)
        action_one_hot = (
            torch.zeros((action.shape[0], self.action_space_size))
            .to(action.device)
            .float()
        )
        action_one_hot.scatter_(1, action.long(), 1.0)
        x = torch.cat((encoded_state, action_one_hot), dim=1)

        next_encoded_state = self.dynamics_encoded_state_network(x)

        reward = self.dynamics_reward_network(next_encoded_state)

        # Scale encoded state between [0, 1] (See paper appendix Training)
        min_next_encoded_state = next_encoded_state.min(1, keepdim=True)[0]
        max_next_encoded_state = next_encoded_state.max(1, keepdim=True)[0]
        scale_next_encoded_state = max_next_encoded_state - min_next_encoded_state
        scale_next_encoded_state[scale_next_encoded_state < 1e-5] += 1e-5
        next_encoded_state_normalized = (
            next_encoded_state - min_next_encoded_state
        ) / scale_next_encoded_state

        return next_encoded_state_normalized, reward

    def initial_inference(self, observation):
        encoded_state = self.representation(observation)
        policy_logits, value = self.prediction(encoded_state)
        # reward equal to 0 for consistency
        reward = torch.log(
            (
                torch.zeros(1, self.full_support_size)
                .scatter(1, torch.tensor([[self.full_support_size // 2]]).long(), 1.0)
                .repeat(len(observation), 1)
                .to(observation.device)
            )
        )

        return (
            value,
            reward,
            policy_logits,
            encoded_state,
        )

    def recurrent_inference(self, encoded_state, action):
        next_encoded_state, reward = self.dynamics(encoded_state, action)
        policy_logits, value = self.prediction(next_encoded_state)
        return value, reward, policy_logits, next_encoded_state


def mlp(
    input_size,
    layer_sizes,
    output_size,
    output_activation=torch.nn.Identity,
    activation=torch.nn.ELU,
):
    sizes = [input_size] + layer_sizes + [output_size]
    layers = []
    for i in range(len(sizes) - 1):
        act = activation if i < len(sizes) - 2 else output_activation
        layers += [torch.nn.Linear(sizes[i], sizes[i + 1]), act()]
    return torch.nn.Sequential(*layers)


def support_to_scalar(logits, support_size):
    """
    Transform a categorical representation to a scalar
    See paper appendix Network Architecture
    """
    # Decode to a scalar
    probabilities = torch.softmax(logits, dim=1)
    support = (
        torch.tensor([x for x in range(-support_size, support_size + 1)])
        .expand(probabilities.shape)
        .float()
        .to(device=probabilities.device)
    )
    x = torch.sum(support * probabilities, dim=1, keepdim=True)

    # Invert the scaling (defined in https://arxiv.org/abs/1805.11593)
    x = torch.sign(x) * (
        ((torch.sqrt(1 + 4 * 0.001 * (torch.abs(x) + 1 + 0.001)) - 1) / (2 * 0.001))
        ** 2
        - 1
    )
    return x


def scalar_to_support(x, support_size):
    """
    Transform a scalar to a categorical representation with (2 * support_size + 1) categories
    See paper appendix Network Architecture
    """
    # Reduce the scale (defined in https://arxiv.org/abs/1805.11593)
    x = torch.sign(x) * (torch.sqrt(torch.abs(x) + 1) - 1) + 0.001 * x

    # Encode on a vector
    x = torch.clamp(x, -support_size, support_size)
    floor = x.floor()
    prob = x - floor
    logits = torch.zeros(x.shape[0], x.shape[1], 2 * support_size + 1).to(x.device)
    logits.scatter_(
        2, (floor + support_size).long().unsqueeze(-1), (1 - prob).unsqueeze(-1)
    )
    indexes = floor + support_size + 1
    prob = prob.masked_fill_(2 * support_size < indexes, 0.0)
    indexes = indexes.masked_fill_(2 * support_size < indexes, 0.0)
    logits.scatter_(2, indexes.long().unsqueeze(-1), prob.unsqueeze(-1))
    return logits


def dict_to_cpu(dictionary):
    cpu_dict = {}
    for key, value in dictionary.items():
        if isinstance(value, torch.Tensor):
            cpu_dict[key] = value.cpu()
        elif isinstance(value, dict):
            cpu_dict[key] = dict_to_cpu(value)
        else:
            cpu_dict[key] = value
    return cpu_dict


def scale_gradient(tensor, scale):
    """Scales the gradient for the backward pass."""
    return tensor * scale + tensor.detach() * (1 - scale)


# -- self_play.py --
class MCTS:
    """
    Core Monte Carlo Tree Search algorithm.
    To decide on an action, we run N simulations, always starting at the root of
    the search tree and traversing the tree according to the UCB formula until we
    reach a leaf node.
    """

    def __init__(self, config):
        self.config = config

    def run(
        self,
        model,
        observation,
        legal_actions,
        to_play,
        add_exploration_noise,
        override_root_with=None,
    ):
        """
        At the root of the search tree we use the representation function to obtain a
        hidden state given the current observation.
        We then run a Monte Carlo Tree Search using only action sequences and the model
        learned by the network.
        """
        if override_root_with:
            root = override_root_with
            root_predicted_value = None
        else:
            root = Node(0)
            observation = (
                torch.tensor(observation)
                .float()
                .unsqueeze(0)
                .to(next(model.parameters()).device)
            )
            (
                root_predicted_value,
                reward,
                policy_logits,
                hidden_state,
            ) = model.initial_inference(observation)
            root_predicted_value = support_to_scalar(
                root_predicted_value, self.config.support_size
            ).item()
            reward = support_to_scalar(reward, self.config.support_size).item()
            assert (
                legal_actions
            ), f"Legal actions should not be an empty array. Got {legal_actions}."
            assert set(legal_actions).issubset(
                set(self.config.action_space)
            ), "Legal actions should be a subset of the action space."
            root.expand(
                legal_actions,
                to_play,
                reward,
                policy_logits,
                hidden_state,
            )

        if add_exploration_noise:
            root.add_exploration_noise(
                dirichlet_alpha=self.config.root_dirichlet_alpha,
                exploration_fraction=self.config.root_exploration_fraction,
            )

        min_max_stats = MinMaxStats()

        max_tree_depth = 0
        for _ in range(self.config.num_simulations):
            virtual_to_play = to_play
            node = root
            search_path = [node]
            current_tree_depth = 0

            while node.expanded():
                current_tree_depth += 1
                action, node = self.select_child(node, min_max_stats)
                search_path.append(node)

                # Players play turn by turn
                if virtual_to_play + 1 < len(self.config.players):
                    virtual_to_play = self.config.players[virtual_to_play + 1]
                else:
                    virtual_to_play = self.config.players[0]

            # Inside the search tree we use the dynamics function to obtain the next hidden
            # state given an action and the previous hidden state
            parent = search_path[-2]
            value, reward, policy_logits, hidden_state = model.recurrent_inference(
                parent.hidden_state,
                torch.tensor([[action]]).to(parent.hidden_state.device),
            )
            value = support_to_scalar(value, self.config.support_size).item()
            reward = support_to_scalar(reward, self.config.support_size).item()
            node.expand(
                self.config.action_space,
                virtual_to_play,
                reward,
                policy_logits,
                hidden_state,
            )

            self.backpropagate(search_path, value, virtual_to_play, min_max_stats)

            max_tree_depth = max(max_tree_depth, current_tree_depth)

        extra_info = {
            "max_tree_depth": max_tree_depth,
            "root_predicted_value": root_predicted_value,
        }
        return root, extra_info

    def select_child(self, node, min_max_stats):
        """
        Select the child with the highest UCB score.
        """
        max_ucb = max(
            self.ucb_score(node, child, min_max_stats)
            for action, child in node.children.items()
        )
        action = numpy.random.choice(
            [
                action
                for action, child in node.children.items()
                if self.ucb_score(node, child, min_max_stats) == max_ucb
            ]
        )
        return action, node.children[action]

    def ucb_score(self, parent, child, min_max_stats):
        """
        The score for a node is based on its value, plus an exploration bonus based on the prior.
        """
        pb_c = (
            math.log(
                (parent.visit_count + self.config.pb_c_base + 1) / self.config.pb_c_base
            )
            + self.config.pb_c_init
        )
        pb_c *= math.sqrt(parent.visit_count) / (child.visit_count + 1)

        prior_score = pb_c * child.prior

        if child.visit_count > 0:
            # Mean value Q
            value_score = min_max_stats.normalize(
                child.reward
                + self.config.discount
                * (child.value() if len(self.config.players) == 1 else -child.value())
            )
        else:
            value_score = 0

        return prior_score + value_score

    def backpropagate(self, search_path, value, to_play, min_max_stats):
        """
        At the end of a simulation, we propagate the evaluation all the way up the tree
        to the root.
        """
        if len(self.config.players) == 1:
            for node in reversed(search_path):
                node.value_sum += value
                node.visit_count += 1
                min_max_stats.update(node.reward + self.config.discount * node.value())

                value = node.reward + self.config.discount * value

        elif len(self.config.players) == 2:
            for node in reversed(search_path):
                node.value_sum += value if node.to_play == to_play else -value
                node.visit_count += 1
                min_max_stats.update(node.reward + self.config.discount * -node.value())

                value = (
                    -node.reward if node.to_play == to_play else node.reward
                ) + self.config.discount * value

        else:
            raise NotImplementedError("More than two player mode not implemented.")


class Node:
    def __init__(self, prior):
        self.visit_count = 0
        self.to_play = -1
        self.prior = prior
        self.value_sum = 0
        self.children = {}
        self.hidden_state = None
        self.reward = 0

    def expanded(self):
        return len(self.children) > 0

    def value(self):
        if self.visit_count == 0:
            return 0
        return self.value_sum / self.visit_count

    def expand(self, actions, to_play, reward, policy_logits, hidden_state):
        """
        We expand a node using the value, reward and policy prediction obtained from the
        neural network.
        """
        self.to_play = to_play
        self.reward = reward
        self.hidden_state = hidden_state

        policy_values = torch.softmax(
            torch.tensor([policy_logits[0][a] for a in actions]), dim=0
        ).tolist()
        policy = {a: policy_values[i] for i, a in enumerate(actions)}
        for action, p in policy.items():
            self.children[action] = Node(p)

    def add_exploration_noise(self, dirichlet_alpha, exploration_fraction):
        """
        At the start of each search, we add dirichlet noise to the prior of the root to
        encourage the search to explore new actions.
        """
        actions = list(self.children.keys())
        noise = numpy.random.dirichlet([dirichlet_alpha] * len(actions))
        frac = exploration_fraction
        for a, n in zip(actions, noise):
            self.children[a].prior = self.children[a].prior * (1 - frac) + n * frac


class MinMaxStats:
    """
    A class that holds the min-max values of the tree.
    """

    def __init__(self):
        self.maximum = -float("inf")
        self.minimum = float("inf")

    def update(self, value):
        self.maximum = max(self.maximum, value)
        self.minimum = min(self.minimum, value)

    def normalize(self, value):
        if self.maximum > self.minimum:
            # We normalize only when we have set the maximum and minimum values
            return (value - self.minimum) / (self.maximum - self.minimum)
        return value


def select_action(node, temperature):
    """
    Select action according to the visit count distribution and the temperature.
    The temperature is changed dynamically with the visit_softmax_temperature function
    in the config.
    """
    visit_counts = numpy.array(
        [child.visit_count for child in node.children.values()], dtype="int32"
    )
    actions = [action for action in node.children.keys()]
    if temperature == 0:
        action = actions[numpy.argmax(visit_counts)]
    elif temperature == float("inf"):
        action = numpy.random.choice(actions)
    else:
        # See paper appendix Data Generation
        visit_count_distribution = visit_counts ** (1 / temperature)
        visit_count_distribution = visit_count_distribution / sum(
            visit_count_distribution
        )
        action = numpy.random.choice(actions, p=visit_count_distribution)

    return action


# -- trainer.py --
class Trainer:
    def __init__(self, initial_checkpoint, config):
        self.config = config

        # Fix random generator seed
        numpy.random.seed(self.config.seed)
        torch.manual_seed(self.config.seed)

        # Initialize the network
        self.model = MuZeroFullyConnectedNetwork(*config.network_args)
        initialize(self.model)
        self.model.set_weights(copy.deepcopy(initial_checkpoint["weights"]) if initial_checkpoint["weights"] is not None else self.model.get_weights())
        self.model.to(torch.device("cuda" if self.config.train_on_gpu else "cpu"))
        self.model.train()

        self.training_step = initial_checkpoint["training_step"]

        # Initialize the optimizer
        if self.config.optimizer == "SGD":
            self.optimizer = torch.optim.SGD(
                self.model.parameters(),
                lr=self.config.lr_init,
                momentum=self.config.momentum,
                weight_decay=self.config.weight_decay,
            )
        elif self.config.optimizer == "Adam":
            self.optimizer = torch.optim.Adam(
                self.model.parameters(),
                lr=self.config.lr_init,
                weight_decay=self.config.weight_decay,
            )
        else:
            raise NotImplementedError(
                f"{self.config.optimizer} is not implemented. You can change the optimizer manually in trainer.py."
            )

        if initial_checkpoint["optimizer_state"] is not None:
            print("Loading optimizer...\\n")
            self.optimizer.load_state_dict(
                copy.deepcopy(initial_checkpoint["optimizer_state"])
            )

    def update_weights(self, batch):
        """
        Perform one training step.
        """

        (
            observation_batch,
            action_batch,
            target_value,
            target_reward,
            target_policy,
            weight_batch,
            gradient_scale_batch,
        ) = batch

        # Keep values as scalars for calculating the priorities for the prioritized replay
        target_value_scalar = numpy.array(target_value, dtype="float32")
        priorities = numpy.zeros_like(target_value_scalar)

        device = next(self.model.parameters()).device
        if self.config.PER:
            weight_batch = torch.tensor(weight_batch.copy()).float().to(device)
        observation_batch = (
            torch.tensor(numpy.array(observation_batch)).float().to(device)
        )
        action_batch = torch.tensor(action_batch).long().to(device).unsqueeze(-1)
        target_value = torch.tensor(target_value).float().to(device)
        target_reward = torch.tensor(target_reward).float().to(device)
        target_policy = torch.tensor(target_policy).float().to(device)
        gradient_scale_batch = torch.tensor(gradient_scale_batch).float().to(device)
        # observation_batch: batch, channels, height, width
        # action_batch: batch, num_unroll_steps+1, 1 (unsqueeze)
        # target_value: batch, num_unroll_steps+1
        # target_reward: batch, num_unroll_steps+1
        # target_policy: batch, num_unroll_steps+1, len(action_space)
        # gradient_scale_batch: batch, num_unroll_steps+1

        target_value = scalar_to_support(target_value, self.config.support_size)
        target_reward = scalar_to_support(
            target_reward, self.config.support_size
        )
        # target_value: batch, num_unroll_steps+1, 2*support_size+1
        # target_reward: batch, num_unroll_steps+1, 2*support_size+1

        ## Generate predictions
        value, reward, policy_logits, hidden_state = self.model.initial_inference(
            observation_batch
        )
        predictions = [(value, reward, policy_logits)]
        for i in range(1, action_batch.shape[1]):
            value, reward, policy_logits, hidden_state = self.model.recurrent_inference(
                hidden_state, action_batch[:, i]
            )
            # Scale the gradient at the start of the dynamics function (See paper appendix Training)
            hidden_state.register_hook(lambda grad: grad * 0.5)
            predictions.append((value, reward, policy_logits))
        # predictions: num_unroll_steps+1, 3, batch, 2*support_size+1 | 2*support_size+1 | 9 (according to the 2nd dim)

        ## Compute losses
        value_loss, reward_loss, policy_loss = (0, 0, 0)
        value, reward, policy_logits = predictions[0]
        # Ignore reward loss for the first batch step
        current_value_loss, _, current_policy_loss = self.loss_function(
            value.squeeze(-1),
            reward.squeeze(-1),
            policy_logits,
            target_value[:, 0],
            target_reward[:, 0],
            target_policy[:, 0],
        )
        value_loss += current_value_loss
        policy_loss += current_policy_loss
        # Compute priorities for the prioritized replay (See paper appendix Training)
        pred_value_scalar = (
            support_to_scalar(value, self.config.support_size)
            .detach()
            .cpu()
            .numpy()
            .squeeze()
        )
        priorities[:, 0] = (
            numpy.abs(pred_value_scalar - target_value_scalar[:, 0])
            ** self.config.PER_alpha
        )

        for i in range(1, len(predictions)):
            value, reward, policy_logits = predictions[i]
            (
                current_value_loss,
                current_reward_loss,
                current_policy_loss,
            ) = self.loss_function(
                value.squeeze(-1),
                reward.squeeze(-1),
                policy_logits,
                target_value[:, i],
                target_reward[:, i],
                target_policy[:, i],
            )

            # Scale gradient by the number of unroll steps (See paper appendix Training)
            current_value_loss.register_hook(
                lambda grad: grad / gradient_scale_batch[:, i]
            )
            current_reward_loss.register_hook(
                lambda grad: grad / gradient_scale_batch[:, i]
            )
            current_policy_loss.register_hook(
                lambda grad: grad / gradient_scale_batch[:, i]
            )

            value_loss += current_value_loss
            reward_loss += current_reward_loss
            policy_loss += current_policy_loss

            # Compute priorities for the prioritized replay (See paper appendix Training)
            pred_value_scalar = (
                support_to_scalar(value, self.config.support_size)
                .detach()
                .cpu()
                .numpy()
                .squeeze()
            )
            priorities[:, i] = (
                numpy.abs(pred_value_scalar - target_value_scalar[:, i])
                ** self.config.PER_alpha
            )

        # Scale the value loss, paper recommends by 0.25 (See paper appendix Reanalyze)
        loss = value_loss * self.config.value_loss_weight + reward_loss + policy_loss
        if self.config.PER:
            # Correct PER bias by using importance-sampling (IS) weights
            loss *= weight_batch
        # Mean over batch dimension (pseudocode do a sum)
        loss = loss.mean()

        # Optimize
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.training_step += 1

        return (
            priorities,
            # For log purpose
            loss.item(),
            value_loss.mean().item(),
            reward_loss.mean().item(),
            policy_loss.mean().item(),
        )

    def update_lr(self):
        """
        Update learning rate
        """
        lr = self.config.lr_init * self.config.lr_decay_rate ** (
            self.training_step / self.config.lr_decay_steps
        )
        for param_group in self.optimizer.param_groups:
            param_group["lr"] = lr

    @staticmethod
    def loss_function(
        value,
        reward,
        policy_logits,
        target_value,
        target_reward,
        target_policy,
    ):
        # Cross-entropy seems to have a better convergence than MSE
        value_loss = (-target_value * torch.nn.LogSoftmax(dim=1)(value)).sum(1)
        reward_loss = (-target_reward * torch.nn.LogSoftmax(dim=1)(reward)).sum(1)
        policy_loss = (-target_policy * torch.nn.LogSoftmax(dim=1)(policy_logits)).sum(
            1
        )
        return value_loss, reward_loss, policy_loss


# -- the loop, after Trainer.continuous_update_weights --
trainer = Trainer({"weights": None, "optimizer_state": None, "training_step": 0}, config)
for batch in batches:
    trainer.update_lr()
    (
        priorities,
        total_loss,
        value_loss,
        reward_loss,
        policy_loss,
    ) = trainer.update_weights(batch)
    record.append([total_loss, value_loss, reward_loss, policy_loss])
    priority_record.append(priorities)
    record.append(params_of(trainer.model))
    record.append(trainer.optimizer.param_groups[0]["lr"])

with torch.no_grad():
    observation = torch.tensor(numpy.array(batches[0][0])).float()
    value, reward, policy_logits, hidden_state = trainer.model.initial_inference(observation)
    record.append(support_to_scalar(value.double(), config.support_size).numpy().copy())
    record.append(reward.numpy().copy())
    record.append(hidden_state.numpy().copy())
    support = scalar_to_support(torch.tensor([[0.5, 3.7, -120.0, 2.0]]), config.support_size)
    record.append(support.numpy().copy())
    record.append(support_to_scalar(torch.log(support[0] + 1e-12).double(), config.support_size).numpy().copy())
record.append(sorted(trainer.model.get_weights()))

checkpoint = {
    "weights": copy.deepcopy(trainer.model.get_weights()),
    "optimizer_state": copy.deepcopy(dict_to_cpu(trainer.optimizer.state_dict())),
    "training_step": trainer.training_step,
}
resumed = Trainer(checkpoint, config)
resumed.update_lr()
record.append(resumed.update_weights(batches[0])[1:])
record.append(params_of(resumed.model))

trainer.model.eval()
with torch.no_grad():
    for observation in batches[1][0][:2]:
        root, mcts_info = MCTS(config).run(trainer.model, observation, [0, 2], 0, True)
        record.append(mcts_info["max_tree_depth"])
        record.append([[a, c.visit_count] for a, c in root.children.items()])
        priority_record.append([mcts_info["root_predicted_value"]] + [x for c in root.children.values() for x in (c.prior, c.value(), c.reward)])
        record.append(int(select_action(root, 1.0)))
'''

MUZERO_STEPS = [
    ("\nimport numpy\nimport torch\n", "\nimport numpy\nimport retrograd as torch\n"),
    (
        "        loss.backward()\n        self.optimizer.step()\n",
        "        grads = loss.backward()\n        self.optimizer.step(grads)\n",
    ),
]


def _muzero_batches(rng, batch=4, unroll=3, actions=3, batches=3):
    """``ReplayBuffer.get_batch``'s tuples: observations, actions, value and reward targets
    (scalars), policy targets, PER weights and the gradient scales."""
    out = []
    for _ in range(batches):
        out.append(
            [
                list(rng.standard_normal((batch, 1, 1, 4))),
                rng.integers(0, actions, (batch, unroll + 1)).tolist(),
                rng.uniform(-30, 30, (batch, unroll + 1)).tolist(),
                rng.uniform(-3, 3, (batch, unroll + 1)).tolist(),
                rng.dirichlet(np.ones(actions), (batch, unroll + 1)).tolist(),
                rng.uniform(0.5, 1.0, batch),
                [[unroll + 1] * (unroll + 1) for _ in range(batch)],
            ]
        )
    return out


@pytest.mark.parametrize(
    "scaling, optimizer", [("hook", "Adam"), ("hook", "SGD"), ("scale_gradient", "Adam")]
)
def test_muzero_trains_resumes_and_searches_as_torch(scaling, optimizer):
    batches = _muzero_batches(np.random.default_rng(8906))
    source = MUZERO_SOURCE
    if scaling == "scale_gradient":
        source = source.replace(
            "hidden_state.register_hook(lambda grad: grad * 0.5)",
            "hidden_state = scale_gradient(hidden_state, 0.5)",
        )
    initialize = initializer()
    records = []
    for lib in (torch, rg):
        record, loose = [], []
        config = types.SimpleNamespace(
            seed=0, network_args=((1, 1, 4), 0, 3, 5, [8], [8], [8], [8], [8], 10),
            train_on_gpu=False, optimizer=optimizer, lr_init=0.02, momentum=0.9,
            weight_decay=1e-4, PER=True, PER_alpha=0.5, support_size=10, value_loss_weight=0.25,
            lr_decay_rate=0.9, lr_decay_steps=2, action_space=list(range(3)), players=list(range(1)),
            num_simulations=6, root_dirichlet_alpha=0.25, root_exploration_fraction=0.25,
            pb_c_base=19652, pb_c_init=1.25, discount=0.997,
        )  # fmt: skip
        text = source if lib is torch else port(source, MUZERO_STEPS)
        with contextlib.redirect_stdout(io.StringIO()):
            run_source(
                text,
                lib,
                record=record,
                priority_record=loose,
                batches=batches,
                config=config,
                copy=copy,
                initialize=initialize,
                params_of=params_of,
            )
        records.append((record, loose))
    (theirs, their_loose), (ours, our_loose) = records
    assert theirs[-6] == 4  # the deepest MCTS path
    assert_records_agree(our_loose, their_loose, rtol=1e-3, atol=1e-4)
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)


# -- cnn-text-classification-pytorch ------------------------------------------------------------
TEXTCNN_SOURCE = """
import os
import sys
import torch
import torch.autograd as autograd
import torch.nn as nn
import torch.nn.functional as F


# -- model.py --
class CNN_Text(nn.Module):
    
    def __init__(self, args):
        super(CNN_Text, self).__init__()
        self.args = args
        
        V = args.embed_num
        D = args.embed_dim
        C = args.class_num
        Ci = 1
        Co = args.kernel_num
        Ks = args.kernel_sizes

        self.embed = nn.Embedding(V, D)
        self.convs = nn.ModuleList([nn.Conv2d(Ci, Co, (K, D)) for K in Ks])
        self.dropout = nn.Dropout(args.dropout)
        self.fc1 = nn.Linear(len(Ks) * Co, C)

        if self.args.static:
            self.embed.weight.requires_grad = False

    def forward(self, x):
        x = self.embed(x)  # (N, W, D)
    
        x = x.unsqueeze(1)  # (N, Ci, W, D)

        x = [F.relu(conv(x)).squeeze(3) for conv in self.convs]  # [(N, Co, W), ...]*len(Ks)

        x = [F.max_pool1d(i, i.size(2)).squeeze(2) for i in x]  # [(N, Co), ...]*len(Ks)

        x = torch.cat(x, 1)

        x = self.dropout(x)  # (N, len(Ks)*Co)
        logit = self.fc1(x)  # (N, C)
        return logit


# -- train.py --
def train(train_iter, dev_iter, model, args):
    if args.cuda:
        model.cuda()

    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    steps = 0
    best_acc = 0
    last_step = 0
    for epoch in range(1, args.epochs+1):
        for batch in train_iter:
            feature, target = batch.text, batch.label
            feature.t_(), target.sub_(1)  # batch first, index align
            if args.cuda:
                feature, target = feature.cuda(), target.cuda()

            optimizer.zero_grad()
            logit = model(feature)

            #print('logit vector', logit.size())
            #print('target vector', target.size())
            loss = F.cross_entropy(logit, target)
            loss.backward()
            optimizer.step()
            record.append(params_of(model))

            steps += 1
            if steps % args.log_interval == 0:
                corrects = (torch.max(logit, 1)[1].view(target.size()).data == target.data).sum()
                accuracy = 100.0 * corrects/batch.batch_size
                sys.stdout.write(
                    '\\rBatch[{}] - loss: {:.6f}  acc: {:.4f}%({}/{})'.format(steps, 
                                                                             loss.item(), 
                                                                             accuracy.item(),
                                                                             corrects.item(),
                                                                             batch.batch_size))
            if steps % args.test_interval == 0:
                dev_acc = eval(dev_iter, model, args)
                if dev_acc > best_acc:
                    best_acc = dev_acc
                    last_step = steps
                    if args.save_best:
                        save(model, args.save_dir, 'best', steps)
                else:
                    if steps - last_step >= args.early_stop:
                        print('early stop by {} steps.'.format(args.early_stop))
            elif steps % args.save_interval == 0:
                save(model, args.save_dir, 'snapshot', steps)


def eval(data_iter, model, args):
    model.eval()
    corrects, avg_loss = 0, 0
    for batch in data_iter:
        feature, target = batch.text, batch.label
        feature.t_(), target.sub_(1)  # batch first, index align
        if args.cuda:
            feature, target = feature.cuda(), target.cuda()

        logit = model(feature)
        loss = F.cross_entropy(logit, target, size_average=False)

        avg_loss += loss.item()
        corrects += (torch.max(logit, 1)
                     [1].view(target.size()).data == target.data).sum()

    size = len(data_iter.dataset)
    avg_loss /= size
    accuracy = 100.0 * corrects/size
    print('\\nEvaluation - loss: {:.6f}  acc: {:.4f}%({}/{}) \\n'.format(avg_loss, 
                                                                       accuracy, 
                                                                       corrects, 
                                                                       size))
    record.append([avg_loss, accuracy.item(), corrects.item()])
    return accuracy


def predict(text, model, text_field, label_feild, cuda_flag):
    assert isinstance(text, str)
    model.eval()
    # text = text_field.tokenize(text)
    text = text_field.preprocess(text)
    text = [[text_field.vocab.stoi[x] for x in text]]
    x = torch.tensor(text)
    x = autograd.Variable(x)
    if cuda_flag:
        x = x.cuda()
    print(x)
    output = model(x)
    _, predicted = torch.max(output, 1)
    return label_feild.vocab.itos[predicted.item()+1]


def save(model, save_dir, save_prefix, steps):
    if not os.path.isdir(save_dir):
        os.makedirs(save_dir)
    save_prefix = os.path.join(save_dir, save_prefix)
    save_path = '{}_steps_{}.pt'.format(save_prefix, steps)
    torch.save(model.state_dict(), save_path)


# -- main.py, after the data are loaded --
args.embed_num = len(text_field.vocab)
args.class_num = len(label_field.vocab) - 1
args.cuda = (not args.no_cuda) and torch.cuda.is_available(); del args.no_cuda
args.kernel_sizes = [int(k) for k in args.kernel_sizes.split(',')]
args.save_dir = os.path.join(args.save_dir, 'run')

cnn = CNN_Text(args)
initialize(cnn)
train(make_iter(train_data), make_iter(dev_data), cnn, args)
record.append(predict("a good good movie", cnn, text_field, label_field, args.cuda))
record.append(sorted(os.listdir(args.save_dir)))
best = CNN_Text(args)
best.load_state_dict(torch.load(os.path.join(args.save_dir, 'best_steps_{}.pt'.format(args.test_interval))))
record.append(params_of(best))
"""

TEXTCNN_STEPS = [
    (
        "\nimport torch\nimport torch.autograd as autograd\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "\nimport retrograd as torch\nimport retrograd.autograd as autograd\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\n",
    ),
    (
        "            loss.backward()\n            optimizer.step()\n",
        "            grads = loss.backward()\n            optimizer.step(grads)\n",
    ),
]


class _Vocab:
    def __init__(self, itos):
        self.itos, self.stoi = itos, {s: i for i, s in enumerate(itos)}

    def __len__(self):
        return len(self.itos)


class _Field:
    """torchtext's ``Field`` as ``predict`` reads it."""

    def __init__(self, itos):
        self.vocab = _Vocab(itos)

    def preprocess(self, text):
        return text.split()


def _iterator(lib, data):
    """torchtext's ``BucketIterator`` as ``train``/``eval`` read it: fresh batches at every
    pass (``feature.t_()`` transposes them in place), ``text`` ``[width, batch]`` and 1-based
    ``label``, ``batch_size``, and ``len(data_iter.dataset)``."""

    class Iterator:
        dataset = [None] * sum(len(labels) for _, labels in data)

        def __iter__(self):
            return iter(
                [
                    types.SimpleNamespace(
                        text=lib.tensor(text), label=lib.tensor(labels), batch_size=len(labels)
                    )
                    for text, labels in data
                ]
            )

    return Iterator()


@pytest.mark.parametrize("static", [False, True])
def test_textcnn_trains_and_predicts_as_torch(tmp_path, static):
    words = [
        "<unk>",
        "<pad>",
        "a",
        "good",
        "bad",
        "movie",
        "plot",
        "very",
        "not",
        "fun",
        "dull",
        "the",
    ]
    text_field, label_field = _Field(words), _Field(["<unk>", "positive", "negative"])
    rng = np.random.default_rng(8907)

    def batches(n, size, width):
        return [
            (rng.integers(2, len(words), (width, size)), rng.integers(1, 3, size)) for _ in range(n)
        ]

    train_data, dev_data = batches(4, 5, 7), batches(2, 3, 6)
    initialize = initializer()
    records, logs = [], []
    for lib in (torch, rg):
        record = []
        text = TEXTCNN_SOURCE if lib is torch else port(TEXTCNN_SOURCE, TEXTCNN_STEPS)
        args = types.SimpleNamespace(
            lr=0.01, epochs=1, log_interval=1, test_interval=2, save_interval=3, early_stop=1,
            save_best=True, save_dir=str(tmp_path / lib.__name__), embed_dim=6, kernel_num=4,
            kernel_sizes="2,3,4", dropout=0.0, static=static, no_cuda=True,
        )  # fmt: skip
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            run_source(
                text,
                lib,
                record=record,
                text_field=text_field,
                label_field=label_field,
                train_data=train_data,
                dev_data=dev_data,
                make_iter=lambda data, lib=lib: _iterator(lib, data),
                args=args,
                initialize=initialize,
                params_of=params_of,
            )
        records.append(record)
        logs.append(out.getvalue())
    theirs, ours = records
    assert logs[0].count("Evaluation - loss: ") == 2

    # the numbers printed to 6 digits are compared in the records (their last digit may
    # round either way); the rest of the log exactly
    def masked(log):
        return re.sub(r"\d+\.\d+", "#", log)

    assert masked(logs[1]) == masked(logs[0])
    assert "best_steps_2.pt" in theirs[-2]
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)


# -- node2vec (PyTorch Geometric) -----------------------------------------------------------------
NODE2VEC_SOURCE = '''
import torch
from torch import Tensor
from torch.nn import Embedding
from torch.utils.data import DataLoader

EPS = 1e-15


# -- torch_geometric/nn/models/node2vec.py (the walk without torch_cluster: p = q = 1) --
class Node2Vec(torch.nn.Module):
    def __init__(
        self,
        edge_index,
        embedding_dim,
        walk_length,
        context_size,
        walks_per_node=1,
        p=1.0,
        q=1.0,
        num_negative_samples=1,
        num_nodes=None,
        sparse=False,
    ):
        super().__init__()
        self.random_walk_fn = random_walk

        self.num_nodes = int(edge_index.max()) + 1 if num_nodes is None else num_nodes

        row, col = edge_index
        perm = (row * self.num_nodes + col).argsort()
        row, col = row[perm], col[perm]
        deg = torch.bincount(row, minlength=self.num_nodes)
        self.rowptr = torch.cat([deg.new_zeros(1), deg.cumsum(0)])
        self.col = col

        assert walk_length >= context_size

        self.EPS = 1e-15
        self.embedding_dim = embedding_dim
        self.walk_length = walk_length - 1
        self.context_size = context_size
        self.walks_per_node = walks_per_node
        self.p = p
        self.q = q
        self.num_negative_samples = num_negative_samples

        self.embedding = Embedding(self.num_nodes, embedding_dim,
                                   sparse=sparse)

        self.reset_parameters()

    def reset_parameters(self):
        r"""Resets all learnable parameters of the module."""
        self.embedding.reset_parameters()

    def forward(self, batch=None):
        """Returns the embeddings for the nodes in :obj:`batch`."""
        emb = self.embedding.weight
        return emb if batch is None else emb.index_select(0, batch)

    def loader(self, **kwargs):
        return DataLoader(range(self.num_nodes), collate_fn=self.sample,
                          **kwargs)

    @torch.jit.export
    def pos_sample(self, batch):
        batch = batch.repeat(self.walks_per_node)
        rw = self.random_walk_fn(self.rowptr, self.col, batch,
                                 self.walk_length, self.p, self.q)
        if not isinstance(rw, Tensor):
            rw = rw[0]

        walks = []
        num_walks_per_rw = 1 + self.walk_length + 1 - self.context_size
        for j in range(num_walks_per_rw):
            walks.append(rw[:, j:j + self.context_size])
        return torch.cat(walks, dim=0)

    @torch.jit.export
    def neg_sample(self, batch):
        batch = batch.repeat(self.walks_per_node * self.num_negative_samples)

        rw = torch.randint(self.num_nodes, (batch.size(0), self.walk_length),
                           dtype=batch.dtype, device=batch.device)
        rw = torch.cat([batch.view(-1, 1), rw], dim=-1)

        walks = []
        num_walks_per_rw = 1 + self.walk_length + 1 - self.context_size
        for j in range(num_walks_per_rw):
            walks.append(rw[:, j:j + self.context_size])
        return torch.cat(walks, dim=0)

    @torch.jit.export
    def sample(self, batch):
        if not isinstance(batch, Tensor):
            batch = torch.tensor(batch)
        return self.pos_sample(batch), self.neg_sample(batch)

    @torch.jit.export
    def loss(self, pos_rw, neg_rw):
        r"""Computes the loss given positive and negative random walks."""

        # Positive loss.
        start, rest = pos_rw[:, 0], pos_rw[:, 1:].contiguous()

        h_start = self.embedding(start).view(pos_rw.size(0), 1,
                                             self.embedding_dim)
        h_rest = self.embedding(rest.view(-1)).view(pos_rw.size(0), -1,
                                                    self.embedding_dim)

        out = (h_start * h_rest).sum(dim=-1).view(-1)
        pos_loss = -torch.log(torch.sigmoid(out) + self.EPS).mean()

        # Negative loss.
        start, rest = neg_rw[:, 0], neg_rw[:, 1:].contiguous()

        h_start = self.embedding(start).view(neg_rw.size(0), 1,
                                             self.embedding_dim)
        h_rest = self.embedding(rest.view(-1)).view(neg_rw.size(0), -1,
                                                    self.embedding_dim)

        out = (h_start * h_rest).sum(dim=-1).view(-1)
        neg_loss = -torch.log(1 - torch.sigmoid(out) + self.EPS).mean()

        return pos_loss + neg_loss

    def __repr__(self) -> str:
        return (f'{self.__class__.__name__}({self.embedding.weight.size(0)}, '
                f'{self.embedding.weight.size(1)})')


# -- examples/node2vec.py --
device = 'cpu'
model = Node2Vec(
    data.edge_index,
    embedding_dim=8,
    walk_length=6,
    context_size=3,
    walks_per_node=2,
    num_negative_samples=1,
    p=1.0,
    q=1.0,
    sparse=True,
).to(device)
initialize(model)
record.append(repr(model))

num_workers = 0
loader = model.loader(batch_size=4, shuffle=False, num_workers=num_workers)
optimizer = torch.optim.SparseAdam(list(model.parameters()), lr=0.01)


def train():
    model.train()
    total_loss = 0
    for pos_rw, neg_rw in loader:
        optimizer.zero_grad()
        loss = model.loss(pos_rw.to(device), neg_rw.to(device))
        loss.backward()
        optimizer.step()
        total_loss += loss.item()
        record.append(pos_rw.tolist())
        record.append(params_of(model))
    return total_loss / len(loader)


@torch.no_grad()
def test():
    model.eval()
    z = model()
    z = z / z.norm(dim=-1, keepdim=True)
    sim = z[data.test_idx] @ z.t()
    return sim.numpy().copy()


for epoch in range(1, 3):
    loss = train()
    print(f'Epoch: {epoch:03d}, Loss: {loss:.4f}')
    record.append(loss)
record.append(test())
record.append({k: v.numpy().copy() for k, v in optimizer.state[model.embedding.weight].items() if k != 'step'})
'''

NODE2VEC_STEPS = [
    (
        "\nimport torch\nfrom torch import Tensor\nfrom torch.nn import Embedding\n",
        "\nimport retrograd as torch\nfrom retrograd import Tensor\nfrom retrograd.nn import Embedding\n",
    ),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


def _random_walk(lib, seed):
    """torch_cluster's ``random_walk(rowptr, col, start, walk_length, p, q)`` for ``p = q =
    1``: uniform steps along the CSR graph, from a seeded NumPy stream; returns ``(walks,
    None)`` as it does."""
    rng = np.random.default_rng(seed)

    def random_walk(rowptr, col, start, walk_length, p, q):
        rowptr, col = np.asarray(rowptr.tolist()), np.asarray(col.tolist())
        walks = []
        for node in start.tolist():
            walk = [node]
            for _ in range(walk_length):
                lo, hi = rowptr[walk[-1]], rowptr[walk[-1] + 1]
                walk.append(int(col[rng.integers(lo, hi)]) if hi > lo else walk[-1])
            walks.append(walk)
        return lib.tensor(walks, dtype=lib.int64), None

    return random_walk


def test_node2vec_sparse_embedding_trains_as_torch():
    rng = np.random.default_rng(8908)
    nodes = 10
    edges = {(i, (i + 1) % nodes) for i in range(nodes)} | {
        ((i + 1) % nodes, i) for i in range(nodes)
    }
    for _ in range(6):
        a, b = (int(v) for v in rng.choice(nodes, 2, replace=False))
        edges |= {(a, b), (b, a)}
    edge_index = np.array(sorted(edges)).T
    initialize = initializer()
    records, logs = [], []
    for lib in (torch, rg):
        record = []
        text = (
            NODE2VEC_SOURCE
            if lib is torch
            else port(NODE2VEC_SOURCE, NODE2VEC_STEPS).replace("from torch.", "from retrograd.")
        )
        data = types.SimpleNamespace(
            edge_index=lib.tensor(edge_index), test_idx=lib.tensor([0, 3, 7])
        )
        out = io.StringIO()
        with contextlib.redirect_stdout(out), SharedDraws(lib, 8908):
            run_source(
                text,
                lib,
                record=record,
                data=data,
                random_walk=_random_walk(lib, 8908),
                initialize=initialize,
                params_of=params_of,
            )
        records.append(record)
        logs.append(out.getvalue())
    theirs, ours = records
    assert theirs[0] == "Node2Vec(10, 8)" and logs[0].count("Epoch: ") == 2
    assert logs[1] == logs[0]
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)
