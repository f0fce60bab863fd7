# ruff: noqa: E501  (the example scripts are kept as written, long lines included)
"""More official PyTorch examples (github.com/pytorch/examples, BSD-3-Clause) ported as in
``test_example_ports.py``: the script's text as torch runs it, the port made from it by
changing only the gradient lines (:func:`port`), both run in float64 from torch's weights and
the same random draws, agreeing to 1e-9 at every step.

- ``mnist/main.py``: Conv2d, Dropout, ``F.max_pool2d``, ``torch.flatten``, ``log_softmax``,
  ``nll_loss`` (mean and sum), Adadelta, StepLR, ``argmax(keepdim=)``, ``eq``/``view_as``;
- ``super_resolution/model.py`` with its training step: PixelShuffle, ``init.orthogonal_``,
  ``init.calculate_gain``, MSELoss, Adam, PSNR with ``math.log10``;
- ``reinforcement_learning/reinforce.py`` and ``actor_critic.py`` (in float32, as written:
  agreement to float32 rounding): Categorical (sample, log_prob), softmax, ``torch.tensor`` of
  Python floats and of a deque, ``std``, ``np.finfo`` eps, ``smooth_l1_loss``, ``torch.stack``;
- ``super_resolution``'s ``torch.save(model, path)`` of the whole module, loaded back;
- ``time_sequence_prediction/train.py``: LSTMCell, ``split``, ``torch.cat(dim=)``,
  ``.double()``, LBFGS stepping with a closure (whose port returns ``loss, grads``);
- ``fast_neural_style``: TransformerNet (ReflectionPad2d, InstanceNorm2d affine, Upsample),
  a VGG-shaped feature extractor with frozen parameters (``requires_grad = False``), the gram
  matrix by ``bmm``, ``new_tensor``, in-place ``div_`` on a network output;
- ``siamese_network/main.py``: ``test_example_port_siamese.py`` (its own file: it is the
  heaviest, and pytest-xdist runs a file's tests on one worker).

Random draws the two libraries make differently (dropout masks, the categorical sample) come
from one seeded NumPy stream in the harness, as ``randn`` does in ``test_example_ports``.
"""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest
import torch

import retrograd as rg
from test_example_ports import TOLERANCE, namespaces, port, state_of


class DropoutMasks:
    """One seeded stream of keep-masks for ``nn.Dropout`` in training mode, for both
    libraries (the library's own dropout runs in eval mode)."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)

    def patch(self, monkeypatch, lib):
        original = lib.nn.Dropout.forward
        masks = self

        def forward(self, x):
            if not self.training or self.p == 0.0:
                return original(self, x)
            keep = masks.rng.uniform(size=tuple(x.shape)) >= self.p
            return x * lib.tensor(keep / (1.0 - self.p), dtype=x.dtype)

        monkeypatch.setattr(lib.nn.Dropout, "forward", forward)


def assert_records_agree(ours, theirs, noise_driven=()):
    """Values and parameters agree to 1e-9; ``noise_driven`` parameters (whose true gradient
    is zero, see the fast neural style test) to 1e-8."""
    assert len(ours) == len(theirs)
    for (mine, mine_params), (reference, reference_params) in zip(ours, theirs):
        np.testing.assert_allclose(mine, reference, **TOLERANCE)
        assert (mine_params is None) == (reference_params is None)
        if reference_params is not None:
            assert list(mine_params) == list(reference_params)
            for name, value in reference_params.items():
                tolerance = {"rtol": 1e-8, "atol": 1e-8} if name in noise_driven else TOLERANCE
                np.testing.assert_allclose(mine_params[name], value, **tolerance, err_msg=name)


def run_both(run, source, replacements, **kwargs):
    """``run(lib, source, torch_state)`` on torch, then on the port from torch's weights;
    both runs' records must agree."""
    torch.manual_seed(0)
    initial, theirs = run(torch, source, None, **kwargs)
    start, ours = run(rg, port(source, replacements), initial, **kwargs)
    for name, value in initial.items():
        np.testing.assert_array_equal(start[name], value)
    assert_records_agree(ours, theirs)
    return ours


# -- mnist/main.py ---------------------------------------------------------------------------------
MNIST_SOURCE = """
class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = self.conv1(x)
        x = F.relu(x)
        x = self.conv2(x)
        x = F.relu(x)
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = self.fc1(x)
        x = F.relu(x)
        x = self.dropout2(x)
        x = self.fc2(x)
        output = F.log_softmax(x, dim=1)
        return output


def train(args, model, device, train_loader, optimizer, epoch):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        record(loss.item(), model)
        if batch_idx % args.log_interval == 0:
            print('Train Epoch: {} [{}/{} ({:.0f}%)]\\tLoss: {:.6f}'.format(
                epoch, batch_idx * len(data), len(train_loader.dataset),
                100. * batch_idx / len(train_loader), loss.item()))
            if args.dry_run:
                break


def test(model, device, test_loader):
    model.eval()
    test_loss = 0
    correct = 0
    with torch.no_grad():
        for data, target in test_loader:
            data, target = data.to(device), target.to(device)
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction='sum').item()  # sum up batch loss
            pred = output.argmax(dim=1, keepdim=True)  # get the index of the max log-probability
            correct += pred.eq(target.view_as(pred)).sum().item()

    test_loss /= len(test_loader.dataset)
    record([test_loss, correct], None)

    print('\\nTest set: Average loss: {:.4f}, Accuracy: {}/{} ({:.0f}%)\\n'.format(
        test_loss, correct, len(test_loader.dataset),
        100. * correct / len(test_loader.dataset)))

# -- (the harness: the model made, float64, torch's weights) --
model = Net().to(device)
optimizer = optim.Adadelta(model.parameters(), lr=args.lr)

scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
for epoch in range(1, args.epochs + 1):
    train(args, model, device, train_loader, optimizer, epoch)
    test(model, device, test_loader)
    scheduler.step()
    record(scheduler.get_last_lr(), None)

if args.save_model:
    torch.save(model.state_dict(), save_path)
"""

MNIST_PORT = [
    ("        loss.backward()\n", "        grads = loss.backward()\n"),
    ("        optimizer.step()\n", "        optimizer.step(grads)\n"),
]


def _run_mnist(lib, source, torch_state, monkeypatch, tmp_path):
    batch = 4
    rng = np.random.default_rng(3)
    images = (rng.uniform(0.0, 1.0, (3 * batch, 1, 28, 28)) - 0.1307) / 0.3081
    labels = rng.integers(0, 10, 3 * batch)
    data_module = lib.utils.data

    def loader(rows):
        dataset = data_module.TensorDataset(lib.tensor(images[rows]), lib.tensor(labels[rows]))
        return data_module.DataLoader(dataset, batch_size=batch)

    records: list = []
    DropoutMasks(13).patch(monkeypatch, lib)
    ours, theirs = namespaces(
        args=types.SimpleNamespace(
            lr=1.0, gamma=0.7, epochs=2, log_interval=1, dry_run=False, save_model=True
        ),
        train_loader=loader(slice(0, 2 * batch)),
        test_loader=loader(slice(2 * batch, 3 * batch)),
        device=lib.device("cpu"),
        StepLR=lib.optim.lr_scheduler.StepLR,
        save_path=str(tmp_path / f"mnist_cnn_{lib.__name__}.pt"),
        record=lambda value, model: records.append(
            (value, None if model is None else state_of(model))
        ),
    )
    namespace = ours if lib is rg else theirs
    definitions, loop = source.split(
        "# -- (the harness: the model made, float64, torch's weights) --"
    )
    make, loop = loop.split("\nscheduler = ")
    exec(compile(definitions + make, "mnist_main.py", "exec"), namespace)
    model = namespace["model"].double()
    if torch_state is not None:
        model.load_state_dict(torch_state)
    initial = state_of(model)
    exec(compile("scheduler = " + loop, "mnist_main.py", "exec"), namespace)
    saved = lib.load(namespace["save_path"])
    records.append(([0.0], {k: np.asarray(v) for k, v in saved.items()}))
    return initial, records


def test_the_mnist_example_ports_changing_only_the_gradient_lines(monkeypatch, tmp_path):
    ours = run_both(
        _run_mnist, MNIST_SOURCE, MNIST_PORT, monkeypatch=monkeypatch, tmp_path=tmp_path
    )
    assert len(ours) == 2 * (2 + 1 + 1) + 1  # per epoch: 2 steps, a test, the lr; the checkpoint
    assert ours[3][0] == pytest.approx([0.7])


# -- reinforcement_learning: reinforce.py and actor_critic.py --------------------------------------
class CartPole:
    """gym's ``CartPole-v1`` dynamics (Euler steps, float32 observations), seeded from NumPy:
    the stand-in for ``gym.make('CartPole-v1')``, which neither library depends on."""

    spec = types.SimpleNamespace(reward_threshold=475.0)

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)

    def reset(self, seed=None):
        self.state = self.rng.uniform(-0.05, 0.05, 4)
        return np.array(self.state, dtype=np.float32), {}

    def step(self, action):
        x, x_dot, theta, theta_dot = self.state
        force = 10.0 if action == 1 else -10.0
        cos, sin = np.cos(theta), np.sin(theta)
        temp = (force + 0.05 * theta_dot**2 * sin) / 1.1
        theta_acc = (9.8 * sin - cos * temp) / (0.5 * (4.0 / 3.0 - 0.1 * cos**2 / 1.1))
        x_acc = temp - 0.05 * theta_acc * cos / 1.1
        x, x_dot = x + 0.02 * x_dot, x_dot + 0.02 * x_acc
        theta, theta_dot = theta + 0.02 * theta_dot, theta_dot + 0.02 * theta_acc
        self.state = np.array([x, x_dot, theta, theta_dot])
        done = bool(abs(x) > 2.4 or abs(theta) > 12 * 2 * np.pi / 360)
        return np.array(self.state, dtype=np.float32), 1.0, done, False, {}


class CategoricalDraws:
    """One seeded stream of uniforms for ``Categorical.sample`` in both libraries: the index
    is where the draw falls in the cumulative probabilities."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)

    def patch(self, monkeypatch, lib):
        draws = self

        def sample(self, sample_shape=()):
            probs = np.asarray(self.probs.detach(), dtype=np.float64)
            probs = probs / probs.sum(-1, keepdims=True)
            u = draws.rng.uniform(size=tuple(sample_shape) + probs.shape[:-1])
            index = (u[..., None] > np.cumsum(probs, -1)).sum(-1)
            return lib.tensor(np.minimum(index, probs.shape[-1] - 1))

        monkeypatch.setattr(lib.distributions.Categorical, "sample", sample)


REINFORCE_SOURCE = """
class Policy(nn.Module):
    def __init__(self):
        super(Policy, self).__init__()
        self.affine1 = nn.Linear(4, 128)
        self.dropout = nn.Dropout(p=0.6)
        self.affine2 = nn.Linear(128, 2)

        self.saved_log_probs = []
        self.rewards = []

    def forward(self, x):
        x = self.affine1(x)
        x = self.dropout(x)
        x = F.relu(x)
        action_scores = self.affine2(x)
        return F.softmax(action_scores, dim=1)


policy = Policy()
optimizer = optim.Adam(policy.parameters(), lr=1e-2)
eps = np.finfo(np.float32).eps.item()


def select_action(state):
    state = torch.from_numpy(state).float().unsqueeze(0)
    probs = policy(state)
    m = Categorical(probs)
    action = m.sample()
    policy.saved_log_probs.append(m.log_prob(action))
    return action.item()


def finish_episode():
    R = 0
    policy_loss = []
    returns = deque()
    for r in policy.rewards[::-1]:
        R = r + args.gamma * R
        returns.appendleft(R)
    returns = torch.tensor(returns)
    returns = (returns - returns.mean()) / (returns.std() + eps)
    for log_prob, R in zip(policy.saved_log_probs, returns):
        policy_loss.append(-log_prob * R)
    optimizer.zero_grad()
    policy_loss = torch.cat(policy_loss).sum()
    policy_loss.backward()
    optimizer.step()
    record(policy_loss.item(), policy)
    del policy.rewards[:]
    del policy.saved_log_probs[:]


def main():
    running_reward = 10
    for i_episode in count(1):
        state, _ = env.reset(seed=args.seed)
        ep_reward = 0
        for t in range(1, 10000):  # Don't infinite loop while learning
            action = select_action(state)
            state, reward, done, _, _ = env.step(action)
            if args.render:
                env.render()
            policy.rewards.append(reward)
            ep_reward += reward
            if done:
                break

        running_reward = 0.05 * ep_reward + (1 - 0.05) * running_reward
        finish_episode()
        if i_episode % args.log_interval == 0:
            print('Episode {}\\tLast reward: {:.2f}\\tAverage reward: {:.2f}'.format(
                  i_episode, ep_reward, running_reward))
        if running_reward > env.spec.reward_threshold:
            print("Solved! Running reward is now {} and "
                  "the last episode runs to {} time steps!".format(running_reward, t))
            break
"""

REINFORCE_PORT = [
    ("    policy_loss.backward()\n", "    grads = policy_loss.backward()\n"),
    ("    optimizer.step()\n", "    optimizer.step(grads)\n"),
]

ACTOR_CRITIC_SOURCE = """
SavedAction = namedtuple('SavedAction', ['log_prob', 'value'])


class Policy(nn.Module):
    \"\"\"
    implements both actor and critic in one model
    \"\"\"
    def __init__(self):
        super(Policy, self).__init__()
        self.affine1 = nn.Linear(4, 128)

        # actor's layer
        self.action_head = nn.Linear(128, 2)

        # critic's layer
        self.value_head = nn.Linear(128, 1)

        # action & reward buffer
        self.saved_actions = []
        self.rewards = []

    def forward(self, x):
        \"\"\"
        forward of both actor and critic
        \"\"\"
        x = F.relu(self.affine1(x))

        # actor: choses action to take from state s_t
        # by returning probability of each action
        action_prob = F.softmax(self.action_head(x), dim=-1)

        # critic: evaluates being in the state s_t
        state_values = self.value_head(x)

        # return values for both actor and critic as a tuple of 2 values:
        # 1. a list with the probability of each action over the action space
        # 2. the value from state s_t
        return action_prob, state_values


model = Policy()
optimizer = optim.Adam(model.parameters(), lr=3e-2)
eps = np.finfo(np.float32).eps.item()


def select_action(state):
    state = torch.from_numpy(state).float()
    probs, state_value = model(state)

    # create a categorical distribution over the list of probabilities of actions
    m = Categorical(probs)

    # and sample an action using the distribution
    action = m.sample()

    # save to action buffer
    model.saved_actions.append(SavedAction(m.log_prob(action), state_value))

    # the action to take (left or right)
    return action.item()


def finish_episode():
    \"\"\"
    Training code. Calculates actor and critic loss and performs backprop.
    \"\"\"
    R = 0
    saved_actions = model.saved_actions
    policy_losses = [] # list to save actor (policy) loss
    value_losses = [] # list to save critic (value) loss
    returns = [] # list to save the true values

    # calculate the true value using rewards returned from the environment
    for r in model.rewards[::-1]:
        # calculate the discounted value
        R = r + args.gamma * R
        returns.insert(0, R)

    returns = torch.tensor(returns)
    returns = (returns - returns.mean()) / (returns.std() + eps)

    for (log_prob, value), R in zip(saved_actions, returns):
        advantage = R - value.item()

        # calculate actor (policy) loss
        policy_losses.append(-log_prob * advantage)

        # calculate critic (value) loss using L1 smooth loss
        value_losses.append(F.smooth_l1_loss(value, torch.tensor([R])))

    # reset gradients
    optimizer.zero_grad()

    # sum up all the values of policy_losses and value_losses
    loss = torch.stack(policy_losses).sum() + torch.stack(value_losses).sum()

    # perform backprop
    loss.backward()
    optimizer.step()
    record(loss.item(), model)

    # reset rewards and action buffer
    del model.rewards[:]
    del model.saved_actions[:]


def main():
    running_reward = 10

    # run infinitely many episodes
    for i_episode in count(1):

        # reset environment and episode reward
        state, _ = env.reset()
        ep_reward = 0

        # for each episode, only run 9999 steps so that we don't
        # infinite loop while learning
        for t in range(1, 10000):

            # select action from policy
            action = select_action(state)

            # take the action
            state, reward, done, _, _ = env.step(action)

            if args.render:
                env.render()

            model.rewards.append(reward)
            ep_reward += reward
            if done:
                break

        # update cumulative reward
        running_reward = 0.05 * ep_reward + (1 - 0.05) * running_reward

        # perform backprop
        finish_episode()

        # log results
        if i_episode % args.log_interval == 0:
            print('Episode {}\\tLast reward: {:.2f}\\tAverage reward: {:.2f}'.format(
                  i_episode, ep_reward, running_reward))

        # check if we have "solved" the cart pole problem
        if running_reward > env.spec.reward_threshold:
            print("Solved! Running reward is now {} and "
                  "the last episode runs to {} time steps!".format(running_reward, t))
            break
"""

ACTOR_CRITIC_PORT = [
    ("    loss.backward()\n", "    grads = loss.backward()\n"),
    ("    optimizer.step()\n", "    optimizer.step(grads)\n"),
]

#: The policies compute in float32 as written (``torch.from_numpy(state).float()``): the
#: two libraries round their float32 sums differently, so agreement is to float32 rounding.
FLOAT32_TOLERANCE = {"rtol": 2e-5, "atol": 2e-6}


def _run_policy(lib, source, torch_state, monkeypatch, model_name):
    records: list = []
    DropoutMasks(17).patch(monkeypatch, lib)
    CategoricalDraws(19).patch(monkeypatch, lib)
    ours, theirs = namespaces(
        args=types.SimpleNamespace(gamma=0.99, seed=543, render=False, log_interval=1),
        env=CartPole(23),
        np=np,
        deque=__import__("collections").deque,
        namedtuple=__import__("collections").namedtuple,
        count=lambda start: range(start, start + 4),
        Categorical=lib.distributions.Categorical,
        record=lambda value, model: records.append((value, state_of(model))),
    )
    namespace = ours if lib is rg else theirs
    exec(compile(source, f"{model_name}.py", "exec"), namespace)
    model = namespace[model_name]
    if torch_state is not None:
        model.load_state_dict(torch_state)
    initial = state_of(model)
    namespace["main"]()
    return initial, records


@pytest.mark.parametrize(
    "source, replacements, model_name",
    [
        (REINFORCE_SOURCE, REINFORCE_PORT, "policy"),
        (ACTOR_CRITIC_SOURCE, ACTOR_CRITIC_PORT, "model"),
    ],
    ids=["reinforce", "actor_critic"],
)
def test_the_reinforcement_learning_examples_port_changing_only_the_gradient_lines(
    monkeypatch, source, replacements, model_name
):
    torch.manual_seed(0)
    initial, theirs = _run_policy(torch, source, None, monkeypatch, model_name)
    _, ours = _run_policy(rg, port(source, replacements), initial, monkeypatch, model_name)
    assert len(ours) == len(theirs) == 4
    for (mine, mine_params), (reference, reference_params) in zip(ours, theirs):
        assert mine == pytest.approx(reference, rel=1e-4, abs=1e-5)
        for name, value in reference_params.items():
            assert mine_params[name].dtype == np.float32
            np.testing.assert_allclose(mine_params[name], value, **FLOAT32_TOLERANCE, err_msg=name)


# -- time_sequence_prediction/train.py -------------------------------------------------------------
TIME_SEQUENCE_SOURCE = """
class Sequence(nn.Module):
    def __init__(self):
        super(Sequence, self).__init__()
        self.lstm1 = nn.LSTMCell(1, 51)
        self.lstm2 = nn.LSTMCell(51, 51)
        self.linear = nn.Linear(51, 1)
        self.dummy_param = nn.Parameter(torch.empty(0))

    def forward(self, input, future = 0):
        outputs = []
        device = self.dummy_param.device
        h_t = torch.zeros(input.size(0), 51, dtype=torch.double).to(device)
        c_t = torch.zeros(input.size(0), 51, dtype=torch.double).to(device)
        h_t2 = torch.zeros(input.size(0), 51, dtype=torch.double).to(device)
        c_t2 = torch.zeros(input.size(0), 51, dtype=torch.double).to(device)

        for input_t in input.split(1, dim=1):
            h_t, c_t = self.lstm1(input_t, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        for i in range(future):# if we should predict the future
            h_t, c_t = self.lstm1(output, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        outputs = torch.cat(outputs, dim=1)
        return outputs


if __name__ == '__main__':
    device = torch.device(device_name)
    # set random seed to 0
    np.random.seed(0)
    torch.manual_seed(0)
    # load data and make training set
    data = torch.from_numpy(traindata).to(device)
    input = data[3:, :-1]
    target = data[3:, 1:]
    test_input = data[:3, :-1]
    test_target = data[:3, 1:]
    # build the model
    seq = Sequence().to(device).double()
    load_weights(seq)
    criterion = nn.MSELoss().to(device)
    # use LBFGS as optimizer since we can load the whole data to train
    optimizer = optim.LBFGS(seq.parameters(), lr=0.8)
    #begin to train
    for i in range(opt.steps):
        print('STEP: ', i)
        def closure():
            optimizer.zero_grad()
            out = seq(input)
            loss = criterion(out, target)
            print('loss:', loss.item())
            loss.backward()
            return loss
        optimizer.step(closure)
        # begin to predict, no need to track gradient here
        with torch.no_grad():
            future = 1000
            pred = seq(test_input, future=future)
            loss = criterion(pred[:, :-future], test_target)
            print('test loss:', loss.item())
            y = pred.cpu().detach().numpy()
        record([loss.item(), *y[:, -1]], seq)
"""

TIME_SEQUENCE_PORT = [
    ("            loss.backward()\n", "            grads = loss.backward()\n"),
    ("            return loss\n", "            return loss, grads\n"),
]


def _sine_waves():
    """``generate_sine_wave.py``, smaller: N waves of length L, shifted at random."""
    np.random.seed(2)
    T, L, N = 20, 24, 6  # noqa: N806 (the script's names)
    x = np.empty((N, L), "int64")
    x[:] = np.array(range(L)) + np.random.randint(-4 * T, 4 * T, N).reshape(N, 1)
    return np.sin(x / 1.0 / T).astype("float64")


def _run_time_sequence(lib, source, torch_state):
    records: list = []
    weights: dict = {}

    def load_weights(model):
        if torch_state is not None:
            model.load_state_dict(torch_state)
        weights.update(state_of(model))

    ours, theirs = namespaces(
        __name__="__main__",
        device_name="cpu",
        opt=types.SimpleNamespace(steps=2),
        np=np,
        traindata=_sine_waves(),
        load_weights=load_weights,
        record=lambda value, model: records.append((value, state_of(model))),
    )
    exec(compile(source, "time_sequence_prediction.py", "exec"), ours if lib is rg else theirs)
    return weights, records


def test_the_time_sequence_prediction_example_ports_changing_only_the_closure(capsys):
    ours = run_both(_run_time_sequence, TIME_SEQUENCE_SOURCE, TIME_SEQUENCE_PORT)
    assert len(ours) == 2
    printed = capsys.readouterr().out
    # each LBFGS step evaluates the closure up to max_eval = 25 times, in both libraries alike
    assert printed.count("loss:") > 2 * 2 * 10


# -- super_resolution: model.py and main.py --------------------------------------------------------
SUPER_RESOLUTION_SOURCE = """
class Net(nn.Module):
    def __init__(self, upscale_factor):
        super(Net, self).__init__()

        self.relu = nn.ReLU()
        self.conv1 = nn.Conv2d(1, 64, (5, 5), (1, 1), (2, 2))
        self.conv2 = nn.Conv2d(64, 64, (3, 3), (1, 1), (1, 1))
        self.conv3 = nn.Conv2d(64, 32, (3, 3), (1, 1), (1, 1))
        self.conv4 = nn.Conv2d(32, upscale_factor ** 2, (3, 3), (1, 1), (1, 1))
        self.pixel_shuffle = nn.PixelShuffle(upscale_factor)

        self._initialize_weights()

    def forward(self, x):
        x = self.relu(self.conv1(x))
        x = self.relu(self.conv2(x))
        x = self.relu(self.conv3(x))
        x = self.pixel_shuffle(self.conv4(x))
        return x

    def _initialize_weights(self):
        init.orthogonal_(self.conv1.weight, init.calculate_gain('relu'))
        init.orthogonal_(self.conv2.weight, init.calculate_gain('relu'))
        init.orthogonal_(self.conv3.weight, init.calculate_gain('relu'))
        init.orthogonal_(self.conv4.weight)


print('===> Building model')
model = Net(upscale_factor=opt.upscale_factor).to(device)
# -- (the harness: float64, torch's weights) --
criterion = nn.MSELoss()

optimizer = optim.Adam(model.parameters(), lr=opt.lr)


def train(epoch):
    epoch_loss = 0
    for iteration, batch in enumerate(training_data_loader, 1):
        input, target = batch[0].to(device), batch[1].to(device)

        optimizer.zero_grad()
        loss = criterion(model(input), target)
        epoch_loss += loss.item()
        loss.backward()
        optimizer.step()

        print("===> Epoch[{}]({}/{}): Loss: {:.4f}".format(epoch, iteration, len(training_data_loader), loss.item()))
        record(loss.item(), model)

    print("===> Epoch {} Complete: Avg. Loss: {:.4f}".format(epoch, epoch_loss / len(training_data_loader)))


def test():
    avg_psnr = 0
    with torch.no_grad():
        for batch in testing_data_loader:
            input, target = batch[0].to(device), batch[1].to(device)

            prediction = model(input)
            mse = criterion(prediction, target)
            psnr = 10 * log10(1 / mse.item())
            avg_psnr += psnr
    print("===> Avg. PSNR: {:.4f} dB".format(avg_psnr / len(testing_data_loader)))
    record(avg_psnr, None)


def checkpoint(epoch):
    model_out_path = "model_epoch_{}.pth".format(epoch)
    torch.save(model, model_out_path)
    print("Checkpoint saved to {}".format(model_out_path))

for epoch in range(1, opt.nEpochs + 1):
    train(epoch)
    test()
    checkpoint(epoch)
"""

SUPER_RESOLUTION_PORT = [
    ("        loss.backward()\n", "        grads = loss.backward()\n"),
    ("        optimizer.step()\n", "        optimizer.step(grads)\n"),
]


def _run_super_resolution(lib, source, torch_state, monkeypatch, tmp_path):
    """The datasets (BSDS300's luminance, cropped, and its downscaled copy) are random images
    of the same shapes, loaded in order (``shuffle=False``: the libraries shuffle differently)."""
    factor, batch = 3, 2
    rng = np.random.default_rng(29)
    images = rng.uniform(0.0, 1.0, (3 * batch, 1, 6 * factor, 6 * factor))
    small = images.reshape(3 * batch, 1, 6, factor, 6, factor).mean((3, 5))
    data_module = lib.utils.data

    def loader(rows):
        dataset = data_module.TensorDataset(lib.tensor(small[rows]), lib.tensor(images[rows]))
        return data_module.DataLoader(dataset=dataset, batch_size=batch, shuffle=False)

    folder = tmp_path / lib.__name__
    folder.mkdir()
    monkeypatch.chdir(folder)
    records: list = []
    ours, theirs = namespaces(
        opt=types.SimpleNamespace(upscale_factor=factor, nEpochs=2, lr=0.01),
        init=lib.nn.init,
        log10=__import__("math").log10,
        device=lib.device("cpu"),
        training_data_loader=loader(slice(0, 2 * batch)),
        testing_data_loader=loader(slice(2 * batch, 3 * batch)),
        record=lambda value, model: records.append(
            (value, None if model is None else state_of(model))
        ),
    )
    # the script's classes live in a module, as in the script, so that torch.save can pickle them
    script = types.ModuleType(f"super_resolution_on_{lib.__name__}")
    script.__dict__.update(ours if lib is rg else theirs)
    monkeypatch.setitem(sys.modules, script.__name__, script)
    namespace = script.__dict__
    definitions, loop = source.split("# -- (the harness: float64, torch's weights) --")
    exec(compile(definitions, "super_resolution.py", "exec"), namespace)
    model = namespace["model"].double()
    if torch_state is not None:
        model.load_state_dict(torch_state)
    initial = state_of(model)
    exec(compile(loop, "super_resolution.py", "exec"), namespace)
    # super_resolve.py: the whole module saved with torch.save, loaded and run
    saved = lib.load("model_epoch_2.pth", weights_only=False)
    assert type(saved).__name__ == "Net" and saved is not model
    records.append((saved(lib.tensor(small[:1])).detach().numpy(), state_of(saved)))
    return initial, records


def test_the_super_resolution_example_ports_changing_only_the_gradient_lines(monkeypatch, tmp_path):
    ours = run_both(
        _run_super_resolution,
        SUPER_RESOLUTION_SOURCE,
        SUPER_RESOLUTION_PORT,
        monkeypatch=monkeypatch,
        tmp_path=tmp_path,
    )
    assert len(ours) == 2 * (2 + 1) + 1
    assert ours[-1][0].shape == (1, 1, 18, 18)


# -- fast_neural_style: transformer_net.py, vgg.py, utils.py and neural_style.py ------------------
FAST_NEURAL_STYLE_SOURCE = """
class TransformerNet(torch.nn.Module):
    def __init__(self):
        super(TransformerNet, self).__init__()
        # Initial convolution layers
        self.conv1 = ConvLayer(3, 32, kernel_size=9, stride=1)
        self.in1 = torch.nn.InstanceNorm2d(32, affine=True)
        self.conv2 = ConvLayer(32, 64, kernel_size=3, stride=2)
        self.in2 = torch.nn.InstanceNorm2d(64, affine=True)
        self.conv3 = ConvLayer(64, 128, kernel_size=3, stride=2)
        self.in3 = torch.nn.InstanceNorm2d(128, affine=True)
        # Residual layers
        self.res1 = ResidualBlock(128)
        self.res2 = ResidualBlock(128)
        self.res3 = ResidualBlock(128)
        self.res4 = ResidualBlock(128)
        self.res5 = ResidualBlock(128)
        # Upsampling Layers
        self.deconv1 = UpsampleConvLayer(128, 64, kernel_size=3, stride=1, upsample=2)
        self.in4 = torch.nn.InstanceNorm2d(64, affine=True)
        self.deconv2 = UpsampleConvLayer(64, 32, kernel_size=3, stride=1, upsample=2)
        self.in5 = torch.nn.InstanceNorm2d(32, affine=True)
        self.deconv3 = ConvLayer(32, 3, kernel_size=9, stride=1)
        # Non-linearities
        self.relu = torch.nn.ReLU()

    def forward(self, X):
        y = self.relu(self.in1(self.conv1(X)))
        y = self.relu(self.in2(self.conv2(y)))
        y = self.relu(self.in3(self.conv3(y)))
        y = self.res1(y)
        y = self.res2(y)
        y = self.res3(y)
        y = self.res4(y)
        y = self.res5(y)
        y = self.relu(self.in4(self.deconv1(y)))
        y = self.relu(self.in5(self.deconv2(y)))
        y = self.deconv3(y)
        return y


class ConvLayer(torch.nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride):
        super(ConvLayer, self).__init__()
        reflection_padding = kernel_size // 2
        self.reflection_pad = torch.nn.ReflectionPad2d(reflection_padding)
        self.conv2d = torch.nn.Conv2d(in_channels, out_channels, kernel_size, stride)

    def forward(self, x):
        out = self.reflection_pad(x)
        out = self.conv2d(out)
        return out


class ResidualBlock(torch.nn.Module):
    \"\"\"ResidualBlock
    introduced in: https://arxiv.org/abs/1512.03385
    recommended architecture: http://torch.ch/blog/2016/02/04/resnets.html
    \"\"\"

    def __init__(self, channels):
        super(ResidualBlock, self).__init__()
        self.conv1 = ConvLayer(channels, channels, kernel_size=3, stride=1)
        self.in1 = torch.nn.InstanceNorm2d(channels, affine=True)
        self.conv2 = ConvLayer(channels, channels, kernel_size=3, stride=1)
        self.in2 = torch.nn.InstanceNorm2d(channels, affine=True)
        self.relu = torch.nn.ReLU()

    def forward(self, x):
        residual = x
        out = self.relu(self.in1(self.conv1(x)))
        out = self.in2(self.conv2(out))
        out = out + residual
        return out


class UpsampleConvLayer(torch.nn.Module):
    \"\"\"UpsampleConvLayer
    Upsamples the input and then does a convolution. This method gives better results
    compared to ConvTranspose2d.
    ref: http://distill.pub/2016/deconv-checkerboard/
    \"\"\"

    def __init__(self, in_channels, out_channels, kernel_size, stride, upsample=None):
        super(UpsampleConvLayer, self).__init__()
        self.upsample = upsample
        reflection_padding = kernel_size // 2
        self.reflection_pad = torch.nn.ReflectionPad2d(reflection_padding)
        self.conv2d = torch.nn.Conv2d(in_channels, out_channels, kernel_size, stride)

    def forward(self, x):
        x_in = x
        if self.upsample:
            x_in = torch.nn.functional.interpolate(x_in, mode='nearest', scale_factor=self.upsample)
        out = self.reflection_pad(x_in)
        out = self.conv2d(out)
        return out


class Vgg16(torch.nn.Module):
    def __init__(self, requires_grad=False):
        super(Vgg16, self).__init__()
        vgg_pretrained_features = models.vgg16(pretrained=True).features
        self.slice1 = torch.nn.Sequential()
        self.slice2 = torch.nn.Sequential()
        self.slice3 = torch.nn.Sequential()
        self.slice4 = torch.nn.Sequential()
        for x in range(4):
            self.slice1.add_module(str(x), vgg_pretrained_features[x])
        for x in range(4, 9):
            self.slice2.add_module(str(x), vgg_pretrained_features[x])
        for x in range(9, 16):
            self.slice3.add_module(str(x), vgg_pretrained_features[x])
        for x in range(16, 23):
            self.slice4.add_module(str(x), vgg_pretrained_features[x])
        if not requires_grad:
            for param in self.parameters():
                param.requires_grad = False

    def forward(self, X):
        h = self.slice1(X)
        h_relu1_2 = h
        h = self.slice2(h)
        h_relu2_2 = h
        h = self.slice3(h)
        h_relu3_3 = h
        h = self.slice4(h)
        h_relu4_3 = h
        vgg_outputs = namedtuple("VggOutputs", ['relu1_2', 'relu2_2', 'relu3_3', 'relu4_3'])
        out = vgg_outputs(h_relu1_2, h_relu2_2, h_relu3_3, h_relu4_3)
        return out


def gram_matrix(y):
    (b, ch, h, w) = y.size()
    features = y.view(b, ch, w * h)
    features_t = features.transpose(1, 2)
    gram = features.bmm(features_t) / (ch * h * w)
    return gram


def normalize_batch(batch):
    # normalize using imagenet mean and std
    mean = batch.new_tensor([0.485, 0.456, 0.406]).view(-1, 1, 1)
    std = batch.new_tensor([0.229, 0.224, 0.225]).view(-1, 1, 1)
    batch = batch.div_(255.0)
    return (batch - mean) / std


def train(args):
    device = torch.device("cpu")
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)

    transformer = TransformerNet().to(device)
    load_weights(transformer)
    optimizer = Adam(transformer.parameters(), args.lr)
    mse_loss = torch.nn.MSELoss()

    vgg = Vgg16(requires_grad=False).to(device)
    style = style_image.repeat(args.batch_size, 1, 1, 1).to(device)

    features_style = vgg(normalize_batch(style))
    gram_style = [gram_matrix(y) for y in features_style]

    for e in range(args.epochs):
        transformer.train()
        agg_content_loss = 0.
        agg_style_loss = 0.
        count = 0
        for batch_id, (x, _) in enumerate(train_loader):
            n_batch = len(x)
            count += n_batch
            optimizer.zero_grad()

            x = x.to(device)
            y = transformer(x)

            y = normalize_batch(y)
            x = normalize_batch(x)

            features_y = vgg(y)
            features_x = vgg(x)

            content_loss = args.content_weight * mse_loss(features_y.relu2_2, features_x.relu2_2)

            style_loss = 0.
            for ft_y, gm_s in zip(features_y, gram_style):
                gm_y = gram_matrix(ft_y)
                style_loss += mse_loss(gm_y, gm_s[:n_batch, :, :])
            style_loss *= args.style_weight

            total_loss = content_loss + style_loss
            total_loss.backward()
            optimizer.step()

            agg_content_loss += content_loss.item()
            agg_style_loss += style_loss.item()
            record([content_loss.item(), style_loss.item()], transformer)

            if (batch_id + 1) % args.log_interval == 0:
                mesg = "{}\\tEpoch {}:\\t[{}/{}]\\tcontent: {:.6f}\\tstyle: {:.6f}\\ttotal: {:.6f}".format(
                    time.ctime(), e + 1, count, len(train_loader.dataset),
                                  agg_content_loss / (batch_id + 1),
                                  agg_style_loss / (batch_id + 1),
                                  (agg_content_loss + agg_style_loss) / (batch_id + 1)
                )
                print(mesg)

    # save model
    transformer.eval().cpu()
    torch.save(transformer.state_dict(), args.save_model_path)
    print("\\nDone, trained model saved at", args.save_model_path)


def stylize(args):
    device = torch.device("cpu")
    content_image = args.content_image.unsqueeze(0).to(device)
    with torch.no_grad():
        style_model = TransformerNet()
        state_dict = torch.load(args.model)
        # remove saved deprecated running_* keys in InstanceNorm from the checkpoint
        for k in list(state_dict.keys()):
            if re.search(r'in\\d+\\.running_(mean|var)$', k):
                del state_dict[k]
        style_model.load_state_dict(state_dict)
        style_model.to(device)
        style_model.eval()
        output = style_model(content_image).cpu()
    return output
"""

FAST_NEURAL_STYLE_PORT = [
    ("            total_loss.backward()\n", "            grads = total_loss.backward()\n"),
    ("            optimizer.step()\n", "            optimizer.step(grads)\n"),
]


def _vgg16_features(lib, channels=(4, 6, 8, 8)):
    """``models.vgg16().features[:23]``'s layout (conv-ReLU blocks between max-pools) with
    few channels, float64."""
    layers, previous = [], 3
    for block, convs in zip(channels, (2, 2, 3, 3)):
        if layers:
            layers.append(lib.nn.MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1))
        for _ in range(convs):
            layers += [lib.nn.Conv2d(previous, block, 3, padding=1), lib.nn.ReLU(inplace=True)]
            previous = block
    return lib.nn.Sequential(*layers).double()


def _run_fast_neural_style(lib, source, torch_state, tmp_path, vgg_state):
    rng = np.random.default_rng(31)
    images = rng.uniform(0.0, 255.0, (4, 3, 16, 16))
    data_module = lib.utils.data
    dataset = data_module.TensorDataset(lib.tensor(images), lib.tensor(np.zeros(4)))
    features = _vgg16_features(lib)
    if vgg_state is not None:
        features.load_state_dict({k: lib.tensor(v) for k, v in vgg_state.items()})
    records: list = []
    weights: dict = {}

    def load_weights(model):
        model.double()
        if torch_state is not None:
            model.load_state_dict(torch_state)
        weights.update(state_of(model))

    args = types.SimpleNamespace(
        seed=42, lr=1e-3, batch_size=2, epochs=2, content_weight=1e5, style_weight=1e10,
        log_interval=1, save_model_path=str(tmp_path / f"style_{lib.__name__}.model"),
    )  # fmt: skip
    ours, theirs = namespaces(
        np=np,
        re=__import__("re"),
        time=__import__("time"),
        namedtuple=__import__("collections").namedtuple,
        Adam=lib.optim.Adam,
        models=types.SimpleNamespace(
            vgg16=lambda pretrained: types.SimpleNamespace(features=features)
        ),
        style_image=lib.tensor(rng.uniform(0.0, 255.0, (3, 16, 16))),
        train_loader=data_module.DataLoader(dataset, batch_size=args.batch_size),
        load_weights=load_weights,
        record=lambda value, model: records.append((value, state_of(model))),
    )
    namespace = ours if lib is rg else theirs
    exec(compile(source, "neural_style.py", "exec"), namespace)
    namespace["train"](args)
    assert all(not p.requires_grad for p in features.parameters())
    output = namespace["stylize"](
        types.SimpleNamespace(
            content_image=lib.tensor(images[0], dtype=lib.float32), model=args.save_model_path
        )
    )
    assert output.dtype == lib.float32
    records.append((output.numpy(), None))
    records.append((np.asarray(dataset[0][0]), {"vgg": features[0].weight.detach().numpy()}))
    return weights, records


def test_the_fast_neural_style_example_ports_changing_only_the_gradient_lines(tmp_path):
    torch.manual_seed(0)
    vgg = _vgg16_features(torch)
    vgg_state = {k: v.numpy() for k, v in vgg.state_dict().items()}
    initial, theirs = _run_fast_neural_style(
        torch, FAST_NEURAL_STYLE_SOURCE, None, tmp_path, vgg_state
    )
    start, ours = _run_fast_neural_style(
        rg, port(FAST_NEURAL_STYLE_SOURCE, FAST_NEURAL_STYLE_PORT), initial, tmp_path, vgg_state
    )
    for name, value in initial.items():
        np.testing.assert_array_equal(start[name], value)
    assert len(ours) == len(theirs) == 2 * 2 + 2
    # stylize runs in float32 (a fresh TransformerNet loading the float64 state)
    (mine, _), (reference, _) = ours.pop(-2), theirs.pop(-2)
    np.testing.assert_allclose(mine, reference, rtol=1e-4, atol=1e-3)
    # A convolution followed by an InstanceNorm has a bias of zero true gradient (the norm
    # subtracts it again): its gradient is rounding noise, which Adam divides by its own
    # size, so those biases move by noise, alike in both libraries to ~1e-9 absolute.
    before_instance_norm = {
        name for name in initial if name.endswith("conv2d.bias") and "deconv3" not in name
    }
    assert len(before_instance_norm) == 2 + 2 * 5 + 2 + 1
    assert_records_agree(ours, theirs, noise_driven=before_instance_norm)
