# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
neural fields, continued.

- SIREN fitting a signed distance function as vsitzmann/siren writes it: the ``SineLayer``/
  ``Siren`` of ``explore_siren.ipynb`` (``coords.clone().detach().requires_grad_(True)``, the
  sine initialisation under ``torch.no_grad()``), ``diff_operators.py`` whole (``gradient`` by
  ``torch.autograd.grad(y, [x], grad_outputs=..., create_graph=True)``, ``divergence``/
  ``laplace``, ``hessian`` written into ``torch.zeros(...).to(y.device)`` by ``h[..., i, j, :] =
  grad(dydx[..., j], x, grad_y, create_graph=True)[0][..., :]`` and ``jacobian`` by ``jac[:, :,
  i, :] = grad(y_flat, x, ...)``, with their ``torch.any(torch.isnan(...))`` status), and
  ``loss_functions.py``'s ``sdf`` (``torch.where(gt_sdf != -1, ...)``, ``torch.exp(-1e2 *
  torch.abs(pred_sdf))``, ``1 - F.cosine_similarity(gradient, gt_normals, dim=-1)[..., None]``,
  the eikonal ``torch.abs(gradient.norm(dim=-1) - 1)``), trained as ``training.py`` sums the
  losses (``train_loss += single_loss``) with ``clip_grad_norm_(..., max_norm=1.)`` and Adam; the
  trained field's Laplacian, Hessian and Jacobian are compared after training, their gradients
  (third derivatives of the network) taken once more.

The point cloud (``dataio.PointCloud``'s ``.xyz`` file of points and normals) is a sphere sampled
by the test in the dataset's layout: on-surface points with ``sdf`` 0 and their normals, off-
surface points with ``sdf`` -1 and normals -1. The training loop is ``training.py``'s inner step
for one batch (summaries, checkpoints and ``tqdm`` left out). ``initialize(model)`` gives the port
torch's initial weights. The lines changed: the import lines and the gradient lines
(``grads = train_loss.backward()``, ``clip_grad_norm_(grads, ...)``, ``optim.step(grads)``).
"""

from __future__ import annotations

import numpy as np

from real_ports import assert_records_agree, initializer, runs_with_draws

SIREN_SDF_SOURCE = r"""
import torch
from torch import nn
import torch.nn.functional as F
import numpy as np
from torch.autograd import grad

# explore_siren.ipynb
class SineLayer(nn.Module):
    # See paper sec. 3.2, final paragraph, and supplement Sec. 1.5 for discussion of omega_0.

    # If is_first=True, omega_0 is a frequency factor which simply multiplies the activations before the
    # nonlinearity. Different signals may require different omega_0 in the first layer - this is a
    # hyperparameter.

    # If is_first=False, then the weights will be divided by omega_0 so as to keep the magnitude of
    # activations constant, but boost gradients to the weight matrix (see supplement Sec. 1.5)

    def __init__(self, in_features, out_features, bias=True,
                 is_first=False, omega_0=30):
        super().__init__()
        self.omega_0 = omega_0
        self.is_first = is_first

        self.in_features = in_features
        self.linear = nn.Linear(in_features, out_features, bias=bias)

        self.init_weights()

    def init_weights(self):
        with torch.no_grad():
            if self.is_first:
                self.linear.weight.uniform_(-1 / self.in_features,
                                             1 / self.in_features)
            else:
                self.linear.weight.uniform_(-np.sqrt(6 / self.in_features) / self.omega_0,
                                             np.sqrt(6 / self.in_features) / self.omega_0)

    def forward(self, input):
        return torch.sin(self.omega_0 * self.linear(input))

    def forward_with_intermediate(self, input):
        # For visualization of activation distributions
        intermediate = self.omega_0 * self.linear(input)
        return torch.sin(intermediate), intermediate


class Siren(nn.Module):
    def __init__(self, in_features, hidden_features, hidden_layers, out_features, outermost_linear=False,
                 first_omega_0=30, hidden_omega_0=30.):
        super().__init__()

        self.net = []
        self.net.append(SineLayer(in_features, hidden_features,
                                  is_first=True, omega_0=first_omega_0))

        for i in range(hidden_layers):
            self.net.append(SineLayer(hidden_features, hidden_features,
                                      is_first=False, omega_0=hidden_omega_0))

        if outermost_linear:
            final_linear = nn.Linear(hidden_features, out_features)

            with torch.no_grad():
                final_linear.weight.uniform_(-np.sqrt(6 / hidden_features) / hidden_omega_0,
                                              np.sqrt(6 / hidden_features) / hidden_omega_0)

            self.net.append(final_linear)
        else:
            self.net.append(SineLayer(hidden_features, out_features,
                                      is_first=False, omega_0=hidden_omega_0))

        self.net = nn.Sequential(*self.net)

    def forward(self, coords):
        coords = coords.clone().detach().requires_grad_(True) # allows to take derivative w.r.t. input
        output = self.net(coords)
        return output, coords


# diff_operators.py
def hessian(y, x):
    ''' hessian of y wrt x
    y: shape (meta_batch_size, num_observations, channels)
    x: shape (meta_batch_size, num_observations, 2)
    '''
    meta_batch_size, num_observations = y.shape[:2]
    grad_y = torch.ones_like(y[..., 0]).to(y.device)
    h = torch.zeros(meta_batch_size, num_observations, y.shape[-1], x.shape[-1], x.shape[-1]).to(y.device)
    for i in range(y.shape[-1]):
        # calculate dydx over batches for each feature value of y
        dydx = grad(y[..., i], x, grad_y, create_graph=True)[0]

        # calculate hessian on y for each x value
        for j in range(x.shape[-1]):
            h[..., i, j, :] = grad(dydx[..., j], x, grad_y, create_graph=True)[0][..., :]

    status = 0
    if torch.any(torch.isnan(h)):
        status = -1
    return h, status


def laplace(y, x):
    grad = gradient(y, x)
    return divergence(grad, x)


def divergence(y, x):
    div = 0.
    for i in range(y.shape[-1]):
        div += grad(y[..., i], x, torch.ones_like(y[..., i]), create_graph=True)[0][..., i:i+1]
    return div


def gradient(y, x, grad_outputs=None):
    if grad_outputs is None:
        grad_outputs = torch.ones_like(y)
    grad = torch.autograd.grad(y, [x], grad_outputs=grad_outputs, create_graph=True)[0]
    return grad


def jacobian(y, x):
    ''' jacobian of y wrt x '''
    meta_batch_size, num_observations = y.shape[:2]
    jac = torch.zeros(meta_batch_size, num_observations, y.shape[-1], x.shape[-1]).to(y.device) # (meta_batch_size*num_points, 2, 2)
    for i in range(y.shape[-1]):
        # calculate dydx over batches for each feature value of y
        y_flat = y[...,i].view(-1, 1)
        jac[:, :, i, :] = grad(y_flat, x, torch.ones_like(y_flat), create_graph=True)[0]

    status = 0
    if torch.any(torch.isnan(jac)):
        status = -1

    return jac, status


# loss_functions.py
def sdf(model_output, gt):
    '''
       x: batch of input coordinates
       y: usually the output of the trial_soln function
       '''
    gt_sdf = gt['sdf']
    gt_normals = gt['normals']

    coords = model_output['model_in']
    pred_sdf = model_output['model_out']

    gradient = diff_operators.gradient(pred_sdf, coords)

    # Wherever boundary_values is not equal to zero, we interpret it as a boundary constraint.
    sdf_constraint = torch.where(gt_sdf != -1, pred_sdf, torch.zeros_like(pred_sdf))
    inter_constraint = torch.where(gt_sdf != -1, torch.zeros_like(pred_sdf), torch.exp(-1e2 * torch.abs(pred_sdf)))
    normal_constraint = torch.where(gt_sdf != -1, 1 - F.cosine_similarity(gradient, gt_normals, dim=-1)[..., None],
                                    torch.zeros_like(gradient[..., :1]))
    grad_constraint = torch.abs(gradient.norm(dim=-1) - 1)
    # Exp      # Lapl
    # -----------------
    return {'sdf': torch.abs(sdf_constraint).mean() * 3e3,  # 1e4      # 3e3
            'inter': inter_constraint.mean() * 1e2,  # 1e2                   # 1e3
            'normal_constraint': normal_constraint.mean() * 1e2,  # 1e2
            'grad_constraint': grad_constraint.mean() * 5e1}  # 1e1      # 5e1
"""

SIREN_SDF_TRAIN = """
class diff_operators:  # the module, as ``import diff_operators`` names it
    gradient = staticmethod(gradient)

model = Siren(in_features=3, out_features=1, hidden_features=16, hidden_layers=2, outermost_linear=True)
initialize(model)
loss_fn = sdf
optim = torch.optim.Adam(lr=1e-4, params=model.parameters())
model_input = {'coords': torch.tensor(cloud_coords).float()[None]}
gt = {'sdf': torch.tensor(cloud_sdf).float()[None], 'normals': torch.tensor(cloud_normals).float()[None]}
clip_grad = True
for step in range(4):
    output, coords = model(model_input['coords'])
    model_output = {'model_in': coords, 'model_out': output}
    losses = loss_fn(model_output, gt)

    train_loss = 0.
    for loss_name, loss in losses.items():
        single_loss = loss.mean()
        train_loss += single_loss

    optim.zero_grad()
    train_loss.backward()

    if clip_grad:
        if isinstance(clip_grad, bool):
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.)
        else:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=clip_grad)

    optim.step()
    record.append({name: float(loss) for name, loss in losses.items()})
    record.append({name: p.detach().numpy().copy() for name, p in model.named_parameters()})

output, coords = model(model_input['coords'][:, :6])
lap = laplace(output, coords)
h, h_status = hessian(output, coords)
jac, jac_status = jacobian(gradient(output, coords), coords)
third = torch.autograd.grad(lap.sum() + h.sum() + jac.sum(), [coords])[0]
record.append([lap.detach().numpy(), h.detach().numpy(), jac.detach().numpy(), third.numpy(), h_status, jac_status])
"""

SIREN_SDF_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("from torch import nn\n", "from retrograd import nn\n"),
    ("import torch.nn.functional as F\n", "import retrograd.nn.functional as F\n"),
    ("    train_loss.backward()\n", "    grads = train_loss.backward()\n"),
    (
        "clip_grad_norm_(model.parameters(), max_norm=1.)",
        "clip_grad_norm_(grads, model.parameters(), max_norm=1.)",
    ),
    ("    optim.step()\n", "    optim.step(grads)\n"),
]


def test_siren_fits_a_signed_distance_function_as_torch(capsys):
    np.random.seed(394)
    rng = np.random.default_rng(394)
    on_surface = rng.standard_normal((24, 3))
    on_surface /= np.linalg.norm(on_surface, axis=1, keepdims=True) * 2
    off_surface = rng.uniform(-1, 1, (24, 3))
    (theirs, ours), _ = runs_with_draws(
        SIREN_SDF_SOURCE + SIREN_SDF_TRAIN,
        SIREN_SDF_STEPS,
        capsys,
        394,
        initialize=initializer(),
        cloud_coords=np.concatenate([on_surface, off_surface]),
        cloud_sdf=np.concatenate([np.zeros((24, 1)), -np.ones((24, 1))]),
        cloud_normals=np.concatenate([2 * on_surface, -np.ones((24, 3))]),
    )
    *steps, (their_lap, their_h, their_jac, their_third, *their_status) = theirs
    *our_steps, (our_lap, our_h, our_jac, our_third, *our_status) = ours
    assert our_status == their_status == [0, 0]
    assert_records_agree(our_steps, steps, rtol=2e-4, atol=2e-5)
    assert_records_agree(
        [our_lap, our_h, our_jac, our_third],
        [their_lap, their_h, their_jac, their_third],
        rtol=2e-4,
        atol=1e-4,
    )
