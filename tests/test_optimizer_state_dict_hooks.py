"""torch 2.13's optimizer state-dict hooks (``register_state_dict_pre_hook``,
``register_state_dict_post_hook``, ``register_load_state_dict_pre_hook``,
``register_load_state_dict_post_hook``, with ``prepend``): what they see, their order, a
post-hook's replacement dict, a load pre-hook's edited copy (the caller's dict untouched), and
removal; compared call by call with torch's."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg


def _optimizer(lib):
    weight = lib.nn.Parameter(lib.ones(3) if lib is torch else rg.ones((3,)))
    optimizer = lib.optim.SGD([weight], lr=0.1, momentum=0.9)
    if lib is torch:
        weight.grad = torch.full((3,), 0.5)
        optimizer.step()
    else:
        optimizer.step((weight * 0.5).sum().backward())
    return optimizer


def _run(lib):
    seen = []
    optimizer = _optimizer(lib)
    handles = [
        optimizer.register_state_dict_pre_hook(lambda o: seen.append("pre")),
        optimizer.register_state_dict_pre_hook(lambda o: seen.append("pre-first"), prepend=True),
        optimizer.register_state_dict_post_hook(
            lambda o, sd: seen.append(("post", sorted(sd))) or {**sd, "extra": 1}
        ),
        optimizer.register_load_state_dict_pre_hook(
            lambda o, sd: seen.append(("load-pre", sorted(sd))) or None
        ),
        optimizer.register_load_state_dict_pre_hook(
            lambda o, sd: {**sd, "param_groups": [{**g, "lr": 0.5} for g in sd["param_groups"]]}
        ),
        optimizer.register_load_state_dict_post_hook(lambda o: seen.append("load-post")),
    ]
    state = optimizer.state_dict()
    given = {k: v for k, v in state.items() if k != "extra"}
    optimizer.load_state_dict(given)
    lr = optimizer.param_groups[0]["lr"]
    for handle in handles:
        handle.remove()
    plain = optimizer.state_dict()
    return seen, sorted(state), lr, sorted(plain), given["param_groups"][0]["lr"]


def test_state_dict_hooks_as_torchs():
    theirs, ours = _run(torch), _run(rg)
    assert ours == theirs
    seen, keys, lr, plain, untouched = ours
    assert seen[:2] == ["pre-first", "pre"] and "extra" in keys and lr == 0.5
    assert "extra" not in plain and untouched == 0.1  # the caller's dict was not edited


def test_a_state_dict_hook_that_is_not_callable_is_refused():
    optimizer = _optimizer(rg)
    with pytest.raises(rg.errors.DTypeError, match="callable"):
        optimizer.register_state_dict_post_hook(3)


def test_momentum_survives_the_hooked_round_trip():
    optimizer = _optimizer(rg)
    optimizer.register_load_state_dict_post_hook(lambda o: None)
    state = optimizer.state_dict()
    other = _optimizer(rg)
    other.load_state_dict(state)
    (mine,) = optimizer.state.values()
    (theirs,) = other.state.values()
    np.testing.assert_array_equal(
        np.asarray(mine["momentum_buffer"]), np.asarray(theirs["momentum_buffer"])
    )
