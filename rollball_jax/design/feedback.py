"""Feedback around a designed trajectory: time-varying LQR (TVLQR).

An open-loop plan for an unstable motion (the paper's ball starts with its centre of mass
above the geometric centre) is useless on a robot without feedback. Around a nominal
trajectory ``(x̄(t), ū(t))`` of ``ẋ = f(t, x, u)`` (``u`` = the rail accelerations θ̈) the
deviations obey, to first order, ``δẋ = A(t) δx + B(t) δu`` with the exact Jacobians
``A = ∂f/∂x``, ``B = ∂f/∂u`` (forward-mode autodiff of the model's vector field). The
feedback ``δu = −K(t) δx`` minimising ``∫ (δxᵀQδx + δuᵀRδu) dt + δx(T)ᵀQ_f δx(T)`` has
``K = R⁻¹BᵀP`` with ``P`` the solution of the Riccati differential equation

    −Ṗ = AᵀP + PA − P B R⁻¹ Bᵀ P + Q,   P(T) = Q_f,

integrated backwards in time with diffrax (:func:`riccati`). :class:`TVLQRControl` is a
closed-loop control, ``u(t, x) = ū(t) − K(t)(x − x̄(t))``, usable wherever a control is
(``rb.simulate``, batches); :func:`tvlqr` builds it from a model and an open-loop control.

Representation: ``x̄`` and ``K`` are sampled on a grid of ``G`` times and interpolated by
natural cubic splines (C², so the closed loop has no kinks of its own); ``ū`` is the
open-loop control itself, evaluated exactly.
"""

from __future__ import annotations

from collections.abc import Callable

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from ..controls import AbstractControl, ConstantControl, _natural_spline_operator
from ..errors import ModelError, SimulationError
from ..models import AbstractModel


def riccati(
    A: Callable[[Array], Float[Array, "N N"]],
    B: Callable[[Array], Float[Array, "N n"]],
    Q: Float[ArrayLike, "N N"],
    R: Float[ArrayLike, "n n"],
    Qf: Float[ArrayLike, "N N"],
    ts: Float[ArrayLike, " G"],
    *,
    rtol: float = 1e-9,
    atol: float = 1e-9,
    max_steps: int = 100_000,
) -> Float[Array, "G N N"]:
    """``P(t)`` at the increasing times ``ts`` ``(G,)`` of the Riccati ODE above, with
    ``P(ts[-1]) = Qf``; integrated from ``ts[-1]`` back to ``ts[0]`` (diffrax ``Tsit5``,
    PID control, symmetrised at every evaluation). ``A(t)`` ``(N, N)``, ``B(t)`` ``(N, n)``
    are callables; ``Q``, ``Qf`` symmetric positive semi-definite, ``R`` symmetric positive
    definite. Raises ``SimulationError`` if the solve fails (e.g. a finite escape)."""
    ts = jnp.asarray(ts, dtype=jnp.float64)
    Q, R, Qf = (jnp.asarray(M, dtype=jnp.float64) for M in (Q, R, Qf))
    R_inv = jnp.linalg.inv(R)

    def rhs(t, P, args):
        P = 0.5 * (P + P.T)
        a, b = A(t), B(t)
        PB = P @ b
        return -(a.T @ P + P @ a - PB @ R_inv @ PB.T + Q)

    sol = dfx.diffeqsolve(
        dfx.ODETerm(rhs), dfx.Tsit5(), ts[-1], ts[0], -1e-3 * (ts[-1] - ts[0]), Qf,
        saveat=dfx.SaveAt(ts=ts[::-1]), stepsize_controller=dfx.PIDController(rtol=rtol, atol=atol),
        max_steps=max_steps, throw=False,
    )
    P = sol.ys[::-1]
    if not bool(jnp.all(jnp.isfinite(P))) or int(sol.result._value) != 0:
        raise SimulationError("Riccati solve failed (finite escape or max_steps): check Q, R, Q_f and the horizon",
                              cause="riccati")
    return 0.5 * (P + jnp.swapaxes(P, 1, 2))


def _spline_second_derivatives(knots: np.ndarray, values: Array) -> Array:
    """Natural-spline second derivatives of ``values`` ``(G, ...)`` on ``knots`` ``(G,)``."""
    S = jnp.asarray(_natural_spline_operator(np.asarray(knots)))
    return jnp.tensordot(S, values, axes=(1, 0))


def _spline_eval(knots, values, second, t):
    """Natural cubic spline through ``(knots, values)`` at ``t`` (constant beyond the ends)."""
    tc = jnp.clip(t, knots[0], knots[-1])
    j = jnp.clip(jnp.searchsorted(knots, tc, side="right") - 1, 0, knots.shape[0] - 2)
    t0, t1 = knots[j], knots[j + 1]
    h = t1 - t0
    a, b = (t1 - tc) / h, (tc - t0) / h
    return a * values[j] + b * values[j + 1] + ((a**3 - a) * second[j] + (b**3 - b) * second[j + 1]) * h**2 / 6.0


class TVLQRControl(AbstractControl):
    """Closed-loop control ``u(t, x) = ū(t) − K(t)(x − x̄(t))`` ``(n,)``.

    Attributes: ``nominal`` (the open-loop control ū), ``knots`` ``(G,)`` [time],
    ``x_nominal`` ``(G, N)`` and ``gains`` ``(G, n, N)`` with their spline second
    derivatives, ``u_max`` (``None``, or a bound: every component of u clipped to
    [−u_max, u_max], an actuator's acceleration limit). Build it with :func:`tvlqr`.
    Beyond the knots x̄ and K are held constant.
    Kink times: those of ``nominal``.
    """

    closed_loop = True
    nominal: AbstractControl
    knots: Float[Array, " G"]
    x_nominal: Float[Array, "G N"]
    x_second: Float[Array, "G N"]
    gains: Float[Array, "G n N"]
    gains_second: Float[Array, "G n N"]
    u_max: Float[Array, ""] | None = None

    def __call__(self, t, x=None):
        if x is None:
            raise ModelError("TVLQRControl is a closed-loop control: call it as control(t, x)")
        knots = jax.lax.stop_gradient(self.knots)
        x_bar = _spline_eval(knots, self.x_nominal, self.x_second, t)
        K = _spline_eval(knots, self.gains, self.gains_second, t)
        u = self.nominal(t) - K @ (x - x_bar)
        return u if self.u_max is None else jnp.clip(u, -self.u_max, self.u_max)

    @property
    def kink_times(self):
        return self.nominal.kink_times


def state_weights(model: AbstractModel, default: float = 1.0, **by_label: float) -> Float[Array, "N N"]:
    """Diagonal weight matrix ``(N, N)`` for :func:`tvlqr`: ``default`` on every state
    component, and ``by_label[name]`` on the component named ``name`` in
    ``model.state_labels()`` (e.g. ``state_weights(ball, z1=100.0, z2=100.0)`` weights
    the GC position). Raises ``ModelError`` for an unknown label or a negative weight."""
    labels = model.state_labels()
    diag = np.full(len(labels), float(default))
    for name, w in by_label.items():
        if name not in labels:
            raise ModelError(f"unknown state label {name!r}; the model's labels are {labels}")
        diag[labels.index(name)] = float(w)
    if np.any(~(diag >= 0)):
        raise ModelError(f"state weights must be non-negative and finite; got {diag.tolist()}")
    return jnp.diag(jnp.asarray(diag))


def linearisation(model: AbstractModel, control: AbstractControl, t, x) -> tuple[Float[Array, "N N"], Float[Array, "N n"]]:
    """``(A, B) = (∂f/∂x, ∂f/∂u)`` of the model's vector field at ``(t, x, u = control(t, x))``
    (forward-mode autodiff; ``u`` = θ̈ of the masses)."""
    u = control(t, x)

    def f(x_, u_):
        return model.vector_field(t, x_, ConstantControl(u_))

    return jax.jacfwd(f, argnums=(0, 1))(x, u)


def tvlqr(
    model: AbstractModel,
    control: AbstractControl,
    x0: Float[ArrayLike, " N"],
    t_span: tuple[float, float],
    Q: Float[ArrayLike, "N N"] | None = None,
    R: Float[ArrayLike, "n n"] | None = None,
    Qf: Float[ArrayLike, "N N"] | None = None,
    *,
    n_grid: int = 401,
    rtol: float = 1e-10,
    atol: float = 1e-10,
    nominal: tuple[ArrayLike, ArrayLike] | None = None,
    u_max: float | None = None,
) -> TVLQRControl:
    """TVLQR feedback around the open-loop motion of ``model`` under ``control`` from ``x0``.

    The nominal ``x̄`` is ``rb.simulate`` on ``n_grid`` equally spaced times of ``t_span``,
    or, when given, ``nominal = (ts (G,), xs (G, N))`` (increasing times spanning
    ``t_span``): e.g. a multiple-shooting design's segments
    (:meth:`~.shooting.MultipleShooting.nominal`), which an unstable motion cannot be
    re-simulated in one piece to reproduce. ``A(t), B(t)`` are the exact Jacobians along
    it; ``P`` from :func:`riccati`. Defaults: ``Q = I`` ``(N, N)``, ``R = I`` ``(n, n)``,
    ``Qf = Q``. ``u_max``: saturate the closed-loop control (see :class:`TVLQRControl`;
    the gains are those of the unsaturated problem). Returns a :class:`TVLQRControl`.
    Raises ``ModelError`` for weights of the wrong shape, a non-positive ``u_max``, a
    ``nominal`` of the wrong shape, or an open-loop ``control`` that is itself
    closed-loop.
    """
    from ..solve import simulate

    if control.closed_loop:
        raise ModelError("tvlqr needs an open-loop nominal control")
    N, n = model.state_size, model.n
    if n == 0:
        raise ModelError("tvlqr needs a model with moving masses (the inputs are their rail accelerations)")
    Q = jnp.eye(N) if Q is None else jnp.asarray(Q, dtype=jnp.float64)
    R = jnp.eye(n) if R is None else jnp.asarray(R, dtype=jnp.float64)
    Qf = Q if Qf is None else jnp.asarray(Qf, dtype=jnp.float64)
    for name, M, shape in (("Q", Q, (N, N)), ("R", R, (n, n)), ("Qf", Qf, (N, N))):
        if M.shape != shape:
            raise ModelError(f"'{name}' must have shape {shape}; got {M.shape}")
    if nominal is None:
        sol = simulate(model, control, x0, t_span, n_save=n_grid, rtol=rtol, atol=atol)
        knots, xs = np.asarray(sol.ts), jnp.asarray(sol.xs)
    else:
        knots = np.asarray(nominal[0], dtype=np.float64)
        xs = jnp.asarray(nominal[1], dtype=jnp.float64)
        if knots.ndim != 1 or knots.size < 3 or xs.shape != (knots.size, N):
            raise ModelError(f"nominal must be (ts (G,), xs (G, {N})) with G >= 3; got {knots.shape}, {xs.shape}")
        if np.any(np.diff(knots) <= 0) or abs(knots[0] - t_span[0]) > 1e-12 or abs(knots[-1] - t_span[1]) > 1e-12:
            raise ModelError("nominal times must increase strictly from t_span[0] to t_span[1]")
    x_second = _spline_second_derivatives(knots, xs)
    kj = jnp.asarray(knots)

    @jax.jit
    def AB(t):
        x_bar = _spline_eval(kj, xs, x_second, t)
        return linearisation(model, control, t, x_bar)

    P = riccati(lambda t: AB(t)[0], lambda t: AB(t)[1], Q, R, Qf, knots)
    Bs = jax.vmap(lambda t, x: linearisation(model, control, t, x)[1])(kj, xs)  # (G, N, n)
    gains = jnp.linalg.solve(R, jnp.einsum("gNn,gNM->gnM", Bs, P))  # K = R⁻¹ Bᵀ P
    if u_max is not None:
        u_max = float(u_max)
        if not u_max > 0 or not np.isfinite(u_max):
            raise ModelError(f"u_max must be positive and finite (or None); got {u_max}")
        u_max = jnp.asarray(u_max)
    return TVLQRControl(
        nominal=control, knots=kj, x_nominal=xs, x_second=x_second,
        gains=gains, gains_second=_spline_second_derivatives(knots, gains), u_max=u_max,
    )
