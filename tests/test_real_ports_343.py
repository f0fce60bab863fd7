"""Real-style PyTorch programs on retrograd, continued (the harness: ``tests/real_ports.py``):
rotation-equivariant layers, then a small equivariant interatomic potential trained on energies
and forces with them, against torch's run of the same code.

- Programs written here in the style of e3nn's ``o3`` core (Wigner matrices, rotation
  conversions, spherical harmonics) and of the equivariant potentials built on it. Complex
  tensors as such code builds them: spin generators from ``torch.diag(..., diagonal=+-1)``,
  ``torch.diag(1j * m)`` and ``-0.5j * (raising - lowering)`` stacked with a real tensor, a
  real-to-complex basis in ``torch.zeros(..., dtype=torch.complex128)`` written by ``q[i, j] =
  -1j * c``, ``(-1j) ** l * q``, ``q.to(dtype=..., device=..., copy=True,
  memory_format=torch.contiguous_format)``, ``torch.conj(Q.T) @ X @ Q``,
  ``torch.real``/``torch.imag``, a four-operand complex ``torch.einsum("ij,kl,mn,ikn->jlm")``;
  ``torch.matrix_exp`` of batched generators; ``functools.lru_cache`` over tensors; Racah's
  formula in ``fractions.Fraction`` written into a float64 tensor; Euler angles, quaternions
  (``unbind``, an in-place ``neg_`` of a slice) and axis-angle forms, with
  ``torch.nn.functional.normalize``, ``torch.atan2``/``acos`` of clamped coordinates,
  ``R.new_tensor``, ``torch.allclose(torch.det(R), ...)``, ``torch.broadcast_tensors``;
  spherical harmonics built degree by degree by coupling with the direction
  (``einsum("ni,nj,ijk->nk")``) and normalised by ``sh.div_`` in place.
- The potential sums radial-weighted harmonics over edges by ``index_add_``, contracts them
  with ``wigner_3j(1, 1, 2)`` and ``wigner_3j(2, 2, 2)`` in ``torch.einsum``, and takes forces
  as ``-torch.autograd.grad(energy, pos, create_graph=True)[0]`` inside the loss.

Compared against torch: the generators, bases, rotations and their round trips, Wigner
matrices, harmonics in the three normalisations, coupling tensors, the equivariance properties
(which must hold in torch), and the potential's losses, weights and invariance. The lines a port
changes: the ``import`` lines and the gradient lines; ``torch.rand``/``randn`` draw one shared
stream.
"""

from __future__ import annotations

import torch

import retrograd as rg
from real_ports import SharedDraws, assert_records_agree, initializer, port, run_source

E3NN_SOURCE = '''
import functools
import math
import fractions
from math import factorial

import torch


def resolve(dtype=None, device=None):
    # the default dtype and device where none is given
    return (dtype or torch.get_default_dtype(), device or torch.empty(0).device)


# ---- representations of SU(2) and SO(3) ----------------------------------------------
def spin_generators(j):
    """The generators of spin ``j`` (complex, ``2j+1`` square) along x, z and -y."""
    lower_m = torch.arange(-j, j)
    ladder = torch.sqrt(j * (j + 1) - lower_m * (lower_m + 1))  # <m+1|J+|m>
    j_plus, j_minus = torch.diag(-ladder, diagonal=-1), torch.diag(ladder, diagonal=1)
    spin_z = torch.diag(1j * torch.arange(-j, j + 1))
    return torch.stack([0.5 * (j_plus + j_minus), spin_z, -0.5j * (j_plus - j_minus)], dim=0)


def real_to_complex(l, dtype=None, device=None):
    """The unitary taking real harmonics of degree ``l`` to complex ones."""
    size = 2 * l + 1
    q = torch.zeros((size, size), dtype=torch.complex128)
    half = 2**-0.5
    q[l, l] = 1
    for k in range(1, l + 1):
        sign = (-1) ** k
        q[l - k, l + k], q[l - k, l - k] = half, -1j * half
        q[l + k, l + k], q[l + k, l - k] = sign * half, 1j * sign * half
    q = (-1j) ** l * q  # a global phase that keeps the coupling coefficients real
    dtype, device = resolve(dtype, device)
    complex_of = {torch.float32: torch.complex64, torch.float64: torch.complex128}
    return q.to(dtype=complex_of[dtype], device=device, copy=True,
                memory_format=torch.contiguous_format)


def rotation_generators(l):
    basis = real_to_complex(l)
    gens = torch.conj(basis.T) @ spin_generators(l) @ basis
    assert torch.all(torch.abs(torch.imag(gens)) < 1e-5)
    return torch.real(gens)


def wigner_D(l, alpha, beta, gamma):
    gens = rotation_generators(l)
    angles = torch.broadcast_tensors(alpha, beta, gamma)
    turns = [a[..., None, None] % (2 * math.pi) for a in angles]
    return (torch.matrix_exp(turns[0] * gens[1]) @ torch.matrix_exp(turns[1] * gens[0])
            @ torch.matrix_exp(turns[2] * gens[1]))


def racah(j1, m1, j2, m2, j3, m3):
    """<j1 m1 j2 m2 | j3 m3> by Racah's formula (integer spins)."""
    if m1 + m2 != m3:
        return 0.0
    squared = fractions.Fraction(
        (2 * j3 + 1) * factorial(j3 + j1 - j2) * factorial(j3 - j1 + j2) * factorial(j1 + j2 - j3),
        factorial(j1 + j2 + j3 + 1),
    )
    for a, b in ((j1, m1), (j2, m2), (j3, m3)):
        squared *= factorial(a + b) * factorial(a - b)
    total = fractions.Fraction(0)
    for k in range(0, j1 + j2 - j3 + 1):
        bottom = [k, j1 + j2 - j3 - k, j1 - m1 - k, j2 + m2 - k, j3 - j2 + m1 + k, j3 - j1 - m2 + k]
        if min(bottom) < 0:
            continue
        term = fractions.Fraction(1)
        for n in bottom:
            term /= factorial(n)
        total += (-1) ** k * term
    return float(squared) ** 0.5 * float(total)


@functools.lru_cache(None)
def spin_coupling(j1, j2, j3):
    table = torch.zeros((2 * j1 + 1, 2 * j2 + 1, 2 * j3 + 1), dtype=torch.float64)
    if abs(j1 - j2) <= j3 <= j1 + j2:
        for m1 in range(-j1, j1 + 1):
            for m2 in range(-j2, j2 + 1):
                if abs(m1 + m2) <= j3:
                    table[j1 + m1, j2 + m2, j3 + m1 + m2] = racah(j1, m1, j2, m2, j3, m1 + m2)
    return table


@functools.lru_cache(None)
def real_coupling(l1, l2, l3):
    q1, q2 = (real_to_complex(l, dtype=torch.float64) for l in (l1, l2))
    back = torch.conj(real_to_complex(l3, dtype=torch.float64).T)
    spin = spin_coupling(l1, l2, l3).to(dtype=torch.complex128)
    coupled = torch.einsum("ij,kl,mn,ikn->jlm", q1, q2, back, spin)
    assert torch.all(torch.abs(torch.imag(coupled)) < 1e-5)
    coupled = torch.real(coupled)
    return coupled / torch.norm(coupled)


def wigner_3j(l1, l2, l3, dtype=None, device=None):
    assert abs(l1 - l2) <= l3 <= l1 + l2
    dtype, device = resolve(dtype, device)
    return real_coupling(l1, l2, l3).to(dtype=dtype, device=device, copy=True,
                                        memory_format=torch.contiguous_format)


# ---- rotations in their parametrisations --------------------------------------------------
def random_angles(*shape, dtype=None):
    alpha, gamma = 2 * math.pi * torch.rand(2, *shape, dtype=dtype)
    beta = torch.rand(shape, dtype=dtype).mul(2).sub(1).acos()  # uniform on the sphere
    return alpha, beta, gamma


def about_x(angle):
    c, s, one, zero = angle.cos(), angle.sin(), torch.ones_like(angle), torch.zeros_like(angle)
    rows = [[one, zero, zero], [zero, c, -s], [zero, s, c]]
    return torch.stack([torch.stack(r, dim=-1) for r in rows], dim=-2)


def about_y(angle):
    c, s, one, zero = angle.cos(), angle.sin(), torch.ones_like(angle), torch.zeros_like(angle)
    rows = [[c, zero, s], [zero, one, zero], [-s, zero, c]]
    return torch.stack([torch.stack(r, dim=-1) for r in rows], dim=-2)


def euler_to_matrix(alpha, beta, gamma):
    first, second, third = torch.broadcast_tensors(alpha, beta, gamma)
    return about_y(first) @ about_x(second) @ about_y(third)


def direction_to_angles(xyz):
    unit = torch.nn.functional.normalize(xyz, p=2, dim=-1).clamp(-1, 1)
    return torch.atan2(unit[..., 0], unit[..., 2]), torch.acos(unit[..., 1])


def angles_to_direction(alpha, beta):
    a, b = torch.broadcast_tensors(alpha, beta)
    return torch.stack([b.sin() * a.sin(), b.cos(), b.sin() * a.cos()], dim=-1)


def matrix_to_euler(rot):
    assert torch.allclose(torch.det(rot), rot.new_tensor(1))
    alpha, beta = direction_to_angles(rot @ rot.new_tensor([0.0, 1.0, 0.0]))
    rest = euler_to_matrix(alpha, beta, torch.zeros_like(alpha)).transpose(-1, -2) @ rot
    return alpha, beta, torch.atan2(rest[..., 0, 2], rest[..., 0, 0])


def hamilton(p, q):
    p, q = torch.broadcast_tensors(p, q)
    a0, a1, a2, a3 = p.unbind(-1)
    b0, b1, b2, b3 = q.unbind(-1)
    return torch.stack([
        a0 * b0 - a1 * b1 - a2 * b2 - a3 * b3,
        a0 * b1 + a1 * b0 + a2 * b3 - a3 * b2,
        a0 * b2 - a1 * b3 + a2 * b0 + a3 * b1,
        a0 * b3 + a1 * b2 - a2 * b1 + a3 * b0,
    ], dim=-1)


def conjugate(q):
    q = q.clone()
    q[..., 1:].neg_()
    return q


def axis_angle_to_quaternion(axis, angle):
    axis, angle = torch.broadcast_tensors(axis, angle.unsqueeze(-1))
    unit = torch.nn.functional.normalize(axis, dim=-1)
    return torch.cat([torch.cos(angle[..., :1] / 2), unit * torch.sin(angle / 2)], dim=-1)


def euler_to_quaternion(alpha, beta, gamma):
    first, second, third = torch.broadcast_tensors(alpha, beta, gamma)
    y_axis, x_axis = first.new_tensor([0.0, 1.0, 0.0]), first.new_tensor([1.0, 0.0, 0.0])
    turns = [axis_angle_to_quaternion(y_axis, first), axis_angle_to_quaternion(x_axis, second),
             axis_angle_to_quaternion(y_axis, third)]
    return hamilton(turns[0], hamilton(turns[1], turns[2]))


def axis_angle_to_matrix(axis, angle):
    axis, angle = torch.broadcast_tensors(axis, angle.unsqueeze(-1))
    alpha, beta = direction_to_angles(axis)
    frame = euler_to_matrix(alpha, beta, torch.zeros_like(beta))  # takes y onto the axis
    return frame @ about_y(angle[..., 0]) @ frame.transpose(-2, -1)


def quaternion_to_matrix(q):
    half_turn = torch.acos(q[..., 0].clamp(-1, 1))
    return axis_angle_to_matrix(torch.nn.functional.normalize(q[..., 1:], dim=-1), 2 * half_turn)


def matrix_to_axis_angle(rot):
    assert torch.allclose(torch.det(rot), rot.new_tensor(1))
    trace = rot[..., 0, 0] + rot[..., 1, 1] + rot[..., 2, 2]
    angle = torch.acos(trace.sub(1).div(2).clamp(-1, 1))
    skew = torch.stack([rot[..., 2, 1] - rot[..., 1, 2], rot[..., 0, 2] - rot[..., 2, 0],
                        rot[..., 1, 0] - rot[..., 0, 1]], dim=-1)
    return torch.nn.functional.normalize(skew, dim=-1), angle


# ---- spherical harmonics, built degree by degree by coupling with the direction ----------
class Harmonics(torch.nn.Module):
    def __init__(self, ls, normalize, normalization="integral"):
        super().__init__()
        assert normalization in ("integral", "component", "norm")
        self.ls, self.normalize, self.normalization = list(ls), normalize, normalization
        self.lmax = max(self.ls)
        self.couplings = [wigner_3j(l - 1, 1, l) for l in range(2, self.lmax + 1)]
        # Y_l = c_l (Y_{l-1} x) C: c_l makes |Y_l|^2 = 2l + 1 on the unit sphere
        probe = torch.tensor([[0.0, 1.0, 0.0]])
        self.scales, previous = [], math.sqrt(3) * probe
        for l, coupling in zip(range(2, self.lmax + 1), self.couplings):
            raw = torch.einsum("ni,nj,ijk->nk", previous, probe, coupling)
            self.scales.append(math.sqrt(2 * l + 1) / raw.norm().item())
            previous = self.scales[-1] * raw

    def forward(self, x):
        if self.normalize:
            x = torch.nn.functional.normalize(x, dim=-1)  # a zero vector stays zero
        degrees = [torch.ones_like(x[:, :1]), math.sqrt(3) * x]
        for scale, coupling in zip(self.scales, self.couplings):
            degrees.append(scale * torch.einsum("ni,nj,ijk->nk", degrees[-1], x, coupling))
        sh = torch.cat([degrees[l] for l in self.ls], dim=-1)
        if self.normalization == "integral":
            sh.div_(2 * math.sqrt(math.pi))
        elif self.normalization == "norm":
            sh.div_(torch.cat([
                torch.ones(2 * l + 1, dtype=sh.dtype, device=sh.device) * (2 * l + 1) ** 0.5
                for l in self.ls
            ]))
        return sh


def spherical_harmonics(l, x, normalize, normalization="integral"):
    ls = [l] if isinstance(l, int) else list(l)
    return Harmonics(ls, normalize, normalization)(x)
'''

CHECKS_SOURCE = """
# the properties the representations must have, recorded
for l in range(4):
    record.append(rotation_generators(l).numpy())
    record.append(real_to_complex(l, dtype=torch.float64).abs().numpy())
angles = random_angles(4)
rot = euler_to_matrix(*angles)
record.append(rot.numpy())
record.append(torch.stack(matrix_to_euler(rot)).numpy())
quat = euler_to_quaternion(*angles)
record.append(quat.numpy())
record.append((quaternion_to_matrix(quat) - rot).abs().max().item() < 1e-4)
record.append(hamilton(quat, conjugate(quat)).numpy())
record.append((axis_angle_to_matrix(*matrix_to_axis_angle(rot)) - rot).abs().max().item() < 1e-4)
for l in range(4):
    d = wigner_D(l, *angles)
    record.append(d.numpy())
    record.append((d @ d.transpose(-1, -2) - torch.eye(2 * l + 1)).abs().max().item() < 1e-4)
points = torch.randn(6, 3)
for kind in ("integral", "component", "norm"):
    record.append(spherical_harmonics([0, 1, 2, 3], points, True, kind).numpy())
record.append(spherical_harmonics([3, 1], points, normalize=False, normalization="norm").numpy())
first = [a[0] for a in angles]
for l in range(4):
    turned = spherical_harmonics(l, points @ rot[0].T, normalize=True)
    expected = spherical_harmonics(l, points, normalize=True) @ wigner_D(l, *first).T
    record.append((turned - expected).abs().max().item() < 1e-4)
for ls in [(1, 1, 0), (1, 1, 2), (2, 1, 1), (2, 1, 3), (2, 2, 2)]:
    c = wigner_3j(*ls)
    record.append(c.numpy())
    ds = [wigner_D(l, *angles) for l in ls]
    record.append((torch.einsum("zil,zjm,zkn,ijk->zlmn", *ds, c) - c).abs().max().item() < 1e-4)
alpha, beta = direction_to_angles(points)
unit = torch.nn.functional.normalize(points, dim=-1)
record.append((angles_to_direction(alpha, beta) - unit).abs().max().item() < 1e-5)
"""

POTENTIAL_SOURCE = """
import torch.nn as nn


class TensorPotential(nn.Module):
    # atom features of degrees 0-2 from radial-weighted harmonics, contracted to invariants
    def __init__(self, n_radial=5, hidden=12, cutoff=2.5):
        super().__init__()
        self.cutoff = cutoff
        self.register_buffer("mu", torch.linspace(0.0, cutoff, n_radial))
        self.register_buffer("c112", wigner_3j(1, 1, 2))
        self.register_buffer("c222", wigner_3j(2, 2, 2))
        self.radial = nn.Sequential(nn.Linear(n_radial, hidden), nn.SiLU(), nn.Linear(hidden, 3))
        self.harmonics = Harmonics([0, 1, 2], normalize=True, normalization="component")
        self.energy = nn.Sequential(nn.Linear(5, hidden), nn.SiLU(), nn.Linear(hidden, 1))

    def forward(self, pos, src, dst):
        bond = pos[dst] - pos[src]
        length = bond.norm(dim=-1)
        smooth = 0.5 * (torch.cos(math.pi * length / self.cutoff) + 1.0) * (length < self.cutoff)
        weights = self.radial(torch.exp(-4.0 * (length[:, None] - self.mu) ** 2)) * smooth[:, None]
        sh = self.harmonics(bond)
        per_edge = torch.cat([weights[:, :1] * sh[:, :1], weights[:, 1:2] * sh[:, 1:4],
                              weights[:, 2:] * sh[:, 4:]], dim=-1)
        atoms = torch.zeros(pos.shape[0], 9, dtype=pos.dtype).index_add_(0, src, per_edge)
        s, v, t = atoms[:, 0], atoms[:, 1:4], atoms[:, 4:]
        scalars = torch.stack([
            s, (v * v).sum(-1), (t * t).sum(-1),
            torch.einsum("ni,nj,nk,ijk->n", v, v, t, self.c112),
            torch.einsum("ni,nj,nk,ijk->n", t, t, t, self.c222),
        ], dim=-1)
        return self.energy(scalars).sum()


def lennard_jones(pos, src, dst):
    inv3 = (pos[dst] - pos[src]).norm(dim=-1) ** -3
    return 0.5 * (inv3**2 - inv3).sum()


atoms = 4
src, dst = torch.meshgrid(torch.arange(atoms), torch.arange(atoms), indexing="ij")
pairs = src != dst
src, dst = src[pairs], dst[pairs]
offsets = torch.arange(atoms)[:, None] * torch.tensor([1.0, 0.0, 0.0])
configs = [0.5 * torch.randn(atoms, 3) + offsets for _ in range(2)]
labels = []
for pos in configs:
    pos = pos.detach().clone().requires_grad_()
    e = lennard_jones(pos, src, dst)
    labels.append((e.detach(), -torch.autograd.grad(e, pos)[0]))

model = TensorPotential()
initialize(model)
optimizer = torch.optim.Adam(model.parameters(), lr=4e-3)
for epoch in range(3):
    for pos, (e_ref, f_ref) in zip(configs, labels):
        pos = pos.detach().clone().requires_grad_()
        e = model(pos, src, dst)
        f = -torch.autograd.grad(e, pos, create_graph=True)[0]
        loss = (e - e_ref) ** 2 + ((f - f_ref) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        record.append([e.item(), loss.item()])
    print(f"epoch {epoch}: {loss.item():.5f}")

rot = euler_to_matrix(*random_angles())
here = configs[0].clone().requires_grad_(True)
there = (configs[0] @ rot.T).requires_grad_(True)
e_here, e_there = model(here, src, dst), model(there, src, dst)
f_here = -torch.autograd.grad(e_here, here)[0]
f_there = -torch.autograd.grad(e_there, there)[0]
record.append((e_here - e_there).abs().item() < 1e-4)
record.append((f_here @ rot.T - f_there).abs().max().item() < 1e-4)
record.append({key: t.detach().numpy() for key, t in model.state_dict().items()})
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
    # (float32 matrix exponentials of angles up to 2 pi round apart by a few 1e-6: torch's
    # own is that far from the float64 value)
    assert_records_agree(ours, theirs, rtol=1e-5, atol=5e-6)


def test_equivariant_potential_on_energies_and_forces_as_torch(capsys):
    (theirs, ours), (their_log, our_log) = _runs(
        E3NN_SOURCE + POTENTIAL_SOURCE, E3NN_STEPS, capsys, 3430
    )
    assert theirs[-3:-1] == [True, True]  # invariant energy, equivariant forces
    assert our_log == their_log
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-6)
