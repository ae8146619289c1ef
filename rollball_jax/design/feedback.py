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

Error coordinates (``error="geometric"``): a state holding a unit quaternion (versor) ``q``
(the ball, ``model.versor_index`` not ``None``) lives on a manifold of dimension ``N − 1``;
``x − x̄`` on the four components of ``q`` is a redundant error (one direction, the length
of ``q``, is neither a physical deviation nor controllable: an eigenvalue 0 that the
Riccati solve carries along). The geometric error replaces those four components by the
body-frame rotation error

    δφ = 2 s · vec(q̄⁻¹ ⊗ q)   (3,),  s = sign of the scalar part of q̄⁻¹ ⊗ q,

(:func:`state_error`; the rotation vector of q̄⁻¹ ⊗ q to O(|δφ|³), either sign of q), with
the exact inverse ``q = q̄ ⊗ (√(1 − |δφ|²/4), δφ/2)`` (:func:`state_retract`). The LQR is
then solved for the error ``e = φ(x, x̄)`` ``(N − 1,)`` itself: ``ė = φ_x f(x, u) +
φ_x̄ f(x̄, ū)`` with ``x = ψ(x̄, e)``, linearised at ``e = 0`` by autodiff
(:func:`error_linearisation`; e.g. the orientation block is ``δφ̇ = δΩ − Ω̄ × δφ``), the
weights pulled back, ``Q_e(t) = ψ_eᵀ Q ψ_e``, so that a deviation costs what it cost in
``x``; the feedback is ``u = ū − K_e(t) φ(x, x̄(t))``.
"""

from __future__ import annotations

from collections.abc import Callable

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .. import _checks as checks
from .._rejection_limit import RejectionLimit
from .._typing import ArrayInput, FloatInput, RealScalar, TimeSpan

from ..controls import AbstractControl, ConstantControl, _natural_spline_operator
from ..errors import ModelError, SimulationError, concrete
from ..geometry import quat_conjugate, quat_multiply
from ..models import AbstractModel

__all__ = [
    "linearisation", "tvlqr", "TVLQRControl", "state_weights", "riccati", "error_linearisation", "state_error",
    "state_retract", "periodic_angles"
]


#: Default tolerances (rtol = atol) and step budget of the Riccati solve (:func:`riccati`,
#: and :func:`tvlqr`'s).
RICCATI_TOL = 1e-9
RICCATI_MAX_STEPS = 100_000


def riccati(
    A: Callable[[Array], Float[Array, "N N"]],
    B: Callable[[Array], Float[Array, "N n"]],
    Q: FloatInput["N N"] | Callable[[Array], Float[Array, "N N"]],
    R: FloatInput["n n"],
    Qf: FloatInput["N N"],
    ts: FloatInput[" G"],
    *,
    rtol: RealScalar = RICCATI_TOL,
    atol: RealScalar = RICCATI_TOL,
    max_steps: int = RICCATI_MAX_STEPS,
) -> Float[Array, "G N N"]:
    """``P(t)`` at the increasing times ``ts`` ``(G,)`` of the Riccati ODE above, with
    ``P(ts[-1]) = Qf``; integrated from ``ts[-1]`` back to ``ts[0]`` (diffrax ``Tsit5``,
    PID control, symmetrised at every evaluation). ``A(t)`` ``(N, N)``, ``B(t)`` ``(N, n)``
    are callables; ``Q`` (an array, or a callable ``Q(t)`` ``(N, N)``), ``Qf`` symmetric
    positive semi-definite, ``R`` symmetric positive definite. Raises ``SimulationError`` if
    the solve fails (e.g. a finite escape). Called eagerly, each call compiles its solve
    anew (the callables are part of the program); :func:`tvlqr` keeps one compiled program
    per model structure."""
    ts = jnp.asarray(ts, dtype=jnp.float64)
    Q_of_t = Q if callable(Q) else (lambda t, Q_=jnp.asarray(Q, dtype=jnp.float64): Q_)
    R, Qf = (jnp.asarray(M, dtype=jnp.float64) for M in (R, Qf))
    P, ok = _riccati_solve(lambda t: (A(t), B(t)), Q_of_t, R, Qf, ts, rtol, atol, max_steps)
    _raise_unless(ok)
    return P


def _riccati_solve(AB, Q_of_t, R, Qf, ts, rtol, atol, max_steps):
    """Traceable core of :func:`riccati`: ``(P (G, N, N), ok)``; ``AB(t) = (A(t), B(t))``,
    ``ok`` false for a failed solve (a finite escape or ``max_steps``)."""
    R_inv = jnp.linalg.inv(R)

    def rhs(t, P, args):
        P = 0.5 * (P + P.T)
        a, b = AB(t)
        PB = P @ b
        return -(a.T @ P + P @ a - PB @ R_inv @ PB.T + Q_of_t(t))

    sol = dfx.diffeqsolve(
        dfx.ODETerm(rhs), dfx.Tsit5(), ts[-1], ts[0], -1e-3 * (ts[-1] - ts[0]), Qf,
        saveat=dfx.SaveAt(ts=ts[::-1]), stepsize_controller=RejectionLimit(dfx.PIDController(rtol=rtol, atol=atol)),
        max_steps=max_steps, throw=False,
    )
    P = sol.ys[::-1]
    ok = jnp.all(jnp.isfinite(P)) & (sol.result == dfx.RESULTS.successful)
    return 0.5 * (P + jnp.swapaxes(P, 1, 2)), ok


def _raise_unless(ok):
    if not bool(ok):
        raise SimulationError("Riccati solve failed (finite escape or max_steps): check Q, R, Q_f and the horizon",
                              cause="riccati")


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


def _versor_of(x, k):
    return x[k : k + 4] / jnp.linalg.norm(x[k : k + 4])


def periodic_angles(model: AbstractModel) -> tuple[int, ...]:
    """Indices into the state of the rail angles θ_i whose rail is a closed curve of period
    2π in θ (:attr:`~rollball_jax.rails.AbstractRail.periodic`: circles, ellipses, figure
    eights): θ_i and θ_i + 2π are the same configuration, and the vector field is
    2π-periodic in θ_i. Spokes and user (:class:`~rollball_jax.rails.FunctionRail`) rails
    are not assumed periodic."""
    if model.n == 0:
        return ()
    closed = np.concatenate([np.full(g.size, g.periodic) for g in model.rails.groups])
    closed = closed[np.asarray(model.rails.order, dtype=int)]  # group-row order -> mass order
    return tuple(int(i) for i in np.nonzero(closed)[0])


def _wrap_angles(d, wrap: tuple[int, ...]):
    """``d`` with the components ``wrap`` mapped into [−π, π) (``d`` elsewhere unchanged)."""
    if not wrap:
        return d
    idx = np.asarray(wrap, dtype=int)
    return d.at[idx].set(jnp.mod(d[idx] + jnp.pi, 2.0 * jnp.pi) - jnp.pi)


def state_error(x: FloatInput[" N"], x_bar: FloatInput[" N"], versor_index: int | None = None,
                wrap: tuple[int, ...] = ()) -> Float[Array, " M"]:
    """Error ``e = φ(x, x̄)`` of a state ``x`` ``(N,)`` from the nominal ``x̄`` ``(N,)``.

    ``wrap``: indices (before the versor) of angles of period 2π, whose difference is taken
    into [−π, π) (e.g. :func:`periodic_angles`; a mass that slipped a full turn behind is
    on the nominal, not 2π off it). ``versor_index = None``: ``e = x − x̄`` ``(N,)`` (with
    ``wrap``). Otherwise ``k = versor_index`` is the
    index of ``q0`` of a versor ``q = x[k:k+4]``, and ``e`` ``(N − 1,)`` is ``x − x̄`` with
    those four components replaced by the body-frame rotation error

        δφ = 2 s · vec(q̄̂* ⊗ q̂)   (3,),   q̂ = q/|q|,  s = +1 if the scalar part ≥ 0 else −1,

    the rotation ``q = q̄ ⊗ exp(δφ/2)`` to O(|δφ|³) (``2 sin(α/2) = α − α³/24`` for a rotation
    by α about a fixed axis); the same for ``q`` and ``−q``, zero at ``x = x̄``, with
    ``state_error(state_retract(x̄, e), x̄) = e`` exactly for ``|δφ| ≤ 2``. For the ball
    (``Ball.versor_index = 2n``, ``q`` maps body to spatial) ``δφ`` is in the body frame.
    """
    x = jnp.asarray(x)
    x_bar = jnp.asarray(x_bar)
    if versor_index is None:
        return _wrap_angles(x - x_bar, wrap)
    k = int(versor_index)
    r = quat_multiply(quat_conjugate(_versor_of(x_bar, k)), _versor_of(x, k))
    s = jnp.where(r[0] < 0.0, -1.0, 1.0)
    return jnp.concatenate([_wrap_angles(x[:k] - x_bar[:k], wrap), 2.0 * s * r[1:], x[k + 4 :] - x_bar[k + 4 :]])


def state_retract(x_bar: FloatInput[" N"], e: FloatInput[" M"], versor_index: int | None = None) -> Float[Array, " N"]:
    """The state ``x = ψ(x̄, e)`` ``(N,)`` with error ``e`` from ``x̄`` (the inverse of
    :func:`state_error`): ``x̄ + e``, or with a versor at ``k = versor_index`` (``e``
    ``(N − 1,)``), ``q = q̄̂ ⊗ (√(1 − |δφ|²/4), δφ/2)``, a unit versor (``|δφ|`` > 2 is
    clipped to the rotation by π)."""
    x_bar = jnp.asarray(x_bar)
    e = jnp.asarray(e)
    if versor_index is None:
        return x_bar + e
    k = int(versor_index)
    half = 0.5 * e[k : k + 3]
    r = jnp.concatenate([jnp.sqrt(jnp.maximum(1.0 - jnp.sum(half**2), 0.0))[None], half])
    q = quat_multiply(_versor_of(x_bar, k), r)
    return jnp.concatenate([x_bar[:k] + e[:k], q, x_bar[k + 4 :] + e[k + 3 :]])


def error_linearisation(
    model: AbstractModel, control: AbstractControl, t, x_bar, versor_index: int | None = None
) -> tuple[Float[Array, "M M"], Float[Array, "M n"]]:
    """``(A_e, B_e) = (∂ė/∂e, ∂ė/∂δu)`` at ``e = 0``, ``δu = 0`` of the error dynamics

        ė = φ_x(x, x̄) f(t, x, ū + δu) + φ_x̄(x, x̄) f(t, x̄, ū),   x = ψ(x̄, e),

    with ``φ`` = :func:`state_error`, ``ψ`` = :func:`state_retract`, ``ū = control(t, x̄)``
    and the nominal moving by the model's own field (forward-mode autodiff; ``M = N`` or
    ``N − 1``). With ``versor_index = None`` these are :func:`linearisation`'s ``(A, B)``; with
    the ball's versor the orientation rows read ``δφ̇ = δΩ − Ω̄ × δφ``."""
    k = None if versor_index is None else int(versor_index)  # static: a NumPy integer would be traced
    return _error_linearisation(model, control, jnp.asarray(t, dtype=jnp.float64), jnp.asarray(x_bar), k)


@eqx.filter_jit  # one compiled program per model structure, whatever t (an array here)
def _error_linearisation(model, control, t, x_bar, versor_index):
    u_bar = control(t, x_bar)

    def f(x_, u_):
        return model.vector_field(t, x_, ConstantControl(u_))

    x_bar_dot = f(x_bar, u_bar)

    def e_dot(e, u):
        x = state_retract(x_bar, e, versor_index)
        return jax.jvp(lambda a, b: state_error(a, b, versor_index), (x, x_bar), (f(x, u), x_bar_dot))[1]

    e0 = state_error(x_bar, x_bar, versor_index)
    return jax.jacfwd(e_dot, argnums=(0, 1))(e0, u_bar)


class TVLQRControl(AbstractControl):
    """Closed-loop control ``u(t, x) = ū(t) − K(t) φ(x, x̄(t))`` ``(n,)``.

    Attributes: ``nominal`` (the open-loop control ū), ``knots`` ``(G,)`` [time],
    ``x_nominal`` ``(G, N)`` and ``gains`` ``(G, n, M)`` with their spline second
    derivatives, ``u_max`` (``None``, or a bound: every component of u clipped to
    [−u_max, u_max], an actuator's acceleration limit), ``versor_index`` (static; ``None``:
    ``φ(x, x̄) = x − x̄``, ``M = N``; an index: the geometric error of
    :func:`state_error`, ``M = N − 1``), ``wrap`` (static; indices of 2π-periodic angles
    whose error is wrapped, :func:`state_error`). Build it with :func:`tvlqr`.
    Beyond the knots x̄ and K are held constant.
    Kink times: those of ``nominal``.
    """

    closed_loop = True
    nominal: AbstractControl
    knots: Float[Array, " G"]
    x_nominal: Float[Array, "G N"]
    x_second: Float[Array, "G N"]
    gains: Float[Array, "G n M"]
    gains_second: Float[Array, "G n M"]
    u_max: Float[Array, ""] | None = None
    versor_index: int | None = eqx.field(static=True, default=None)
    wrap: tuple[int, ...] = eqx.field(static=True, default=())

    def __check_init__(self):
        # shapes only (static, also for traced leaves): a gain of the wrong shape surfaced
        # in the solve as JAX's "dot_general requires contracting dimensions ..."
        if np.ndim(self.knots) != 1 or np.ndim(self.x_nominal) != 2:
            raise ModelError(f"TVLQRControl: 'knots' (G,) and 'x_nominal' (G, N) expected; got shapes "
                             f"{np.shape(self.knots)}, {np.shape(self.x_nominal)}; build it with rollball_jax.design.tvlqr")
        G, (g_x, N) = np.shape(self.knots)[0], np.shape(self.x_nominal)
        M = N if self.versor_index is None else N - 1
        n = np.shape(self.gains)[1] if np.ndim(self.gains) == 3 else -1
        for name, shape, want in (("knots", np.shape(self.knots), (G,)), ("x_second", np.shape(self.x_second), (G, N)),
                                  ("x_nominal", (g_x, N), (G, N)), ("gains", np.shape(self.gains), (G, n, M)),
                                  ("gains_second", np.shape(self.gains_second), (G, n, M))):
            if shape != want or G < 2:
                raise ModelError(
                    f"TVLQRControl: '{name}' has shape {shape}; with knots (G,) = ({G},) and x_nominal (G, N) = "
                    f"{(g_x, N)} it must be {want} (gains (G, n, M): M = N" + ("" if M == N else " − 1 with a versor_index")
                    + ", G >= 2); build it with rollball_jax.design.tvlqr")

    def __call__(self, t, x=None):
        if x is None:
            raise ModelError("TVLQRControl is a closed-loop control: call it as control(t, x)")
        knots = jax.lax.stop_gradient(self.knots)
        x_bar = _spline_eval(knots, self.x_nominal, self.x_second, t)
        K = _spline_eval(knots, self.gains, self.gains_second, t)
        u = self.nominal(t) - K @ state_error(x, x_bar, self.versor_index, self.wrap)
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
    return _linearisation(model, control, jnp.asarray(t, dtype=jnp.float64), jnp.asarray(x))


@eqx.filter_jit  # one compiled program per model structure, whatever t (an array here)
def _linearisation(model, control, t, x):
    u = control(t, x)

    def f(x_, u_):
        return model.vector_field(t, x_, ConstantControl(u_))

    return jax.jacfwd(f, argnums=(0, 1))(x, u)


@eqx.filter_jit
def _tvlqr_gains(model, control, knots, xs, x_second, Q, R, Qf, k):
    """``(gains (G, n, M), ok)`` of :func:`tvlqr` along the nominal spline
    ``(knots, xs, x_second)``: the linearisation, the Riccati solve (:func:`riccati`'s core,
    at its default tolerances) and ``K = R⁻¹ Bᵀ P`` in one program, compiled once per
    model/control structure, grid size, error kind and weight shape (closures built per
    call made the Riccati solve and the gains compile anew at every call). ``k``: the
    versor index of the geometric error, or ``None`` for the full error."""
    M = model.state_size if k is None else model.state_size - 1

    def x_bar_at(t):
        return _spline_eval(knots, xs, x_second, t)

    def pulled_back(W, x_bar):
        """ψ_eᵀ W ψ_e at e = 0 for an (N, N) weight; an (M, M) weight as given."""
        if W.shape == (M, M):
            return W
        F = jax.jacfwd(lambda e: state_retract(x_bar, e, k))(jnp.zeros(M))  # (N, M)
        return F.T @ W @ F

    def lin(t, x_bar):
        if k is None:
            return linearisation(model, control, t, x_bar)
        return error_linearisation(model, control, t, x_bar, k)

    Q_e = (lambda t: Q) if k is None else (lambda t: pulled_back(Q, x_bar_at(t)))
    Qf_e = Qf if k is None else pulled_back(Qf, xs[-1])
    P, ok = _riccati_solve(lambda t: lin(t, x_bar_at(t)), Q_e, R, Qf_e, knots, RICCATI_TOL, RICCATI_TOL,
                           RICCATI_MAX_STEPS)
    Bs = jax.vmap(lambda t, x: lin(t, x)[1])(knots, xs)  # (G, M, n)
    gains = jnp.linalg.solve(R, jnp.einsum("gNn,gNM->gnM", Bs, P))  # K = R⁻¹ Bᵀ P
    return gains, ok


def _check_weights(Q, R, Qf) -> None:
    """LQR weights: ``R`` symmetric positive definite, ``Q`` and ``Qf`` symmetric positive
    semi-definite (when concrete); ``ModelError`` naming the matrix otherwise (the Riccati
    solve failed with a generic message before)."""
    for name, W, strict in (("Q", Q, False), ("R", R, True), ("Qf", Qf, False)):
        w = concrete(W)
        if w is None:
            continue
        w = np.asarray(w, dtype=np.float64)
        if not np.all(np.isfinite(w)) or not np.allclose(w, w.T, rtol=1e-12, atol=1e-12 * np.max(np.abs(w), initial=0.0)):
            raise ModelError(f"'{name}' must be a finite symmetric matrix")
        low = float(np.min(np.linalg.eigvalsh(w))) if w.size else 0.0
        scale = float(np.max(np.abs(w), initial=0.0))
        if (strict and not low > 1e-12 * scale) or (not strict and low < -1e-12 * scale) or (strict and scale == 0.0):
            kind = "positive definite" if strict else "positive semi-definite"
            raise ModelError(f"'{name}' must be {kind}; its smallest eigenvalue is {low:.6g}")


def tvlqr(
    model: AbstractModel,
    control: AbstractControl,
    x0: FloatInput[" N"] | None,
    t_span: TimeSpan,
    Q: FloatInput["M M"] | None = None,
    R: FloatInput["n n"] | None = None,
    Qf: FloatInput["M M"] | None = None,
    *,
    n_grid: int = 401,
    rtol: RealScalar = 1e-10,
    atol: RealScalar = 1e-10,
    nominal: tuple[ArrayInput, ArrayInput] | None = None,
    u_max: float | None = None,
    error: str = "full",
) -> TVLQRControl:
    """TVLQR feedback around the open-loop motion of ``model`` under ``control`` from ``x0``.

    The nominal ``x̄`` is ``rb.simulate`` on ``n_grid`` equally spaced times of ``t_span``,
    or, when given, ``nominal = (ts (G,), xs (G, N))`` (increasing times spanning
    ``t_span``): e.g. a multiple-shooting design's segments
    (:meth:`~.shooting.MultipleShooting.nominal`), which an unstable motion cannot be
    re-simulated in one piece to reproduce. ``A(t), B(t)`` are the exact Jacobians along
    it; ``P`` from :func:`riccati`. Defaults: ``Q = I`` ``(N, N)``, ``R = I`` ``(n, n)``,
    ``Qf = Q``. ``u_max``: saturate the closed-loop control (see :class:`TVLQRControl`;
    the gains are those of the unsaturated problem). ``error``: ``"full"`` (default) feeds
    back ``x − x̄`` ``(N,)``; ``"geometric"`` feeds back the error of :func:`state_error`
    (``(N − 1,)``: the versor's four components replaced by the body-frame rotation error
    δφ), the LQR solved for the error dynamics of :func:`error_linearisation`, ``Q``/``Qf``
    given ``(N, N)`` (pulled back along the nominal, ``ψ_eᵀ Q ψ_e``: a unit weight ``w`` on
    each of q0…q3 becomes ``w/4`` on each component of δφ, a zero weight a zero one) or
    directly ``(N − 1, N − 1)``, and the errors of the rail angles of closed rails
    (:func:`periodic_angles`) wrapped into [−π, π) (the same gains: the wrap is the identity
    near the nominal); for a model without a versor only the wrap differs from
    ``"full"``. Returns a :class:`TVLQRControl`. ``x0`` may be ``None`` when ``nominal`` is
    given (it is not used then). Raises ``ModelError`` for weights of the wrong shape or
    not symmetric (``R`` positive definite, ``Q``, ``Qf`` positive semi-definite), ``n_grid``
    below 3, a non-positive ``u_max``, a ``nominal`` of the wrong shape or not finite, an
    unknown ``error``, or an open-loop ``control`` that is itself closed-loop.
    """
    from ..solve import simulate

    if control.closed_loop:
        raise ModelError("tvlqr needs an open-loop nominal control")
    N, n = model.state_size, model.n
    if n == 0:
        raise ModelError("tvlqr needs a model with moving masses (the inputs are their rail accelerations)")
    if error not in ("full", "geometric"):
        raise ModelError(f"error must be 'full' or 'geometric'; got {error!r}")
    k = model.versor_index if error == "geometric" else None
    M = N if k is None else N - 1
    Q = jnp.eye(N) if Q is None else jnp.asarray(Q, dtype=jnp.float64)
    R = jnp.eye(n) if R is None else jnp.asarray(R, dtype=jnp.float64)
    Qf = Q if Qf is None else jnp.asarray(Qf, dtype=jnp.float64)
    for name, W in (("Q", Q), ("Qf", Qf)):
        if W.shape not in ((N, N), (M, M)):
            raise ModelError(f"'{name}' must have shape {(N, N)}" + ("" if M == N else f" or {(M, M)}") + f"; got {W.shape}")
    if R.shape != (n, n):
        raise ModelError(f"'R' must have shape {(n, n)}; got {R.shape}")
    _check_weights(Q, R, Qf)
    checks.integer(n_grid, "n_grid", minimum=3)  # knots of the gains' spline (n_grid = 1 gave NaN gains)
    if nominal is None:
        if x0 is None:
            raise ModelError("tvlqr needs 'x0' (the nominal motion is simulated from it) or 'nominal'")
        sol = simulate(model, control, x0, t_span, n_save=n_grid, rtol=rtol, atol=atol)
        knots, xs = np.asarray(sol.ts), jnp.asarray(sol.xs)
    else:
        knots = np.asarray(nominal[0], dtype=np.float64)
        xs = jnp.asarray(nominal[1], dtype=jnp.float64)
        if knots.ndim != 1 or knots.size < 3 or xs.shape != (knots.size, N):
            raise ModelError(f"nominal must be (ts (G,), xs (G, {N})) with G >= 3; got {knots.shape}, {xs.shape}")
        if np.any(np.diff(knots) <= 0) or abs(knots[0] - t_span[0]) > 1e-12 or abs(knots[-1] - t_span[1]) > 1e-12:
            raise ModelError("nominal times must increase strictly from t_span[0] to t_span[1]")
        xs_c = concrete(xs)
        if xs_c is not None and not np.all(np.isfinite(xs_c)):
            g = int(np.argmax(~np.all(np.isfinite(xs_c), axis=1)))
            raise ModelError(f"nominal states must be finite; the one at t = {knots[g]:.6g} (index {g}) is not")
        if x0 is not None and np.shape(x0) != (N,):
            raise ModelError(f"'x0' must have shape {(N,)} (it is not used when 'nominal' is given: pass None); "
                             f"got {np.shape(x0)}")
    x_second = _spline_second_derivatives(knots, xs)
    kj = jnp.asarray(knots)
    gains, ok = _tvlqr_gains(model, control, kj, xs, x_second, Q, R, Qf, k)
    _raise_unless(ok)
    if u_max is not None:
        u_max = float(u_max)
        if not u_max > 0 or not np.isfinite(u_max):
            raise ModelError(f"u_max must be positive and finite (or None); got {u_max}")
        u_max = jnp.asarray(u_max)
    return TVLQRControl(
        nominal=control, knots=kj, x_nominal=xs, x_second=x_second,
        gains=gains, gains_second=_spline_second_derivatives(knots, gains), u_max=u_max, versor_index=k,
        wrap=periodic_angles(model) if error == "geometric" else (),
    )
