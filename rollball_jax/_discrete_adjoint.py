"""Discrete adjoint: derivatives of exactly the steps the forward solve took.

A solve is done in two passes:

1. **Record.** An adaptive explicit Runge–Kutta solve (:mod:`rollball_jax._rk`, the same
   accepted steps as ``diffrax.diffeqsolve`` with a PID controller and jump times) under
   ``stop_gradient`` records every accepted step ``[t_n, t_{n+1}]`` and the state after
   every ``chunk``-th step. Its steps also resolve what the derivative sees (a state at
   rest, whose own error estimate is zero, still gets steps that resolve its linearised
   oscillations): by default (``tangent_control="bound"``) they are bounded by the error
   the solver would make on the linearised equation, from a power-iteration estimate of
   the Jacobian's spectral radius (one field evaluation a step;
   :func:`rollball_jax._rk.adaptive_solve`); with ``tangent_control="tangent"`` one
   probe tangent of the variational equation ``v̇ = ∂f/∂x·v`` is integrated alongside
   and its local error is controlled as well (to ``_rk.TANGENT_TOLERANCE_FACTOR`` = 10
   times the state's tolerances, as CVODES can include forward sensitivities in its
   error test; a second state, but the choice for models with fast damping, where the
   bound keeps resolving a mode that has decayed).
2. **Replay.** The recorded steps are replayed, chunk by chunk, as a *fixed* sequence of
   Runge–Kutta maps. Each chunk is a ``jax.custom_jvp`` function whose primal value is
   looked up from the record (no recomputation) and whose tangent is the JVP of the
   chunk's step maps, rematerialised (``jax.checkpoint``) so that reverse mode stores
   one state per chunk and recomputes the chunk in the backward pass.

Because no step is re-decided under differentiation, forward mode, reverse mode and any
nesting of them (``jax.hessian``, Hessian-vector products, ``jacrev∘jacrev``) give the
exact derivative of the recorded discrete map, at any horizon.

3. **Reverse mode**: the replay is a primitive
   (``jax.experimental.hijax.VJPHiPrimitive``, :class:`_Replay`) whose reverse rule is
   the hand-written sweep of :mod:`rollball_jax._reverse_sweep` (the transpose of the
   replay's tangent map, over the steps actually taken, each stage's field VJP in its own
   sequential XLA:CPU executor): the same derivative as JAX's transpose of the replay, to
   rounding, at ~70 % of its time and ~60 % of its compile (paper ball, 75 parameters:
   ``docs/derivatives.md``). Forward mode and every derivative of the sweep itself
   (second order) still go through the replay's chunk rule, so every nesting above keeps
   working (dense saves included). The sweep is a ``jax.custom_jvp`` function
   (:func:`_sweep`) and the reverse rule's forward half is the replay's own program, so
   the program of ``jax.jit(jax.grad(f))`` holds no hijax primitive and is dispatched by
   JAX's C++ cache (a program holding one is re-lowered in Python on every call).

Memory: about ``3·K`` numbers for a solve of ``K`` (accepted) steps, plus one state
``(N,)`` per chunk of 16 steps, plus the stage inputs of the first ``STORED_CHUNKS`` (4)
chunks, which the recording pass keeps for the reverse sweep (``4·16·S·N`` numbers:
100 kB for the paper ball's Dopri8, S = 13, N = 15; the sweep recomputes those of later
chunks, one chunk at a time: ``16·S·N`` numbers). The buffers are sized by
``max_steps`` (a static bound): a solve that needs more steps raises an error naming
``max_steps``.
"""

from __future__ import annotations

import functools

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import hijax as hx

from . import _checks as checks, _rk
from ._reverse_sweep import reverse_sweep
from ._executor import own_executor
from ._rejection_limit import MAX_CONSECUTIVE_REJECTIONS
from ._results import MESSAGES, checked, nan_where
from ._time_tangents import with_time_derivatives

CHUNK = 16  # steps per rematerialised chunk
#: Chunks at the start of a solve whose stage inputs the recording pass keeps for the
#: reverse sweep (which recomputes the others): ``STORED_CHUNKS·CHUNK·S·N`` numbers, 100 kB
#: for the paper ball (N = 15, S = 13), per solve (a ``jax.vmap`` of solves keeps one per
#: member). Not with ``dense=True`` (whose sweep needs every stage: recomputed). A program
#: without a reverse pass (the value alone, ``jax.jacfwd``) does not hold them: XLA removes
#: the unused store (checked in the compiled programs of the paper ball's final GC).
#: Measured (paper ball, reverse gradient of the final GC, 2 cores, fresh processes
#: alternating, fastest of 60 calls): [0, 20] (50 steps, all stored) 0.74-0.78 ms with
#: none stored, 0.65-0.70 ms with 4 chunks; [0, 200] (663 steps) 8.7-9.0, 8.3-8.8 with 4,
#: 8.2-8.3 with 16 (docs/derivatives.md, *Cost*).
STORED_CHUNKS = 4
GROUP = 16  # chunks per group (groups past the last step are skipped with one cond)
DEFAULT_MAX_STEPS = 4096


TANGENT_CONTROLS = (True, False, "tangent", "bound")  # accepted values of ``tangent_control``
#: The default ``tangent_control`` of every discrete-adjoint solve: the tangent bound (one
#: field evaluation a step; docs/derivatives.md, *Which to use*).
DEFAULT_TANGENT_CONTROL = "bound"


def tangent_mode(tangent_control) -> str | None:
    """The recording pass's derivative-aware step control for ``tangent_control``:
    ``"bound"`` → the tangent bound (:func:`rollball_jax._rk.adaptive_solve`; the
    default, :data:`DEFAULT_TANGENT_CONTROL`), ``True`` or ``"tangent"`` → ``"tangent"``
    (a carried probe tangent), ``False``
    or ``None`` → ``None`` (the state's own error test only). Raises ``ValueError`` for
    anything else."""
    if isinstance(tangent_control, (bool, np.bool_)):
        return "tangent" if tangent_control else None
    if tangent_control is None or tangent_control in ("tangent", "bound"):
        return tangent_control
    raise ValueError(f"tangent_control must be one of {TANGENT_CONTROLS}, got {tangent_control!r}")


def _probe_direction(n: int) -> np.ndarray:
    """Fixed probe tangent (seeded): excites every mode of the linearisation."""
    return np.random.default_rng(20261130).standard_normal((1, n))


def solve(
    vf,
    params,
    x0,
    save_ts,
    kink_times=None,
    *,
    solver: dfx.AbstractSolver | None = None,
    rtol=1e-10,
    atol=1e-10,
    max_steps: int = DEFAULT_MAX_STEPS,
    dt0=None,
    dtmax=None,
    tangent_control: bool | str | None = DEFAULT_TANGENT_CONTROL,
    throw: bool = True,
    dense: bool = False,
):
    """States at ``save_ts`` ``(T,)`` of ``ẋ = vf(params, t, x)``, shape ``(T, N)``.

    ``t0 = save_ts[0]``, ``t1 = save_ts[-1]``; ``save_ts`` strictly increasing. The
    result is differentiable (forward and reverse mode, any order) in every leaf of
    ``params`` (a pytree of inexact arrays) and in ``x0`` ``(N,)``; the derivative is that
    of the recorded step sequence. ``vf`` must not close over traced values (pass them in
    ``params``). Save times are step stops unless ``dense`` (the states there are step
    ends, not interpolated). ``kink_times`` ``(m,)`` are jump times (steps end just before and
    restart just after them); they get zero derivative. ``t0`` and the save times are
    differentiated through the ODE (:mod:`rollball_jax._time_tangents`). A solve that
    does not reach ``t1`` within ``max_steps`` steps (accepted + rejected) raises at run
    time, naming ``max_steps``; one whose steps are rejected
    ``MAX_CONSECUTIVE_REJECTIONS`` (100) times in a row ends there and raises saying so
    (a field that turned non-finite: it does not spend ``max_steps`` first). With
    ``throw=False`` either returns ``inf`` states instead, e.g. for an optimiser that must
    reject the trial point, and NaN derivatives of them. Both hold in the value and in
    every derivative under ``jax.jit`` too (:func:`rollball_jax._results.checked`). ``tangent_control``: see :func:`tangent_mode` (``"bound"``,
    the default, ``True``/``"tangent"``, ``False``/``None``). ``solver``: an explicit Runge–Kutta solver of diffrax
    (default ``Dopri8``); others raise :class:`~rollball_jax.errors.ModelError`.

    ``dense=True``: the save times are not step stops (only ``t1`` is); the state at each
    is the solver's dense output (:func:`rollball_jax._rk.interpolate_saves`) on the
    accepted step that contains it, formed from that step's stages in the recording pass
    and in the replay (which then evaluates all stages, the FSAL one included). The steps
    are then those of a solve to ``t1`` alone, however many save times there are (the
    paper ball over [0, 10] with 201 save times: 201 steps as stops, 28 dense), and the
    derivative is that of the interpolated discrete map. Dense values are accurate to
    about the tolerance (Dopri8's interpolant is of order 7); ``t1`` and save times that
    are step ends are the step ends exactly.
    """
    mode = tangent_mode(tangent_control)
    solver = dfx.Dopri8() if solver is None else solver
    tab = _rk.Tableau.from_solver(solver)
    # derivatives with respect to t0 and the save times: through the ODE's identities
    # (_time_tangents); the solve itself sees the times as constants
    return with_time_derivatives(
        vf, params, jnp.asarray(x0, dtype=jnp.float64), jnp.asarray(save_ts, dtype=jnp.float64),
        lambda x0, save_ts: _solve(vf, params, x0, save_ts, kink_times, tab, mode, rtol, atol, max_steps, dt0, dtmax,
                                   throw, dense),
    )


def _solve(vf, params, x0, save_ts, kink_times, tab, mode, rtol, atol, max_steps, dt0, dtmax, throw, dense):
    """:func:`solve` with the times as constants (``save_ts`` under ``stop_gradient``)."""

    # ---- 1. record (not differentiated) ------------------------------------------------
    p_sg = lax.stop_gradient(params)
    x0_sg = lax.stop_gradient(x0)
    t0, t1 = lax.stop_gradient(save_ts[0]), lax.stop_gradient(save_ts[-1])
    kinks = kink_times
    kinks = None if kinks is None or jnp.shape(kinks)[0] == 0 else lax.stop_gradient(jnp.asarray(kinks, jnp.float64))
    n = x0.shape[0]
    # The recording pass runs the field in its own (sequential) XLA:CPU executor (see
    # _executor); the replay, which is differentiated, does not: wrapping it there too made
    # the reverse gradient ~3 % faster but its compile ~7 % longer (paper ball, fresh
    # processes alternating). Recording pass 2.89-3.02 -> 1.99-2.06 ms, reverse gradient
    # 11.3-11.4 -> 10.3-10.6 ms (docs/derivatives.md).
    record, _, t_end, ok, stats = _rk.adaptive_solve(
        tab, own_executor(lambda t, y: vf(p_sg, t, y)), t0, t1, x0_sg, rtol=rtol, atol=atol, jump_ts=kinks,
        max_steps=max_steps, dt0=dt0, dtmax=dtmax, save_ts=lax.stop_gradient(save_ts), chunk=CHUNK,
        probe_v0=None if mode is None else jnp.asarray(_probe_direction(n)), probe=mode or "tangent", dense=dense,
        store_chunks=0 if dense else STORED_CHUNKS,
    )
    record = lax.stop_gradient(record)

    # ---- 2. replay (differentiated) ----------------------------------------------------
    # reverse mode: the hand-written sweep (_reverse_sweep); everything else: the chunk rule
    S = _replay_primitive(vf, tab, bool(dense), int(max_steps), params, x0, record, save_ts)

    # A failed solve (``max_steps`` ran out, the steps collapsed, a save time passed over):
    # through ``_results.checked``, so that the check is in the value's program and in every
    # derivative's, where a check on the value alone would be dead code under ``jax.jit``.
    # It acts on the output: its tangents (forward mode) and cotangents (reverse mode) are
    # multiplied by NaN when the solve failed. Those cotangents reach the inputs only
    # through the steps taken, so the sweep and the replay's derivative rules multiply
    # their results by NaN too (``record.failed``, ``_poisoned``). (Checking the
    # inputs instead put a batched status on unbatched parameters: ``jax.grad`` of a
    # ``jax.vmap`` of solves failed to trace.) ``missed``: every save time must have been a
    # step end (-2: never written), a guard against a save time that the step sequence
    # passed over, which would otherwise read as zeros.
    failed = record.failed  # ~ok | missed
    missed = jnp.any(record.save_chunk == -2) & ok
    if not throw:  # inf states (an addition, not a select: a select would zero the derivatives)
        return checked(S + jnp.where(failed, jnp.inf, 0.0), failed, 0, ("",), False)
    collapsed = stats["rejected_in_a_row"] >= MAX_CONSECUTIVE_REJECTIONS
    return checked(
        S, failed, jnp.where(missed, 2, jnp.where(collapsed, 0, 1)),  # three causes, exclusive
        (
            f"solve failed before t1: {MESSAGES['max_steps_rejected']}; rb.simulate names the time and component",
            f"solve did not reach t1 within max_steps={int(max_steps)} steps (accepted + rejected): "
            "raise max_steps (memory ~ 3 numbers per step), loosen rtol/atol, or check the model for a blow-up"
            + ("; a model with fast damping takes far fewer steps with tangent_control='tangent' (the default "
               "'bound' keeps resolving a mode that has decayed)" if mode == "bound" else ""),
            "a save time was passed over by the step sequence (save times not strictly increasing, or two "
            "within a few ulps of each other or of a kink time of the control?): space the save times apart",
        ),
        True,
    )


def _replay(vf, tab: _rk.Tableau, dense: bool, max_steps: int, params, x0, record: _rk.Record, save_ts):
    """States at the save times ``(T, N)`` of the replay of ``record``'s steps from ``x0``
    with parameters ``params``: the differentiable part of :func:`solve` (primal values
    looked up from the record; derivatives of any order by each chunk's tangent rule)."""
    n = x0.shape[0]
    n_acc = record.num_accepted
    T = save_ts.shape[0]
    n_chunks = -(-int(max_steps) // CHUNK)
    n_groups = -(-n_chunks // GROUP)
    pad = n_groups * GROUP * CHUNK - int(max_steps)

    def per_chunk(a, fill):
        a = jnp.concatenate([a, jnp.full((pad,), fill, a.dtype)])
        return a.reshape(n_groups, GROUP, CHUNK)

    # Per-chunk step data, scanned over (so a chunk's residuals are its own slices only).
    steps = (per_chunk(record.t_start, 0.0), per_chunk(record.t_end, 1.0), per_chunk(record.save_index, -1),
             (jnp.arange(n_groups * GROUP * CHUNK) < n_acc).reshape(n_groups, GROUP, CHUNK),
             jnp.arange(n_groups * GROUP * CHUNK, dtype=jnp.int32).reshape(n_groups, GROUP, CHUNK))
    save_step = record.save_step
    ts_sg = lax.stop_gradient(save_ts)
    x_next = jnp.concatenate([record.chunk_states[1:], jnp.zeros((n_groups * GROUP - n_chunks, n), x0.dtype)])
    x_next = x_next.reshape(n_groups, GROUP, n)
    chunk_of_save = record.save_chunk
    saves_rec = record.saves

    # Each vector-field evaluation is rematerialised in reverse mode: the transposed
    # stage loop then stores one stage input per stage instead of every intermediate
    # of the field (measured on the paper ball: reverse pass ~2x faster).
    vf_remat = jax.checkpoint(vf)

    def chunk_real(x, S, p, st):
        st, save_step, ts_saved = st  # this chunk's step data; the save → step map and save times (dense output)
        f = lambda t, y: vf_remat(p, t, y)

        def body(carry, s):
            ta, tb, j, active, n_step = s

            def do(a):
                x, S = a
                if dense:  # all stages (the dense output takes the FSAL one too)
                    K = _rk.rk_stages(tab, f, ta, tb, x)
                    x1 = x + _rk._weighted_sum(jnp.asarray(tab.b_sol), K)
                    vals = _rk.interpolate_saves(tab, ta, tb, x, x1, K, ts_saved)
                    return x1, jnp.where((save_step == n_step)[:, None], vals, S)
                x1 = _rk.rk_step_rolled(tab, f, ta, tb, x)
                jc = jnp.clip(j, 0, T - 1)
                return x1, S.at[jc].set(jnp.where(j >= 0, x1, S[jc]))

            return lax.cond(active, do, lambda a: a, carry), None

        return lax.scan(body, (x, S), st)[0]

    @jax.custom_jvp
    def chunk(x, S, p, st, c, x_rec, saves, save_chunk):
        # Primal: the recorded values (the same numbers the forward pass computed).
        return x_rec, jnp.where((save_chunk == c)[:, None], saves, S)

    @chunk.defjvp
    def _chunk_jvp(primals, tangents):
        x, S, p, st = primals[:4]
        tx, tS, tp = tangents[:3]
        out = chunk(*primals)  # re-entrant: higher orders use this rule again

        def tangent(x, S, p, tx, tS, tp, st):
            return jax.jvp(lambda x_, S_, p_: chunk_real(x_, S_, p_, st), (x, S, p), (tx, tS, tp))[1]

        return out, jax.checkpoint(tangent)(x, S, p, tx, tS, tp, st)

    def chunk_step(carry, inp):
        st, c, x_rec = inp
        out = lax.cond(c * CHUNK < n_acc, lambda a: chunk(a[0], a[1], params, (st, save_step, ts_sg), c, x_rec, saves_rec, chunk_of_save),
                       lambda a: a, carry)
        return out, None

    def group_step(carry, inp):
        st, g, x_rec = inp
        cs = g * GROUP + jnp.arange(GROUP)
        return lax.cond(g * GROUP * CHUNK < n_acc, lambda a: lax.scan(chunk_step, a, (st, cs, x_rec))[0], lambda a: a, carry), None

    S0 = jnp.where((record.save_chunk == -1)[:, None], x0[None, :], jnp.zeros((T, n), x0.dtype))
    (_, S), _ = lax.scan(group_step, (x0, S0), (steps, jnp.arange(n_groups), x_next))
    return S


# ======================================================================================
# The replay as a primitive: JAX's rules for every derivative but the first
# reverse one, the hand-written reverse sweep for that.
# ======================================================================================


class _Static:
    """Hashable holder of a primitive's static data, compared by identity of the vector
    field (a new closure per trace) and by value for the rest."""

    def __init__(self, vf, tab, max_steps, dense):
        self.vf, self.tab, self.max_steps, self.dense = vf, tab, max_steps, dense

    def __hash__(self):
        return hash((id(self.vf), self.tab, self.max_steps, self.dense))

    def __eq__(self, other):
        return isinstance(other, _Static) and (self.vf is other.vf and self.tab == other.tab
                                               and self.max_steps == other.max_steps and self.dense == other.dense)


def _replay_of(static, record, save_ts):
    """``(params, x0) -> S``: :func:`_replay` of ``record`` with the primitives' static data."""
    return lambda p, x: _replay(static.vf, static.tab, static.dense, static.max_steps, p, x, record, save_ts)


def _poisoned(tree, record: _rk.Record):
    """``tree`` (a pytree of arrays) times NaN if the recorded solve failed: the replay's
    derivative rules return this, so a failed solve's derivative is NaN whatever steps it
    took (its value raises or is inf: :func:`solve`)."""
    return nan_where(tree, record.failed)


def _instantiate(tangent, primal):
    """``tangent`` (a pytree like ``primal`` whose leaves may be symbolic zeros) with its
    zeros made arrays."""
    return jax.tree.map(lambda t, p: jnp.zeros_like(p) if isinstance(t, hx.Zero) else t, tangent, primal,
                        is_leaf=lambda t: isinstance(t, hx.Zero))


def _batched_out(axis_data, in_dims, out_aval):
    """Every output is batched along axis 0 (the primitives' outputs depend on all inputs)."""
    del axis_data, in_dims
    return jax.tree.map(lambda _: 0, out_aval)


class _Replay(hx.VJPHiPrimitive):
    """``S = replay(params, x0; record, save_ts)`` ``(T, N)``. Value,
    forward mode and every higher order: :func:`_replay` (custom-JVP chunks). Reverse mode:
    :func:`_sweep`, the hand-written sweep of :mod:`._reverse_sweep`. Its reverse rule emits
    no primitive of its own (the replay's program forward, ``_sweep`` backward), nor do
    its ``jvp`` and ``lin`` rules, so a jitted derivative's program is plain JAX; only a
    program of the value alone holds this primitive (JAX's Python dispatch per call)."""

    def __init__(self, static, params, x0, record, save_ts):
        self.in_avals = jax.tree.map(jax.typeof, (params, x0, record, save_ts))
        self.out_aval = jax.typeof(jnp.zeros((save_ts.shape[0], x0.shape[0]), x0.dtype))
        self.params = dict(static=static)
        super().__init__()

    def _fn(self, record, save_ts):
        return _replay_of(self.static, record, save_ts)

    def expand(self, params, x0, record, save_ts):
        return self._fn(record, save_ts)(params, x0)

    def jvp(self, primals, tangents):
        params, x0, record, save_ts = primals
        tp, tx = _instantiate(tangents[0], params), _instantiate(tangents[1], x0)
        out, t_out = jax.jvp(self._fn(record, save_ts), (params, x0), (tp, tx))
        return out, _poisoned(t_out, record)

    def vjp_fwd(self, nzs_in, params, x0, record, save_ts):
        # The replay's own (lo) program, not this primitive again: under ``jax.jit(jax.grad(f))``
        # the staged program then holds no hijax primitive and ``jax.jit`` caches its
        # dispatch; an outer differentiation (second order) differentiates that program.
        return self.expand(params, x0, record, save_ts), (params, x0, record, save_ts)

    # jax.linearize: the replay's JVP (transposed by JAX if the linear map is transposed)
    def lin(self, nzs_in, params, x0, record, save_ts):
        return self.expand(params, x0, record, save_ts), (params, x0, record, save_ts)  # as vjp_fwd

    def linearized(self, res, tp, tx, *_):
        params, x0, record, save_ts = res
        t_out = jax.jvp(self._fn(record, save_ts), (params, x0), (_instantiate(tp, params), _instantiate(tx, x0)))[1]
        return _poisoned(t_out, record)

    def vjp_bwd_retval(self, res, ct):
        params, x0, record, save_ts = res
        ct = _instantiate(ct, jnp.zeros(self.out_aval.shape, self.out_aval.dtype))
        p_bar, x_bar = _sweep(self.static, params, x0, record, save_ts, ct)
        return p_bar, x_bar, jax.tree.map(jnp.zeros_like, record), jnp.zeros_like(save_ts)

    def batch_dim_rule(self, axis_data, in_dims):
        return _batched_out(axis_data, in_dims, self.out_aval)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _sweep(static, params, x0, record, save_ts, ct):
    """``(p̄, x̄0)`` of the replay for the cotangent ``ct`` ``(T, N)`` of its saves: the
    hand-written sweep of :mod:`._reverse_sweep`. Its own derivatives (``jax.hessian`` is
    forward over reverse; ``jacrev∘jacrev``) are those of JAX's transpose of
    :func:`_replay`, whose loops have static length: the same numbers to rounding, at the
    cost of that route. A ``custom_jvp`` function, not a hijax primitive: a program that
    holds no hijax primitive is cached by ``jax.jit``'s C++ dispatch, so a jitted
    gradient calls its executable directly (measured: ``docs/derivatives.md``)."""
    return _poisoned(reverse_sweep(static.tab, static.vf, params, record, ct, CHUNK, dense=static.dense, save_ts=save_ts),
                     record)


@_sweep.defjvp
def _sweep_jvp(static, primals, tangents):
    params, x0, record, save_ts, ct = primals
    tp, tx, _, _, tct = tangents
    replay = _replay_of(static, record, save_ts)
    out, t_out = jax.jvp(lambda p, x, c: jax.vjp(replay, p, x)[1](c), (params, x0, ct), (tp, tx, tct))
    return _poisoned(out, record), _poisoned(t_out, record)


def _replay_primitive(vf, tab, dense, max_steps, params, x0, record, save_ts):
    """:func:`_replay` with the reverse sweep as its reverse-mode rule."""
    return _Replay(_Static(vf, tab, max_steps, dense), params, x0, record, save_ts)(params, x0, record, save_ts)


class ModelField:
    """``vf(params, t, y)`` of a model under a control, with the inexact array leaves of
    ``(model, control)`` as ``params`` (:func:`model_field`), and its vector–Jacobian
    product :meth:`vjp` (the model's :meth:`~rollball_jax.models.AbstractModel.vector_field_vjp`),
    which the reverse sweep uses instead of ``jax.vjp`` of the field."""

    def __init__(self, static):
        self._static = static

    def __call__(self, p, t, y):
        m, c = eqx.combine(p, self._static)
        return m.vector_field(t, y, c)

    def vjp(self, p, t, y, ct):
        """``(ȳ (N,), p̄)`` (``p̄`` a pytree like ``p``) for the cotangent ``ct`` ``(N,)``
        of ``self(p, t, y)``."""
        m, c = eqx.combine(p, self._static)
        y_bar, m_bar, c_bar = m.vector_field_vjp(t, y, c, ct)
        return y_bar, (m_bar, c_bar)


def model_field(model, control):
    """``(vf, params)`` for :func:`solve`: the model's vector field (a :class:`ModelField`)
    with the inexact array leaves of ``(model, control)`` as parameters. Raises
    ``ModelError`` if ``control`` does not return one θ̈ per mass (its output's shape is
    traced, so this costs ~1 ms where it runs: inside the jit-compiled solves, once per
    compilation; on every call of the eager ``adjoint="backsolve"`` route)."""
    checks.control_output(model, control)
    params, static = eqx.partition((model, control), eqx.is_inexact_array)
    return ModelField(static), params
