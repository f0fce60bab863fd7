# ruff: noqa: E501  (the programs are kept as their authors wrote them: long lines)
"""Real PyTorch programs of influence functions ported to retrograd (the harness:
``tests/real_ports.py``).

- nimarb/pytorch_influence_functions (``influence_function.py``, ``calc_influence_function.py``
  and ``utils.display_progress`` as written): ``grad_z`` (``list(grad(loss, list(model.
  parameters()), create_graph=True))`` after ``model.eval()``), ``calc_loss`` (``log_softmax``
  without a ``dim``, torch's implicit dim 1 of a matrix, then ``nll_loss``), ``hvp`` (a first
  ``grad(y, w, retain_graph=True, create_graph=True)``, the products summed into ``0``, a second
  ``grad`` with ``create_graph=True``), ``s_test``'s LiSSA recursion ``_v + (1 - damp) * _h_e -
  _hv / scale`` whose estimate stays on the graph through every recursion, one batch drawn from a
  fresh iterator of the train ``DataLoader`` each time; ``calc_s_test_single`` averaging ``r``
  estimates (``s_test_vec += s_test_vec_list[i]`` extends the list, as written),
  ``calc_influence_single`` and ``calc_grad_z`` reading ``train_loader.dataset[i]`` through
  ``collate_fn([z])``, ``calc_influence_function`` (``torch.sum(k * j).data.cpu().numpy()``) and
  ``np.argsort`` of the influences. The CIFAR model and loaders are replaced by a small tanh MLP
  trained a few SGD steps on synthetic three-class points (a ``TensorDataset``).
"""

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
import sys


def display_progress(text, current_step, last_step, enabled=True,
                     fix_zero_start=True):
    """Draws a progress indicator on the screen with the text preceeding the
    progress

    Arguments:
        test: str, text displayed to describe the task being executed
        current_step: int, current step of the iteration
        last_step: int, last possible step of the iteration
        enabled: bool, if false this function will not execute. This is
            for running silently without stdout output.
        fix_zero_start: bool, if true adds 1 to each current step so that the
            display starts at 1 instead of 0, which it would for most loops
            otherwise.
    """
    if not enabled:
        return

    # Fix display for most loops which start with 0, otherwise looks weird
    if fix_zero_start:
        current_step = current_step + 1

    term_line_len = 80
    final_chars = [':', ';', ' ', '.', ',']
    if text[-1:] not in final_chars:
        text = text + ' '
    if len(text) < term_line_len:
        bar_len = term_line_len - (len(text)
                                   + len(str(current_step))
                                   + len(str(last_step))
                                   + len("  / "))
    else:
        bar_len = 30
    filled_len = int(round(bar_len * current_step / float(last_step)))
    bar = '=' * filled_len + '.' * (bar_len - filled_len)

    bar = f"{text}[{bar:s}] {current_step:d} / {last_step:d}"
    if current_step < last_step-1:
        # Erase to end of line and print
        sys.stdout.write("\\033[K" + bar + "\\r")
    else:
        sys.stdout.write(bar + "\\n")

    sys.stdout.flush()
'''

INFLUENCE_SOURCE = '''
import torch
from torch.autograd import grad


def s_test(z_test, t_test, model, z_loader, gpu=-1, damp=0.01, scale=25.0,
           recursion_depth=5000):
    """s_test can be precomputed for each test point of interest, and then
    multiplied with grad_z to get the desired value for each training point.
    Here, strochastic estimation is used to calculate s_test. s_test is the
    Inverse Hessian Vector Product.

    Arguments:
        z_test: torch tensor, test data points, such as test images
        t_test: torch tensor, contains all test data labels
        model: torch NN, model used to evaluate the dataset
        z_loader: torch Dataloader, can load the training dataset
        gpu: int, GPU id to use if >=0 and -1 means use CPU
        damp: float, dampening factor
        scale: float, scaling factor
        recursion_depth: int, number of iterations aka recursion depth
            should be enough so that the value stabilises.

    Returns:
        h_estimate: list of torch tensors, s_test"""
    v = grad_z(z_test, t_test, model, gpu)
    h_estimate = v.copy()

    ################################
    # TODO: Dynamically set the recursion depth so that iterations stops
    # once h_estimate stabilises
    ################################
    for i in range(recursion_depth):
        # take just one random sample from training dataset
        # easiest way to just use the DataLoader once, break at the end of loop
        #########################
        # TODO: do x, t really have to be chosen RANDOMLY from the train set?
        #########################
        for x, t in z_loader:
            if gpu >= 0:
                x, t = x.cuda(), t.cuda()
            y = model(x)
            loss = calc_loss(y, t)
            hv = hvp(loss, list(model.parameters()), h_estimate)
            # Recursively caclulate h_estimate
            h_estimate = [
                _v + (1 - damp) * _h_e - _hv / scale
                for _v, _h_e, _hv in zip(v, h_estimate, hv)]
            break
        display_progress("Calc. s_test recursions: ", i, recursion_depth)
    return h_estimate


def calc_loss(y, t):
    """Calculates the loss

    Arguments:
        y: torch tensor, input with size (minibatch, nr_of_classes)
        t: torch tensor, target expected by loss of size (0 to nr_of_classes-1)

    Returns:
        loss: scalar, the loss"""
    ####################
    # if dim == [0, 1, 3] then dim=0; else dim=1
    ####################
    # y = torch.nn.functional.log_softmax(y, dim=0)
    y = torch.nn.functional.log_softmax(y)
    loss = torch.nn.functional.nll_loss(
        y, t, weight=None, reduction='mean')
    return loss


def grad_z(z, t, model, gpu=-1):
    """Calculates the gradient z. One grad_z should be computed for each
    training sample.

    Arguments:
        z: torch tensor, training data points
            e.g. an image sample (batch_size, 3, 256, 256)
        t: torch tensor, training data labels
        model: torch NN, model used to evaluate the dataset
        gpu: int, device id to use for GPU, -1 for CPU

    Returns:
        grad_z: list of torch tensor, containing the gradients
            from model parameters to loss"""
    model.eval()
    # initialize
    if gpu >= 0:
        z, t = z.cuda(), t.cuda()
    y = model(z)
    loss = calc_loss(y, t)
    # Compute sum of gradients from model parameters to loss
    return list(grad(loss, list(model.parameters()), create_graph=True))


def hvp(y, w, v):
    """Multiply the Hessians of y and w by v.
    Uses a backprop-like approach to compute the product between the Hessian
    and another vector efficiently, which even works for large Hessians.
    Example: if: y = 0.5 * w^T A x then hvp(y, w, v) returns and expression
    which evaluates to the same values as (A + A.t) v.

    Arguments:
        y: scalar/tensor, for example the output of the loss function
        w: list of torch tensors, tensors over which the Hessian
            should be constructed
        v: list of torch tensors, same shape as w,
            will be multiplied with the Hessian

    Returns:
        return_grads: list of torch tensors, contains product of Hessian and v.

    Raises:
        ValueError: `y` and `w` have a different length."""
    if len(w) != len(v):
        raise(ValueError("w and v must have the same length."))

    # First backprop
    first_grads = grad(y, w, retain_graph=True, create_graph=True)

    # Elementwise products
    elemwise_products = 0
    for grad_elem, v_elem in zip(first_grads, v):
        elemwise_products += torch.sum(grad_elem * v_elem)

    # Second backprop
    return_grads = grad(elemwise_products, w, create_graph=True)

    return return_grads
'''

CALC_SOURCE = '''
import torch
import numpy as np
import logging


def calc_s_test_single(model, z_test, t_test, train_loader, gpu=-1,
                       damp=0.01, scale=25, recursion_depth=5000, r=1):
    """Calculates s_test for a single test image taking into account the whole
    training dataset. s_test = invHessian * nabla(Loss(test_img, model params))"""
    s_test_vec_list = []
    for i in range(r):
        s_test_vec_list.append(s_test(z_test, t_test, model, train_loader,
                                      gpu=gpu, damp=damp, scale=scale,
                                      recursion_depth=recursion_depth))
        display_progress("Averaging r-times: ", i, r)

    ################################
    # TODO: Understand why the first[0] tensor is the largest with 1675 tensor
    #       entries while all subsequent ones only have 335 entries?
    ################################
    s_test_vec = s_test_vec_list[0]
    for i in range(1, r):
        s_test_vec += s_test_vec_list[i]

    s_test_vec = [i / r for i in s_test_vec]

    return s_test_vec


def calc_grad_z(model, train_loader, save_pth=False, gpu=-1, start=0):
    """Calculates grad_z and can save the output to files. One grad_z should
    be computed for each training data sample."""
    if save_pth and isinstance(save_pth, str):
        save_pth = Path(save_pth)
    if not save_pth:
        logging.info("ATTENTION: Not saving grad_z files!")

    grad_zs = []
    for i in range(start, len(train_loader.dataset)):
        z, t = train_loader.dataset[i]
        z = train_loader.collate_fn([z])
        t = train_loader.collate_fn([t])
        grad_z_vec = grad_z(z, t, model, gpu=gpu)
        if save_pth:
            grad_z_vec = [g.cpu() for g in grad_z_vec]
            torch.save(grad_z_vec, save_pth.joinpath(f"{i}.grad_z"))
        else:
            grad_zs.append(grad_z_vec)
        display_progress(
            "Calc. grad_z: ", i-start, len(train_loader.dataset)-start)

    return grad_zs, save_pth


def calc_influence_function(train_dataset_size, grad_z_vecs=None,
                            e_s_test=None):
    """Calculates the influence function"""
    if not grad_z_vecs and not e_s_test:
        grad_z_vecs = load_grad_z()
        e_s_test, _ = load_s_test(train_dataset_size=train_dataset_size)

    if (len(grad_z_vecs) != train_dataset_size):
        logging.warn("Training data size and the number of grad_z files are"
                     " inconsistent.")
        train_dataset_size = len(grad_z_vecs)

    influences = []
    for i in range(train_dataset_size):
        tmp_influence = -sum(
            [
                ###################################
                # TODO: verify if computation really needs to be done
                # on the CPU or if GPU would work, too
                ###################################
                torch.sum(k * j).data.cpu().numpy()
                for k, j in zip(grad_z_vecs[i], e_s_test)
                ###################################
                # Originally with [i] because each grad_z contained
                # a list of tensors as long as e_s_test list
                # There is one grad_z per training data sample
                ###################################
            ]) / train_dataset_size
        influences.append(tmp_influence)
        display_progress("Calc. influence function: ", i, train_dataset_size)

    harmful = np.argsort(influences)
    helpful = harmful[::-1]

    return influences, harmful.tolist(), helpful.tolist()


def calc_influence_single(model, train_loader, test_loader, test_id_num, gpu,
                          recursion_depth, r, s_test_vec=None,
                          time_logging=False):
    """Calculates the influences of all training data points on a single
    test dataset image."""
    # Calculate s_test vectors if not provided
    if not s_test_vec:
        z_test, t_test = test_loader.dataset[test_id_num]
        z_test = test_loader.collate_fn([z_test])
        t_test = test_loader.collate_fn([t_test])
        s_test_vec = calc_s_test_single(model, z_test, t_test, train_loader,
                                        gpu, recursion_depth=recursion_depth,
                                        r=r)

    # Calculate the influence function
    train_dataset_size = len(train_loader.dataset)
    influences = []
    for i in range(train_dataset_size):
        z, t = train_loader.dataset[i]
        z = train_loader.collate_fn([z])
        t = train_loader.collate_fn([t])
        if time_logging:
            time_a = datetime.datetime.now()
        grad_z_vec = grad_z(z, t, model, gpu=gpu)
        if time_logging:
            time_b = datetime.datetime.now()
            time_delta = time_b - time_a
            logging.info(f"Time for grad_z iter:"
                         f" {time_delta.total_seconds() * 1000}")
        tmp_influence = -sum(
            [
                ####################
                # TODO: potential bottle neck, takes 17% execution time
                # torch.sum(k * j).data.cpu().numpy()
                ####################
                torch.sum(k * j).data
                for k, j in zip(grad_z_vec, s_test_vec)
            ]) / train_dataset_size
        influences.append(tmp_influence)
        display_progress("Calc. influence function: ", i, train_dataset_size)

    harmful = np.argsort(influences)
    helpful = harmful[::-1]

    return influences, harmful.tolist(), helpful.tolist(), test_id_num
'''

# the driver: a small classifier trained a few steps, then the influences of its training
# points on a test point, both ways the package offers
DRIVER_SOURCE = """
import torch
import torch.nn as nn
from torch.utils.data import TensorDataset, DataLoader

model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
initialize(model)
train_set = TensorDataset(torch.tensor(train_x), torch.tensor(train_y))
test_set = TensorDataset(torch.tensor(test_x), torch.tensor(test_y))
train_loader = DataLoader(train_set, batch_size=4, shuffle=False)
test_loader = DataLoader(test_set, batch_size=1, shuffle=False)
optimizer = torch.optim.SGD(model.parameters(), lr=0.3)
for epoch in range(3):
    model.train()
    for x, t in train_loader:
        optimizer.zero_grad()
        loss = calc_loss(model(x), t)
        loss.backward()
        optimizer.step()
        record(loss.item())

influences, harmful, helpful, test_id = calc_influence_single(
    model, train_loader, test_loader, test_id_num=1, gpu=-1, recursion_depth=4, r=2)
record([float(i) for i in influences])
record([harmful, helpful])

z_test, t_test = test_loader.dataset[0]
z_test = test_loader.collate_fn([z_test])
t_test = test_loader.collate_fn([t_test])
e_s_test = calc_s_test_single(model, z_test, t_test, train_loader, damp=0.05, scale=10, recursion_depth=3, r=1)
record({str(i): s.detach().numpy() for i, s in enumerate(e_s_test)})
grad_z_vecs, _ = calc_grad_z(model, train_loader)
influences, harmful, helpful = calc_influence_function(len(train_set), grad_z_vecs, e_s_test)
record([float(i) for i in influences])
record([harmful, helpful])
"""

STEPS = [
    ("        optimizer.zero_grad()\n", ""),
    (
        "        loss.backward()\n        optimizer.step()",
        "        grads = loss.backward()\n        optimizer.step(grads)",
    ),
    ("import torch\n", "import retrograd as torch\n"),
    ("import torch.nn as nn\n", "import retrograd.nn as nn\n"),
]


@pytest.mark.usefixtures("global_streams_restored")
def test_nimarb_influence_functions_by_lissa_hvp_recursions_as_torch(capsys):
    torch.manual_seed(0)
    rng = np.random.default_rng(461)
    centers = rng.normal(scale=1.5, size=(3, 4))
    train_y = np.arange(12) % 3
    train_x = (centers[train_y] + rng.normal(size=(12, 4))).astype(np.float32)
    test_y = np.array([2, 0])
    test_x = (centers[test_y] + rng.normal(size=(2, 4))).astype(np.float32)
    initialize = initializer()
    records, logs = [], []
    source = UTILS_SOURCE + INFLUENCE_SOURCE + CALC_SOURCE + DRIVER_SOURCE
    for lib in (torch, rg):
        record = []
        text = source if lib is torch else ported_imports(port(source, STEPS))
        run_source(
            text,
            lib,
            record=record.append,
            initialize=initialize,
            train_x=train_x,
            train_y=train_y,
            test_x=test_x,
            test_y=test_y,
        )
        records.append(record)
        logs.append(capsys.readouterr().out)
    theirs, ours = records
    assert logs[0] == logs[1]
    assert "Calc. influence function: " in logs[0]
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-6)
