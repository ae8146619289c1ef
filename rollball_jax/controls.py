"""Prescribed mass motion: rail accelerations θ̈(t) = u(t) (Putkaradze & Rogers, eqs. 6.2, 7.2).

Every control is an ``eqx.Module`` called as ``u = control(t, x)`` (open-loop controls
ignore the state ``x``; ``control(t)`` works for them) with ``t`` a scalar and
``u`` of shape ``(n,)`` [rad/s² for angle-parametrised rails, length/s² for spokes].
``control.kink_times`` lists the times where u(t) is not smooth; ``simulate`` makes the
solver step exactly onto them (stepping across the kinks of (6.6)
costs a high-order method its order).
"""

from __future__ import annotations

import abc

from collections.abc import Callable
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Inexact, PyTree

from ._typing import FloatInput

from . import _checks as checks
from .errors import ModelError, array_namespace, as_float64, concrete, to_device, to_jax

__all__ = [
    "AbstractControl", "PaperStep", "ConstantControl", "PiecewiseLinearControl", "CubicSplineControl",
    "FunctionControl"
]


class AbstractControl(eqx.Module):
    """Base class: ``__call__(t, x=None) -> u`` of shape ``(n,)``; ``kink_times`` ``(m,)``.

    ``x`` ``(N,)`` is the current state, which the vector fields pass: open-loop controls
    (every control of this module) ignore it; closed-loop controls (feedback, e.g.
    :class:`rollball_jax.design.TVLQRControl`) set ``closed_loop = True`` and need it.
    """

    closed_loop: ClassVar[bool] = False

    @abc.abstractmethod
    def __call__(self, t: FloatInput[""], x: FloatInput[" N"] | None = None) -> Inexact[Array, " n"]:
        """Rail accelerations θ̈ ``(n,)`` of the masses at time ``t`` (state ``x`` for closed loops)."""

    @property
    def kink_times(self) -> Inexact[Array, " m"]:
        """Times where u(t) or its derivatives jump (may be empty)."""
        return jnp.zeros((0,))

    @property
    def size(self) -> int:
        """Number of masses ``n`` the control drives."""
        if self.closed_loop:
            raise ModelError("the size of a closed-loop control needs its state: use model.n")
        return int(jax.eval_shape(self, jnp.zeros(())).shape[0])


class PaperStep(AbstractControl):
    """Smoothed unit step of the paper (Putkaradze & Rogers, eqs. 6.6 and 7.11).

    ``u_i(t) = amplitude · sign_i · {1 for t ≤ t_a; (t_b − t)/(t_b − t_a) for t_a ≤ t ≤ t_b;
    0 for t ≥ t_b}`` with t_a = 0.1, t_b = 0.2 in the paper ((t_b − t)/(t_b − t_a) = −10t + 2).
    Use :meth:`ball` (all signs +1, eq. 7.11) or :meth:`disk` (signs (−1)^i, i = 1…n,
    eq. 6.6). ``signs`` ``(n,)``; kinks at t_a and t_b. Differentiable in ``signs``
    and ``amplitude``; t_a and t_b are kink times, not differentiated (zero derivative
    by construction: steps stop at them, and a stop does not move with them).
    """

    signs: Inexact[Array, " n"]
    amplitude: Inexact[Array, ""]
    t_a: Inexact[Array, ""]
    t_b: Inexact[Array, ""]

    def __init__(self, signs, amplitude=1.0, t_a=0.1, t_b=0.2):
        xp = array_namespace(signs)  # concrete data is shaped in NumPy (errors.array_namespace)
        self.signs = to_jax(xp.atleast_1d(xp.asarray(signs, dtype=np.float64)))
        self.amplitude = as_float64(amplitude)
        self.t_a = as_float64(t_a)
        self.t_b = as_float64(t_b)
        checks.finite_leaves({"signs": self.signs, "amplitude": self.amplitude, "t_a": self.t_a, "t_b": self.t_b}, "PaperStep")
        ta, tb = concrete(self.t_a), concrete(self.t_b)
        if ta is not None and tb is not None and not ta < tb:
            raise ModelError(f"PaperStep needs t_a < t_b; got t_a={ta}, t_b={tb}")

    @classmethod
    def ball(cls, n: int, **kw) -> "PaperStep":
        """(7.11): every mass accelerates the same way."""
        return cls(np.ones(n), **kw)

    @classmethod
    def disk(cls, n: int, **kw) -> "PaperStep":
        """(6.6): ``u_i`` carries the sign (−1)^i, i = 1…n."""
        return cls(np.array([(-1.0) ** i for i in range(1, n + 1)]), **kw)

    def __call__(self, t, x=None):
        t_a, t_b = jax.lax.stop_gradient(self.t_a), jax.lax.stop_gradient(self.t_b)
        ramp = jnp.clip((t_b - t) / (t_b - t_a), 0.0, 1.0)
        return self.amplitude * self.signs * ramp

    @property
    def kink_times(self):
        return jnp.stack([self.t_a, self.t_b])


class ConstantControl(AbstractControl):
    """Constant rail accelerations ``u(t) = values`` ``(n,)`` (zeros hold rail speeds)."""

    values: Inexact[Array, " n"]

    def __init__(self, values):
        xp = array_namespace(values)  # concrete data is shaped in NumPy (errors.array_namespace)
        self.values = to_jax(xp.atleast_1d(xp.asarray(values, dtype=np.float64)))
        if self.values.ndim != 1:
            raise ModelError(f"ConstantControl 'values' must be a 1-D array (n,); got shape {self.values.shape}")
        checks.finite_leaves(self.values, "ConstantControl.values")

    def __call__(self, t, x=None):
        return self.values + 0.0 * t


def _knots(knots, values, name):
    knots, values = (as_float64(x) for x in (knots, values))
    if values.ndim == 1:
        values = values[None]
    if knots.ndim != 1 or knots.shape[0] < 2:
        raise ModelError(f"{name} 'knots' must be a 1-D array of at least 2 times; got shape {knots.shape}")
    if values.ndim != 2 or values.shape[1] != knots.shape[0]:
        raise ModelError(
            f"{name} 'values' must have shape (n, {knots.shape[0]}) (one row per mass); got {values.shape}"
        )
    checks.finite_leaves(knots, f"{name}.knots")
    checks.finite_leaves(values, f"{name}.values")
    k = concrete(knots)
    if k is not None and np.any(np.diff(k) <= 0):
        raise ModelError(f"{name} 'knots' must be strictly increasing; got {k.tolist()}")
    return knots, values


class PiecewiseLinearControl(AbstractControl):
    """u(t) linear between knots: ``knots`` ``(K,)`` [time], ``values`` ``(n, K)``.

    Constant beyond the end knots. Differentiable in ``values``; kinks at the knots.
    The knot times are not differentiated (zero derivative by construction).
    """

    knots: Inexact[Array, " K"]
    values: Inexact[Array, "n K"]

    def __init__(self, knots, values):
        self.knots, self.values = _knots(knots, values, "PiecewiseLinearControl")

    def __call__(self, t, x=None):
        knots = jax.lax.stop_gradient(self.knots)
        return jax.vmap(lambda v: jnp.interp(t, knots, v))(self.values)

    @property
    def kink_times(self):
        return self.knots


def _natural_spline_operator(knots: np.ndarray) -> np.ndarray:
    """Matrix S with ``M = S @ y``: second derivatives of the natural cubic spline."""
    k = knots.shape[0]
    h = np.diff(knots)
    a = np.zeros((k, k))
    b = np.zeros((k, k))
    a[0, 0] = a[-1, -1] = 1.0
    for j in range(1, k - 1):
        a[j, j - 1] = h[j - 1]
        a[j, j] = 2.0 * (h[j - 1] + h[j])
        a[j, j + 1] = h[j]
        b[j, j - 1] = 6.0 / h[j - 1]
        b[j, j] = -6.0 / h[j - 1] - 6.0 / h[j]
        b[j, j + 1] = 6.0 / h[j]
    return np.linalg.solve(a, b)


class CubicSplineControl(AbstractControl):
    """u(t) = natural cubic spline through ``(knots, values)``; ``values`` ``(n, K)``.

    Constant (the end values) beyond the end knots. Exactly linear, hence
    differentiable, in ``values``. The knot times are fixed at construction (the
    spline's second-derivative operator is precomputed from them) and are **not
    differentiated**: their derivative is zero by construction.
    """

    knots: Inexact[Array, " K"]
    values: Inexact[Array, "n K"]
    operator: Inexact[Array, "K K"]

    def __init__(self, knots, values):
        self.knots, self.values = _knots(knots, values, "CubicSplineControl")
        k = concrete(self.knots)
        if k is None:
            raise ModelError("CubicSplineControl knots must be concrete (not traced)")
        self.operator = to_device(_natural_spline_operator(k))

    def __call__(self, t, x=None):
        knots = jax.lax.stop_gradient(self.knots)
        operator = jax.lax.stop_gradient(self.operator)
        tc = jnp.clip(t, knots[0], knots[-1])
        j = jnp.clip(jnp.searchsorted(knots, tc, side="right") - 1, 0, knots.shape[0] - 2)
        t0, t1 = knots[j], knots[j + 1]
        h = t1 - t0
        y0, y1 = self.values[:, j], self.values[:, j + 1]
        # second derivatives at knots j, j+1 (rows of values @ operatorᵀ; multiply-and-reduce,
        # no dot: see geometry.matvec)
        m0, m1 = jnp.sum(self.values * operator[j], axis=-1), jnp.sum(self.values * operator[j + 1], axis=-1)
        a = (t1 - tc) / h
        b = (tc - t0) / h
        return a * y0 + b * y1 + ((a**3 - a) * m0 + (b**3 - b) * m1) * h**2 / 6.0

    @property
    def kink_times(self):
        return self.knots


class FunctionControl(AbstractControl):
    """User control ``fn(t, params) -> (n,)`` written with ``jax.numpy``.

    ``kink_times``: times where ``fn`` is not smooth (stepped onto exactly).
    """

    params: PyTree
    fn: Callable[[Array, Any], Array] = eqx.field(static=True)
    kinks: Inexact[Array, " m"]

    def __init__(self, fn, params=None, kink_times=()):
        if not callable(fn):
            raise ModelError("FunctionControl 'fn' must be callable: fn(t, params) -> (n,)")
        self.fn = fn
        self.params = params
        self.kinks = as_float64(kink_times).reshape(-1)
        checks.finite_leaves(params, "FunctionControl.params")
        checks.finite_leaves(self.kinks, "FunctionControl.kink_times")
        # traced once now (nothing computed), so a function that does not trace with JAX is
        # refused here, naming it, rather than inside the first solve
        out = checks.traced_output(lambda p: jnp.asarray(fn(jnp.zeros(()), p)), (params,), "FunctionControl 'fn'",
                                   "fn(t, params)")
        if len(out.shape) > 1:
            raise ModelError(f"FunctionControl 'fn' must return the rail accelerations u of shape (n,); got shape {out.shape}")

    def __call__(self, t, x=None):
        return jnp.atleast_1d(self.fn(t, self.params))

    @property
    def kink_times(self):
        return self.kinks
