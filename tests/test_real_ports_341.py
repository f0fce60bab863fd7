# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
DeepONet, data-driven and physics-informed, as JohnCSu/DeepONet_Pytorch_Demo's
``DeepONet.ipynb`` writes it (its code cells in order, the plotting left out), small.

- the data: ``random_chebyshev`` (``np.random.rand`` coefficients, ``chebval``),
  ``generate_data`` (``np.random.seed``, ``cumulative_trapezoid`` and ``np.interp`` targets,
  ``torch.tensor(..., dtype = torch.float32)`` of stacked arrays, ``unsqueeze``), a
  ``Dataset`` subclass read by ``DataLoader``;
- the network: ``MLP`` with ``self.activation = torch.tanh`` over an ``nn.ModuleList`` that
  holds ``linear_in`` twice over (as an attribute and in the list), ``DeepONet``'s
  ``self.fc(self.trunk(y)*self.branch(u))`` broadcasting the branch's ``[B,1,M]`` against the
  trunk's ``[B,N,I]``; trained by ``Adam`` and ``StepLR`` stepped every batch, evaluated
  under ``torch.no_grad()`` on ``sin(a x)``;
- the physics-informed operator (PINO): ``batched_PINO_grad`` =
  ``vmap(vmap(jacrev(aux_net(net), has_aux=True), (0,None)), 0)`` over the module itself
  (its parameters closed over, not passed), the derivative in the query point against the
  input function and the initial condition from the auxiliary outputs, and ``loss.backward()``
  through ``jacrev`` into the network's parameters.

``.cuda()`` is left out (no GPU here) and ``shuffle = True`` would draw each library's own
order, so the loaders keep theirs; ``initialize(...)`` gives the port torch's initial weights.
The lines changed: the ``import`` lines and the gradient lines (``grads = loss.backward()``,
``optimiser.step(grads)``).
"""

from __future__ import annotations

import numpy as np
import torch

import retrograd as rg
from real_ports import SharedDraws, assert_records_agree, initializer, port, run_source

DEEPONET_SOURCE = """
import torch.nn as nn
import torch
import numpy as np

from torch.optim import Adam

class MLP(nn.Module):
    def __init__(self,in_features : int,out_features: int,hidden_features: int,num_hidden_layers: int) -> None:
        super().__init__()


        self.linear_in = nn.Linear(in_features,hidden_features)
        self.linear_out = nn.Linear(hidden_features,out_features)

        self.activation = torch.tanh
        self.layers = nn.ModuleList([self.linear_in] + [nn.Linear(hidden_features, hidden_features) for _ in range(num_hidden_layers)  ])


    def forward(self,x):
        for layer in self.layers:
            x = self.activation(layer(x))

        return self.linear_out(x)


class DeepONet(nn.Module):
    def __init__(self,latent_features,out_features,branch,trunk) -> None:
        super().__init__()
        self.branch = branch
        self.trunk = trunk
        self.fc = nn.Linear(latent_features,out_features,bias = False)


    def forward(self,y,u):
        return self.fc(self.trunk(y)*self.branch(u))

from numpy.polynomial.chebyshev import Chebyshev,chebval,chebint,cheb2poly
def random_chebyshev(n,M,degree,return_coeff = False):
    '''
    This generates a random function output between the domain [-1,1] along a uniform grid of size n using chebyshev polynomials.
    '''
    coeff = (np.random.rand(degree+1)-0.5)*2*np.abs(M)
    x= np.linspace(-1,1,n)
    y = chebval(x,coeff)
    if return_coeff:
        return x,y,coeff
    else:
        return x,y


from scipy.integrate import cumulative_trapezoid

# Generate DataTuples:
def generate_data(n_samples,a,b,n_sensors,n_points,M,degree,y0 = 0,random_query = False,seed = 1234):
    '''
    Generate Data needed for training.

    Returns a tuple of (y,u,Guy) that will be added to the Dataloader
    '''
    if seed is not None:
        np.random.seed(1234)

    x = np.linspace(-1,1,n_points)
    u,dy_coeff = zip(*[random_chebyshev(n_sensors,M,degree,return_coeff=True)[1:] for _ in range(n_samples)])

    u = np.stack(u,axis = 0)

    #Generate 100 y points for -1 and 1

    xp = np.linspace(a,b,n_sensors)
    if random_query:
        y = np.random.rand(n_samples,n_points)*(b-a)+a
    else:
        # y = np.array([np.linspace(a,b,n_points) for _ in range(n_samples)]
        y = np.tile(np.linspace(a,b,n_points),(n_samples,1))

    #Integrate cheb poly, we use interp in case we want random y points
    Guy = [cumulative_trapezoid(dy,xp,initial=y0) for dy in u]
    Guy = [np.interp(yy,xp,G) for yy,G in zip(y,Guy)]

    #Guy data needs 2 batch dimensions: One for samples and the other for
    y,u,Guy = torch.tensor(y,dtype = torch.float32),torch.tensor(u,dtype = torch.float32),torch.tensor(Guy,dtype = torch.float32)
    #To match network shape input and output, need to add a tensor dimension to y and Guy
    return y.unsqueeze(-1),u.unsqueeze(1),Guy.unsqueeze(-1)

from torch.utils.data import DataLoader,Dataset

class Onet_dataset(Dataset):
    def __init__(self,y,u,Guy):
        self.y = y
        self.u = u
        self.Guy = Guy

    def __len__(self):
        return len(self.y)

    def __getitem__(self,idx):
        return self.y[idx],self.u[idx],self.Guy[idx]

ys,us,Guys = generate_data(8,0,2,12,9,5,8)
Onet_data = Onet_dataset(ys,us,Guys)
# Onet_data.set_device('cuda')
Onet_DL = DataLoader(Onet_data,batch_size = 4,shuffle = False)

Onet = DeepONet(16,1,branch = MLP(12,16,16,2),trunk = MLP(1,16,16,2))
initialize(Onet)


optimiser = Adam(Onet.parameters(),lr = 5e-3)
lr_sch = torch.optim.lr_scheduler.StepLR(optimiser,4,0.95)

optimiser.zero_grad()
x = torch.linspace(0,2,12)
a = 4
dy = torch.sin(a*x)

dy_in = dy.unsqueeze(0).unsqueeze(1)
x_in = x.unsqueeze(0).unsqueeze(-1)
out_true = -1/a*(torch.cos(a*x)-1)
print(dy_in.shape,x_in.shape)

loss_list = []
acc_list = []
for epoch in range(0,3):
    for (y,u,Guy) in(Onet_DL):
        (y,u,Guy) = (y,u,Guy)
        # print(y.shape,u.shape,Guy.shape)
        out = Onet(y,u)
        # print(out.shape,Guy.shape)
        loss = (out-Guy).pow(2).mean()
        loss.backward()
        optimiser.step()
        optimiser.zero_grad()
        lr_sch.step()
        record.append(float(loss))
    if (epoch % 100) == 0:
        print(f'{float(lr_sch.get_last_lr()[0]):.3E}')
        with torch.no_grad():
            out = Onet.cpu()(x_in,dy_in).squeeze()
            accuracy = (out-out_true).pow(2).mean()
            Onet = Onet

        print(f'Epoch: {epoch} loss {float(loss):.3e} Acc {float(accuracy):.3e}')
        loss_list.append(float(loss))
        acc_list.append(float(accuracy))
record.append(acc_list)
record.append({k: v.detach().numpy() for k, v in Onet.state_dict().items()})

from torch.func import vmap,jacrev,grad

def batched_PINO_grad(net):
    def aux_net(net):
        def inner_func(*args,**kwargs):
            out = net(*args,**kwargs)
            return out,out
        return inner_func

    g = jacrev(aux_net(net),has_aux=True)
    # If y,u are the arg inputs, we only want to iterate over y's first dim (the query dim) not u

    grad_func = vmap(g,(0,None))

    return vmap(grad_func,0)

PINO = DeepONet(16,1,branch = MLP(12,16,16,2),trunk = MLP(1,16,16,2))
initialize(PINO)

f = batched_PINO_grad(PINO)
y = torch.rand((3,9,1))
u = torch.rand((3,1,12))

grads,evals = f(y,u)
print(grads.shape,evals.shape,PINO(y,u).shape)
record.append(grads.detach().numpy())
record.append(evals.detach().numpy())

ys,us,Guys = generate_data(8,0,2,12,12,5,8)
Pino_data = Onet_dataset(ys,us,Guys)
# Onet_data.set_device('cuda')
Pino_DL = DataLoader(Pino_data,batch_size = 4,shuffle = False)


optimiser = Adam(PINO.parameters())
lr_sch = torch.optim.lr_scheduler.StepLR(optimiser,4,0.95)

PINO = PINO
optimiser.zero_grad()
x = torch.linspace(0,2,12)
a = 4
dy = torch.sin(a*x)

dy_in = dy.unsqueeze(0).unsqueeze(1)
x_in = x.unsqueeze(0).unsqueeze(-1)
out_true = -1/a*(torch.cos(a*x)-1)
print(dy_in.shape,x_in.shape)

PINO_loss_list= []
PINO_acc_list = []
f = batched_PINO_grad(PINO)
for epoch in range(0,2):
    for (y,u,Guy) in(Pino_DL):
        (y,u,Guy) = (y,u,Guy)
        # print(y.shape,u.shape,Guy.shape)
        grads,evals = f(y,u)

        #PINN loss

        PINN_loss = (grads.squeeze() - u.squeeze()).pow(2).mean()

        #Initial Condition Loss
        IC_loss = (evals[:,0].squeeze()).pow(2).mean()

        # print(out.shape,Guy.shape)
        # loss = (out-Guy).pow(2).mean()
        loss = 10*PINN_loss + IC_loss
        loss.backward()
        optimiser.step()
        optimiser.zero_grad()
        lr_sch.step()
        record.append([float(PINN_loss), float(IC_loss)])
    if (epoch % 100) == 0:
        print(f'{float(lr_sch.get_last_lr()[0]):.3E}')
        with torch.no_grad():
            out = PINO.cpu()(x_in,dy_in).squeeze()
            accuracy = (out-out_true).pow(2).mean()
            PINO = PINO

        print(f'Epoch: {epoch} loss {float(loss):.3e} PINN Loss {float(PINN_loss):.3e} IC Loss {float(IC_loss):.3e} Acc {float(accuracy):.3e}')
        PINO_loss_list.append(float(loss))
        PINO_acc_list.append(float(accuracy))
record.append(PINO_acc_list)
record.append({k: v.detach().numpy() for k, v in PINO.state_dict().items()})
"""

DEEPONET_STEPS = [
    (
        "import torch.nn as nn\nimport torch\n",
        "import retrograd.nn as nn\nimport retrograd as torch\n",
    ),
    ("from torch.optim import Adam\n", "from retrograd.optim import Adam\n"),
    ("from torch.utils.data import", "from retrograd.utils.data import"),
    ("from torch.func import", "from retrograd.func import"),
    (
        "        loss.backward()\n        optimiser.step()\n",
        "        grads = loss.backward()\n        optimiser.step(grads)\n",
    ),
]


def test_deeponet_data_driven_and_physics_informed_by_vmap_of_jacrev_as_torch(capsys):
    initialize, records, logs = initializer(), [], []
    # torch's initial weights, which the port loads, the same whatever ran before on the
    # worker: a few of L-BFGS's or Adam's trajectories from other weights part by more
    # than the tolerance (rounding that a line search's branch or a long fit amplifies)
    torch.manual_seed(341)
    for lib in (torch, rg):
        record = []
        np.random.seed(341)
        text = DEEPONET_SOURCE if lib is torch else port(DEEPONET_SOURCE, DEEPONET_STEPS)
        with SharedDraws(lib, 341):  # torch.rand: one stream for both runs
            run_source(text, lib, record=record, initialize=initialize)
        records.append(record)
        logs.append(capsys.readouterr().out)
    theirs, ours = records
    assert logs[1].replace("retrograd.Size", "torch.Size") == logs[0]
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-6)
