"""Exact Jacobians of the vector fields: ∂f/∂x and ∂f/∂p (Putkaradze & Rogers, eqs. 6.2, 7.2).

The paper supplies stiff integrators (ode15s, ode23t, radau5) with the Jacobian of f with
respect to the state, computed by complex-step differentiation (sec. 6 and 7, refs.
[37–39]). Here the same matrices come from forward-mode automatic differentiation
(``jax.jacfwd``) of the very same JAX vector field, exact to rounding;
:func:`complex_step_jacobian` reproduces the paper's method for comparison.

Shapes: ``x`` is one state ``(N,)`` in the paper's order — N = 2n + 9 for the ball (7.1),
N = 2n + 2 for the disk (6.1) — and ``t`` a scalar. Every function is compiled once per
model/control *structure* (number and kinds of rails, control type) with ``eqx.filter_jit``'s
rule (array leaves traced, the rest static; dispatched by ``_dispatch.array_jit``); new
parameter values, states or times reuse the compiled code (``t`` and ``x`` are converted
to float64 arrays first, so Python floats do not trigger recompilation).

Use in implicit solvers. diffrax's implicit methods (``Kvaerno3/4/5``, ``KenCarp3/4/5``,
``ImplicitEuler``; diffrax 0.7.2 has no Radau method) need no Jacobian argument: their
root finder ``diffrax.VeryChord`` builds the Newton matrix of each stage equation
k − f(t, y + γ h k) = 0 as ``lineax.JacobianLinearOperator`` of the stage residual,
linearised with ``jax.linearize`` (forward mode) and materialised for an LU
factorisation, i.e. I − γ h ∂f/∂x with the same exact ∂f/∂x as :func:`state_jacobian`,
once per step (``CalculateJacobian.second_stage`` for the ESDIRK methods) — see
``diffrax/_root_finder/_verychord.py`` and ``lineax.linearise``. Its Newton tolerances
default to the step-size controller's rtol/atol; at 1e-10 the simplified-Newton iteration
often fails to meet them (about half the Kvaerno5 steps on the paper examples are
rejected and retried smaller); ``Kvaerno5(root_finder=diffrax.VeryChord(rtol=1e-6,
atol=1e-6, norm=optimistix.max_norm))`` reaches the same accuracy in ~6× fewer steps on
the paper disk. SciPy's and SUNDIALS' implicit methods get the Jacobian from
:mod:`rollball_jax.scipy_bridge` and :mod:`rollball_jax.dae`.

Parameter Jacobians are returned as pytrees shaped like the parameters: an array leaf of
shape ``S`` becomes ``∂f/∂leaf`` of shape ``(N, *S)``, i.e. the leading axis is the
component of f. Leaves that are not differentiated are ``None``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PyTree

from ._dispatch import array_jit, float64_arg
from ._typing import ArrayInput, FloatInput

from .controls import AbstractControl
from .errors import ModelError
from .models import AbstractModel

__all__ = [
    "vector_field",
    "state_jacobian",
    "state_jacobian_rev",
    "parameter_jacobian",
    "parameter_jacobian_where",
    "complex_step_jacobian",
    "complex_step_parameter_jacobian",
]


def _f64(t, x):
    t, x = float64_arg(t), float64_arg(x)
    if t.shape != ():
        raise ModelError(f"t must be a scalar; got shape {t.shape}")
    return t, x


def _check(model, x):
    if not isinstance(model, AbstractModel):
        raise ModelError(f"model must be a rollball_jax model (Ball, Disk, ...); got {type(model).__name__}")
    if x.shape != (model.state_size,):
        raise ModelError(f"x must have shape ({model.state_size},) for this model; got {x.shape}")


@array_jit
def _vf(model, control, t, x):
    return model.vector_field(t, x, control)


def vector_field(model: AbstractModel, control: AbstractControl, t: ArrayInput, x: FloatInput[" N"]) -> Float[Array, " N"]:
    """f(t, x) of (7.2)/(6.2), jit-compiled (same function ``model.vector_field`` evaluates)."""
    t, x = _f64(t, x)
    _check(model, x)
    return _vf(model, control, t, x)


@array_jit
def _state_jac_fwd(model, control, t, x):
    return jax.jacfwd(lambda y: model.vector_field(t, y, control))(x)


@array_jit
def _state_jac_rev(model, control, t, x):
    return jax.jacrev(lambda y: model.vector_field(t, y, control))(x)


def state_jacobian(
    model: AbstractModel, control: AbstractControl, t: ArrayInput, x: FloatInput[" N"]
) -> Float[Array, "N N"]:
    """State Jacobian ``J[i, j] = ∂f_i/∂x_j`` of (7.2) (ball) or (6.2) (disk), shape ``(N, N)``.

    Forward-mode autodiff (``jax.jacfwd``: N Jacobian-vector products in one vectorised
    pass), exact up to rounding. This is the matrix the paper obtains by complex-step
    differentiation and supplies to ode15s/radau5. The ball's versor is used as given
    (Λ of (2.15) is not normalised), so the rows of the q-columns are the derivative of
    the unconstrained formula (7.2), as the DAE (7.3) needs.

    Raises ``ModelError`` for a state of the wrong length or a non-scalar ``t``.
    """
    t, x = _f64(t, x)
    _check(model, x)
    return _state_jac_fwd(model, control, t, x)


def state_jacobian_rev(
    model: AbstractModel, control: AbstractControl, t: ArrayInput, x: FloatInput[" N"]
) -> Float[Array, "N N"]:
    """As :func:`state_jacobian`, by reverse mode (``jax.jacrev``); equal to rounding."""
    t, x = _f64(t, x)
    _check(model, x)
    return _state_jac_rev(model, control, t, x)


@array_jit
def _param_jac(params, static, t, x):
    def f(p):
        model, control = eqx.combine(p, static)
        return model.vector_field(t, x, control)

    return jax.jacfwd(f)(params)


def parameter_jacobian(
    model: AbstractModel,
    control: AbstractControl,
    t: ArrayInput,
    x: FloatInput[" N"],
    filter_spec: PyTree[bool | Callable[[Any], bool]] = eqx.is_inexact_array,
) -> tuple[PyTree, PyTree]:
    """∂f/∂p for the parameters ``p`` of ``(model, control)`` selected by ``filter_spec``.

    ``filter_spec`` is an equinox filter (see ``eqx.partition``): a callable applied to
    every leaf (default ``eqx.is_inexact_array``: every floating-point array leaf — m0,
    radius, inertia, χ0, g, masses, rail parameters, force, control parameters) or a
    pytree of booleans/callables with the structure of ``(model, control)``, e.g. built
    with ``eqx.tree_at``. Returns ``(d_model, d_control)``: pytrees with the structure of
    ``model`` and ``control`` in which a selected leaf of shape ``S`` is replaced by
    ``∂f/∂leaf`` of shape ``(N, *S)`` and every other leaf by ``None``.

    Notes: derivatives are taken with respect to the leaves *as stored*: e.g.
    ``CircleRail.paper`` stores the rotation matrix B(ς(v)) (7.10), not the spherical
    coordinates v, and ``SpokeRail`` stores the normalised direction. Use
    :func:`parameter_jacobian_where` to differentiate with respect to a chosen few leaves.
    """
    t, x = _f64(t, x)
    _check(model, x)
    params, static = eqx.partition((model, control), filter_spec)
    return _param_jac(params, static, t, x)


@array_jit
def _param_jac_where(model, control, t, x, where):
    def f(p):
        m, c = eqx.tree_at(where, (model, control), p)
        return m.vector_field(t, x, c)

    return jax.jacfwd(f)(where((model, control)))


def parameter_jacobian_where(
    model: AbstractModel,
    control: AbstractControl,
    t: ArrayInput,
    x: FloatInput[" N"],
    where: Callable[[tuple[AbstractModel, AbstractControl]], PyTree[Array]],
) -> PyTree[Array]:
    """∂f/∂p for the leaves that ``where((model, control))`` returns.

    Example: ``parameter_jacobian_where(ball, ctl, t, x, lambda mc: (mc[0].m0, mc[1].amplitude))``
    returns ``(∂f/∂m0 (N,), ∂f/∂amplitude (N,))``; a leaf of shape ``S`` gives ``(N, *S)``.
    ``where`` follows ``eqx.tree_at``: it must return leaves (arrays) of the pair. It is a
    static argument: pass the same function object to reuse the compiled code.
    """
    t, x = _f64(t, x)
    _check(model, x)
    return _param_jac_where(model, control, t, x, where)


@array_jit
def _cs_state(model, control, t, x, h):
    n = x.shape[0]
    xs = x[None, :].astype(jnp.complex128) + 1j * h * jnp.eye(n)
    fs = jax.vmap(lambda y: model.vector_field(t, y, control))(xs)  # (N perturbations, N)
    return jnp.imag(fs).T / h


def complex_step_jacobian(
    model: AbstractModel,
    control: AbstractControl,
    t: ArrayInput,
    x: FloatInput[" N"],
    h: float = 1e-30,
) -> Float[Array, "N N"]:
    """State Jacobian by complex-step differentiation (the paper's method, refs. [37–39]).

    ``J[:, j] = Im f(t, x + i h e_j) / h``: the same JAX vector field evaluated in
    complex128 at N complex-perturbed states (vectorised with ``jax.vmap``). For an
    analytic f the error is O(h² |f‴|) with no subtractive cancellation, so with
    h = 1e-30 the result is exact to rounding, like :func:`state_jacobian`. The vector
    fields (7.2)/(6.2) are analytic in x (polynomials, sin/cos, a 3×3 solve by
    Cramer's rule; no abs/norm/conjugation of state-dependent quantities), and the
    built-in rails and controls accept complex θ. A user ``FunctionRail`` must use
    analytic operations only (no ``jnp.abs``, ``jnp.linalg.norm``, comparisons on θ).
    """
    t, x = _f64(t, x)
    _check(model, x)
    return _cs_state(model, control, t, x, np.float64(h))


@array_jit
def _cs_param(model, control, t, x, h, where):
    p = jnp.asarray(where((model, control)))
    k = p.size
    perturbed = p.reshape(-1)[None, :].astype(jnp.complex128) + 1j * h * jnp.eye(k)  # (k, k)

    def f(pk):
        m, c = eqx.tree_at(where, (model, control), pk.reshape(p.shape))
        return jnp.imag(m.vector_field(t, x.astype(jnp.complex128), c)) / h

    return jax.vmap(f)(perturbed).T.reshape((x.shape[0], *p.shape))  # (N, *p.shape)


def complex_step_parameter_jacobian(
    model: AbstractModel,
    control: AbstractControl,
    t: ArrayInput,
    x: FloatInput[" N"],
    where: Callable[[tuple[AbstractModel, AbstractControl]], Array],
    h: float = 1e-30,
) -> Float[Array, "N ..."]:
    """∂f/∂p by complex step for the single array leaf ``p = where((model, control))``.

    Returns ``(N, *p.shape)``, comparable with :func:`parameter_jacobian_where`: every entry
    of p is perturbed by i·h in turn (vectorised with ``jax.vmap``) and the same JAX vector
    field is evaluated in complex128. ``where`` is static (as in
    :func:`parameter_jacobian_where`). Model construction checks are bypassed
    (``eqx.tree_at``), so any leaf can be used.
    """
    t, x = _f64(t, x)
    _check(model, x)
    return _cs_param(model, control, t, x, np.float64(h), where)
