"""Models: the rolling ball and the rolling disk as equinox modules (pytrees).

Units are any consistent set (the paper's examples use m0 = r = g = 1). Vectors are in
the body frame translated to the geometric centre (GC) unless stated.

Both models validate their parameters when built from concrete values and raise
:class:`~rollball_jax.errors.ModelError` naming the offending parameter. Models built
inside ``jit``/``vmap``/``grad`` (traced values) skip the value checks.
"""

from __future__ import annotations

import abc

from collections.abc import Sequence
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Inexact

from ._typing import ArrayInput

from . import _checks as checks
from .controls import AbstractControl
from .errors import ModelError, SimulationError, array_namespace, concrete, to_jax
from .forces import AbstractForce, ConstantForce
from .rails import CHECK_SAMPLES, AbstractRail, RailSet

__all__ = ["AbstractModel", "Ball", "Disk"]


def _scalar(x, name):
    x = checks.numeric(x, name)
    if x.shape != ():
        raise ModelError(f"'{name}' must be a scalar; got shape {x.shape}")
    return x


def _masses(masses, rails: RailSet):
    xp = array_namespace(masses)
    masses = xp.atleast_1d(checks.numeric(masses, "masses")) if masses is not None else np.zeros((0,))
    masses = to_jax(masses)
    if masses.ndim != 1:
        raise ModelError(f"'masses' must be a 1-D array (n,); got shape {masses.shape}")
    if masses.shape[0] != rails.size:
        raise ModelError(
            f"'masses' has {masses.shape[0]} entries but 'rails' describe {rails.size} rails: "
            "give one rail per point mass"
        )
    checks.positive(masses, "masses")
    return masses


def _masses_rails_force(masses, rails, force):
    """Validated ``(masses (n,), RailSet, AbstractForce)`` shared by Ball and Disk."""
    rails = RailSet(rails)
    masses = _masses(masses, rails)
    force = ConstantForce() if force is None else force
    if not isinstance(force, AbstractForce):
        raise ModelError("'force' must be an AbstractForce (e.g. ConstantForce([Fx, Fy, Fz]))")
    return masses, rails, force


def _host_value(fn):
    """``fn()``, a NumPy value computed from the rails. Inside an outer ``jit`` the rails'
    compiled helpers are traced into it and ``fn`` fails to convert a tracer; concrete rails
    are then evaluated at trace time instead (``jax.ensure_compile_time_eval``, op by op:
    slower, so only then), so a model built inside a ``jit`` is checked too."""
    try:
        return fn()
    except jax.errors.TracerArrayConversionError:
        with jax.ensure_compile_time_eval():
            return fn()


def _check_rails_inside(rails: RailSet, radius, chi0) -> None:
    r = concrete(radius)
    c = concrete(chi0)
    if r is None or c is None:
        return
    if not np.linalg.norm(c) < r:
        raise ModelError(f"'chi0' (|χ0| = {np.linalg.norm(c):.6g}) must lie strictly inside the ball (r = {r})")
    if rails.size == 0:
        return
    try:
        reach = _host_value(rails.max_distance)
    except Exception:  # traced rail parameters
        return
    bad = np.nonzero(~(reach < r))[0]
    if bad.size:
        i = int(bad[0])
        detail = (f"reaches |ζ(θ)| = {reach[i]:.12g} >= radius {float(r):.12g}: "
                  "every rail must stay strictly inside the ball")
        raise ModelError(f"rail of mass {i + 1} {detail}", mass=i, detail=detail)


def _shell_scalars(m0, radius, g):
    """``(m0, radius, g)`` as float64 scalars of the shell (ball or disk); raises
    ``ModelError`` for a non-positive m0 or radius or a non-finite g."""
    m0, radius, g = _scalar(m0, "m0"), _scalar(radius, "radius"), _scalar(g, "g")
    checks.positive(m0, "m0")
    checks.positive(radius, "radius")
    g_ = concrete(g)
    if g_ is not None and not np.isfinite(g_):
        raise ModelError("'g' must be finite")
    return m0, radius, g


class AbstractModel(eqx.Module):
    """Interface shared by every simulated system (ball, disk, rigid bodies).

    A model is a pytree of parameters with: ``n`` (number of prescribed-motion masses),
    ``state_size``, ``state_labels()``, ``vector_field(t, x, control)`` (pure, jittable),
    ``observables(x, **context)`` (dict of arrays for one state), ``observable_context(x0, **kw)``
    (constants the observables need, e.g. the disk's initial GC) and ``check_trajectory(ts, xs)``
    (host-side checks after a solve, raising :class:`~rollball_jax.errors.SimulationError`).
    """

    @property
    def n(self) -> int:
        return 0

    @property
    @abc.abstractmethod
    def state_size(self) -> int:
        """Length ``N`` of the state vector."""

    @abc.abstractmethod
    def state_labels(self) -> list[str]:
        """Names of the ``N`` state components, in order."""

    @abc.abstractmethod
    def vector_field(self, t, x, control):
        """``ẋ`` ``(N,)`` at time ``t`` and state ``x`` ``(N,)`` under ``control`` (pure, jittable)."""

    def vector_field_vjp(self, t, x, control, ct):
        """``(x̄ (N,), model̄, control̄)``: cotangents of the state and of the inexact array
        leaves of the model and the control (``None`` elsewhere, as ``eqx.filter_vjp``) for
        the cotangent ``ct`` ``(N,)`` of :meth:`vector_field`'s value. The reverse sweep of
        :mod:`rollball_jax._discrete_adjoint` calls it once per replayed stage; this default
        is ``eqx.filter_vjp`` of :meth:`vector_field`, a model may supply a faster one
        (:class:`Ball`). Only the value is used: derivatives of it are never taken."""
        _, pull = eqx.filter_vjp(lambda x_, mc: mc[0].vector_field(t, x_, mc[1]), x, (self, control))
        x_bar, (model_bar, control_bar) = pull(ct)
        return x_bar, model_bar, control_bar

    def observables(self, x, **context) -> dict:
        return {}

    @property
    def kind(self) -> str:
        """Short name of the system (``"ball"``, ``"disk"``, ``"freerigidbody"``, ...): the
        class name in lower case; used in labels and in the metadata of written results."""
        return type(self).__name__.lower()

    def observable_context(self, x0, **kwargs) -> dict:
        return {}

    def check_trajectory(self, ts, xs, outside=None) -> None:
        """Host-side checks after a solve (raise ``SimulationError``). ``outside`` ``(T,)``:
        :meth:`outside` at the states, if the caller already computed it."""
        return None

    def check_state(self, x, name: str = "x0", outside=None) -> None:
        """Host-side rules a concrete state ``x`` ``(N,)`` must satisfy beyond length and
        finiteness; raises ``ModelError`` naming ``name``. ``outside``: :meth:`outside` at
        ``x``, if the caller already computed it. Default: a versor at :attr:`versor_index`
        (if any) of unit length to within ``checks.VERSOR_TOL``."""
        k = self.versor_index
        if k is not None:
            checks.versor(np.asarray(x)[k : k + 4], f"{name}[{k}:{k + 4}] (q)")

    @property
    def versor_index(self) -> int | None:
        """Index of q0 in the state if the state holds a versor q (checked to be unit), else None."""
        return None

    #: True when the motion lies in the e1–e3 plane (the disk): the GC moves along e1 only and
    #: the masses stay in one plane, so plots and reports draw 2-D figures instead of 3-D ones.
    planar: ClassVar[bool] = False

    def outside(self, x):
        """Traceable: True where the state is physically invalid in a way a solve must stop at
        (a point mass outside the shell). Default: never."""
        return jnp.asarray(False)


def _rail_reach(model, x):
    """``(n,)`` |ζ_i(θ_i)| / r of one state (traceable)."""
    pos = model.rails.positions(x[: model.n])
    return jnp.linalg.norm(pos, axis=-1) / model.radius


@eqx.filter_jit
def _rail_reach_along(model, xs):
    """``(T, n)`` |ζ_i(θ_i)| / r along states ``xs`` ``(T, N)`` (compiled once per structure)."""
    import jax

    return jax.vmap(lambda x: _rail_reach(model, x))(xs)


def _check_rails_along(model, ts, xs, error=SimulationError, outside=None):
    """Raise if a point mass is at or beyond the shell at one of the states ``xs`` ``(T, N)``.
    ``outside``: ``model.outside`` at ``xs`` if already computed (nothing to do when all False)."""
    if model.n == 0 or (outside is not None and not np.any(outside)):
        return
    import jax

    try:
        with jax.ensure_compile_time_eval():  # concrete values inside a jit trace: evaluate now
            reach = np.asarray(_rail_reach_along(model, jnp.asarray(xs)))
    except jax.errors.TracerArrayConversionError:  # traced model: checked when it was built
        return
    out = ~(reach < 1.0)
    if np.any(out):
        k, j = np.argwhere(out)[0]
        msg = (f"mass {int(j) + 1} is outside the ball: |ζ(θ)| = {reach[k, j]:.6g}·r at t = {ts[k]:.6g} "
               f"(θ = {xs[k, j]:.6g}); its rail leaves the shell for this θ (e.g. an open FunctionRail)")
        if error is SimulationError:
            raise SimulationError(msg, t_reached=float(ts[max(int(k) - 1, 0)]), cause="rail left")
        raise error(msg)


def _check_rail_ends(model, ts, xs):
    """Raise SimulationError if a mass ran past an end of its rail (rails with ends: spokes,
    :meth:`~rollball_jax.rails.AbstractRail.theta_limits`)."""
    bounded = model.rails.bounded()
    if not bounded:
        return
    theta = xs[:, : model.n]
    for masses, lim in bounded:
        th = theta[:, masses]
        out = (th < lim[:, 0]) | (th > lim[:, 1])
        if np.any(out):
            k, j = np.argwhere(out)[0]
            raise SimulationError(
                f"mass {int(masses[j]) + 1} left the end of its rail (θ = {th[k, j]:.6g} outside "
                f"[{lim[j, 0]:.6g}, {lim[j, 1]:.6g}]) by t = {ts[k]:.6g}",
                t_reached=float(ts[k]),
                cause="rail left",
            )


class Ball(AbstractModel):
    """Rolling ball with static internal structure and point masses on rails (Putkaradze & Rogers, sec. 4).

    Attributes
    ----------
    m0 : ()            mass of the ball with its static internal structure.
    radius : ()        ball radius r.
    inertia : (3,)     principal moments (d1, d2, d3) of m0 about its CM, body axes E1..E3.
    chi0 : (3,)        χ0, GC → CM of m0 (body frame).
    g : ()             gravitational acceleration (gravity is −g e3 in the spatial frame).
    masses : (n,)      point masses m_i.
    rails : RailSet    rail ζ_i(θ_i) of each point mass (n rails, mass order).
    force : AbstractForce  external force F_e(t) at the GC, spatial frame (default 0).

    With no point masses this is the static-internal-structure ball (5.26), e.g. the
    Chaplygin ball. Raises ``ModelError`` for non-positive masses, radius or moments,
    moments violating the triangle inequality, a CM or rail not strictly inside the
    ball (|ζ(θ)| ≥ r), or mismatched shapes.
    """

    m0: Inexact[Array, ""]
    radius: Inexact[Array, ""]
    inertia: Inexact[Array, "3"]
    chi0: Inexact[Array, "3"]
    g: Inexact[Array, ""]
    masses: Inexact[Array, " n"]
    rails: RailSet
    force: AbstractForce

    def __init__(
        self,
        m0: ArrayInput,
        radius: ArrayInput,
        inertia: ArrayInput,
        chi0: ArrayInput = (0.0, 0.0, 0.0),
        g: ArrayInput = 1.0,
        masses: ArrayInput | None = None,
        rails: Sequence[AbstractRail] | AbstractRail | RailSet = (),
        force: AbstractForce | None = None,
    ):
        checks.require_x64("Ball")
        self.m0, self.radius, self.g = _shell_scalars(m0, radius, g)
        self.inertia = checks.principal_moments(inertia)  # positive, triangle inequality
        self.chi0 = checks.numeric(chi0, "chi0")
        if self.chi0.shape != (3,):
            raise ModelError(f"'chi0' must have shape (3,); got {self.chi0.shape}")
        self.masses, self.rails, self.force = _masses_rails_force(masses, rails, force)
        _check_rails_inside(self.rails, self.radius, self.chi0)

    @property
    def n(self) -> int:
        """Number of point masses."""
        return self.rails.size

    @property
    def state_size(self) -> int:
        """Length 2n + 9 of the state (7.1)."""
        return 2 * self.n + 9

    def state_labels(self) -> list[str]:
        """Names of the state components in the paper's order (7.1)."""
        n = self.n
        return (
            [f"theta{i + 1}" for i in range(n)]
            + [f"theta{i + 1}_dot" for i in range(n)]
            + ["q0", "q1", "q2", "q3", "Omega1", "Omega2", "Omega3", "z1", "z2"]
        )

    def initial_state(
        self,
        theta: ArrayInput | None = None,
        theta_dot: ArrayInput | None = None,
        q: ArrayInput = (1.0, 0.0, 0.0, 0.0),
        Omega: ArrayInput = (0.0, 0.0, 0.0),
        z: ArrayInput = (0.0, 0.0),
    ) -> Inexact[Array, " N"]:
        """Assemble x = [θ, θ̇, q, Ω, z] (7.1). Defaults: masses at θ = 0 at rest, ball at rest at the origin."""
        n = self.n
        xp = array_namespace(theta, theta_dot, q, Omega, z)
        theta = xp.zeros(n) if theta is None else xp.atleast_1d(xp.asarray(theta, dtype=np.float64))
        theta_dot = xp.zeros(n) if theta_dot is None else xp.atleast_1d(xp.asarray(theta_dot, dtype=np.float64))
        parts = {"theta": (theta, (n,)), "theta_dot": (theta_dot, (n,)), "q": (q, (4,)), "Omega": (Omega, (3,)), "z": (z, (2,))}
        out = []
        for name, (v, shape) in parts.items():
            v = xp.asarray(v, dtype=np.float64).reshape(-1)  # theta=[1, 2] for a ball without masses is refused
            if v.shape != shape:
                raise ModelError(f"initial '{name}' must have shape {shape}; got {v.shape}")
            out.append(v)
        qn = concrete(out[2])
        if qn is not None:
            checks.versor(qn, "q")
        out = xp.concatenate(out)
        return to_jax(out)

    def vector_field(self, t, x, control: AbstractControl):
        """f(t, x) of the ODE (7.2); see :func:`rollball_jax.dynamics.ball.ball_vector_field`."""
        from .dynamics.ball import ball_vector_field

        return ball_vector_field(t, x, self, control)

    def vector_field_vjp(self, t, x, control: AbstractControl, ct):
        """Cotangents of the state, the ball and the control for the cotangent ``ct`` of
        :meth:`vector_field` (see :meth:`AbstractModel.vector_field_vjp`), with the core
        of (7.4) differentiated by hand: :func:`rollball_jax.dynamics.ball.ball_vector_field_vjp`.
        A subclass that overrides :meth:`vector_field` gets the generic VJP of its own field
        (:meth:`AbstractModel.vector_field_vjp`), not this one."""
        if type(self).vector_field is not Ball.vector_field:
            return super().vector_field_vjp(t, x, control, ct)
        from .dynamics.ball import ball_vector_field_vjp

        return ball_vector_field_vjp(t, x, self, control, ct)

    def observables(self, x, **context):
        """Observables of one state; see :func:`rollball_jax.observables.observables`."""
        from .observables import observables

        return observables(self, x)

    def kinematics(self, x, **context):
        """``(θ (n,), θ̇ (n,), Λ (3, 3) body → spatial, Ω (3,) body, z_GC (3,) spatial)`` of
        one state (7.1); Λ from the versor q (2.15), the GC at height 0."""
        from .dynamics.ball import ball_state_split
        from .geometry import rotation_matrix

        theta, theta_dot, q, omega, z = ball_state_split(x, self.n)
        return theta, theta_dot, rotation_matrix(q), omega, jnp.stack([z[0], z[1], jnp.zeros_like(z[0])])

    @property
    def rotational_inertia(self) -> Inexact[Array, "3"]:
        """``(d1, d2, d3)``: principal moments of m0 about its CM, body axes (as in the kinetic energy)."""
        return self.inertia

    def body_angular_acceleration(self, x, f) -> Inexact[Array, "3"]:
        """Ω̇ ``(3,)`` (body frame) from the vector field's output ``f = ẋ``: κ of (7.4)."""
        n = self.n
        return f[2 * n + 4 : 2 * n + 7]

    def check_state(self, x, name: str = "x0", outside=None) -> None:
        """The versor q = x[2n:2n+4] must have unit length (to within ``checks.VERSOR_TOL``);
        every mass strictly inside the shell."""
        super().check_state(x, name)  # the versor at versor_index = 2n
        _check_rails_along(self, np.zeros(1), np.asarray(x)[None], error=ModelError, outside=outside)

    @property
    def versor_index(self) -> int:
        """q0 is x[2n] (7.1)."""
        return 2 * self.n

    def outside(self, x):
        """True if a point mass is at or beyond the shell (|ζ_i(θ_i)| ≥ r)."""
        return jnp.any(_rail_reach(self, x) >= 1.0) if self.n else jnp.asarray(False)

    def check_trajectory(self, ts, xs, outside=None):
        _check_rail_ends(self, ts, xs)
        _check_rails_along(self, ts, xs, outside=outside)


class Disk(AbstractModel):
    """Rolling disk: the ball's planar special case (Putkaradze & Rogers, sec. 5.4).

    The disk rolls in the e1–e3 plane about E2 (principal, orthogonal to the plane);
    all rails lie in the body x–z plane (ζ_2 ≡ 0).

    Attributes
    ----------
    m0, radius, g : ()  as for :class:`Ball`.
    d2 : ()             polar moment of inertia of m0 about its CM (about E2).
    chi0 : (3,)         χ0 = (x, 0, z); give (x, z) or (x, 0, z).
    masses : (n,)       point masses.
    rails : RailSet     planar rails (x–z plane of the body frame).
    force : AbstractForce  F_e(t) at the GC, spatial frame; only F_e,1 enters (5.33).

    Raises ``ModelError`` as :class:`Ball` does, and for a rail leaving the x–z plane.
    """

    planar: ClassVar[bool] = True

    m0: Inexact[Array, ""]
    radius: Inexact[Array, ""]
    d2: Inexact[Array, ""]
    chi0: Inexact[Array, "3"]
    g: Inexact[Array, ""]
    masses: Inexact[Array, " n"]
    rails: RailSet
    force: AbstractForce

    def __init__(
        self,
        m0: ArrayInput,
        radius: ArrayInput,
        d2: ArrayInput,
        chi0: ArrayInput = (0.0, 0.0),
        g: ArrayInput = 1.0,
        masses: ArrayInput | None = None,
        rails: Sequence[AbstractRail] | AbstractRail | RailSet = (),
        force: AbstractForce | None = None,
    ):
        checks.require_x64("Disk")
        self.m0, self.radius, self.g = _shell_scalars(m0, radius, g)
        self.d2 = _scalar(d2, "d2")
        xp = array_namespace(chi0)
        chi0 = xp.asarray(checks.numeric(chi0, "chi0"))
        if chi0.shape == (2,):
            chi0 = xp.stack([chi0[0], 0.0 * chi0[0], chi0[1]])
        chi0 = to_jax(chi0)
        if chi0.shape != (3,):
            raise ModelError(f"'chi0' must be (x, z) or (x, 0, z); got shape {chi0.shape}")
        c = concrete(chi0)
        if c is not None and c[1] != 0.0:
            raise ModelError("'chi0' of a disk must lie in the x–z plane (χ0_y = 0)")
        self.chi0 = chi0
        self.masses, self.rails, self.force = _masses_rails_force(masses, rails, force)
        checks.positive(self.d2, "d2")
        _check_rails_inside(self.rails, self.radius, self.chi0)
        self._check_planar()

    def _check_planar(self):
        if self.rails.size == 0:
            return
        try:
            # as densely as the in-ball check (rails.max_distance), whose compiled sampler it shares
            pts = _host_value(lambda: self.rails.sample(CHECK_SAMPLES))
        except Exception:  # traced rail parameters: checked when built concretely
            return
        off = np.max(np.abs(pts[..., 1]), axis=1)
        bad = np.nonzero(off > 1e-12)[0]
        if bad.size:
            i = int(bad[0])
            detail = f"leaves the disk's x–z plane (|ζ_y| = {off[i]:.3g})"
            raise ModelError(f"rail of mass {i + 1} {detail}", mass=i, detail=detail)

    @property
    def n(self) -> int:
        """Number of point masses."""
        return self.rails.size

    @property
    def state_size(self) -> int:
        """Length 2n + 2 of the state (6.1)."""
        return 2 * self.n + 2

    def state_labels(self) -> list[str]:
        """Names of the state components in the paper's order (6.1)."""
        n = self.n
        return [f"theta{i + 1}" for i in range(n)] + [f"theta{i + 1}_dot" for i in range(n)] + ["phi", "phi_dot"]

    def initial_state(self, theta=None, theta_dot=None, phi=0.0, phi_dot=0.0) -> Inexact[Array, " N"]:
        """Assemble x = [θ, θ̇, φ, φ̇] (6.1), (6.4); φ̇_a = −ż_a / r."""
        n = self.n
        xp = array_namespace(theta, theta_dot, phi, phi_dot)
        theta = xp.zeros(n) if theta is None else xp.atleast_1d(xp.asarray(theta, dtype=np.float64))
        theta_dot = xp.zeros(n) if theta_dot is None else xp.atleast_1d(xp.asarray(theta_dot, dtype=np.float64))
        if theta.shape != (n,) or theta_dot.shape != (n,):
            raise ModelError(f"initial 'theta' and 'theta_dot' must have shape ({n},)")
        phi, phi_dot = (xp.asarray(v, dtype=np.float64).reshape(-1) for v in (phi, phi_dot))
        for name, v in (("phi", phi), ("phi_dot", phi_dot)):
            if v.shape != (1,):  # phi=[0.1, 0.2] gave a state one too long
                raise ModelError(f"initial '{name}' must be a number (the disk's rotation angle/rate); got {v.shape[0]} values")
        x = xp.concatenate([theta, theta_dot, phi, phi_dot])
        return to_jax(x)

    def vector_field(self, t, x, control: AbstractControl):
        """f(t, x) of the ODE (6.2); see :func:`rollball_jax.dynamics.disk.disk_vector_field`."""
        from .dynamics.disk import disk_vector_field

        return disk_vector_field(t, x, self, control)

    def observables(self, x, z_a=0.0, phi_a=0.0):
        """Observables of one state; GC at z = z_a − r(φ − φ_a) (5.41)."""
        from .observables import observables

        return observables(self, x, z_a, phi_a)

    def kinematics(self, x, z_a=0.0, phi_a=0.0):
        """``(θ (n,), θ̇ (n,), Λ (3, 3), Ω (3,) body, z_GC (3,) spatial)`` of one state
        (6.1): Λ the rotation by φ about e2 (5.29), Ω = (0, −φ̇, 0) (5.30), the GC at
        z = z_a − r(φ − φ_a) (5.41)."""
        from .geometry import rotation_about_e2

        n = self.n
        theta, theta_dot, phi, phi_dot = x[:n], x[n : 2 * n], x[2 * n], x[2 * n + 1]
        omega = jnp.stack([0.0 * phi_dot, -phi_dot, 0.0 * phi_dot])
        gc1 = z_a - self.radius * (phi - phi_a)
        return theta, theta_dot, rotation_about_e2(phi), omega, jnp.stack([gc1, jnp.zeros_like(gc1), jnp.zeros_like(gc1)])

    @property
    def rotational_inertia(self) -> Inexact[Array, "3"]:
        """``(0, d2, 0)``: the disk turns about E2 only; d2 is m0's polar moment about its CM."""
        return jnp.array([0.0, 1.0, 0.0]) * self.d2

    def body_angular_acceleration(self, x, f) -> Inexact[Array, "3"]:
        """Ω̇ = −φ̈ e2 ``(3,)`` (5.30) from the vector field's output ``f = ẋ``."""
        phi_ddot = f[2 * self.n + 1]
        return jnp.stack([0.0 * phi_ddot, -phi_ddot, 0.0 * phi_ddot])

    def observable_context(self, x0, z_a=0.0, **kwargs):
        """``{"z_a": z_a, "phi_a": φ(0)}``: the initial GC position and angle (5.41), float64
        scalars; NumPy when ``x0`` and ``z_a`` are concrete (eager ``jnp`` here, or moving
        them to the device, cost more than the checks of ``rb.simulate``), else JAX."""
        xp = array_namespace(x0, z_a)
        return {"z_a": xp.asarray(z_a, dtype=np.float64), "phi_a": xp.asarray(x0, dtype=np.float64)[2 * self.n]}

    def check_state(self, x, name: str = "x0", outside=None) -> None:
        """Every mass strictly inside the disk."""
        _check_rails_along(self, np.zeros(1), np.asarray(x)[None], error=ModelError, outside=outside)

    def outside(self, x):
        """True if a point mass is at or beyond the rim (|ζ_i(θ_i)| ≥ r)."""
        return jnp.any(_rail_reach(self, x) >= 1.0) if self.n else jnp.asarray(False)

    def check_trajectory(self, ts, xs, outside=None):
        _check_rail_ends(self, ts, xs)
        _check_rails_along(self, ts, xs, outside=outside)
