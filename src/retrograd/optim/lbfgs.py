"""``LBFGS`` (``torch.optim.LBFGS``): quasi-Newton steps from a closure.

The closure is called as often as the algorithm needs (several times per step) and returns
``(loss, grads)`` (:mod:`.closure`).

The algorithm is torch's, operation for operation (the two-loop recursion over at most
``history_size`` curvature pairs, torch's first step size ``min(1, 1/|g|_1) * lr``, its
optional strong-Wolfe line search with cubic interpolation, and its stopping tests), on one
flat vector of the parameters' gradients on the inner backend; scalars that torch keeps as
0-d tensors (``ys``, ``H_diag``, ``ro``, ``al``) are 0-d tensors of the parameters' dtype here
too, so float32 runs round as torch's do. A complex parameter takes its real and imaginary
parts as two real elements of that vector (torch's ``view_as_real``), so the history, the
line search and the state are real (float32 for complex64) as torch's are.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import Any

from ..errors import (
    AutodiffError,
    DTypeError,
    InvalidArgumentError,
    OptimizerGroupsError,
    ShapeError,
    shape_text,
)
from ..tensor import Tensor, cat, zeros
from ..tensor.complexes import view_as_complex, view_as_real
from ..tensor.inplace import assign
from .closure import evaluate_closure
from .optimizers import Optimizer, state_count, state_tensor

__all__ = ["LBFGS"]

#: the state's entries (torch's names), all kept under the first parameter: counts, vectors of
#: every parameter's elements, 0-d values, and the history as lists of either
_COUNTS = ("func_evals", "n_iter")
_FLAT = ("d", "prev_flat_grad")
_FLAT_LISTS = ("old_dirs", "old_stps")
_SCALAR_LISTS = ("ro", "al")


def _check_options(
    max_iter: Any, max_eval: Any, tolerance_grad: Any, tolerance_change: Any, history_size: Any
) -> None:
    """What torch's L-BFGS would fail on only inside ``step`` (a comparison with a str, a
    list of ``None`` entries): refused when the optimizer is built, naming the option."""
    numbers_given = {"max_iter": max_iter, "tolerance_grad": tolerance_grad,
                     "tolerance_change": tolerance_change}  # fmt: skip
    if max_eval is not None:
        numbers_given["max_eval"] = max_eval
    for name, value in numbers_given.items():
        if not isinstance(value, numbers.Real):
            raise DTypeError(
                f"LBFGS: {name} must be a real number, got {type(value).__name__} {value!r}"
            )
    if not isinstance(history_size, numbers.Integral):
        raise DTypeError(
            f"LBFGS: history_size must be an int, got {type(history_size).__name__} "
            f"{history_size!r}"
        )
    if not 1 <= history_size < 2**63:
        raise InvalidArgumentError(
            f"LBFGS: history_size must be a positive int64, got {history_size}"
        )


class LBFGS(Optimizer):
    """L-BFGS, as ``torch.optim.LBFGS`` (after minFunc): one parameter group;
    ``step(closure)`` runs up to ``max_iter`` iterations and ``max_eval`` evaluations of the
    closure and returns the loss of its first evaluation.

    ``line_search_fn``: ``None`` (fixed steps of ``lr``) or ``"strong_wolfe"``.
    """

    def __init__(
        self,
        params: Any,
        lr: float = 1.0,
        max_iter: int = 20,
        max_eval: int | None = None,
        tolerance_grad: float = 1e-7,
        tolerance_change: float = 1e-9,
        history_size: int = 100,
        line_search_fn: str | None = None,
    ):
        _check_options(max_iter, max_eval, tolerance_grad, tolerance_change, history_size)
        if max_eval is None:
            max_eval = max_iter * 5 // 4
        if line_search_fn not in (None, "strong_wolfe"):
            raise InvalidArgumentError(
                f"LBFGS: line_search_fn must be None or 'strong_wolfe', got {line_search_fn!r}"
            )
        defaults = {"lr": lr, "max_iter": max_iter, "max_eval": max_eval,
                    "tolerance_grad": tolerance_grad, "tolerance_change": tolerance_change,
                    "history_size": history_size, "line_search_fn": line_search_fn}  # fmt: skip
        super().__init__(params, defaults)
        if len(self.param_groups) != 1:
            raise InvalidArgumentError(
                "LBFGS doesn't support per-parameter options (parameter groups)"
            )
        self._params = self.param_groups[0]["params"]

    def load_state_value(
        self, where: str, number: int, key: str, value: Any, parameter: Tensor
    ) -> Any:
        """L-BFGS's state (torch's layout): not one buffer per parameter but the whole
        history, vectors over all parameters' elements and lists of them."""
        flat = (sum(_real_numel(v) for v in self._values()),)
        if key in _COUNTS:
            return state_count(where, number, key, value)
        if key in _FLAT:
            return _real(state_tensor(where, number, key, value, parameter, flat))
        if key == "H_diag" and isinstance(value, int | float):
            return value  # 1 after the first iteration, as torch's
        if key == "H_diag":
            return _real(state_tensor(where, number, key, value, parameter, ()))
        if key in _FLAT_LISTS + _SCALAR_LISTS:
            if not isinstance(value, list | tuple):
                raise InvalidArgumentError(
                    f"{where}: state {number}/{key} must be a list, got {type(value).__name__}"
                )
            shape = flat if key in _FLAT_LISTS else ()
            return [
                None if v is None and key == "al" else _real(state_tensor(where, number, key, v,
                                                                          parameter, shape))
                for v in value
            ]  # fmt: skip
        return super().load_state_value(where, number, key, value, parameter)

    # -- the flat vector of all parameters ------------------------------------------------
    def _values(self) -> list[Tensor]:
        return [p.inner() if p.backend.is_autodiff else p for p in self._params]

    def _gather_flat_grad(self, grads: Any) -> Tensor:
        views = []
        for p, value in zip(self._params, self._values()):
            grad = p.grad(grads)
            if grad is None:
                grad = zeros(value.shape, dtype=value.dtype, backend=value.backend,
                             device=value.device)  # fmt: skip
            elif grad.backend.is_autodiff:
                grad = grad.inner()
            if grad.is_complex():  # its real and imaginary parts, as torch's view_as_real
                grad = view_as_real(grad)
            views.append(grad.reshape(-1))
        return cat(views, 0)

    def _add_grad(self, step_size: Any, update: Tensor) -> None:
        offset = 0
        for p in self._params:
            # read at each place: a parameter listed twice takes both pieces, as torch's add_
            value = p.inner() if p.backend.is_autodiff else p
            numel = _real_numel(value)
            piece = update[offset : offset + numel]
            if value.is_complex():  # pairs of real and imaginary parts, as torch's view_as_real
                piece = view_as_complex(piece.reshape(*value.shape, 2))
            # torch's p.add_(piece, alpha=step_size): one fused multiply-add, rounded once
            assign(p, value.add(piece.reshape(value.shape), alpha=float(step_size)), "LBFGS.step")
            offset += numel

    def _clone_param(self) -> list[Tensor]:
        return [value.clone() for value in self._values()]

    def _set_param(self, params_data: list[Tensor]) -> None:
        for p, value in zip(self._params, params_data):
            assign(p, value, "LBFGS.step")

    def _evaluate(self, closure: Callable[[], Any]) -> tuple[Tensor, float, Tensor]:
        loss, grads = evaluate_closure(closure, "LBFGS.step")
        if isinstance(loss, Tensor) and loss.numel() != 1:  # its line search compares numbers
            raise ShapeError(
                f"LBFGS.step: the closure's loss must be a one-element tensor (a number), got "
                f"shape {shape_text(loss.shape)}; reduce it (loss.sum(), loss.mean())"
            )
        return loss, float(loss), self._gather_flat_grad(grads)

    def _directional_evaluate(self, closure, x, t, d) -> tuple[float, Tensor]:
        self._add_grad(t, d)
        _, loss, flat_grad = self._evaluate(closure)
        self._set_param(x)
        return loss, flat_grad

    def step(self, closure: Any = None) -> Tensor:  # type: ignore[override]
        """One optimization step: ``closure`` re-evaluates the model and returns
        ``(loss, grads)`` (or the loss alone, then differentiated here)."""
        if not callable(closure):
            raise AutodiffError(
                "LBFGS.step: pass a closure that re-evaluates the model and returns "
                "(loss, grads) with grads = loss.backward(); LBFGS evaluates it several times"
            )
        if len(self.param_groups) != 1:  # a group added (torch's add_param_group takes it)
            raise OptimizerGroupsError(
                "LBFGS.step: Expected exactly one param_group, but got "
                f"{len(self.param_groups)} (LBFGS doesn't support per-parameter options)"
            )
        self.check_hyper_parameters("step")
        # A closure raising mid-step (a failing batch, a KeyboardInterrupt) left the
        # parameters at a trial point of the step and the state half-advanced: its iteration
        # counted, its direction not, so every later step failed ("cannot combine a tensor
        # with NoneType", torch's too). A step that raises leaves both as they were.
        first = self._params[0]
        had_state = first in self.state
        saved_state = {
            k: list(v) if isinstance(v, list) else v for k, v in self.state[first].items()
        }
        saved_params = self._clone_param()
        try:
            return self._step(closure)
        except BaseException:
            self._set_param(saved_params)
            if had_state:
                self.state[first] = saved_state
            else:
                self.state.pop(first, None)
            raise

    def _step(self, closure: Callable[[], Any]) -> Tensor:
        group = self.param_groups[0]
        lr, max_iter, max_eval = float(group["lr"]), group["max_iter"], group["max_eval"]
        tolerance_grad, tolerance_change = group["tolerance_grad"], group["tolerance_change"]
        line_search_fn, history_size = group["line_search_fn"], group["history_size"]

        state = self.state.setdefault(self._params[0], {})
        state.setdefault("func_evals", 0)
        state.setdefault("n_iter", 0)

        orig_loss, loss, flat_grad = self._evaluate(closure)
        current_evals = 1
        state["func_evals"] += 1
        if bool(flat_grad.abs().max() <= tolerance_grad):  # already optimal
            return orig_loss

        d, t = state.get("d"), state.get("t")
        old_dirs, old_stps, ro = state.get("old_dirs"), state.get("old_stps"), state.get("ro")
        h_diag = state.get("H_diag")
        prev_flat_grad, prev_loss = state.get("prev_flat_grad"), state.get("prev_loss")

        n_iter = 0
        while n_iter < max_iter:
            n_iter += 1
            state["n_iter"] += 1

            # the direction: steepest descent first, then the two-loop recursion
            if state["n_iter"] == 1:
                d = -flat_grad
                old_dirs, old_stps, ro = [], [], []
                h_diag = 1
            else:
                y = flat_grad - prev_flat_grad
                s = d * t
                ys = _dot(y, s)
                if float(ys) > 1e-10:  # keep the pair only where the curvature is positive
                    if len(old_dirs) == history_size:
                        old_dirs.pop(0)
                        old_stps.pop(0)
                        ro.pop(0)
                    old_dirs.append(y)
                    old_stps.append(s)
                    ro.append(1.0 / ys)
                    h_diag = ys / _dot(y, y)
                num_old = len(old_dirs)
                al = state.setdefault("al", [None] * history_size)
                q = -flat_grad
                for i in range(num_old - 1, -1, -1):
                    al[i] = _dot(old_stps[i], q) * ro[i]
                    # (torch's add_ with an alpha: one fused multiply-add, rounded once)
                    q = q.add(old_dirs[i], alpha=float(-al[i]))
                d = r = q * h_diag
                for i in range(num_old):
                    be_i = _dot(old_dirs[i], r) * ro[i]
                    r = r.add(old_stps[i], alpha=float(al[i] - be_i))
                d = r

            prev_flat_grad = flat_grad.clone()
            prev_loss = loss

            # the step size: torch's first step is scaled by the gradient's 1-norm (a 0-d
            # tensor of the parameters' dtype where that scale is below 1, as torch's)
            if state["n_iter"] == 1:
                t = min(1.0, 1.0 / flat_grad.abs().sum()) * lr
            else:
                t = lr
            gtd = _dot(flat_grad, d)
            if bool(gtd > -tolerance_change):  # not a descent direction
                break

            ls_func_evals = 0
            if line_search_fn is not None:
                x_init = self._clone_param()

                def obj_func(x, t, d):
                    return self._directional_evaluate(closure, x, t, d)

                loss, flat_grad, t, ls_func_evals = _strong_wolfe(
                    obj_func, x_init, t, d, loss, flat_grad, gtd, max_ls=max_eval - current_evals
                )
                self._add_grad(t, d)
                opt_cond = bool(flat_grad.abs().max() <= tolerance_grad)
            else:
                self._add_grad(t, d)
                opt_cond = False
                if n_iter != max_iter:
                    _, loss, flat_grad = self._evaluate(closure)
                    opt_cond = bool(flat_grad.abs().max() <= tolerance_grad)
                    ls_func_evals = 1
            current_evals += ls_func_evals
            state["func_evals"] += ls_func_evals

            if n_iter == max_iter or current_evals >= max_eval or opt_cond:
                break
            if bool((d * t).abs().max() <= tolerance_change):  # lack of progress
                break
            if abs(loss - prev_loss) < tolerance_change:
                break

        state.update(d=d, t=t, old_dirs=old_dirs, old_stps=old_stps, ro=ro, H_diag=h_diag,
                     prev_flat_grad=prev_flat_grad, prev_loss=prev_loss)  # fmt: skip
        return orig_loss


def _real_numel(value: Tensor) -> int:
    """The elements ``value`` takes in the flat vector: two for each complex one."""
    return 2 * value.numel() if value.is_complex() else value.numel()


def _real(value: Tensor) -> Tensor:
    """A saved flat vector or 0-d value as the real tensor L-BFGS keeps (``state_tensor``
    gives a complex parameter's buffers its complex dtype; these hold real numbers)."""
    return value.real.clone() if value.is_complex() else value


def _dot(a: Tensor, b: Tensor) -> Tensor:
    """The inner product of two flat vectors, a 0-d tensor of their dtype."""
    return (a * b).sum()


def _cubic_interpolate(x1, f1, g1, x2, f2, g2, bounds=None) -> float:
    """The minimizer of the cubic through ``(x1, f1, g1)`` and ``(x2, f2, g2)``, clamped to
    ``bounds`` (torch's ``_cubic_interpolate``, after minFunc's ``polyinterp``)."""
    if bounds is not None:
        xmin_bound, xmax_bound = bounds
    else:
        xmin_bound, xmax_bound = (x1, x2) if x1 <= x2 else (x2, x1)
    d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
    d2_square = d1**2 - g1 * g2
    if d2_square >= 0:
        d2 = d2_square.sqrt() if isinstance(d2_square, Tensor) else d2_square**0.5
        if x1 <= x2:
            min_pos = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
        else:
            min_pos = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
        return min(max(min_pos, xmin_bound), xmax_bound)
    return (xmin_bound + xmax_bound) / 2.0


def _strong_wolfe(obj_func, x, t, d, f, g, gtd, c1=1e-4, c2=0.9, tolerance_change=1e-9,
                  max_ls=25):  # fmt: skip
    """torch's line search for a step ``t`` along ``d`` meeting the strong Wolfe conditions:
    bracket a point, then zoom in by cubic interpolation. Returns ``(f, g, t, evaluations)``."""
    d_norm = d.abs().max()
    g = g.clone()
    f_new, g_new = obj_func(x, t, d)
    ls_func_evals = 1
    gtd_new = _dot(g_new, d)

    # bracket an interval containing a point satisfying the Wolfe criteria
    t_prev, f_prev, g_prev, gtd_prev = 0, f, g, gtd
    done = False
    ls_iter = 0
    while ls_iter < max_ls:
        if f_new > (f + c1 * t * gtd) or (ls_iter > 1 and f_new >= f_prev):
            bracket, bracket_f = [t_prev, t], [f_prev, f_new]
            bracket_g, bracket_gtd = [g_prev, g_new.clone()], [gtd_prev, gtd_new]
            break
        if abs(gtd_new) <= -c2 * gtd:
            bracket, bracket_f, bracket_g = [t], [f_new], [g_new]
            done = True
            break
        if gtd_new >= 0:
            bracket, bracket_f = [t_prev, t], [f_prev, f_new]
            bracket_g, bracket_gtd = [g_prev, g_new.clone()], [gtd_prev, gtd_new]
            break
        # interpolate
        min_step = t + 0.01 * (t - t_prev)
        max_step = t * 10
        tmp = t
        t = _cubic_interpolate(
            t_prev, f_prev, gtd_prev, t, f_new, gtd_new, bounds=(min_step, max_step)
        )
        t_prev, f_prev, g_prev, gtd_prev = tmp, f_new, g_new.clone(), gtd_new
        f_new, g_new = obj_func(x, t, d)
        ls_func_evals += 1
        gtd_new = _dot(g_new, d)
        ls_iter += 1

    if ls_iter == max_ls:  # reached the maximum number of evaluations
        bracket, bracket_f, bracket_g = [0, t], [f, f_new], [g, g_new]

    # zoom: refine the bracket until a point meets the criteria
    insuf_progress = False
    low_pos, high_pos = (0, 1) if bracket_f[0] <= bracket_f[-1] else (1, 0)
    while not done and ls_iter < max_ls:
        if abs(bracket[1] - bracket[0]) * d_norm < tolerance_change:
            break
        t = _cubic_interpolate(
            bracket[0], bracket_f[0], bracket_gtd[0], bracket[1], bracket_f[1], bracket_gtd[1]
        )
        # a point too near an end of the bracket makes little progress: move it inwards
        eps = 0.1 * (max(bracket) - min(bracket))
        if min(max(bracket) - t, t - min(bracket)) < eps:
            if insuf_progress or t >= max(bracket) or t <= min(bracket):
                if abs(t - max(bracket)) < abs(t - min(bracket)):
                    t = max(bracket) - eps
                else:
                    t = min(bracket) + eps
                insuf_progress = False
            else:
                insuf_progress = True
        else:
            insuf_progress = False

        f_new, g_new = obj_func(x, t, d)
        ls_func_evals += 1
        gtd_new = _dot(g_new, d)
        ls_iter += 1

        if f_new > (f + c1 * t * gtd) or f_new >= bracket_f[low_pos]:
            bracket[high_pos], bracket_f[high_pos] = t, f_new
            bracket_g[high_pos], bracket_gtd[high_pos] = g_new.clone(), gtd_new
            low_pos, high_pos = (0, 1) if bracket_f[0] <= bracket_f[1] else (1, 0)
        else:
            if abs(gtd_new) <= -c2 * gtd:
                done = True
            elif gtd_new * (bracket[high_pos] - bracket[low_pos]) >= 0:
                bracket[high_pos], bracket_f[high_pos] = bracket[low_pos], bracket_f[low_pos]
                bracket_g[high_pos] = bracket_g[low_pos]
                bracket_gtd[high_pos] = bracket_gtd[low_pos]
            bracket[low_pos], bracket_f[low_pos] = t, f_new
            bracket_g[low_pos], bracket_gtd[low_pos] = g_new.clone(), gtd_new

    t = bracket[low_pos]
    return bracket_f[low_pos], bracket_g[low_pos], t, ls_func_evals
