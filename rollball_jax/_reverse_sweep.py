"""Hand-written reverse sweep: the vector–Jacobian product of the discrete adjoint's replay.

The replay (:mod:`rollball_jax.discrete_adjoint`) is a fixed sequence of explicit
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
bounded by the steps actually taken, not by ``max_steps``), recomputes a chunk's stage
inputs ``Y_i`` once (a forward pass of ≤ 16 steps from the recorded chunk state), and
evaluates each stage's VJP of the field in its own sequential executor
(:func:`rollball_jax._executor.own_executor`), with the parameter cotangent as one flat
vector (one addition per stage instead of one per parameter leaf).

A save time that a step ends on adds its cotangent to ``λ`` there; a save at ``t0``
adds to ``x̄_0``. Dense saves (interpolated) are not handled here: the dense replay keeps
JAX's transpose.

The sweep is a value, not a differentiable program: its own derivatives (second order,
e.g. ``jax.hessian`` = forward over reverse) are taken of JAX's transpose of the replay
instead (see :class:`rollball_jax.discrete_adjoint`'s primitives), whose loops are of
static length.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax
from jax.flatten_util import ravel_pytree

from . import _rk
from ._executor import own_executor


def reverse_sweep(tab: _rk.Tableau, vf, params, record: _rk.Record, ct_saves, chunk: int):
    """``(p̄, x̄0)``: the cotangents of ``params`` (same pytree) and of the initial state
    ``(N,)`` for the cotangent ``ct_saves`` ``(T, N)`` of the replay's save states, over the
    steps of ``record`` (step-stop saves; ``chunk`` as recorded).

    ``vf(params, t, y) -> ẏ``; the tableau's stage sums and stage times are those of
    :func:`rollball_jax._rk.rk_step_rolled` (the replay's step), so the linearisation points
    are the replay's to rounding."""
    S = _rk.solution_stages(tab)
    _, A_full, C_full = _rk.stage_matrices(tab)
    A, C = jnp.asarray(A_full[:S, :S]), jnp.asarray(C_full[:S])
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

    def vjp_stage(pf, t, y, ct):
        _, pull = jax.vjp(lambda yy, pp: vf(unravel(pp), t, yy), y, pf)
        return pull(ct)

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
        return x + _rk._weighted_sum(B, K), Y

    def step_adjoint(ta, tb, Y, lam, pbar):
        h = tb - ta

        def stage(k, carry):
            i = S - 1 - k
            acc, xbar, pbar = carry  # acc[i] = Σ_{j>i} A_ji Ȳ_j
            ti = jnp.where(C[i] == 1.0, tb, ta + C[i] * h)
            ybar, pb = vjp_field(pflat, ti, Y[i], h * (B[i] * lam + acc[i]))
            return acc + A[i][:, None] * ybar[None, :], xbar + ybar, pbar + pb

        _, xbar, pbar = lax.fori_loop(0, S, stage, (jnp.zeros((S, n), dtype), lam, pbar))
        return xbar, pbar

    def save_cotangent(j):
        return jnp.where(j >= 0, ct_saves[jnp.clip(j, 0, T - 1)], jnp.zeros((n,), dtype))

    def chunk_adjoint(c, carry):
        lam, pbar = carry
        base = c * chunk
        m = jnp.minimum(chunk, n_acc - base)  # steps in this chunk
        ta_c, tb_c, j_c = (lax.dynamic_slice_in_dim(a, base, chunk) for a in steps)

        def forward(k, fc):
            x, Ys = fc
            x1, Y = stage_inputs(ta_c[k], tb_c[k], x)
            return x1, lax.dynamic_update_index_in_dim(Ys, Y, k, 0)

        _, Ys = lax.fori_loop(0, m, forward, (record.chunk_states[c], jnp.zeros((chunk, S, n), dtype)))

        def backward(i, bc):
            lam, pbar = bc
            k = m - 1 - i
            return step_adjoint(ta_c[k], tb_c[k], Ys[k], lam + save_cotangent(j_c[k]), pbar)

        return lax.fori_loop(0, m, backward, (lam, pbar))

    n_chunks = -(-n_acc // chunk)
    lam0 = jnp.zeros((n,), dtype)
    lam, pbar = lax.fori_loop(0, n_chunks, lambda i, c: chunk_adjoint(n_chunks - 1 - i, c), (lam0, jnp.zeros_like(pflat)))
    # Saves at t0 (``save_chunk == -1``) are x0 itself.
    at_t0 = (record.save_chunk == -1)[:, None]
    xbar0 = lam + jnp.sum(jnp.where(at_t0, ct_saves, 0.0), axis=0)
    return unravel(pbar), xbar0
