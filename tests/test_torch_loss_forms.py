"""torch's top-level loss functions (``torch.kl_div``, ``torch.ctc_loss``, ...) as torch 2.13
runs them from Python: with ``reduction`` left out they give every element's loss (the Python
binding passes 0, whatever the schema's ``reduction=1`` says), and an explicit 1 or 2 reduces.
Values and gradients against torch's, on the chosen inner backend."""

import numpy as np
import pytest
import torch

import retrograd as rg


def _cases():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 3, 4))
    probs = rng.uniform(0.05, 0.95, (3, 4))
    sign = np.where(rng.standard_normal((3, 4)) > 0, 1.0, -1.0)
    log_probs = np.log(rng.dirichlet(np.ones(5), (6, 2)))
    return {
        "kl_div": ((a, probs), ()),
        "hinge_embedding_loss": ((a, sign), (1.0,)),
        "margin_ranking_loss": ((a, b, sign), (0.0,)),
        "binary_cross_entropy_with_logits": ((a, probs), (None, None)),
        "cosine_embedding_loss": ((a, b, sign[:, 0]), (0.0,)),
        "triplet_margin_loss": ((a, b, a + 1.0), (1.0, 2.0, 1e-6, False)),
        "ctc_loss": (
            (log_probs, np.array([[1, 2], [3, 3]]), np.array([6, 5]), np.array([2, 2])),
            (0,),
        ),
    }


@pytest.mark.parametrize("name", list(_cases()))
@pytest.mark.parametrize("reduction", [None, 0, 1, 2])
def test_top_level_loss_reduces_as_torchs(name, reduction):
    arrays, middle = _cases()[name]
    # the inputs with a gradient (a target read only by comparisons has none, in either)
    float_count = {"ctc_loss": 1, "hinge_embedding_loss": 1, "cosine_embedding_loss": 2}
    float_count = float_count.get(name, len(arrays))
    ours = [rg.tensor(x, requires_grad=i < float_count) for i, x in enumerate(arrays)]
    theirs = [torch.tensor(x, requires_grad=i < float_count) for i, x in enumerate(arrays)]
    extra = () if reduction is None else (*middle, reduction)
    if name == "ctc_loss":  # through the log_softmax torch's contract puts before it (its
        # kernel's gradient is exact only there; retrograd's is exact in log_probs too)
        out = rg.ctc_loss(ours[0].log_softmax(-1), *ours[1:], *extra)
        tout = torch.ctc_loss(theirs[0].log_softmax(-1), *theirs[1:], *extra)
    else:
        out = getattr(rg, name)(*ours, *extra)
        tout = getattr(torch, name)(*theirs, *extra)
    assert tuple(out.shape) == tuple(tout.shape)
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-10, atol=1e-12)
    grads = (out * out).sum().backward()
    (tout * tout).sum().backward()
    for x, tx in zip(ours[:float_count], theirs[:float_count]):
        np.testing.assert_allclose(x.grad(grads).numpy(), tx.grad.numpy(), rtol=1e-9, atol=1e-12)
