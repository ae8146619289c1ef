"""What is free in a trajectory design: controls, knots, horizon, initial angles.

A :class:`DesignProblem` fixes a model, its initial state, a horizon ``T`` and the form
of the controls θ̈_i(t) = u_i(t) (a natural cubic spline or a piecewise-linear function
of time through ``n_knots`` equally spaced knots on [0, T]); it says which masses'
controls are free (the others keep fixed knot values) and, optionally, which initial
angles θ_i(0) are free. The free numbers form a small pytree of *parameters*::

    {"values": (n_free, K) knot values of u for the free masses,
     "theta0": (n_angles,) initial angles of the masses listed in ``free_initial_angles``}

:meth:`DesignProblem.evaluate` solves the model from the parameters (a pure,
differentiable function) and returns an :class:`Evaluation`: the states on a uniform
grid of ``n_samples`` times over [0, T] (the last one is T), plus everything a cost
term needs (control, observables, contact forces, quadrature weights). The same
:class:`Evaluation` can wrap any other trajectory of the same parameters (e.g. SciPy's,
in :mod:`rollball_jax.design.verify`), so every cost term and metric is computed the
same way on both.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PyTree

from .._typing import ArrayInput, FloatInput, RealScalar

from ..controls import AbstractControl, CubicSplineControl, PiecewiseLinearControl
from ..errors import ModelError
from ..models import AbstractModel
from ..sensitivity import trajectory
from .._discrete_adjoint import DEFAULT_TANGENT_CONTROL, tangent_mode

__all__ = ["DesignProblem", "Evaluation"]

if TYPE_CHECKING:
    from ..contact import ContactForces

CONTROL_KINDS = {"spline": CubicSplineControl, "linear": PiecewiseLinearControl}


def trapezoid_weights(ts: Float[Array, " T"]) -> Float[Array, " T"]:
    """Weights w with Σ w_j f(t_j) ≈ ∫ f dt (trapezoid rule on the grid ``ts``)."""
    dt = jnp.diff(ts)
    return jnp.concatenate([dt[:1] * 0.5, 0.5 * (dt[1:] + dt[:-1]), dt[-1:] * 0.5])


class Evaluation(eqx.Module):
    """One trajectory of a design, with what cost terms need.

    Attributes
    ----------
    model, control : the model and the control u(t) built from the parameters.
    x0 : (N,)        initial state.
    ts : (T,)        sample times, ``ts[0] = 0``, ``ts[-1]`` = horizon.
    xs : (T, N)      states at ``ts`` (paper's order).
    context : dict   the model's observable context (the disk's initial GC).
    contact_forces : :class:`~rollball_jax.contact.ContactForces` | None
                     the contact forces at ``ts`` if already computed
                     (:meth:`with_contact`), else ``None``. They are not recomputed: a
                     copy with another control, ``ts`` or ``xs`` must set this to ``None``.
    """

    model: AbstractModel
    control: AbstractControl
    x0: Float[Array, " N"]
    ts: Float[Array, " T"]
    xs: Float[Array, "T N"]
    context: dict
    contact_forces: ContactForces | None = None

    @property
    def horizon(self) -> Float[Array, ""]:
        return self.ts[-1] - self.ts[0]

    @property
    def x_final(self) -> Float[Array, " N"]:
        return self.xs[-1]

    @property
    def n(self) -> int:
        return self.model.n

    @property
    def weights(self) -> Float[Array, " T"]:
        """Trapezoid quadrature weights of ``ts`` (sum = horizon)."""
        return trapezoid_weights(self.ts)

    def observables(self, x: Float[Array, " N"]) -> dict:
        """Observables of one state (``model.observables`` with the context)."""
        return self.model.observables(x, **self.context)

    def path_observables(self) -> dict:
        """Observables at every sample time (time first)."""
        return jax.vmap(self.observables)(self.xs)

    @property
    def gc(self) -> Float[Array, "T 2"]:
        """Horizontal GC path (spatial e1, e2) at the sample times."""
        return jax.vmap(lambda x: self.observables(x)["gc"][:2])(self.xs)

    @property
    def gc_final(self) -> Float[Array, "2"]:
        """Horizontal GC at the last sample time (only that state's observables)."""
        return self.observables(self.x_final)["gc"][:2]

    @property
    def theta_dot(self) -> Float[Array, "T n"]:
        return self.xs[:, self.n : 2 * self.n]

    def gc_velocity(self, t, x) -> Float[Array, "2"]:
        """d/dt of the horizontal GC at one state, exactly along the flow (jvp)."""
        f = self.model.vector_field(t, x, self.control)
        return jax.jvp(lambda y: self.observables(y)["gc"][:2], (x,), (f,))[1]

    def contact(self):
        """Contact forces at the sample times (:class:`rollball_jax.contact.ContactForces`);
        the stored ones after :meth:`with_contact`."""
        if self.contact_forces is not None:
            return self.contact_forces
        from ..contact import contact_forces

        return contact_forces(self.model, self.control, self.ts, self.xs, self.context)

    def with_contact(self) -> "Evaluation":
        """A copy that holds its contact forces, so that every cost term and metric that
        asks for them shares one computation (one copy in a compiled program, not one
        per caller)."""
        if self.contact_forces is not None:
            return self
        return eqx.tree_at(lambda e: e.contact_forces, self, self.contact(), is_leaf=lambda x: x is None)


def _indices(spec, n: int, name: str) -> tuple[int, ...]:
    if spec is None or spec is True:
        return tuple(range(n))
    if spec is False:
        return ()
    idx = tuple(int(i) for i in np.atleast_1d(np.asarray(spec, dtype=int)))
    if any(i < 0 or i >= n for i in idx) or len(set(idx)) != len(idx):
        raise ModelError(f"'{name}' must list distinct mass indices in 0..{n - 1}; got {list(idx)}")
    return tuple(sorted(idx))


class DesignProblem(eqx.Module):
    """A trajectory-design problem: model, initial state, horizon and free controls.

    Parameters
    ----------
    model : Ball or Disk.
    x0 : (N,) initial state in the paper's order (7.1)/(6.1).
    horizon : T, the final time (the design runs on [0, T]).
    n_knots : number K of equally spaced knots of u_i(t) on [0, T] (or give ``knots``).
    control : ``"spline"`` (natural cubic spline, :class:`CubicSplineControl`) or
        ``"linear"`` (:class:`PiecewiseLinearControl`).
    free_masses : indices of the masses whose control is free (default: all). The
        others follow ``fixed_values`` ``(n, K)`` (default 0: they keep their initial rate).
    free_initial_angles : ``False`` (default), ``True`` (all) or indices of masses
        whose initial angle θ_i(0) is free.
    n_samples : number of sample times (uniform on [0, T]) for path costs and output.
    rtol, atol, solver, max_steps : of the differentiable solve (Dopri8 by default).
    tangent_control : its derivative-aware step control (:func:`rollball_jax.sensitivity.trajectory`):
        ``"bound"`` (default, the tangent bound), ``"tangent"``/``True`` (a carried probe
        tangent: far fewer steps for a model with fast damping, e.g. stiff feedback) or
        ``False``; anything else raises ``ModelError``.
    dense : sample by the solver's dense output on the steps of a solve to T (default),
        instead of making every sample time a step stop. Measured on experiment (a)
        (``python benchmarks/bench_design.py --skip-fd``, 201 samples, 46 LM iterations,
        two runs each): run time 6.5 / 6.3 s dense against 9.2 / 8.2 s with stops, compile
        9.1 / 8.9 s against 8.4 / 7.8 s; the iterates agree to the reported digits.
    z_a : disk only, the initial GC position along e1 (5.41).
    """

    model: AbstractModel
    x0: Float[Array, " N"]
    template: AbstractControl
    fixed_values: Float[Array, "n K"]
    rtol: Float[Array, ""]
    atol: Float[Array, ""]
    z_a: Float[Array, ""]
    solver: dfx.AbstractSolver
    n_samples: int = eqx.field(static=True)
    horizon: float = eqx.field(static=True)
    control_kind: str = eqx.field(static=True)
    free_masses: tuple[int, ...] = eqx.field(static=True)
    free_initial_angles: tuple[int, ...] = eqx.field(static=True)
    max_steps: int = eqx.field(static=True)
    dense: bool = eqx.field(static=True)
    tangent_control: bool | str = eqx.field(static=True)

    def __init__(
        self,
        model: AbstractModel,
        x0: FloatInput[" N"],
        horizon: float,
        n_knots: int = 8,
        *,
        knots: FloatInput[" K"] | None = None,
        control: str = "spline",
        free_masses: Sequence[int] | None = None,
        fixed_values: FloatInput["n K"] | None = None,
        free_initial_angles: bool | Sequence[int] = False,
        n_samples: int = 201,
        rtol: RealScalar = 1e-10,
        atol: RealScalar = 1e-10,
        solver: dfx.AbstractSolver | None = None,
        max_steps: int = 20_000,
        z_a: float = 0.0,
        dense: bool = True,
        tangent_control: bool | str = DEFAULT_TANGENT_CONTROL,
    ):
        n = model.n
        if n == 0:
            raise ModelError("a design needs at least one moving mass")
        self.model = model
        self.x0 = jnp.asarray(x0, dtype=jnp.float64)
        if self.x0.shape != (model.state_size,):
            raise ModelError(f"x0 must have length {model.state_size}; got shape {self.x0.shape}")
        from .. import _checks as checks

        checks.state(model, self.x0)
        self.horizon = float(horizon)
        if not self.horizon > 0:
            raise ModelError(f"horizon must be positive; got {horizon}")
        if knots is None:
            if int(n_knots) < 2:
                raise ModelError(f"n_knots must be at least 2; got {n_knots}")
            knots = np.linspace(0.0, self.horizon, int(n_knots))
        knots = np.asarray(knots, dtype=np.float64)
        if knots[0] != 0.0 or abs(knots[-1] - self.horizon) > 1e-12 * self.horizon:
            raise ModelError(f"knots must run from 0 to the horizon {self.horizon}; got [{knots[0]}, {knots[-1]}]")
        if control not in CONTROL_KINDS:
            raise ModelError(f"control must be one of {sorted(CONTROL_KINDS)}; got {control!r}")
        self.control_kind = control
        self.template = CONTROL_KINDS[control](knots, np.zeros((n, knots.size)))
        self.fixed_values = (
            jnp.zeros((n, knots.size)) if fixed_values is None else jnp.asarray(fixed_values, dtype=jnp.float64)
        )
        if self.fixed_values.shape != (n, knots.size):
            raise ModelError(f"fixed_values must have shape ({n}, {knots.size}); got {self.fixed_values.shape}")
        self.free_masses = _indices(free_masses, n, "free_masses")
        if not self.free_masses:
            raise ModelError("at least one mass must have a free control")
        self.free_initial_angles = _indices(free_initial_angles, n, "free_initial_angles")
        self.n_samples = int(n_samples)
        self.dense = bool(dense)
        if self.n_samples < 2:
            raise ModelError("n_samples must be at least 2")
        self.rtol = jnp.asarray(rtol, dtype=jnp.float64)
        self.atol = jnp.asarray(atol, dtype=jnp.float64)
        self.solver = dfx.Dopri8() if solver is None else solver
        self.max_steps = int(max_steps)
        self.z_a = jnp.asarray(z_a, dtype=jnp.float64)
        try:
            tangent_mode(tangent_control)
        except ValueError as e:
            raise ModelError(str(e)) from None
        self.tangent_control = tangent_control

    # ---- parameters -------------------------------------------------------------
    @property
    def knots(self) -> Float[Array, " K"]:
        return self.template.knots

    @property
    def n_knots(self) -> int:
        return int(self.template.knots.shape[0])

    def initial_params(self, values: ArrayInput | None = None, theta0: ArrayInput | None = None) -> dict:
        """Parameter pytree: ``values`` ``(n_free, K)`` (default 0) and, if any initial
        angle is free, ``theta0`` (default: the angles in ``x0``)."""
        shape = (len(self.free_masses), self.n_knots)
        values = jnp.zeros(shape) if values is None else jnp.asarray(values, dtype=jnp.float64)
        if values.shape != shape:
            raise ModelError(f"values must have shape {shape} (free masses × knots); got {values.shape}")
        params = {"values": values}
        if self.free_initial_angles:
            idx = np.asarray(self.free_initial_angles)
            th = self.x0[idx] if theta0 is None else jnp.asarray(theta0, dtype=jnp.float64)
            if th.shape != idx.shape:
                raise ModelError(f"theta0 must have shape {idx.shape}; got {th.shape}")
            params["theta0"] = th
        return params

    def control(self, params: PyTree) -> AbstractControl:
        """The control u(t) of the parameters (fixed masses keep ``fixed_values``)."""
        values = self.fixed_values.at[np.asarray(self.free_masses)].set(params["values"])
        return eqx.tree_at(lambda c: c.values, self.template, values)

    def initial_state(self, params: PyTree) -> Float[Array, " N"]:
        """x0 with the free initial angles replaced."""
        if not self.free_initial_angles:
            return self.x0
        return self.x0.at[np.asarray(self.free_initial_angles)].set(params["theta0"])

    @property
    def sample_ts(self) -> Float[Array, " T"]:
        """Uniform sample grid on [0, T], ``n_samples`` points."""
        return jnp.linspace(0.0, self.horizon, self.n_samples)

    def context(self, x0) -> dict:
        return self.model.observable_context(x0, z_a=self.z_a)

    # ---- solving ------------------------------------------------------------------
    def evaluate(self, params: PyTree, adjoint: str | dfx.AbstractAdjoint = "discrete") -> Evaluation:
        """Solve from the parameters and wrap the sampled trajectory (pure, differentiable).

        ``adjoint``: ``"discrete"`` (default; exact derivatives of the steps taken, in
        forward and reverse mode, with derivative-aware step control; the samples are the
        dense output of the steps, or step stops with ``dense=False``) or ``"backsolve"``. A failed solve (too many steps) gives ``inf``
        states (``"backsolve"``: raises), which the cost turns into a large finite value
        so that optimisers reject the step; its derivatives are NaN (the cost's select
        gives Levenberg–Marquardt's forward-mode Jacobian zeros there, BFGS evaluates
        gradients at accepted points only, and Adam, which takes every step, stops there:
        :func:`~rollball_jax.design.optimize.optimize`).
        """
        control = self.control(params)
        x0 = self.initial_state(params)
        ts = self.sample_ts
        xs = trajectory(self.model, control, x0, ts, solver=self.solver, rtol=self.rtol, atol=self.atol,
                        max_steps=self.max_steps, adjoint=adjoint, throw=False, dense=self.dense,
                        tangent_control=self.tangent_control)
        return Evaluation(self.model, control, x0, ts, xs, self.context(x0))

    def wrap(self, params: PyTree, ts: ArrayInput, xs: ArrayInput) -> Evaluation:
        """An :class:`Evaluation` of a trajectory computed elsewhere (e.g. SciPy)."""
        x0 = self.initial_state(params)
        return Evaluation(self.model, self.control(params), x0, jnp.asarray(ts, dtype=jnp.float64),
                          jnp.asarray(xs, dtype=jnp.float64), self.context(x0))

    def flatten(self, params: PyTree):
        """``(vector, unravel)`` of the parameters (for SciPy optimisers)."""
        from jax.flatten_util import ravel_pytree

        return ravel_pytree(params)
