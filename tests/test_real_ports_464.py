# ruff: noqa: E501, W291, W293  (the programs are kept as their authors wrote them: long lines, trailing blanks)
"""Real PyTorch implicit MAML ported to retrograd (the harness: ``tests/real_ports.py``).

- aravindr93/imaml_dev (``implicit_maml/learner_model.py``'s ``Learner`` and
  ``make_fc_network``, ``implicit_maml/utils.py``'s ``to_tensor``/``to_device``/``to_numpy``/
  ``cg_solve``/``measure_accuracy``, and ``examples/omniglot_implicit_maml.py``'s training loop,
  as written): parameters flattened by ``torch.cat([param.data.view(-1) ...]).clone()`` and
  written back by ``param.data.copy_(param_vals[offset:offset + param.nelement()].view(
  param.size()))``, the proximal ``regularization_loss`` around ``w_k`` with a 0-d ``lam``,
  ``hessian_vector_product`` (``torch.autograd.grad(tloss, self.model.parameters(),
  create_graph=True)``, ``torch.cat`` of the flat gradient, ``torch.sum(flat_grad * vec)``, a
  second ``grad``), conjugate gradients on ``(1 + regu_coef) v + Hv / (lam + lam_damping)``
  (``type(b) == torch.Tensor``, ``r.dot(r)``, ``if newrdotr < residual_tol``), the meta-gradient
  summed from ``0.0`` over tasks and handed to ``outer_step_with_grad(meta_grad,
  flat_grad=True)`` (a dummy ``regularization_loss(self.get_params())`` backward, then each
  ``p.grad.copy_`` of a slice before Adam's step); ``utils.measure_accuracy`` by
  ``np.argmax`` of ``predict(x, return_numpy=True)``. The Omniglot tasks are replaced by a
  synthetic ``dataset.__getitem__(idx)`` of 5-way tasks of 64 features, the conv net by
  ``make_fc_network`` (16 hidden units), the plotting, pickling and ``tqdm`` left out.

The port's ``outer_step_with_grad`` writes each slice into the ``Gradients`` of the dummy
backward (``p.grad_replace(grads, this_grad)``) where torch copies into ``p.grad``.
"""

import random

import numpy as np
import pytest
import torch
from tests.real_ports import (
    assert_records_agree,
    global_streams_restored,  # noqa: F401  (a fixture)
    initializer,
    port,
    ported_imports,
    run_source,
)

import retrograd as rg

UTILS_SOURCE = '''
import os
import numpy as np
import torch


def to_cuda(x):
    try:
        return x.cuda()
    except:
        return torch.from_numpy(x).float().cuda()


def to_tensor(x):
    if type(x) == np.ndarray:
        return torch.from_numpy(x).float()
    elif type(x) == torch.Tensor:
        return x
    else:
        print("Type error. Input should be either numpy array or torch tensor")
    

def to_device(x, GPU=False):
    if GPU:
        return to_cuda(x)
    else:
        return to_tensor(x)
    
    
def to_numpy(x):
    if type(x) == np.ndarray:
        return x
    else:
        try:
            return x.data.numpy()
        except:
            return x.cpu().data.numpy()
        

def cg_solve(f_Ax, b, cg_iters=10, callback=None, verbose=False, residual_tol=1e-10, x_init=None):
    """
    Goal: Solve Ax=b equivalent to minimizing f(x) = 1/2 x^T A x - x^T b
    Assumption: A is PSD, no damping term is used here (must be damped externally in f_Ax)
    Algorithm template from wikipedia
    Verbose mode works only with numpy
    """
       
    if type(b) == torch.Tensor:
        x = torch.zeros(b.shape[0]) if x_init is None else x_init
        x = x.to(b.device)
        if b.dtype == torch.float16:
            x = x.half()
        r = b - f_Ax(x)
        p = r.clone()
    elif type(b) == np.ndarray:
        x = np.zeros_like(b) if x_init is None else x_init
        r = b - f_Ax(x)
        p = r.copy()
    else:
        print("Type error in cg")

    fmtstr = "%10i %10.3g %10.3g %10.3g"
    titlestr = "%10s %10s %10s %10s"
    if verbose: print(titlestr % ("iter", "residual norm", "soln norm", "obj fn"))

    for i in range(cg_iters):
        if callback is not None:
            callback(x)
        if verbose:
            obj_fn = 0.5*x.dot(f_Ax(x)) - 0.5*b.dot(x)
            norm_x = torch.norm(x) if type(x) == torch.Tensor else np.linalg.norm(x)
            print(fmtstr % (i, r.dot(r), norm_x, obj_fn))

        rdotr = r.dot(r)
        Ap = f_Ax(p)
        alpha = rdotr/(p.dot(Ap))
        x = x + alpha * p
        r = r - alpha * Ap
        newrdotr = r.dot(r)
        beta = newrdotr/rdotr
        p = r + beta * p

        if newrdotr < residual_tol:
            # print("Early CG termination because the residual was small")
            break

    if callback is not None:
        callback(x)
    if verbose: 
        obj_fn = 0.5*x.dot(f_Ax(x)) - 0.5*b.dot(x)
        norm_x = torch.norm(x) if type(x) == torch.Tensor else np.linalg.norm(x)
        print(fmtstr % (i, r.dot(r), norm_x, obj_fn))
    return x

    
def measure_accuracy(task, model, train=False):
    if train is True:
        x, y = task['x_train'], task['y_train']
    else:
        x, y = task['x_val'], task['y_val']
    y_hat = model.predict(x, return_numpy = True)
    batch_size = y.shape[0]
    predict_label = np.argmax(y_hat, axis=1)
    try:
        correct = np.sum(predict_label == y.cpu().data.numpy())
    except:
        correct = np.sum(predict_label == y.data.numpy())
    return correct * 100.0 / batch_size
'''

LEARNER_SOURCE = '''
import numpy as np
import torch
import torch.nn as nn
from   torch.nn import functional as F

class Learner:
    def __init__(self, model, loss_function, inner_lr=1e-3, outer_lr=1e-2, GPU=False, inner_alg='gradient', outer_alg='adam'):
        self.model = model
        self.use_gpu = GPU
        if GPU:
            self.model.cuda()
        assert outer_alg == 'sgd' or 'adam'
        self.inner_opt = torch.optim.SGD(self.model.parameters(), lr=inner_lr)
        if outer_alg == 'adam':
            self.outer_opt = torch.optim.Adam(self.model.parameters(), lr=outer_lr, eps=1e-3)
        else:
            self.outer_opt = torch.optim.SGD(self.model.parameters(), lr=outer_lr)
        self.loss_function = loss_function
        assert inner_alg == 'gradient' # sqp unsupported in this version
        self.inner_alg = inner_alg

    def get_params(self):
        return torch.cat([param.data.view(-1) for param in self.model.parameters()], 0).clone()

    def set_params(self, param_vals):
        offset = 0
        for param in self.model.parameters():
            param.data.copy_(param_vals[offset:offset + param.nelement()].view(param.size()))
            offset += param.nelement()
            
    def set_outer_lr(self, lr):
        for param_group in self.outer_opt.param_groups:
            param_group['lr'] = lr
            
    def set_inner_lr(self, lr):
        for param_group in self.inner_opt.param_groups:
            param_group['lr'] = lr

    def regularization_loss(self, w_0, lam=0.0):
        """
        Add a regularization loss onto the weights
        The proximal term regularizes around the point w_0
        Strength of regularization is lambda
        lambda can either be scalar (type float) or ndarray (numpy.ndarray)
        """
        regu_loss = 0.0
        offset = 0
        regu_lam = lam if type(lam) == float or np.float64 else utils.to_tensor(lam)
        if w_0.dtype == torch.float16:
            try:
                regu_lam = regu_lam.half()
            except:
                regu_lam = np.float16(regu_lam)
        for param in self.model.parameters():
            delta = param.view(-1) - w_0[offset:offset + param.nelement()].view(-1)
            if type(regu_lam) == float or np.float64:
                regu_loss += 0.5 * regu_lam * torch.sum(delta ** 2)
            else:
                # import ipdb; ipdb.set_trace()
                param_lam = regu_lam[offset:offset + param.nelement()].view(-1)
                param_delta = delta * param_lam
                regu_loss += 0.5 * torch.sum(param_delta ** 2)
            offset += param.nelement()
        return regu_loss

    def get_loss(self, x, y, return_numpy=False):
        """
        Assume that x and y are torch tensors -- either in CPU or GPU (controlled externally)
        """
        yhat = self.model.forward(x)
        loss = self.loss_function(yhat, y)
        if return_numpy:
            loss = utils.to_numpy(loss).ravel()[0]
        return loss

    def predict(self, x, return_numpy=False):
        yhat = self.model.forward(utils.to_device(x, self.use_gpu))
        if return_numpy:
            yhat = utils.to_numpy(yhat)
        return yhat

    def learn_on_data(self, x, y, num_steps=10,
                      add_regularization=False,
                      w_0=None, lam=0.0):
        
        assert self.inner_alg == 'gradient' # or 'sqp' or 'adam' # TODO(Aravind): support sqp and adam 
        train_loss = []
        if self.inner_alg == 'gradient':
            for i in range(num_steps):
                self.inner_opt.zero_grad()
                tloss = self.get_loss(x, y)
                loss = tloss + self.regularization_loss(w_0, lam) if add_regularization else tloss
                loss.backward()
                self.inner_opt.step()
                train_loss.append(utils.to_numpy(tloss))

        return train_loss

    def learn_task(self, task, num_steps=10, add_regularization=False, w_0=None, lam=0.0):
        xt, yt = task['x_train'], task['y_train']
        return self.learn_on_data(xt, yt, num_steps, add_regularization, w_0, lam)

    def outer_step_with_grad(self, grad, flat_grad=False):
        """
        Given the gradient, step with the outer optimizer using the gradient.
        Assumed that the gradient is a tuple/list of size compatible with model.parameters()
        If flat_grad, then the gradient is a flattened vector
        """
        check = 0
        for p in self.model.parameters():
            check = check + 1 if type(p.grad) == type(None) else check
        if check > 0:
            # initialize the grad fields properly
            dummy_loss = self.regularization_loss(self.get_params())
            dummy_loss.backward()  # this would initialize required variables
        if flat_grad:
            offset = 0
            grad = utils.to_device(grad, self.use_gpu)
            for p in self.model.parameters():
                this_grad = grad[offset:offset + p.nelement()].view(p.size())
                p.grad.copy_(this_grad)
                offset += p.nelement()
        else:
            for i, p in enumerate(self.model.parameters()):
                p.grad = grad[i]
        self.outer_opt.step()

    def matrix_evaluator(self, task, lam, regu_coef=1.0, lam_damping=10.0, x=None, y=None):
        """
        Constructor function that can be given to CG optimizer
        Works for both type(lam) == float and type(lam) == np.ndarray
        """
        if type(lam) == np.ndarray:
            lam = utils.to_device(lam, self.use_gpu)
        def evaluator(v):
            hvp = self.hessian_vector_product(task, v, x=x, y=y)
            Av = (1.0 + regu_coef) * v + hvp / (lam + lam_damping)
            return Av
        return evaluator

    def hessian_vector_product(self, task, vector, params=None, x=None, y=None):
        """
        Performs hessian vector product on the train set in task with the provided vector
        """
        if x is not None and y is not None:
            xt, yt = x, y
        else:
            xt, yt = task['x_train'], task['y_train']
        if params is not None:
            self.set_params(params)
        tloss = self.get_loss(xt, yt)
        grad_ft = torch.autograd.grad(tloss, self.model.parameters(), create_graph=True)
        flat_grad = torch.cat([g.contiguous().view(-1) for g in grad_ft])
        vec = utils.to_device(vector, self.use_gpu)
        h = torch.sum(flat_grad * vec)
        hvp = torch.autograd.grad(h, self.model.parameters())
        hvp_flat = torch.cat([g.contiguous().view(-1) for g in hvp])
        return hvp_flat


def make_fc_network(in_dim=1, out_dim=1, hidden_sizes=(40,40), float16=False):
    non_linearity = nn.ReLU()
    model = nn.Sequential()
    model.add_module('fc_0', nn.Linear(in_dim, hidden_sizes[0]))
    model.add_module('nl_0', non_linearity)
    model.add_module('fc_1', nn.Linear(hidden_sizes[0], hidden_sizes[1]))
    model.add_module('nl_1', non_linearity)
    model.add_module('fc_2', nn.Linear(hidden_sizes[1], out_dim))
    if float16:
        return model.half()
    else:
        return model
'''

# examples/omniglot_implicit_maml.py's training loop (args as a namespace, a synthetic dataset,
# an fc network, a few meta steps; plotting and pickling left out)
TRAIN_SOURCE = """
import random
from types import SimpleNamespace

np.random.seed(123)
torch.manual_seed(123)
random.seed(123)

args = SimpleNamespace(N_way=5, K_shot=1, inner_lr=1e-2, outer_lr=1e-2, n_steps=5, meta_steps=2,
                       task_mb_size=2, lam=1.0, cg_steps=5, cg_damping=1.0, use_gpu=False,
                       num_tasks=6, lam_lr=0.0, lam_min=0.0, scalar_lam=True, inner_alg='gradient')
dataset = make_dataset(torch, args.num_tasks, args.N_way)

learner_net = make_fc_network(in_dim=64, out_dim=args.N_way, hidden_sizes=(16, 16))
fast_net = make_fc_network(in_dim=64, out_dim=args.N_way, hidden_sizes=(16, 16))
initialize(learner_net)
initialize(fast_net)
meta_learner = Learner(model=learner_net, loss_function=torch.nn.CrossEntropyLoss(), inner_alg=args.inner_alg,
                       inner_lr=args.inner_lr, outer_lr=args.outer_lr, GPU=args.use_gpu)
fast_learner = Learner(model=fast_net, loss_function=torch.nn.CrossEntropyLoss(), inner_alg=args.inner_alg,
                       inner_lr=args.inner_lr, outer_lr=args.outer_lr, GPU=args.use_gpu)

init_params = meta_learner.get_params()
device = 'cuda' if args.use_gpu is True else 'cpu'
lam = torch.tensor(args.lam) if args.scalar_lam is True else torch.ones(init_params.shape[0])*args.lam
lam = lam.to(device)

losses = np.zeros((args.meta_steps, 4))
accuracy = np.zeros((args.meta_steps, 2))
for outstep in range(args.meta_steps):
    task_mb = np.random.choice(args.num_tasks, size=args.task_mb_size)
    w_k = meta_learner.get_params()
    meta_grad = 0.0
    lam_grad = 0.0
    
    for idx in task_mb:
        fast_learner.set_params(w_k.clone()) # sync weights
        task = dataset.__getitem__(idx) # get task
        vl_before = fast_learner.get_loss(task['x_val'], task['y_val'], return_numpy=True)
        tl = fast_learner.learn_task(task, num_steps=args.n_steps)
        # pull back for regularization
        fast_learner.inner_opt.zero_grad()
        regu_loss = fast_learner.regularization_loss(w_k, lam)
        regu_loss.backward()
        fast_learner.inner_opt.step()
        vl_after = fast_learner.get_loss(task['x_val'], task['y_val'], return_numpy=True)
        tacc = utils.measure_accuracy(task, fast_learner, train=True)
        vacc = utils.measure_accuracy(task, fast_learner, train=False)
        
        valid_loss = fast_learner.get_loss(task['x_val'], task['y_val'])
        valid_grad = torch.autograd.grad(valid_loss, fast_learner.model.parameters())
        flat_grad = torch.cat([g.contiguous().view(-1) for g in valid_grad])
        
        if args.cg_steps <= 1:
            task_outer_grad = flat_grad
        else:
            task_matrix_evaluator = fast_learner.matrix_evaluator(task, lam, args.cg_damping)
            task_outer_grad = utils.cg_solve(task_matrix_evaluator, flat_grad, args.cg_steps, x_init=None)
        
        meta_grad += (task_outer_grad/args.task_mb_size)
        losses[outstep] += (np.array([tl[0], vl_before, tl[-1], vl_after])/args.task_mb_size)
        accuracy[outstep] += np.array([tacc, vacc]) / args.task_mb_size
              
        if args.lam_lr <= 0.0:
            task_lam_grad = 0.0

        lam_grad += (task_lam_grad / args.task_mb_size)
    
    meta_learner.outer_step_with_grad(meta_grad, flat_grad=True)
    lam_delta = - args.lam_lr * lam_grad
    lam = torch.clamp(lam + lam_delta, args.lam_min, 5000.0) # clips each element individually if vector
    record(losses[outstep].copy())
    record(accuracy[outstep].copy())
    record({'meta_grad': meta_grad.numpy().copy(), 'w': meta_learner.get_params().numpy().copy(), 'lam': lam.numpy().copy()})
"""

STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("import torch.nn as nn\n", "import retrograd.nn as nn\n"),
    ("from   torch.nn import functional as F\n", "from   retrograd.nn import functional as F\n"),
    ("                self.inner_opt.zero_grad()\n", ""),
    (
        "                loss.backward()\n                self.inner_opt.step()",
        "                grads = loss.backward()\n                self.inner_opt.step(grads)",
    ),
    (
        "            check = check + 1 if type(p.grad) == type(None) else check",
        "            check = check + 1  # (no gradient is held between steps)",
    ),
    (
        "            dummy_loss.backward()  # this would initialize required variables",
        "            grads = dummy_loss.backward()  # this would initialize required variables",
    ),
    ("                p.grad.copy_(this_grad)", "                p.grad_replace(grads, this_grad)"),
    ("        self.outer_opt.step()", "        self.outer_opt.step(grads)"),
    ("        fast_learner.inner_opt.zero_grad()\n", ""),
    (
        "        regu_loss.backward()\n        fast_learner.inner_opt.step()",
        "        grads = regu_loss.backward()\n        fast_learner.inner_opt.step(grads)",
    ),
]


class SyntheticTasks:
    """``OmniglotFewShotDataset.__getitem__(idx)``'s dict (``x_train``, ``y_train``, ``x_val``,
    ``y_val``) over synthetic 5-way tasks: each class a random 64-feature prototype, the
    points it plus noise, one shot to train and three to validate."""

    def __init__(self, lib, num_tasks, n_way):
        rng = np.random.default_rng(464)
        self.tasks = []
        for _ in range(num_tasks):
            prototypes = rng.normal(size=(n_way, 64))
            y_train, y_val = np.arange(n_way), np.repeat(np.arange(n_way), 3)
            self.tasks.append(
                {
                    "x_train": lib.tensor(
                        prototypes[y_train] + 0.3 * rng.normal(size=(n_way, 64)), dtype=lib.float32
                    ),
                    "y_train": lib.tensor(y_train),
                    "x_val": lib.tensor(
                        prototypes[y_val] + 0.3 * rng.normal(size=(3 * n_way, 64)),
                        dtype=lib.float32,
                    ),
                    "y_val": lib.tensor(y_val),
                }
            )

    def __getitem__(self, idx):
        return self.tasks[idx]


@pytest.mark.usefixtures("global_streams_restored")
def test_imaml_dev_implicit_meta_gradients_by_conjugate_gradients_as_torch(capsys):
    torch.manual_seed(0)
    initialize = initializer()
    records = []
    for lib in (torch, rg):
        record = []
        np.random.seed(464)
        random.seed(464)
        utils = run_source(
            UTILS_SOURCE if lib is torch else ported_imports(port(UTILS_SOURCE, STEPS[:1])), lib
        )
        source = LEARNER_SOURCE + TRAIN_SOURCE
        if lib is rg:
            source = ported_imports(port(source, STEPS))
        run_source(
            source,
            lib,
            utils=type("utils", (), utils),
            record=record.append,
            initialize=initialize,
            make_dataset=SyntheticTasks,
        )
        records.append(record)
    capsys.readouterr()
    theirs, ours = records
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-6)
