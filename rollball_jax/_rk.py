"""Lean explicit Runge–Kutta engine: adaptive forward pass that records its steps.

Used by the discrete adjoint (:mod:`rollball_jax._discrete_adjoint`). The step-size
logic reproduces diffrax's ``PIDController`` (integral control, ``icoeff = 1``,
``safety = 0.9``, ``factormin = 0.2``, ``factormax = 10``, RMS norm of
``error / (atol + rtol·max(|y0|, |y1|))``, first step 0.01 as diffrax 0.7 takes) wrapped in
``ClipStepSizeController(jump_ts=...)`` (steps end just before a jump time and restart
just after it) and diffrax's end-of-interval clipping, so that it takes the same
accepted steps as ``diffrax.diffeqsolve`` with those settings (measured on the paper
ball: the same first steps, then the sequences drift apart — diffrax 49 accepted, this
engine 49, final states 1e-10 apart; the exact step-for-step match is not yet achieved).
The stages of both the recording step and the replayed step (:func:`rk_step_rolled`) run
in a loop around one copy of the vector field: measured on the paper ball (2 cores), the
recording pass with its probe tangent compiles in 1.9 s instead of 6.1 s with unrolled
stages, and the whole reverse-mode gradient became faster too (18.7 vs 20.4 ms), although
the recording pass alone runs ~1.3x slower (``adaptive_solve(..., rolled=False)`` keeps
the unrolled stages). Stage sums are multiply-and-reduce (:func:`_weighted_sum`), which
XLA fuses, rather than ``dot`` calls.

What is recorded for a replay (per accepted step ``n``): the step's start and end
times, the save time it ends on (if any), and the state at every ``chunk``-th accepted
step. Memory: ``3·K`` numbers for ``K`` steps plus ``(K/chunk + 1)·N`` for the states.
"""

from __future__ import annotations

from collections.abc import Callable

import diffrax as dfx
import equinox as eqx
import equinox.internal as eqxi
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ._rejection_limit import MAX_CONSECUTIVE_REJECTIONS
from .errors import ModelError

SAFETY = 0.9
FACTOR_MIN = 0.2
FACTOR_MAX = 10.0
DIFFRAX_FIRST_STEP = 0.01
PROBE_EPS = 1e-5
#: The probe tangent's local error is held to ``TANGENT_TOLERANCE_FACTOR`` times the state's
#: tolerances. The probe is there so that the steps are never blind to the linearised
#: dynamics (a state at rest has zero error estimate); holding the tangent as tightly as the
#: state (factor 1, as CVODES does with ``errconS`` on; its default is off) tightens the
#: steps beyond that. Measured, Dopri8, paper ball over [0, 20] (|∂GC/∂x0| error against tol
#: 1e-13; accepted steps), and the hanging disk's ∂φ(20)/∂φ̇(0) against sin(ωT)/ω:
#:
#: ========  ===========================  ==============================  ====================
#: factor    ball, tol 1e-10              ball, tol 1e-6 / 1e-8            disk, tol 1e-10 / 1e-6
#: ========  ===========================  ==============================  ====================
#: 1         69 steps, 3.4e-11             3.2e-7 / 2.9e-9                   3.1e-11 / 3.2e-6
#: 10        55 steps, 2.4e-10             1.3e-6 / 2.6e-8                   1.9e-10 / 6.4e-5
#: 100       49 steps, 4.4e-10             5.7e-6 / 3.5e-8                   1.6e-9 / 6.4e-4
#: no probe  50 steps, 5.2e-10             5.7e-6 / 4.7e-8                   O(1) wrong
#: ========  ===========================  ==============================  ====================
#:
#: With 10 the derivative is more accurate than the plain solve's own steps give, the
#: equilibrium is resolved, and a derivative costs ~20 % less than with 1 (over [0, 100]:
#: 291 steps instead of 382). (The no-probe row measured 2026-12-05, the others earlier.)
#: The tangent bound (``adaptive_solve(..., probe="bound")``) holds its bound to the same
#: factor: 50 steps, 5.2e-10; 5.7e-6 / 4.7e-8; disk 1.0e-10 / 1.3e-5 (its ρ from two
#: power-iteration steps, since 2026-12-07's evening; with one step's ρ at the step's two
#: ends, before: 51 steps, 6.0e-10; 7.0e-6 / 4.3e-8; disk 5.7e-11 / 3.5e-6, and with
#: factor 1: 54 steps, 4.4e-10; 3.0e-6 / 3.2e-8; disk 5.4e-12 / 1.4e-7).
TANGENT_TOLERANCE_FACTOR = 10.0


class Tableau(eqx.Module):
    """Butcher tableau of an explicit Runge–Kutta solver from diffrax (static data)."""

    a: tuple = eqx.field(static=True)
    c: tuple = eqx.field(static=True)
    b_sol: tuple = eqx.field(static=True)
    b_err: tuple = eqx.field(static=True)
    fsal: bool = eqx.field(static=True)
    ssal: bool = eqx.field(static=True)
    error_order: float = eqx.field(static=True)
    name: str = eqx.field(static=True)
    # diffrax's dense-output constructor of the solver: a class (Dopri8, Tsit5) or a
    # classmethod such as ThirdOrderHermitePolynomialInterpolation.from_k (Heun, Bosh3)
    interpolation: Callable = eqx.field(static=True)

    @classmethod
    def from_solver(cls, solver: dfx.AbstractSolver, purpose: str | None = None) -> "Tableau":
        """The tableau of ``solver``; raises ``ModelError`` for a solver without an explicit
        Butcher tableau and an embedded error estimate (``purpose`` names what needs it)."""
        tab = getattr(type(solver), "tableau", None)
        if tab is None or not hasattr(tab, "a_lower") or getattr(tab, "a_diagonal", None) is not None:
            if purpose is None:
                raise ModelError(
                    f"the discrete adjoint needs an explicit Runge–Kutta solver with an embedded error "
                    f"estimate (Dopri8, Dopri5, Tsit5, Bosh3, ...); got {type(solver).__name__}. "
                    f"For an implicit solver use adjoint='backsolve' (continuous adjoint)."
                )
            raise ModelError(
                f"{purpose} need an explicit Runge–Kutta solver with a Butcher tableau "
                f"(Dopri8, Dopri5, Tsit5, Bosh3, ...); got {type(solver).__name__}"
            )
        return cls(
            a=tuple(tuple(float(v) for v in np.asarray(r)) for r in tab.a_lower),
            c=tuple(float(v) for v in np.asarray(tab.c)),
            b_sol=tuple(float(v) for v in np.asarray(tab.b_sol)),
            b_err=tuple(float(v) for v in np.asarray(tab.b_error)),
            fsal=bool(tab.fsal),
            ssal=bool(tab.ssal),
            error_order=float(solver.error_order(dfx.ODETerm(lambda t, y, args: y))),
            name=type(solver).__name__,
            interpolation=type(solver).interpolation_cls,
        )


def rk_step_rolled(tab: Tableau, f, t0, t1, y0):
    """One explicit RK step without error estimate, stages in a ``fori_loop``.

    The same map as the recording pass's step (up to rounding in the stage sums). One
    copy of the vector field in the program: its derivatives compile fast and, in
    reverse mode, cost less than unrolled stages. Only the stages the solution needs are
    evaluated (:func:`solution_stages`): a FSAL solver's last stage, ``f(t1, y1)``, feeds
    only the error estimate and the next step, so Dopri8 replays 13 of its 14 stages and
    Tsit5/Dopri5 6 of 7. The first stage runs in the loop too (``A[0] = 0``, ``C[0] = 0``),
    so the program holds one copy of the vector field, not two: measured on the paper
    ball, the reverse-mode gradient's XLA compile 4.0 → 3.3 s, the forward-mode
    Jacobian's 2.9 → 2.4 s, run times and results unchanged.
    """
    S = solution_stages(tab)
    K = rk_stages(tab, f, t0, t1, y0, S)
    return y0 + _weighted_sum(jnp.asarray(tab.b_sol[:S]), K)


def rk_stages(tab: Tableau, f, t0, t1, y0, n_stages: int | None = None):
    """The first ``n_stages`` (default all) stage increments ``k_i = h·f(t_i, Y_i)`` of one
    explicit RK step, ``(n_stages, N)``, in a ``fori_loop`` from stage 0 (``A[0] = 0``,
    ``C[0] = 0``: one copy of ``f`` in the program). All stages are what diffrax's dense
    output (``tab.interpolation``) takes as ``k``."""
    S = stage_matrices(tab)[0] if n_stages is None else int(n_stages)
    # A scatter update here: this loop is the replay's, which forward mode differentiates
    # with every direction batched; measured (``bench_derivatives.py``, paper ball, 75
    # directions) the forward-mode Jacobian takes 41 ms with it and 46 ms with an in-place
    # ``dynamic_update_slice``, the reverse gradient the same either way.
    return stage_loop(tab, f, t0, t1, y0, jnp.zeros((S,) + y0.shape, y0.dtype), scatter=True)


def stage_loop(tab: Tableau, f, t0, t1, y0, K, start=0, h=None, combine=None, scatter: bool = False,
               A=None, C=None, shift=None, inputs=None):
    """The stage loop of every explicit RK step in the package (the discrete adjoint's
    recording pass and replay, the batch group loops): for ``i = start, …, S − 1`` (``S =
    K.shape[0]``) ``K[i] = h·f(t_i, y0 + Σ_j A[i, j]·K[j])``, ``t_i = t0 + C[i]·h`` (``t1``
    where ``C[i] = 1``), in a ``fori_loop`` around one copy of ``f``. ``K`` ``(S, ...)``
    holds the stages before ``start`` (e.g. ``K[0] = h·f(t0, y0)`` from FSAL with
    ``start = 1``); a Python ``start`` gives a loop of static length (a ``scan``, which
    reverse mode can transpose), a traced one a ``while`` loop. ``h`` defaults to
    ``t1 − t0`` (the batch passes its per-member nonzero steps); ``combine(w, K)`` forms
    ``Σ_j w[j]·K[j]`` (default :func:`_weighted_sum`). ``K[i]`` is written in place
    (``dynamic_update_slice``) unless ``scatter``: measured, the recording pass's ``while``
    loop is much faster in place (reverse gradient of the paper ball 8.1 vs 11.1 ms with a
    scatter in both loops), the replay's static loop under forward mode with a scatter (see
    :func:`rk_stages`). ``A`` ``(S, S)`` and ``C`` ``(S,)`` replace the tableau's (the
    recording pass appends a stage); ``shift`` ``(S, ...)`` is added to the stage inputs.
    ``inputs`` ``(S', ...)`` (``S' ≤ S``): also write each stage input
    ``y0 + Σ_j A[i, j]·K[j]`` (before ``shift``) of the stages ``i < S'`` into it (in place)
    and return ``(K, inputs)``; its rows before ``start`` are left as given."""
    S = K.shape[0]
    if (A is None) != (C is None):
        raise ValueError("stage_loop: give both A and C, or neither")
    if A is None:
        _, A, C = stage_matrices(tab)
        A, C = A[:S, :S], C[:S]
    A, C = jnp.asarray(A), jnp.asarray(C)
    h = t1 - t0 if h is None else h
    combine = _weighted_sum if combine is None else combine

    def stage_value(i, K):
        """``(y_i, k_i)``: the stage input (without ``shift``) and ``h·f`` there."""
        yi = y0 + combine(A[i], K)
        ti = jnp.where(C[i] == 1.0, t1, t0 + C[i] * h)
        return yi, h * f(ti, yi if shift is None else yi + shift[i])

    def write(K, i, k):
        return K.at[i].set(k) if scatter else lax.dynamic_update_index_in_dim(K, k, i, 0)

    if inputs is None:
        return lax.fori_loop(start, S, lambda i, K: write(K, i, stage_value(i, K)[1]), K)
    last = inputs.shape[0] - 1

    def stage_and_input(i, carry):
        K, Y = carry
        yi, k = stage_value(i, K)
        j = jnp.minimum(i, last)  # rows past the last input: unchanged
        return write(K, i, k), lax.dynamic_update_index_in_dim(Y, jnp.where(i <= last, yi, Y[j]), j, 0)

    return lax.fori_loop(start, S, stage_and_input, (K, inputs))


def interpolate_saves(tab: Tableau, t_start, t_end, y_start, y_end, K, save_ts):
    """States at every time of ``save_ts`` ``(T,)`` by the dense output of one step
    ``[t_start, t_end]`` from ``y_start`` to ``y_end`` with all stage increments ``K``
    ``(S, N)`` (diffrax's ``tab.interpolation``; for Dopri8 a 7th-order polynomial
    through the 14 stages), ``(T, N)``; at ``t_end`` exactly, ``y_end``. Only the rows of
    save times inside the step mean anything; the caller selects them."""
    interp = tab.interpolation(t0=t_start, t1=t_end, y0=y_start, y1=y_end, k=K)
    vals = jax.vmap(interp.evaluate)(save_ts)
    return jnp.where((save_ts == t_end)[:, None], y_end[None, :], vals)


def solution_stages(tab: Tableau) -> int:
    """Number of leading stages the solution ``y1 = y0 + Σ b_i k_i`` depends on: one past
    the last stage that has a nonzero weight ``b_i`` or feeds (through ``A``) a stage that
    has one. The stages after it only serve the error estimate (and FSAL)."""
    S, A, _ = stage_matrices(tab)
    needed = [b != 0.0 for b in tab.b_sol]
    for i in reversed(range(S)):
        if needed[i]:
            for j in range(i):
                needed[j] = needed[j] or A[i, j] != 0.0
    return max(i for i in range(S) if needed[i]) + 1


def stage_matrices(tab: Tableau):
    """``(S, A (S, S), C (S,))``: the number of stages, the full strictly lower
    Butcher matrix and the stage abscissae (``C[0] = 0``), as NumPy arrays."""
    S = len(tab.a) + 1
    A = np.zeros((S, S))
    for i, a in enumerate(tab.a):
        A[i + 1, : len(a)] = a
    return S, A, np.concatenate([[0.0], np.asarray(tab.c)])


def error_polynomial(tab: Tableau) -> tuple[float, ...]:
    """``(e_1, …, e_S)``: the embedded error estimate of one step of the linear equation
    ``v̇ = λv`` is ``Σ_q e_q (hλ)^q v`` with ``e_q = b_errᵀ A^{q−1} 1`` (``A`` is strictly lower
    triangular, so this is a polynomial). Coefficients the order conditions make zero (below
    1e-14 in magnitude: rounding) are 0. Dopri8: the first nonzero is ``e_8`` = −2.4e-7."""
    S, A, _ = stage_matrices(tab)
    b_err, w, coef = np.asarray(tab.b_err), np.ones(S), []
    for _ in range(S):
        c = float(b_err @ w)
        coef.append(c if abs(c) > 1e-14 else 0.0)
        w = A @ w
    return tuple(coef)


def _weighted_sum(w, K):
    """``Σ_i w[i]·K[i]`` for stage values ``K`` ``(S, ...)``, as a multiply-and-reduce (XLA fuses
    it; a ``dot`` of these tiny shapes is a separate library call on the CPU)."""
    return jnp.sum(w.reshape((-1,) + (1,) * (K.ndim - 1)) * K, axis=0)


def _rms(v):
    return jnp.sqrt(jnp.mean(v * v))


def hairer_initial_step(rhs, t0, y0, f0, rtol, atol, error_order: float, norm=None):
    """Hairer's starting step (Hairer, Nørsett & Wanner, *Solving ODEs I*, II.4), as
    diffrax's ``PIDController`` chooses it: ``h0 = 0.01·d0/d1`` (``1e-6`` if either norm is
    tiny), one explicit Euler probe for the second derivative ``d2``, then
    ``min(100·h0, (0.01/max(d1, d2))^(1/error_order))``. ``norm`` maps a scaled array to
    its norm (default RMS over all entries); the batch loops pass a per-member RMS
    (``(N, G) → (G,)``) or the max of it over a group (shared steps)."""
    norm = _rms if norm is None else norm
    scale = atol + rtol * jnp.abs(y0)
    d0, d1 = norm(y0 / scale), norm(f0 / scale)
    small = (d0 < 1e-5) | (d1 < 1e-5)
    h0 = jnp.where(small, 1e-6, 0.01 * d0 / jnp.where(small, 1.0, d1))
    f1 = rhs(t0 + h0, y0 + h0 * f0)
    d2 = norm((f1 - f0) / scale) / h0
    dmax = jnp.maximum(d1, d2)
    tiny = dmax <= 1e-15
    h1 = jnp.where(tiny, jnp.maximum(1e-6, h0 * 1e-3), (0.01 / jnp.where(tiny, 1.0, dmax)) ** (1.0 / error_order))
    return jnp.minimum(100 * h0, h1)


def _next_index(t, ts):
    """Index of the first element of sorted ``ts`` strictly greater than ``t`` (len(ts) if none)."""
    return jnp.searchsorted(ts, t, side="right")


def _get(ts, i):
    return jnp.where(i >= ts.shape[0], jnp.inf, ts[jnp.minimum(i, ts.shape[0] - 1)]) if ts.shape[0] else jnp.inf


def next_interval(next_t0, next_t1, jump_ts, stop_ts):
    """diffrax's ``ClipStepSizeController`` clipping: hop over jump times, stop before
    the next jump time (``prevbefore``) and at the next stop time. Returns
    ``(t0, t1, made_jump)``."""
    made_jump = jnp.asarray(False)
    if jump_ts.shape[0]:
        nxt = eqxi.nextafter(next_t0)
        jump1 = jnp.any(nxt == jump_ts)
        jump2 = jnp.any(next_t0 == jump_ts)
        t0 = jnp.where(jump1, eqxi.nextafter(nxt), next_t0)
        t0 = jnp.where(jump2, nxt, t0)
        made_jump = jump1 | jump2
        next_t1 = jnp.maximum(eqxi.nextafter(t0), next_t1)
        next_t0 = t0
    if stop_ts.shape[0]:
        next_t1 = jnp.minimum(_get(stop_ts, _next_index(next_t0, stop_ts)), next_t1)
    if jump_ts.shape[0]:
        next_t1 = jnp.minimum(eqxi.prevbefore(_get(jump_ts, _next_index(next_t0, jump_ts))), next_t1)
    return next_t0, next_t1, made_jump


class Record(eqx.Module):
    """Accepted steps of a forward pass, for the replay (see module docstring)."""

    t_start: jax.Array  # (K,) start time of accepted step n
    t_end: jax.Array  # (K,) end time of accepted step n
    save_index: jax.Array  # (K,) int: index j of the save time the step ends on, or -1
    chunk_states: jax.Array  # (K/chunk + 1, N): state after every chunk-th accepted step (row 0: y0)
    num_accepted: jax.Array  # () int
    saves: jax.Array  # (T, N): states at the save times (step ends)
    save_chunk: jax.Array  # (T,) int: chunk in which save j was written (-1: at t0; -2: never)
    # dense output only (``adaptive_solve(..., dense=True)``; else -1): per save time j,
    # the accepted step that contains it (``saves[j]`` is then the dense output of that
    # step at the save time).
    save_step: jax.Array  # (T,) int
    # () bool: the solve failed (did not reach t1, or a save time was never written); the
    # derivatives of a failed solve are NaN (rollball_jax._discrete_adjoint)
    failed: jax.Array
    # (L, chunk, S, N) or None: the stage inputs of the accepted steps of the first L chunks
    # (``adaptive_solve(..., store_chunks=L)``; S = solution_stages), which the reverse sweep
    # reads instead of recomputing them; rows past the last accepted step hold no meaning
    # (zeros, or a previous chunk's rows: the chunk buffer is reused) and are never read
    stage_inputs: jax.Array | None = None


def adaptive_solve(
    tab: Tableau,
    f,
    t0,
    t1,
    y0,
    *,
    rtol,
    atol,
    jump_ts,
    max_steps: int,
    dt0=None,
    dtmax=None,
    save_ts=None,
    chunk: int = 16,
    probe_v0=None,
    rolled: bool = True,
    dense: bool = False,
    probe: str = "tangent",
    store_chunks: int = 0,
):
    """Adaptive solve over ``[t0, t1]`` that steps onto every save time and records its steps.

    ``f(t, y)``: vector field. ``save_ts`` ``(T,)`` (within [t0, t1]) are step stops: the
    states there are step ends, not interpolated. ``probe_v0`` ``(1, N)`` (optional): turns
    on step control that also sees the variational equation ``v̇ = J·v``, ``J = ∂f/∂y`` (so
    that a state at rest, whose own error estimate is zero, still gets steps that resolve
    its linearised motion), starting from this direction; ``probe`` chooses how:

    * ``"tangent"`` (this function's default; the discrete adjoint's is ``"bound"``): the probe tangent ``v`` is carried as a perturbed copy
      ``y + ε·v`` of the state through every stage and its local error is controlled too
      (as CVODES does for forward sensitivities with ``errconS`` on), with tolerances
      ``TANGENT_TOLERANCE_FACTOR`` times the state's. Costs a second state.
    * ``"bound"``: the **tangent bound**. Each step appends one stage to its stage loop,
      ``f(t_b, y_1 + ε·u)`` (two without FSAL), giving ``J·u`` by a finite difference: one
      power-iteration step, ``ρ = ‖J·u‖`` (RMS, ``‖u‖ = 1``) estimates the largest
      ``|eigenvalue|`` of ``J``, and ``u ← J·u/ρ`` on acceptance. A step of size ``h``
      passes only if, besides the state's error test, the error estimate the solver would
      make for a unit tangent of ``v̇ = J·v`` with ``J`` of spectral radius ``ρ``, bounded
      by ``Σ_q |e_q| (hρ)^q`` (``e_q``: :func:`error_polynomial`; Dopri8: ≈ 2.4e-7·(hρ)^8), is within
      ``TANGENT_TOLERANCE_FACTOR·(atol + rtol)``, ``ρ`` from two power-iteration steps:
      the geometric mean of the last accepted step's ``‖J·u‖`` and this step's, i.e.
      ``sqrt(‖J·J·u‖)`` (exact for a pair ``±iω`` however badly the state is scaled, where
      one step's ``‖J·u‖`` swings between ``ω²/s`` and ``s`` for a scale ratio ``s``; the
      first step: its own). One field evaluation a step instead of a second state. It
      assumes ``J`` locally constant (the state's own test covers its variation), so the
      derivative is about as accurate as the solve's own steps make it, not more; and it
      keeps ``hρ`` bounded for a fast *decaying* mode too, where a carried tangent has
      decayed and stopped restricting the steps (measured, ``ẏ = diag(−200, rotation)·y``
      over [0, 10], tol 1e-8: 2,431 accepted steps against 398).

    ``dense``: the save times are not step stops (only ``t1`` is); for each save time the
    record holds the accepted step that contains it (``save_step``) and, in ``saves``, the state there by that step's dense output
    (:func:`interpolate_saves`).

    ``store_chunks`` ``L`` (rolled stages, not ``dense``): the record also keeps the stage
    inputs of the accepted steps of the first ``L`` chunks (``record.stage_inputs``
    ``(L, chunk, S, N)``, ``S`` = :func:`solution_stages`: ``L·chunk·S·N`` numbers), for
    the reverse sweep. The step loop then runs chunk by chunk inside an outer loop that
    copies each chunk's stage inputs out: a ``while`` loop that touched the whole store
    would exceed XLA's small-loop byte threshold (:mod:`rollball_jax._xla_flags`) and stop
    being compiled as one kernel. The steps are the same.

    Returns ``(record, y_end, t_end, ok, stats)``; ``ok`` is False if ``max_steps``
    (accepted + rejected) ran out before ``t1``, or if ``MAX_CONSECUTIVE_REJECTIONS``
    steps in a row were rejected (``stats["rejected_in_a_row"]`` then reaches it; see
    :mod:`rollball_jax._rejection_limit`): the solve ends there instead of spending
    ``max_steps`` on a step size that collapses (a field that turned non-finite).
    """
    y0 = jnp.asarray(y0)
    N = y0.shape[0]
    K = int(max_steps)
    n_chunks = -(-K // chunk)
    jump_ts = jnp.zeros((0,)) if jump_ts is None else jnp.asarray(jump_ts, dtype=y0.dtype)
    save_ts = jnp.stack([t0, t1]) if save_ts is None else jnp.asarray(save_ts, dtype=y0.dtype)
    T = save_ts.shape[0]
    stop_ts = save_ts[-1:] if dense else save_ts
    if probe not in ("tangent", "bound"):
        raise ValueError(f"probe must be 'tangent' or 'bound', got {probe!r}")
    store = int(store_chunks) > 0
    if store and (dense or not rolled):
        raise ValueError("store_chunks needs rolled stages and no dense output")
    S_sol = solution_stages(tab)
    carry_tangent = probe_v0 is not None and probe == "tangent"
    use_bound = probe_v0 is not None and probe == "bound"
    F, z0 = f, y0
    if probe_v0 is not None:
        if probe_v0.shape[0] != 1:
            raise ValueError("one probe direction is supported")
        # Both kinds difference the field along a direction with step ε: small enough to
        # follow the linearisation, large enough that rounding in the difference (~1e-16/ε
        # relative) stays far below the tolerances. The carried tangent scales ε by the
        # largest component (its error test sees the copy's rounding). The bound scales it
        # by the median component: a few large coordinates that the field ignores or reads
        # through periodic functions (a GC position, a rolling angle after many turns) must
        # not widen the difference beyond the linear range (with the largest component,
        # the hanging disk after 10⁵ turns got ∂φ(100)/∂φ̇(0) 1.5e-3 wrong, and a ball at rest
        # at z = 10⁶ ∂Ω₁/∂Ω₁ 3.4e-4 wrong, silently); its ρ, a bound for step control,
        # tolerates their rounding in the difference (~ulp(y_i)/ε relative).
        scale = jnp.median(jnp.abs(y0)) if probe == "bound" else jnp.max(jnp.abs(y0))
        eps = PROBE_EPS * (1.0 + scale)

    if carry_tangent:
        # The probe rides along as a perturbed copy y + ε·v, both evaluated in one
        # vmapped call; its tangent is (copy − y)/ε.
        fv = jax.vmap(f, in_axes=(None, 0))

        def F(t, z):
            return fv(t, z)

        z0 = jnp.stack([y0, y0 + eps * jnp.asarray(probe_v0[0], dtype=y0.dtype) / jnp.sqrt(jnp.mean(probe_v0[0] ** 2))])

    if use_bound:
        # Tangent bound (see the docstring); J·u = (f(t, y + ε·u) − f(t, y))/ε.
        u0 = jnp.asarray(probe_v0[0], dtype=y0.dtype)
        u0 = u0 / _rms(u0)
        e_coef = [abs(c) for c in error_polynomial(tab)]
        tangent_tol = TANGENT_TOLERANCE_FACTOR * (atol + rtol)

        def tangent_error(hr):
            """Error estimate of a step ``h`` for a unit tangent of ``v̇ = J·v``, ``hr = h·ρ``,
            scaled by its tolerance: ``Σ_q |e_q| (hρ)^q / tangent_tol``."""
            bound = sum(c * hr ** (q + 1) for q, c in enumerate(e_coef) if c)
            return jnp.where(jnp.isnan(bound), jnp.inf, bound) / tangent_tol

    def add(a, b):
        return jax.tree.map(jnp.add, a, b)

    def scale(c, z):
        return jax.tree.map(lambda x: c * x, z)

    def _err_norm(z0_, z1_, e):
        def one(a, b, err):
            b = jnp.where(jnp.any(jnp.isnan(b)), a, b)
            err = jnp.where(jnp.isnan(err), jnp.inf, err)
            return _rms(err / (atol + rtol * jnp.maximum(jnp.abs(a), jnp.abs(b))))

        if carry_tangent:
            tangent = lambda z: (z[1] - z[0]) / eps
            return jnp.maximum(one(z0_[0], z1_[0], e[0]), one(tangent(z0_), tangent(z1_), tangent(e)) / TANGENT_TOLERANCE_FACTOR)
        return one(z0_, z1_, e)

    if rolled:
        S_, A_, C_ = stage_matrices(tab)
        B_sol, B_err = jnp.asarray(tab.b_sol), jnp.asarray(tab.b_err)
        if use_bound:
            # Appended stages: f(t_b, y_1 + ε·u) (and, without FSAL, f(t_b, y_1) first): the
            # tangent bound's product J·u in the step's own loop (one copy of f in the program).
            n_x = 1 if tab.fsal else 2
            A_x = np.zeros((S_ + n_x, S_ + n_x))
            A_x[:S_, :S_] = A_
            A_x[S_:, :S_] = np.asarray(tab.b_sol)
            C_x = np.concatenate([C_, np.ones(n_x)])
            end_row = S_ - 1 if tab.fsal else S_  # the stage that is f(t_b, y_1)

    def power_step(h, k_end, k_shifted, u):
        """``(ρ, u')`` from ``k_end = h·f(t_b, y_1)`` and ``k_shifted = h·f(t_b, y_1 + ε·u)``:
        ``J·u``, its RMS ``ρ`` (``‖u‖ = 1``) and the next direction ``J·u/ρ`` (``u``
        itself if ``J·u = 0``)."""
        ju = (k_shifted - k_end) / (h * eps)
        r = _rms(ju)
        return r, jnp.where(r > 0, ju / jnp.where(r > 0, r, 1.0), u)

    def step_rolled(ta, tb, z, fz, fresh, u=None):
        # Stages in a loop around one copy of the vector field: ~10x faster to compile
        # than the unrolled stages, ~1.2x slower to run (measured, paper ball). With
        # ``fresh`` (first step, after a jump, or a solver without FSAL) the loop starts
        # at stage 0 and evaluates f(ta, z) itself (A[0] = 0, C[0] = 0): no second copy
        # of the vector field in the program.
        h = tb - ta
        # stage inputs of the solution stages (row 0, the step's start, set here: the loop
        # does not evaluate stage 0 after an FSAL step)
        Y = jnp.zeros((S_sol,) + z.shape, z.dtype).at[0].set(z) if store else None
        if u is None:
            K = jnp.zeros((S_,) + z.shape, z.dtype).at[0].set(h * fz)
            out = stage_loop(tab, F, ta, tb, z, K, start=jnp.where(fresh, 0, 1), inputs=Y)
            K, Y = out if store else (out, None)
            rho_u = None
        else:
            K = jnp.zeros((S_ + n_x,) + z.shape, z.dtype).at[0].set(h * fz)
            shift = jnp.zeros_like(K).at[-1].set(eps * u)
            out = stage_loop(tab, F, ta, tb, z, K, start=jnp.where(fresh, 0, 1), A=A_x, C=C_x, shift=shift, inputs=Y)
            K, Y = out if store else (out, None)
            rho_u = power_step(h, K[end_row], K[-1], u)
            K = K[:S_]
        z1 = z + _weighted_sum(B_sol, K)
        err = _weighted_sum(B_err, K)
        return z1, err, K[-1] / h, K, rho_u, Y

    # Generic (pytree) RK step for the augmented state.
    def step_unrolled(ta, tb, z, fz, fresh, u=None):
        del fresh  # the caller re-evaluated fz
        h = tb - ta
        ks = [scale(h, fz)]
        fi = fz
        zi = z
        for ci, ai in zip(tab.c, tab.a):
            zi = z
            for c, k in zip(ai, ks):
                if c != 0.0:
                    zi = add(zi, scale(c, k))
            ti = tb if ci == 1.0 else ta + ci * h
            fi = F(ti, zi)
            ks.append(scale(h, fi))
        if tab.ssal:
            z1 = zi
        else:
            z1 = z
            for c, k in zip(tab.b_sol, ks):
                if c != 0.0:
                    z1 = add(z1, scale(c, k))
        err = None
        for c, k in zip(tab.b_err, ks):
            if c != 0.0:
                err = scale(c, k) if err is None else add(err, scale(c, k))
        K = jnp.stack(ks)
        rho_u = None
        if u is not None:
            f1 = fi if tab.fsal else F(tb, z1)
            h = tb - ta
            rho_u = power_step(h, h * f1, h * F(tb, z1 + eps * u), u)
        return z1, err, fi, K, rho_u, None

    step = step_rolled if rolled else step_unrolled
    # The rolled step evaluates the first stage itself when told (``fresh``); the unrolled
    # one is handed f(t, z).
    fz0 = jax.tree.map(jnp.zeros_like, z0) if rolled else F(t0, z0)
    if dt0 is None:
        # diffrax 0.7's PIDController starts with 0.01 here: `diffeqsolve` wraps the term
        # (direction), so its Hairer initial-step selection is skipped. Kept for equal steps.
        dt = jnp.asarray(DIFFRAX_FIRST_STEP, dtype=y0.dtype)
    else:
        dt = jnp.asarray(dt0, dtype=y0.dtype)
    if dtmax is not None:
        dt = jnp.minimum(dt, dtmax)
    # ClipStepSizeController.init: clip the first step before the first jump / stop.
    tnext = t0 + dt
    if jump_ts.shape[0]:
        tnext = jnp.minimum(eqxi.prevbefore(_get(jump_ts, _next_index(t0, jump_ts))), tnext)
    tnext = jnp.minimum(_get(stop_ts, _next_index(t0, stop_ts)), tnext)
    tnext = jnp.minimum(tnext, t1)

    t1_clip_floor = t1
    for _ in range(100):
        t1_clip_floor = eqxi.prevbefore(t1_clip_floor)

    dtype = y0.dtype
    rec0 = dict(
        t_start=jnp.zeros((K,), dtype),
        t_end=jnp.zeros((K,), dtype),
        save_index=jnp.full((K,), -1, jnp.int32),
        chunk_states=jnp.zeros((n_chunks + 1, N), dtype).at[0].set(y0),
        saves=jnp.where((save_ts == t0)[:, None], y0[None, :], 0.0),
        save_chunk=jnp.where(save_ts == t0, -1, -2).astype(jnp.int32),  # -1: x0, -2: not (yet) written
        save_step=jnp.full((T,), -1, jnp.int32),
    )
    # (dense: every save, t0's included, is then rewritten by the step that contains it)
    state0 = dict(
        tprev=jnp.asarray(t0, dtype), tnext=tnext, z=z0, fz=fz0, made_jump=jnp.asarray(rolled),
        n_steps=jnp.asarray(0, jnp.int32), n_acc=jnp.asarray(0, jnp.int32), run=jnp.asarray(0, jnp.int32), rec=rec0,
    )
    if use_bound:
        # ρ at the start of the next step (0 before the first: that step is judged by the
        # ρ at its end alone) and the power iteration's direction
        state0.update(rho=jnp.zeros((), dtype), u=u0)
    if store:  # this chunk's stage inputs, row = accepted step mod chunk
        state0.update(chunk_inputs=jnp.zeros((chunk, S_sol, N), dtype))

    def cond(s):
        return (s["tprev"] < t1) & (s["n_steps"] < K) & (s["run"] < MAX_CONSECUTIVE_REJECTIONS)

    def body(s):
        ta, tb, z = s["tprev"], s["tnext"], s["z"]
        if rolled:
            fz = s["fz"]
        else:
            fz = lax.cond(s["made_jump"], lambda: F(ta, z), lambda: s["fz"]) if jump_ts.shape[0] else s["fz"]
        z1, err, f_last, K_step, rho_u, Y_step = step(ta, tb, z, fz, s["made_jump"], s["u"] if use_bound else None)
        serr = _err_norm(z, z1, err)
        if use_bound:
            # the tangent bound with ρ from two power-iteration steps: the geometric mean of
            # the last accepted step's ρ and this step's, sqrt(‖J·J·u‖) (the first step:
            # this step's alone)
            rho = jnp.where(s["rho"] > 0, jnp.sqrt(s["rho"] * rho_u[0]), rho_u[0])
            serr = jnp.maximum(serr, tangent_error((tb - ta) * rho))
        keep = serr < 1.0
        inv = lax.stop_gradient(1.0 / serr)
        factor = jnp.clip(SAFETY * inv ** (1.0 / tab.error_order), jnp.where(keep, 1.0, FACTOR_MIN), jnp.where(keep, FACTOR_MAX, SAFETY))
        new_dt = (tb - ta) * factor
        if dtmax is not None:
            new_dt = jnp.minimum(new_dt, dtmax)
        next_t0 = jnp.where(keep, tb, ta)
        nt0, nt1, jumped = next_interval(next_t0, next_t0 + new_dt, jump_ts, stop_ts)
        nt0 = jnp.minimum(nt0, t1)
        clip = nt1 > t1_clip_floor
        nt1 = jnp.where(clip, jnp.where(keep, t1, nt0 + 0.5 * (t1 - nt0)), nt1)

        n = s["n_acc"]
        rec = s["rec"]
        y1 = z1[0] if carry_tangent else z1
        if tab.fsal:
            f_next = f_last
        elif rolled:
            f_next = f_last  # unused: the next step is fresh
            jumped = jnp.asarray(True)
        else:
            f_next = F(tb, z1)
        # Record. Slot n is (over)written on every attempt; the accepted one stays.
        j = _next_index(ta, stop_ts)  # the save time this step may end on
        s_j = _get(stop_ts, j)
        # A save time that is also a jump time is reached at prevbefore(s_j), and one in the
        # gap that the jump hops over (up to nextafter(jump), where the next step starts) is
        # no step's end either: both are saved at this step's end tb ≤ s_j ≤ nt0 (the state
        # moves by O(ulp·|f|) across the gap). Without a jump nt0 = tb, and s_j ≤ tb means s_j = tb.
        ends_on_save = keep & (j < T) & (s_j <= nt0)
        jc = jnp.minimum(j, T - 1)
        cb = (n + 1) // chunk
        at_boundary = keep & ((n + 1) % chunk == 0)
        upd = lax.dynamic_update_index_in_dim
        if dense:
            # Saves in (t_a, t_b] (or in the gap a jump hops over, up to nt0; t0's in the first
            # step) not yet written get this step's dense output.
            new = keep & (rec["save_step"] < 0) & (save_ts <= jnp.maximum(tb, nt0))
            y_a = z[0] if carry_tangent else z
            vals = interpolate_saves(tab, ta, tb, y_a, y1, K_step[:, 0] if carry_tangent else K_step, save_ts)
            saves_update = dict(
                save_index=rec["save_index"],  # unused (all -1): dense saves are keyed by save_step
                saves=jnp.where(new[:, None], vals, rec["saves"]),
                save_chunk=jnp.where(new, n // chunk, rec["save_chunk"]).astype(jnp.int32),
                save_step=jnp.where(new, n, rec["save_step"]).astype(jnp.int32),
            )
        else:
            saves_update = dict(
                save_index=upd(rec["save_index"], jnp.where(ends_on_save, j, -1).astype(jnp.int32), n, 0),
                saves=upd(rec["saves"], jnp.where(ends_on_save, y1, rec["saves"][jc]), jc, 0),
                save_chunk=upd(rec["save_chunk"], jnp.where(ends_on_save, n // chunk, rec["save_chunk"][jc]).astype(jnp.int32), jc, 0),
                save_step=rec["save_step"],
            )
        rec = dict(
            t_start=upd(rec["t_start"], ta, n, 0),
            t_end=upd(rec["t_end"], tb, n, 0),
            chunk_states=upd(rec["chunk_states"], jnp.where(at_boundary, y1, rec["chunk_states"][cb]), cb, 0),
            **saves_update,
        )
        return dict(
            tprev=nt0,
            tnext=nt1,
            z=jax.tree.map(lambda a, b: jnp.where(keep, a, b), z1, z),
            fz=jax.tree.map(lambda a, b: jnp.where(keep, a, b), f_next, fz),
            made_jump=jnp.where(keep, jumped, s["made_jump"]),
            n_steps=s["n_steps"] + 1,
            n_acc=n + keep.astype(jnp.int32),
            run=jnp.where(keep, 0, s["run"] + 1),  # rejected steps in a row
            rec=rec,
            **({"rho": jnp.where(keep, rho_u[0], s["rho"]), "u": jnp.where(keep, rho_u[1], s["u"])} if use_bound else {}),
            # slot n % chunk is (over)written on every attempt; the accepted one stays
            **({"chunk_inputs": upd(s["chunk_inputs"], Y_step[:, 0] if carry_tangent else Y_step, n % chunk, 0)}
               if store else {}),
        )

    if store:
        L = int(store_chunks)

        def chunk_body(o):
            s, c, inputs = o
            end = (c + 1) * chunk  # the steps of chunk c, then copy its stage inputs out
            s = lax.while_loop(lambda s: cond(s) & (s["n_acc"] < end), body, s)
            cl = jnp.minimum(c, L - 1)
            inputs = lax.dynamic_update_index_in_dim(inputs, jnp.where(c < L, s["chunk_inputs"], inputs[cl]), cl, 0)
            return s, c + 1, inputs

        s, _, stage_inputs = lax.while_loop(lambda o: cond(o[0]), chunk_body,
                                            (state0, jnp.asarray(0, jnp.int32), jnp.zeros((L, chunk, S_sol, N), dtype)))
    else:
        s = lax.while_loop(cond, body, state0)
        stage_inputs = None
    n_acc = s["n_acc"]
    y_end = s["z"][0] if carry_tangent else s["z"]
    rec = s["rec"]
    # The final (partial) chunk's end state.
    last = -(-n_acc // chunk)
    chunk_states = rec["chunk_states"].at[last].set(y_end)
    ok = s["tprev"] >= t1
    record = Record(
        t_start=rec["t_start"], t_end=rec["t_end"], save_index=rec["save_index"], chunk_states=chunk_states,
        num_accepted=n_acc, saves=rec["saves"], save_chunk=rec["save_chunk"], save_step=rec["save_step"],
        failed=~ok | jnp.any(rec["save_chunk"] == -2), stage_inputs=stage_inputs,
    )
    stats = dict(num_steps=s["n_steps"], num_accepted_steps=n_acc, num_rejected_steps=s["n_steps"] - n_acc,
                 rejected_in_a_row=s["run"])
    return record, y_end, s["tprev"], ok, stats
