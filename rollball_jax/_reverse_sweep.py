"""Hand-written reverse sweep: the vector–Jacobian product of the discrete adjoint's replay.

The replay (:mod:`rollball_jax._discrete_adjoint`) is a fixed sequence of explicit
Runge–Kutta maps over the recorded steps ``[t_n, t_{n+1}]``, ``n = 0, …, K − 1``:

    Y_i = x_n + Σ_{j<i} A_ij k_j,   k_i = h_n f(t_n + c_i h_n, Y_i; p),   x_{n+1} = x_n + Σ_i b_i k_i

(only the ``S`` stages the solution needs, :func:`rollball_jax._rk.solution_stages`). Given
the cotangent ``λ`` of ``x_{n+1}``, one step's adjoint is, for ``i = S − 1, …, 0``,

    k̄_i = b_i λ + Σ_{j>i} A_ji Ȳ_j,   (Ȳ_i, p̄_i) = h_n (∂f/∂y, ∂f/∂p)(t_i, Y_i)ᵀ k̄_i,

then ``x̄_n = λ + Σ_i Ȳ_i`` and ``p̄ += Σ_i p̄_i`` — the transpose of the replay's tangent
map, the same derivative JAX obtains by transposing it (equal to rounding; tested), at a
fraction of the cost: JAX's transpose of the replay's nested scans runs ~130 XLA
operations per stage in XLA:CPU's dataflow executor and recomputes each chunk under
``jax.checkpoint``; here the sweep walks the recorded chunks backwards (``while`` loops
bounded by the steps actually taken, not by ``max_steps``), takes a chunk's stage inputs
``Y_i`` from the record (``record.stage_inputs``: the recording pass keeps those of the
first ``discrete_adjoint.STORED_CHUNKS`` chunks) or recomputes them once (a forward
pass of ≤ 16 steps from the recorded chunk state), and evaluates each stage's VJP of the field (``vf.vjp`` when the field has one, e.g. a
model's hand-written one through :class:`rollball_jax._discrete_adjoint.ModelField`;
else ``jax.vjp``) in its own sequential executor
(:func:`rollball_jax._executor.own_executor`), with the parameter cotangent as one flat
vector (one addition per stage instead of one per parameter leaf).

A save time that a step ends on adds its cotangent to ``λ`` there; a save at ``t0``
adds to ``x̄_0``. A dense save (the solver's interpolant on the step that contains it,
linear in the step's start state, end state and stages) adds the transpose of the
interpolant applied to its cotangent to those three.

The sweep is a value, not a differentiable program: its own derivatives (second order,
e.g. ``jax.hessian`` = forward over reverse) are taken of JAX's transpose of the replay
instead (see :class:`rollball_jax._discrete_adjoint`'s primitives), whose loops are of
static length.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax
from jax.flatten_util import ravel_pytree

from . import _rk
from ._executor import own_executor


def reverse_sweep(tab: _rk.Tableau, vf, params, record: _rk.Record, ct_saves, chunk: int, dense: bool = False,
                  save_ts=None):
    """``(p̄, x̄0)``: the cotangents of ``params`` (same pytree) and of the initial state
    ``(N,)`` for the cotangent ``ct_saves`` ``(T, N)`` of the replay's save states, over the
    steps of ``record`` (``chunk`` as recorded).

    ``vf(params, t, y) -> ẏ``, optionally with ``vf.vjp(params, t, y, ct) -> (ȳ, p̄)``
    (``p̄`` a pytree with ``params``' leaves; raises ``ValueError`` at trace time if its
    leaves do not flatten to ``params``' size) used instead of ``jax.vjp``; the tableau's
    stage sums and stage times are those of the replay's step (:func:`rollball_jax._rk.rk_step_rolled`; with ``dense``,
    :func:`rollball_jax._rk.rk_stages`, all stages), so the linearisation points are the
    replay's to rounding. ``dense``: the saves are the dense output
    (:func:`rollball_jax._rk.interpolate_saves` at ``save_ts`` ``(T,)``) of the step that
    contains them (``record.save_step``); its cotangent enters that step's stages, start
    and end state (the interpolant is linear in them). ``record.stage_inputs``
    ``(L, chunk, S, N)`` (or ``None``): the stage inputs of the first ``L`` chunks, read
    instead of recomputed (the recording pass keeps none with dense output); raises
    ``ValueError`` at trace time for another shape."""
    S = len(tab.b_sol) if dense else _rk.solution_stages(tab)
    _, A_full, C_full = _rk.stage_matrices(tab)
    A, C = jnp.asarray(A_full[:S, :S]), jnp.asarray(C_full[:S])
    AT = jnp.asarray(A_full[:S, :S].T)
    B = jnp.asarray(tab.b_sol[:S])
    pflat, unravel = ravel_pytree(params)
    n = ct_saves.shape[-1]
    T = ct_saves.shape[0]
    n_acc = record.num_accepted
    dtype = ct_saves.dtype

    field = own_executor(lambda t, y: vf(params, t, y))
    # Per-step data padded to whole chunks (a dynamic slice past the end would be clamped,
    # i.e. shifted, by XLA); the padding is never read (``m`` steps per chunk are).
    pad = -record.t_start.shape[0] % chunk
    steps = (jnp.pad(record.t_start, (0, pad)), jnp.pad(record.t_end, (0, pad)),
             jnp.pad(record.save_index, (0, pad), constant_values=-1))

    field_vjp = getattr(vf, "vjp", None)  # a model's own VJP (rollball_jax._discrete_adjoint.ModelField)

    def vjp_stage(pf, t, y, ct):
        if field_vjp is None:
            _, pull = jax.vjp(lambda yy, pp: vf(unravel(pp), t, yy), y, pf)
            return pull(ct)
        y_bar, p_bar = field_vjp(unravel(pf), t, y, ct)
        p_bar = ravel_pytree(p_bar)[0]
        if p_bar.shape != pf.shape:  # the model's cotangent must have the parameters' leaves
            raise ValueError(f"vf.vjp returned {p_bar.shape[0]} parameter cotangents for {pf.shape[0]} parameters")
        return y_bar, p_bar

    if jax.default_backend() == "cpu":  # its own sequential executor (see _executor)
        def vjp_field(pf, t, y, ct):
            return lax.cond(t == t, lambda: vjp_stage(pf, t, y, ct),
                            lambda: (jnp.full_like(y, jnp.nan), jnp.full_like(pf, jnp.nan)))
    else:
        vjp_field = vjp_stage

    def stage_inputs(ta, tb, x):
        """One replayed step from ``x``: its end state and its stage inputs ``Y`` ``(S, N)``."""
        h = tb - ta

        def stage(i, carry):
            K, Y = carry
            yi = x + _rk._weighted_sum(A[i], K)
            ti = jnp.where(C[i] == 1.0, tb, ta + C[i] * h)
            return (lax.dynamic_update_index_in_dim(K, h * field(ti, yi), i, 0),
                    lax.dynamic_update_index_in_dim(Y, yi, i, 0))

        K, Y = lax.fori_loop(0, S, stage, (jnp.zeros((S, n), dtype), jnp.zeros((S, n), dtype)))
        return x + _rk._weighted_sum(B, K), Y, K

    def step_adjoint(ta, tb, Y, lam, pbar, kbar_extra):
        """``(x̄_n, p̄)`` from ``λ`` (cotangent of the step's end state) and the stages' own
        cotangents ``kbar_extra`` ``(S, N)`` (dense saves; ``None``: none)."""
        h = tb - ta

        def stage(k, carry):
            i = S - 1 - k
            Ybar, xbar, pbar = carry  # Ybar[j] = Ȳ_j for the stages j > i done so far, zeros else
            ti = jnp.where(C[i] == 1.0, tb, ta + C[i] * h)
            # Σ_{j>i} A_ji Ȳ_j from the stored Ȳ (a row of Aᵀ; measured ~3 % faster on the
            # gradient than accumulating every stage's A_i·Ȳ_i into an (S, N) sum)
            kbar = B[i] * lam + _rk._weighted_sum(AT[i], Ybar)
            if kbar_extra is not None:
                kbar = kbar + kbar_extra[i]
            ybar, pb = vjp_field(pflat, ti, Y[i], h * kbar)
            return lax.dynamic_update_index_in_dim(Ybar, ybar, i, 0), xbar + ybar, pbar + pb

        _, xbar, pbar = lax.fori_loop(0, S, stage, (jnp.zeros((S, n), dtype), lam, pbar))
        return xbar, pbar

    def dense_cotangents(ta, tb, x, x1, K, n_step):
        """Cotangents of (start state, end state, stages) from the saves step ``n_step`` holds."""
        ct = jnp.where((record.save_step == n_step)[:, None], ct_saves, 0.0)
        _, pull = jax.vjp(lambda a, b, k: _rk.interpolate_saves(tab, ta, tb, a, b, k, save_ts), x, x1, K)
        return pull(ct)

    def save_cotangent(j):
        return jnp.where(j >= 0, ct_saves[jnp.clip(j, 0, T - 1)], jnp.zeros((n,), dtype))

    def chunk_adjoint(c, carry):
        lam, pbar = carry
        base = c * chunk
        m = jnp.minimum(chunk, n_acc - base)  # steps in this chunk
        ta_c, tb_c, j_c = (lax.dynamic_slice_in_dim(a, base, chunk) for a in steps)

        def forward(k, fc):
            x, Ys, Ks, Xs = fc
            x1, Y, K = stage_inputs(ta_c[k], tb_c[k], x)
            upd = lax.dynamic_update_index_in_dim
            return (x1, upd(Ys, Y, k, 0), upd(Ks, K, k, 0) if dense else Ks,
                    upd(Xs, x1, k + 1, 0) if dense else Xs)

        x_c = record.chunk_states[c]
        Xs0 = jnp.zeros((chunk + 1, n), dtype).at[0].set(x_c) if dense else jnp.zeros((0, n), dtype)
        Ks0 = jnp.zeros((chunk, S, n), dtype) if dense else jnp.zeros((0,), dtype)

        def recompute():
            return lax.fori_loop(0, m, forward, (x_c, jnp.zeros((chunk, S, n), dtype), Ks0, Xs0))[1:]

        if stored is None:
            Ys, Ks, Xs = recompute()
        else:  # the first chunks' stage inputs as the recording pass computed them
            Ys, Ks, Xs = lax.cond(c < stored.shape[0], lambda: (stored[jnp.minimum(c, stored.shape[0] - 1)], Ks0, Xs0),
                                  recompute)

        def backward(i, bc):
            lam, pbar = bc
            k = m - 1 - i
            ta, tb = ta_c[k], tb_c[k]
            if dense:
                x_bar_d, x1_bar_d, k_bar_d = dense_cotangents(ta, tb, Xs[k], Xs[k + 1], Ks[k], base + k)
                xbar, pbar = step_adjoint(ta, tb, Ys[k], lam + x1_bar_d, pbar, k_bar_d)
                return xbar + x_bar_d, pbar
            return step_adjoint(ta, tb, Ys[k], lam + save_cotangent(j_c[k]), pbar, None)

        return lax.fori_loop(0, m, backward, (lam, pbar))

    n_chunks = -(-n_acc // chunk)
    stored = record.stage_inputs
    if stored is not None and stored.shape[1:] != (chunk, S, n):
        raise ValueError(f"record.stage_inputs has shape {stored.shape}, expected (L, {chunk}, {S}, {n})")
    lam0 = jnp.zeros((n,), dtype)
    lam, pbar = lax.fori_loop(0, n_chunks, lambda i, c: chunk_adjoint(n_chunks - 1 - i, c), (lam0, jnp.zeros_like(pflat)))
    # Saves at t0 (``save_chunk == -1``; step stops only: a dense save is written by the
    # step that contains it, t0's by the first) are x0 itself.
    at_t0 = (record.save_chunk == -1)[:, None] & (not dense)
    xbar0 = lam + jnp.sum(jnp.where(at_t0, ct_saves, 0.0), axis=0)
    return unravel(pbar), xbar0
