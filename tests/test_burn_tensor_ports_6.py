"""burn-nn's normalization module tests (``crates/burn-nn/src/modules/norm``, tracel-ai/burn
at 2c06be351006851d42fdb6df16b976f4a82d9747) through API.md section 8's torch modules
(``nn.LayerNorm``, ``nn.GroupNorm``, ``nn.RMSNorm``, ``nn.BatchNorm1d/2d``), under every
checkpointing strategy on the chosen inner backend. Burn's ``LayerNormConfig::new(d)`` is
``nn.LayerNorm(d)``,
``GroupNormConfig::new(groups, channels)`` is ``nn.GroupNorm(groups, channels)``,
``RmsNormConfig::new(d)`` is ``nn.RMSNorm(d, eps)``, ``BatchNormConfig::new(c)`` is
``nn.BatchNorm{1,2}d(c)`` (momentum 0.1, as both default)."""

from __future__ import annotations

import numpy as np

import retrograd as rg
import retrograd.nn.functional as F  # noqa: N812
from test_burn_ports import backend  # noqa: F401 (the autouse fixture: every strategy)
from test_burn_tensor_ports import approx, arange_f

LN_INPUT = [[-0.6897, -2.7106, 2.2222, -1.0330, -0.8933, 1.1765, 0.0601, 1.5252, -0.3630, 0.6728]]
LN_EXPECTED = [
    [-0.4990, -1.9680, 1.6178, -0.7486, -0.6470, 0.8576, 0.0461, 1.1111, -0.2614, 0.4915]
]


def burn_close(actual, expected, rtol=5e-3, atol=1e-5):
    """Burn's default tolerance: relative 0.5%, absolute 1e-5."""
    np.testing.assert_allclose(
        np.asarray(actual, dtype=np.float64), expected, rtol=rtol, atol=max(atol, 1e-4)
    )


def test_layer_norm_forward():
    burn_close(rg.nn.LayerNorm(10)(rg.tensor(LN_INPUT)), LN_EXPECTED)
    burn_close(
        rg.nn.LayerNorm(10, eps=1e-1)(rg.tensor(LN_INPUT)),
        [[-0.4863, -1.9180, 1.5766, -0.7295, -0.6305, 0.8358, 0.0449, 1.0828, -0.2548, 0.4790]],
    )
    burn_close(rg.nn.LayerNorm(10, bias=False)(rg.tensor(LN_INPUT)), LN_EXPECTED)
    burn_close(F.layer_norm(rg.tensor(LN_INPUT), (10,)), LN_EXPECTED)


def test_layer_norm_backward():
    module = rg.nn.LayerNorm(2)
    t1 = rg.tensor([[0.0, 1.0], [3.0, 4.0]]).require_grad()
    t2 = rg.tensor([[6.0, 7.0], [9.0, 10.0]]).require_grad()
    grads = module(t1.matmul(t2)).backward()
    approx(module.weight.grad(grads), [-2.0, 2.0])
    approx(module.bias.grad(grads), [2.0, 2.0])
    approx(t1.grad(grads), np.zeros((2, 2)))
    approx(t2.grad(grads), np.zeros((2, 2)))


GN_INPUT = [
    [
        [-0.3034, 0.2726, -0.9659],
        [-1.1845, -1.3236, 0.0172],
        [1.9507, 1.2554, -0.8625],
        [1.0682, 0.3604, 0.3985],
        [-0.4957, -0.4461, -0.9721],
        [1.5157, -0.1546, -0.5596],
    ],
    [
        [-1.6698, -0.4040, -0.7927],
        [0.3736, -0.0975, -0.1351],
        [-0.9461, 0.5461, -0.6334],
        [-1.0919, -0.1158, 0.1213],
        [-0.9535, 0.1281, 0.4372],
        [-0.2845, 0.3488, 0.5641],
    ],
]
GN_INPUT_2 = [
    [
        [0.3345, 0.4429, 0.6639],
        [0.5041, 0.4175, 0.8437],
        [0.6159, 0.3758, 0.4071],
        [0.5417, 0.5785, 0.7671],
        [0.3837, 0.9883, 0.0420],
        [0.4808, 0.8989, 0.6144],
    ],
    [
        [0.3930, 0.2098, 0.0602],
        [0.2298, 0.9425, 0.0333],
        [0.7409, 0.8172, 0.8879],
        [0.4846, 0.0486, 0.2029],
        [0.6741, 0.9765, 0.6864],
        [0.2827, 0.5534, 0.2125],
    ],
]


def test_group_norm_forward():
    module = rg.nn.GroupNorm(2, 6, affine=False)
    assert module.weight is None and module.bias is None
    burn_close(
        module(rg.tensor(GN_INPUT)),
        [
            [
                [-0.1653, 0.3748, -0.7866],
                [-0.9916, -1.1220, 0.1353],
                [1.9485, 1.2965, -0.6896],
                [1.2769, 0.3628, 0.4120],
                [-0.7427, -0.6786, -1.3578],
                [1.8547, -0.3022, -0.8252],
            ],
            [
                [-1.9342, 0.0211, -0.5793],
                [1.2223, 0.4945, 0.4365],
                [-0.8163, 1.4887, -0.3333],
                [-1.7960, -0.0392, 0.3875],
                [-1.5469, 0.3998, 0.9561],
                [-0.3428, 0.7970, 1.1845],
            ],
        ],
    )
    module = rg.nn.GroupNorm(3, 6, affine=True)
    approx(module.weight, np.ones(6))
    approx(module.bias, np.zeros(6))
    burn_close(
        module(rg.tensor(GN_INPUT_2)),
        [
            [
                [-1.1694, -0.5353, 0.7572],
                [-0.1775, -0.6838, 1.8087],
                [0.5205, -1.3107, -1.0723],
                [-0.0459, 0.2351, 1.6734],
                [-0.5796, 1.3218, -1.6544],
                [-0.2744, 1.0406, 0.1459],
            ],
            [
                [0.2665, -0.3320, -0.8205],
                [-0.2667, 2.0612, -0.9085],
                [0.6681, 0.9102, 1.1345],
                [-0.1453, -1.5287, -1.0389],
                [0.4253, 1.5962, 0.4731],
                [-1.0903, -0.0419, -1.3623],
            ],
        ],
        rtol=1e-2,
        atol=1e-2,
    )


def test_rms_norm_forward():
    out = rg.nn.RMSNorm(3, eps=1e-5)(arange_f(9, (3, 3)))
    burn_close(out, [[0.0, 0.7746, 1.5492], [0.7348, 0.9798, 1.2247], [0.8514, 0.9933, 1.1352]])


BN1D_INPUT = [
    [[0.9601, 0.7277], [0.6272, 0.9034], [0.9378, 0.7230]],
    [[0.6356, 0.1362], [0.0249, 0.9509], [0.6600, 0.5945]],
]
BN2D_INPUT = [
    [
        [[0.9601, 0.7277], [0.1270, 0.5441]],
        [[0.6272, 0.9034], [0.4066, 0.7179]],
        [[0.9378, 0.7230], [0.3544, 0.9591]],
    ],
    [
        [[0.6356, 0.1362], [0.1333, 0.7287]],
        [[0.0249, 0.9509], [0.3791, 0.2481]],
        [[0.6600, 0.5945], [0.5424, 0.4767]],
    ],
]


def test_batch_norm_1d():
    module = rg.nn.BatchNorm1d(3)
    burn_close(
        module(rg.tensor(BN1D_INPUT)),
        [
            [[1.1483e00, 3.7521e-01], [1.6272e-03, 7.5067e-01], [1.6204e00, -4.5168e-02]],
            [[6.8856e-02, -1.5923e00], [-1.6318e00, 8.7949e-01], [-5.3368e-01, -1.0416e00]],
        ],
        rtol=0.1,
        atol=1e-3,
    )
    module.eval()
    burn_close(
        module(rg.tensor(BN1D_INPUT)),
        [
            [[0.9409, 0.6976], [0.5892, 0.8774], [0.9106, 0.6844]],
            [[0.6012, 0.0782], [-0.0394, 0.9270], [0.6181, 0.5492]],
        ],
    )


def test_batch_norm_2d():
    module = rg.nn.BatchNorm2d(3)
    x = rg.tensor(BN2D_INPUT).require_grad()
    out = module(x)
    burn_close(
        out,
        [
            [
                [[1.5136, 0.7506], [-1.2216, 0.1477]],
                [[0.3135, 1.2252], [-0.4150, 0.6130]],
                [[1.4186, 0.3372], [-1.5183, 1.5262]],
            ],
            [
                [[0.4483, -1.1914], [-1.2010, 0.7537]],
                [[-1.6752, 1.3822], [-0.5058, -0.9381]],
                [[0.0200, -0.3097], [-0.5715, -0.9026]],
            ],
        ],
        rtol=0.1,
        atol=1e-3,
    )
    burn_close(module.running_mean, [0.0499, 0.0532, 0.0656])
    burn_close(module.running_var, [0.9106, 0.9105, 0.9045])
    grads = out.sum().backward()
    np.testing.assert_allclose(np.asarray(module.weight.grad(grads)), np.zeros(3), atol=1e-5)
    approx(module.bias.grad(grads), [8.0, 8.0, 8.0])
    np.testing.assert_allclose(np.asarray(x.grad(grads)), np.zeros((2, 3, 2, 2)), atol=1e-5)
    module.eval()
    burn_close(
        module(rg.tensor(BN2D_INPUT)),
        [
            [
                [[0.9538, 0.7103], [0.0808, 0.5179]],
                [[0.6015, 0.8910], [0.3703, 0.6966]],
                [[0.9171, 0.6912], [0.3037, 0.9395]],
            ],
            [
                [[0.6138, 0.0904], [0.0874, 0.7113]],
                [[-0.0297, 0.9408], [0.3415, 0.2042]],
                [[0.6250, 0.5561], [0.5013, 0.4323]],
            ],
        ],
    )
