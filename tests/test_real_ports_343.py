# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
rotation-equivariant layers built from e3nn's core (e3nn/e3nn, ``e3nn/o3/_wigner.py`` whole,
``e3nn/o3/_rotation.py``'s conversions, ``e3nn/o3/_spherical_harmonics.py``'s
``SphericalHarmonics.forward`` and the ``_spherical_harmonics`` polynomials up to l = 3), then
a small equivariant interatomic potential trained on energies and forces with them, against
torch's run of the same code.

What it exercises: complex tensors the way ``_wigner.py`` builds them (``torch.diag(1j * m)``,
``-0.5j * (raising - lowering)`` stacked with a real tensor, ``torch.zeros(...,
dtype=torch.complex128)`` written by ``q[l + m, l + abs(m)] = -1j / 2**0.5``, ``(-1j) ** l *
q``, ``q.to(dtype=..., copy=True, memory_format=torch.contiguous_format)``, ``torch.conj(Q.T)
@ X @ Q``, ``torch.real``/``torch.imag``, a four-operand complex ``torch.einsum("ij,kl,mn,ikn->
jlm")``); ``torch.matrix_exp`` of batched generators; ``functools.lru_cache`` over tensors;
``Fraction`` coefficients written into a float64 tensor; ``sh.div_`` in place; ``torch.nn.functional.normalize``; ``torch.atan2``/``acos``
of clamped coordinates; ``R.new_tensor``, ``torch.allclose(torch.det(R), ...)``,
``torch.broadcast_tensors``. The potential sums radial-weighted harmonics over edges by
``index_add_``, contracts them with ``wigner_3j(1, 1, 2)`` in ``torch.einsum``, and takes forces
as ``-torch.autograd.grad(energy, pos, create_graph=True)[0]`` inside the loss.

``explicit_default_types`` is e3nn.util's; the Irreps bookkeeping of ``SphericalHarmonics``'s
constructor is left out (it takes a list of ``l``), and so is the ``@torch.jit.script`` of
the polynomials (torch's scripting reads the source file, which text run by ``exec`` has not). The lines changed: the ``import`` lines and
the gradient lines (``grads = loss.backward()``, ``optimizer.step(grads)``).
"""

from __future__ import annotations

import torch

import retrograd as rg
from real_ports import SharedDraws, assert_records_agree, initializer, port, run_source

E3NN_SOURCE = '''
import functools
import math
from typing import Union, List

import torch


# e3nn/util/default_type.py
def torch_get_default_device() -> torch.device:
    return torch.empty(0).device


def explicit_default_types(dtype, device):
    """A torchscript-compatible type resolver"""
    if dtype is None:
        dtype = torch.get_default_dtype()
    if device is None:
        device = torch_get_default_device()
    return dtype, device


# e3nn/o3/_wigner.py
def su2_generators(j: int) -> torch.Tensor:
    m = torch.arange(-j, j)
    raising = torch.diag(-torch.sqrt(j * (j + 1) - m * (m + 1)), diagonal=-1)

    m = torch.arange(-j + 1, j + 1)
    lowering = torch.diag(torch.sqrt(j * (j + 1) - m * (m - 1)), diagonal=1)

    m = torch.arange(-j, j + 1)
    return torch.stack(
        [
            0.5 * (raising + lowering),  # x (usually)
            torch.diag(1j * m),  # z (usually)
            -0.5j * (raising - lowering),  # -y (usually)
        ],
        dim=0,
    )


def change_basis_real_to_complex(l: int, dtype=None, device=None) -> torch.Tensor:
    # https://en.wikipedia.org/wiki/Spherical_harmonics#Real_form
    q = torch.zeros((2 * l + 1, 2 * l + 1), dtype=torch.complex128)
    for m in range(-l, 0):
        q[l + m, l + abs(m)] = 1 / 2**0.5
        q[l + m, l - abs(m)] = -1j / 2**0.5
    q[l, l] = 1
    for m in range(1, l + 1):
        q[l + m, l + abs(m)] = (-1) ** m / 2**0.5
        q[l + m, l - abs(m)] = 1j * (-1) ** m / 2**0.5
    q = (-1j) ** l * q  # Added factor of 1j**l to make the Clebsch-Gordan coefficients real

    dtype, device = explicit_default_types(dtype, device)
    dtype = {
        torch.float32: torch.complex64,
        torch.float64: torch.complex128,
    }[dtype]
    # make sure we always get:
    # 1. a copy so mutation doesn't ruin the stored tensors
    # 2. a contiguous tensor, regardless of what transpositions happened above
    return q.to(dtype=dtype, device=device, copy=True, memory_format=torch.contiguous_format)


def so3_generators(l) -> torch.Tensor:
    X = su2_generators(l)
    Q = change_basis_real_to_complex(l)
    X = torch.conj(Q.T) @ X @ Q
    assert torch.all(torch.abs(torch.imag(X)) < 1e-5)
    return torch.real(X)


def wigner_D(l: int, alpha: torch.Tensor, beta: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
    alpha, beta, gamma = torch.broadcast_tensors(alpha, beta, gamma)
    alpha = alpha[..., None, None] % (2 * math.pi)
    beta = beta[..., None, None] % (2 * math.pi)
    gamma = gamma[..., None, None] % (2 * math.pi)
    X = so3_generators(l)
    return torch.matrix_exp(alpha * X[1]) @ torch.matrix_exp(beta * X[0]) @ torch.matrix_exp(gamma * X[1])


def wigner_3j(l1: int, l2: int, l3: int, dtype=None, device=None) -> torch.Tensor:
    assert abs(l2 - l3) <= l1 <= l2 + l3
    assert isinstance(l1, int) and isinstance(l2, int) and isinstance(l3, int)
    C = _so3_clebsch_gordan(l1, l2, l3)

    dtype, device = explicit_default_types(dtype, device)
    # make sure we always get:
    # 1. a copy so mutation doesn't ruin the stored tensors
    # 2. a contiguous tensor, regardless of what transpositions happened above
    return C.to(dtype=dtype, device=device, copy=True, memory_format=torch.contiguous_format)


@functools.lru_cache(maxsize=None)
def _so3_clebsch_gordan(l1: int, l2: int, l3: int) -> torch.Tensor:
    Q1 = change_basis_real_to_complex(l1, dtype=torch.float64)
    Q2 = change_basis_real_to_complex(l2, dtype=torch.float64)
    Q3 = change_basis_real_to_complex(l3, dtype=torch.float64)
    C = _su2_clebsch_gordan(l1, l2, l3).to(dtype=torch.complex128)
    C = torch.einsum("ij,kl,mn,ikn->jlm", Q1, Q2, torch.conj(Q3.T), C)

    # make it real
    assert torch.all(torch.abs(torch.imag(C)) < 1e-5)
    C = torch.real(C)

    # normalization
    C = C / torch.norm(C)
    return C


@functools.lru_cache(maxsize=None)
def _su2_clebsch_gordan(j1: Union[int, float], j2: Union[int, float], j3: Union[int, float]) -> torch.Tensor:
    assert isinstance(j1, (int, float))
    assert isinstance(j2, (int, float))
    assert isinstance(j3, (int, float))
    mat = torch.zeros((int(2 * j1 + 1), int(2 * j2 + 1), int(2 * j3 + 1)), dtype=torch.float64)
    if int(2 * j3) in range(int(2 * abs(j1 - j2)), int(2 * (j1 + j2)) + 1, 2):
        for m1 in (x / 2 for x in range(-int(2 * j1), int(2 * j1) + 1, 2)):
            for m2 in (x / 2 for x in range(-int(2 * j2), int(2 * j2) + 1, 2)):
                if abs(m1 + m2) <= j3:
                    mat[int(j1 + m1), int(j2 + m2), int(j3 + m1 + m2)] = _su2_clebsch_gordan_coeff(
                        (j1, m1), (j2, m2), (j3, m1 + m2)
                    )
    return mat


def _su2_clebsch_gordan_coeff(idx1, idx2, idx3):
    from fractions import Fraction
    from math import factorial

    j1, m1 = idx1
    j2, m2 = idx2
    j3, m3 = idx3

    if m3 != m1 + m2:
        return 0
    vmin = int(max([-j1 + j2 + m3, -j1 + m1, 0]))
    vmax = int(min([j2 + j3 + m1, j3 - j1 + j2, j3 + m3]))

    def f(n: int) -> int:
        assert n == round(n)
        return factorial(round(n))

    C = (
        (2.0 * j3 + 1.0)
        * Fraction(
            f(j3 + j1 - j2) * f(j3 - j1 + j2) * f(j1 + j2 - j3) * f(j3 + m3) * f(j3 - m3),
            f(j1 + j2 + j3 + 1) * f(j1 - m1) * f(j1 + m1) * f(j2 - m2) * f(j2 + m2),
        )
    ) ** 0.5

    S = 0
    for v in range(vmin, vmax + 1):
        S += (-1) ** int(v + j2 + m2) * Fraction(
            f(j2 + j3 + m1 - v) * f(j1 - m1 + v), f(v) * f(j3 - j1 + j2 - v) * f(j3 + m3 - v) * f(v + j1 - j2 - m3)
        )
    C = C * S
    return C


# e3nn/o3/_rotation.py
def rand_matrix(*shape, requires_grad: bool = False, dtype=None, device=None):
    R = angles_to_matrix(*rand_angles(*shape, dtype=dtype, device=device))
    return R.detach().requires_grad_(requires_grad)


def rand_angles(*shape, requires_grad: bool = False, dtype=None, device=None):
    alpha, gamma = 2 * math.pi * torch.rand(2, *shape, dtype=dtype, device=device)
    beta = torch.rand(shape, dtype=dtype, device=device).mul(2).sub(1).acos()
    alpha = alpha.detach().requires_grad_(requires_grad)
    beta = beta.detach().requires_grad_(requires_grad)
    gamma = gamma.detach().requires_grad_(requires_grad)
    return alpha, beta, gamma


def compose_quaternion(q1, q2) -> torch.Tensor:
    q1, q2 = torch.broadcast_tensors(q1, q2)
    return torch.stack(
        [
            q1[..., 0] * q2[..., 0] - q1[..., 1] * q2[..., 1] - q1[..., 2] * q2[..., 2] - q1[..., 3] * q2[..., 3],
            q1[..., 1] * q2[..., 0] + q1[..., 0] * q2[..., 1] + q1[..., 2] * q2[..., 3] - q1[..., 3] * q2[..., 2],
            q1[..., 0] * q2[..., 2] - q1[..., 1] * q2[..., 3] + q1[..., 2] * q2[..., 0] + q1[..., 3] * q2[..., 1],
            q1[..., 0] * q2[..., 3] + q1[..., 1] * q2[..., 2] - q1[..., 2] * q2[..., 1] + q1[..., 3] * q2[..., 0],
        ],
        dim=-1,
    )


def inverse_quaternion(q):
    q = q.clone()
    q[..., 1:].neg_()
    return q


def matrix_x(angle: torch.Tensor) -> torch.Tensor:
    c = angle.cos()
    s = angle.sin()
    o = torch.ones_like(angle)
    z = torch.zeros_like(angle)
    return torch.stack(
        [
            torch.stack([o, z, z], dim=-1),
            torch.stack([z, c, -s], dim=-1),
            torch.stack([z, s, c], dim=-1),
        ],
        dim=-2,
    )


def matrix_y(angle: torch.Tensor) -> torch.Tensor:
    c = angle.cos()
    s = angle.sin()
    o = torch.ones_like(angle)
    z = torch.zeros_like(angle)
    return torch.stack(
        [
            torch.stack([c, z, s], dim=-1),
            torch.stack([z, o, z], dim=-1),
            torch.stack([-s, z, c], dim=-1),
        ],
        dim=-2,
    )


def angles_to_matrix(alpha, beta, gamma) -> torch.Tensor:
    alpha, beta, gamma = torch.broadcast_tensors(alpha, beta, gamma)
    return matrix_y(alpha) @ matrix_x(beta) @ matrix_y(gamma)


def matrix_to_angles(R):
    assert torch.allclose(torch.det(R), R.new_tensor(1))
    x = R @ R.new_tensor([0.0, 1.0, 0.0])
    a, b = xyz_to_angles(x)
    R = angles_to_matrix(a, b, torch.zeros_like(a)).transpose(-1, -2) @ R
    c = torch.atan2(R[..., 0, 2], R[..., 0, 0])
    return a, b, c


def angles_to_quaternion(alpha, beta, gamma) -> torch.Tensor:
    alpha, beta, gamma = torch.broadcast_tensors(alpha, beta, gamma)
    qa = axis_angle_to_quaternion(alpha.new_tensor([0.0, 1.0, 0.0]), alpha)
    qb = axis_angle_to_quaternion(beta.new_tensor([1.0, 0.0, 0.0]), beta)
    qc = axis_angle_to_quaternion(gamma.new_tensor([0.0, 1.0, 0.0]), gamma)
    return compose_quaternion(qa, compose_quaternion(qb, qc))


def axis_angle_to_quaternion(xyz, angle) -> torch.Tensor:
    xyz, angle = torch.broadcast_tensors(xyz, angle[..., None])
    xyz = torch.nn.functional.normalize(xyz, dim=-1)
    c = torch.cos(angle[..., :1] / 2)
    s = torch.sin(angle / 2)
    return torch.cat([c, xyz * s], dim=-1)


def quaternion_to_axis_angle(q):
    angle = 2 * torch.acos(q[..., 0].clamp(-1, 1))
    axis = torch.nn.functional.normalize(q[..., 1:], dim=-1)
    return axis, angle


def matrix_to_axis_angle(R):
    assert torch.allclose(torch.det(R), R.new_tensor(1))
    tr = R[..., 0, 0] + R[..., 1, 1] + R[..., 2, 2]
    angle = torch.acos(tr.sub(1).div(2).clamp(-1, 1))
    axis = torch.stack(
        [
            R[..., 2, 1] - R[..., 1, 2],
            R[..., 0, 2] - R[..., 2, 0],
            R[..., 1, 0] - R[..., 0, 1],
        ],
        dim=-1,
    )
    axis = torch.nn.functional.normalize(axis, dim=-1)
    return axis, angle


def axis_angle_to_matrix(axis, angle) -> torch.Tensor:
    axis, angle = torch.broadcast_tensors(axis, angle[..., None])
    alpha, beta = xyz_to_angles(axis)
    R = angles_to_matrix(alpha, beta, torch.zeros_like(beta))
    Ry = matrix_y(angle[..., 0])
    return R @ Ry @ R.transpose(-2, -1)


def quaternion_to_matrix(q) -> torch.Tensor:
    return axis_angle_to_matrix(*quaternion_to_axis_angle(q))


def angles_to_xyz(alpha, beta) -> torch.Tensor:
    alpha, beta = torch.broadcast_tensors(alpha, beta)
    x = torch.sin(beta) * torch.sin(alpha)
    y = torch.cos(beta)
    z = torch.sin(beta) * torch.cos(alpha)
    return torch.stack([x, y, z], dim=-1)


def xyz_to_angles(xyz):
    xyz = torch.nn.functional.normalize(xyz, p=2, dim=-1)  # forward 0's instead of nan for zero-radius
    xyz = xyz.clamp(-1, 1)

    beta = torch.acos(xyz[..., 1])
    alpha = torch.atan2(xyz[..., 0], xyz[..., 2])
    return alpha, beta


# e3nn/o3/_spherical_harmonics.py (SphericalHarmonics without its Irreps bookkeeping)
class SphericalHarmonics(torch.nn.Module):
    def __init__(self, ls: List[int], normalize: bool, normalization: str = 'integral'):
        super().__init__()
        self.normalize = normalize
        self.normalization = normalization
        assert normalization in ['integral', 'component', 'norm']
        self._ls_list = ls
        self._lmax = max(ls)
        self._is_range_lmax = ls == list(range(max(ls) + 1))
        self._prof_str = f'spherical_harmonics({ls})'

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # - PROFILER - with torch.autograd.profiler.record_function(self._prof_str):
        if self.normalize:
            x = torch.nn.functional.normalize(x, dim=-1)  # forward 0's instead of nan for zero-radius

        sh = _spherical_harmonics(self._lmax, x[..., 0], x[..., 1], x[..., 2])

        if not self._is_range_lmax:
            sh = torch.cat([
                sh[..., l*l:(l+1)*(l+1)]
                for l in self._ls_list
            ], dim=-1)

        if self.normalization == 'integral':
            sh.div_(math.sqrt(4 * math.pi))
        elif self.normalization == 'norm':
            sh.div_(torch.cat([
                math.sqrt(2 * l + 1) * torch.ones(2 * l + 1, dtype=sh.dtype, device=sh.device)
                for l in self._ls_list
            ]))

        return sh


def spherical_harmonics(l, x: torch.Tensor, normalize: bool, normalization: str = 'integral'):
    sh = SphericalHarmonics([l] if isinstance(l, int) else list(l), normalize, normalization)
    return sh(x)


# @torch.jit.script  (torch's scripting reads the source file, which text run by exec has not)
def _spherical_harmonics(lmax: int, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    sh_0_0 = torch.ones_like(x)
    if lmax == 0:
        return torch.stack([
            sh_0_0,
        ], dim=-1)

    sh_1_0 = math.sqrt(3)*x
    sh_1_1 = math.sqrt(3)*y
    sh_1_2 = math.sqrt(3)*z
    if lmax == 1:
        return torch.stack([
            sh_0_0,
            sh_1_0, sh_1_1, sh_1_2
        ], dim=-1)

    sh_2_0 = math.sqrt(15) * x * z
    sh_2_1 = math.sqrt(15) * x * y
    y2 = y.pow(2)
    x2z2 = x.pow(2) + z.pow(2)
    sh_2_2 = math.sqrt(5) * (y2 - (1/2) * x2z2)
    sh_2_3 = math.sqrt(15) * y * z
    sh_2_4 = (1/2)*math.sqrt(15) * (z.pow(2) - x.pow(2))

    if lmax == 2:
        return torch.stack([
            sh_0_0,
            sh_1_0, sh_1_1, sh_1_2,
            sh_2_0, sh_2_1, sh_2_2, sh_2_3, sh_2_4
        ], dim=-1)

    sh_3_0 = (1/6)*math.sqrt(42) * (sh_2_0 * z + sh_2_4 * x)
    sh_3_1 = math.sqrt(7) * sh_2_0 * y
    sh_3_2 = (1/8)*math.sqrt(168) * (4.0 * y2 - x2z2) * x
    sh_3_3 = (1/2)*math.sqrt(7) * y * (2.0 * y2 - 3.0 * x2z2)
    sh_3_4 = (1/8)*math.sqrt(168) * z * (4.0 * y2 - x2z2)
    sh_3_5 = math.sqrt(7) * sh_2_4 * y
    sh_3_6 = (1/6)*math.sqrt(42) * (sh_2_4 * z - sh_2_0 * x)

    return torch.stack([
        sh_0_0,
        sh_1_0, sh_1_1, sh_1_2,
        sh_2_0, sh_2_1, sh_2_2, sh_2_3, sh_2_4,
        sh_3_0, sh_3_1, sh_3_2, sh_3_3, sh_3_4, sh_3_5, sh_3_6
    ], dim=-1)
'''

CHECKS_SOURCE = """
# the properties e3nn's tests check (tests/o3/wigner_test.py, spherical_harmonics_test.py,
# rotation_test.py), recorded
for l in range(4):
    X = so3_generators(l)
    record.append(X.numpy())
    record.append(change_basis_real_to_complex(l, dtype=torch.float64).abs().numpy())
abc = rand_angles(5)
R = angles_to_matrix(*abc)
record.append(R.numpy())
record.append(torch.stack(matrix_to_angles(R)).numpy())
q = angles_to_quaternion(*abc)
record.append(q.numpy())
record.append((quaternion_to_matrix(q) - R).abs().max().item() < 1e-4)
record.append(compose_quaternion(q, inverse_quaternion(q)).numpy())
axis, angle = matrix_to_axis_angle(R)
record.append((axis_angle_to_matrix(axis, angle) - R).abs().max().item() < 1e-4)
for l in range(4):
    D = wigner_D(l, *abc)
    record.append(D.numpy())
    record.append((D @ D.transpose(-1, -2) - torch.eye(2 * l + 1)).abs().max().item() < 1e-4)
x = torch.randn(7, 3)
for normalization in ['integral', 'component', 'norm']:
    sh = spherical_harmonics([0, 1, 2, 3], x, normalize=True, normalization=normalization)
    record.append(sh.numpy())
sh2 = spherical_harmonics([1, 3], x, normalize=False, normalization='norm')
record.append(sh2.numpy())
for l in range(4):
    D = wigner_D(l, *[a[0] for a in abc])
    left = spherical_harmonics(l, x @ R[0].T, normalize=True)
    right = spherical_harmonics(l, x, normalize=True) @ D.T
    record.append((left - right).abs().max().item() < 1e-4)
for l1, l2, l3 in [(1, 1, 0), (1, 1, 1), (1, 1, 2), (2, 1, 3), (2, 2, 2)]:
    C = wigner_3j(l1, l2, l3)
    record.append(C.numpy())
    D1, D2, D3 = wigner_D(l1, *abc), wigner_D(l2, *abc), wigner_D(l3, *abc)
    rotated = torch.einsum("zil,zjm,zkn,ijk->zlmn", D1, D2, D3, C)
    record.append((rotated - C).abs().max().item() < 1e-4)
alpha, beta = xyz_to_angles(x)
record.append((angles_to_xyz(alpha, beta) - torch.nn.functional.normalize(x, dim=-1)).abs().max().item() < 1e-5)
"""

POTENTIAL_SOURCE = """
import torch.nn as nn

class EquivariantPotential(nn.Module):
    def __init__(self, num_basis=6, hidden=16, r_max=2.5):
        super().__init__()
        self.num_basis, self.r_max = num_basis, r_max
        self.register_buffer("centers", torch.linspace(0.0, r_max, num_basis))
        self.radial = nn.Sequential(nn.Linear(num_basis, hidden), nn.SiLU(), nn.Linear(hidden, 3))
        self.register_buffer("C112", wigner_3j(1, 1, 2))
        self.register_buffer("C222", wigner_3j(2, 2, 2))
        self.readout = nn.Sequential(nn.Linear(5, hidden), nn.SiLU(), nn.Linear(hidden, 1))
        self.sh = SphericalHarmonics([0, 1, 2], normalize=True, normalization='component')

    def forward(self, pos, edge_src, edge_dst):
        vec = pos[edge_dst] - pos[edge_src]
        r = vec.norm(dim=-1)
        basis = torch.exp(-((r[:, None] - self.centers) ** 2) / 0.25)
        cutoff = 0.5 * (torch.cos(math.pi * r / self.r_max) + 1.0) * (r < self.r_max)
        w = self.radial(basis) * cutoff[:, None]
        Y = self.sh(vec)
        edge_features = torch.cat([w[:, 0:1] * Y[:, 0:1], w[:, 1:2] * Y[:, 1:4], w[:, 2:3] * Y[:, 4:9]], dim=-1)
        node = torch.zeros(pos.shape[0], 9, dtype=pos.dtype).index_add_(0, edge_src, edge_features)
        h0, h1, h2 = node[:, 0], node[:, 1:4], node[:, 4:9]
        invariants = torch.stack([
            h0,
            (h1 ** 2).sum(-1),
            (h2 ** 2).sum(-1),
            torch.einsum("ni,nj,nk,ijk->n", h1, h1, h2, self.C112),
            torch.einsum("ni,nj,nk,ijk->n", h2, h2, h2, self.C222),
        ], dim=-1)
        return self.readout(invariants).sum()


def pair_energy(pos, edge_src, edge_dst):
    r = (pos[edge_dst] - pos[edge_src]).norm(dim=-1)
    return (1.0 / r ** 6 - 1.0 / r ** 3).sum() / 2


n_atoms = 5
src, dst = torch.meshgrid(torch.arange(n_atoms), torch.arange(n_atoms), indexing="ij")
keep = src != dst
edge_src, edge_dst = src[keep], dst[keep]
structures = [torch.randn(n_atoms, 3) * 0.6 + torch.arange(n_atoms)[:, None] * torch.tensor([0.9, 0.0, 0.0]) for _ in range(3)]
targets = []
for pos in structures:
    pos = pos.clone().requires_grad_(True)
    energy = pair_energy(pos, edge_src, edge_dst)
    forces = -torch.autograd.grad(energy, pos)[0]
    targets.append((energy.detach(), forces))

model = EquivariantPotential()
initialize(model)
optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
for step in range(4):
    for pos, (energy_target, forces_target) in zip(structures, targets):
        pos = pos.clone().requires_grad_(True)
        energy = model(pos, edge_src, edge_dst)
        forces = -torch.autograd.grad(energy, pos, create_graph=True)[0]
        loss = (energy - energy_target) ** 2 + ((forces - forces_target) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        record.append([energy.item(), loss.item()])
    print(f"step {step} loss {loss.item():.5f}")

R = rand_matrix()
pos = structures[0].clone().requires_grad_(True)
rotated = (structures[0] @ R.T).requires_grad_(True)
e1, e2 = model(pos, edge_src, edge_dst), model(rotated, edge_src, edge_dst)
f1 = -torch.autograd.grad(e1, pos)[0]
f2 = -torch.autograd.grad(e2, rotated)[0]
record.append((e1 - e2).abs().item() < 1e-4)
record.append((f1 @ R.T - f2).abs().max().item() < 1e-4)
record.append({k: v.detach().numpy() for k, v in model.state_dict().items()})
"""

E3NN_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("import torch.nn as nn\n", "import retrograd.nn as nn\n"),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


def _runs(source, steps, capsys, seed):
    initialize, records, logs = initializer(), [], []
    # torch's initial weights, which the port loads, the same whatever ran before on the
    # worker: a few of L-BFGS's or Adam's trajectories from other weights part by more
    # than the tolerance (rounding that a line search's branch or a long fit amplifies)
    torch.manual_seed(343)
    for lib in (torch, rg):
        record = []
        text = source if lib is torch else port(source, steps)
        with SharedDraws(lib, seed):
            run_source(text, lib, record=record, initialize=initialize)
        records.append(record)
        logs.append(capsys.readouterr().out)
    return records, logs


def test_e3nn_wigner_rotations_and_spherical_harmonics_as_torch(capsys):
    (theirs, ours), _ = _runs(E3NN_SOURCE + CHECKS_SOURCE, E3NN_STEPS[:1], capsys, 343)
    assert all(r is True for r in theirs if isinstance(r, bool))  # the properties hold in torch
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)


def test_equivariant_potential_on_energies_and_forces_as_torch(capsys):
    (theirs, ours), (their_log, our_log) = _runs(
        E3NN_SOURCE + POTENTIAL_SOURCE, E3NN_STEPS, capsys, 3430
    )
    assert theirs[-3:-1] == [True, True]  # invariant energy, equivariant forces
    assert our_log == their_log
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-6)
