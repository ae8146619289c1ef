"""Explicit Runge–Kutta loops over a group of members (lockstep, shared and fixed steps)."""

from __future__ import annotations


import jax
import jax.numpy as jnp
from jax import lax

from .._rk import FACTOR_MAX, FACTOR_MIN, SAFETY, Tableau, hairer_initial_step, stage_loop, stage_matrices
from .._rejection_limit import MAX_CONSECUTIVE_REJECTIONS
from ._result import STATUS_MAX_STEPS, STATUS_MAX_STEPS_REJECTED, STATUS_NONFINITE, STATUS_SUCCESS


# ======================================================================================
# Explicit Runge–Kutta on a group (shared steps)
# ======================================================================================


def _tableau(solver) -> Tableau:
    """The solver's Butcher tableau (shared with the discrete adjoint's engine)."""
    return Tableau.from_solver(solver, purpose="modes 'lockstep'/'shared'/'fixed'")


def _combine(x, coeffs, ks):
    acc = x
    for c, k in zip(coeffs, ks):
        if c != 0.0:
            acc = acc + float(c) * k
    return acc


def _tensordot(w, K):
    """``Σ_j w[j]·K[j]`` as one small dense product (the group loops' stage sums)."""
    return jnp.tensordot(w, K, axes=1)


def _rk_step(tab: Tableau, rhs, t, t_next, x, f0, rolled: bool = True, h_vec=None):
    """One explicit RK step from (t, x) to t_next; returns (x1, error, ks, f1), ``ks`` = h·f.

    ``rolled``: the stages run in a ``fori_loop`` around one copy of the vector field
    (compiles ~10x faster; every stage input is formed by a small dense product with the
    Butcher matrix, which XLA keeps as its own kernel). Otherwise the stages are unrolled
    and only the non-zero coefficients are used. ``t``, ``t_next`` may be per-member
    vectors ``(G,)`` (then ``h_vec`` is the non-zero step used for scaling).
    """
    h = t_next - t if h_vec is None else h_vec
    if rolled:
        S = stage_matrices(tab)[0]
        K = jnp.zeros((S,) + x.shape, dtype=x.dtype).at[0].set(h * f0)
        K = stage_loop(tab, rhs, t, t_next, x, K, start=1, h=h, combine=_tensordot)
        x1 = x + jnp.tensordot(jnp.asarray(tab.b_sol), K, axes=1)
        err = jnp.tensordot(jnp.asarray(tab.b_err), K, axes=1)
        f1 = K[-1] / h if tab.fsal else None
        return x1, err, K, f1
    ks = [h * f0]
    y = x
    for i, a in enumerate(tab.a):
        y = _combine(x, a, ks)
        ti = t_next if tab.c[i] == 1.0 else t + float(tab.c[i]) * h
        ks.append(h * rhs(ti, y))
    x1 = y if tab.ssal else _combine(x, tab.b_sol, ks)
    err = None
    for c, k in zip(tab.b_err, ks):
        if c != 0.0:
            err = float(c) * k if err is None else err + float(c) * k
    f1 = ks[-1] / h if tab.fsal else None
    return x1, err, jnp.stack(ks), f1


def _step_factor(inv, accept, error_order):
    """Next step / this step from 1/error (diffrax's I-controller, the constants of
    :mod:`rollball_jax._rk` shared with the discrete adjoint): grow by at most
    ``FACTOR_MAX`` after an accepted step, shrink to between ``FACTOR_MIN`` and ``SAFETY``
    after a rejected one."""
    return jnp.clip(SAFETY * inv ** (1.0 / error_order), jnp.where(accept, 1.0, FACTOR_MIN),
                    jnp.where(accept, FACTOR_MAX, SAFETY))


def _scaled_member_error(err, x0, x1, rtol, atol):
    """RMS over components of err / (atol + rtol·max(|x0|, |x1|)), per member: (G,)."""
    scale = atol + rtol * jnp.maximum(jnp.abs(x0), jnp.abs(x1))
    return jnp.sqrt(jnp.mean((err / scale) ** 2, axis=0))


def _save_loop(tab, ts_pad, idx, buf, t0, t1, x0, x1, ks):
    interp = tab.interpolation(t0=t0, t1=t1, y0=x0, y1=x1, k=ks)

    def cond(c):
        i, _ = c
        return ts_pad[i] <= t1

    def body(c):
        i, b = c
        ti = ts_pad[i]
        y = jnp.where(ti == t1, x1, interp.evaluate(jnp.clip(ti, t0, t1)))
        return i + 1, lax.dynamic_update_index_in_dim(b, y, i, 0)

    return lax.while_loop(cond, body, (idx, buf))


def _group_outputs(buf, x_end, t_end, code, n_steps, n_acc, n_rej, err_est, n_ts):
    return dict(ys=buf[:n_ts], x_end=x_end, t_end=t_end, code=code, num_steps=n_steps,
                num_accepted_steps=n_acc, num_rejected_steps=n_rej, error_estimate=err_est)


def _member_save_loop(tab, ts_pad, idx, buf, t0, t1, x0, x1, ks, accept, cols=None):
    """Per-member saving: member m writes every ts[i] in (t0_m, t1_m] after an accepted
    step, into column ``cols[m]`` of ``buf`` (T+1, N, ·); row T is a scratch row."""
    G = x0.shape[-1]
    cols = jnp.arange(G) if cols is None else cols

    def interp_one(a, b, y0, y1, k, t):
        return tab.interpolation(t0=a, t1=b, y0=y0, y1=y1, k=k).evaluate(t)

    interp = jax.vmap(interp_one, in_axes=(0, 0, -1, -1, -1, 0), out_axes=-1)

    def pending(i):
        return accept & (ts_pad[i] <= t1)

    def cond(c):
        i, _ = c
        return jnp.any(pending(i))

    def body(c):
        i, b = c
        ti = ts_pad[jnp.minimum(i, ts_pad.shape[0] - 1)]
        todo = pending(i)
        tc = jnp.where(todo, jnp.clip(ti, t0, t1), t1)
        y = jnp.where(todo & (ti == t1), x1, interp(t0, t1, x0, x1, ks, tc))
        row = jnp.where(todo, i, ts_pad.shape[0] - 1)  # the last row is a scratch row
        b = b.at[row, :, cols].set(y.T)
        return i + todo.astype(i.dtype), b

    return lax.while_loop(cond, body, (idx, buf))


def _member_rms(v):
    """Per-member RMS over the state axis: ``(N, G) → (G,)``."""
    return jnp.sqrt(jnp.mean(v**2, axis=0))


def _initial_step(tab, rhs, t0, x0, f0, rtol, atol):
    """Hairer's starting step per member (as diffrax's PIDController), ``(G,)``."""
    return hairer_initial_step(rhs, t0, x0, f0, rtol, atol, tab.error_order, norm=_member_rms)


def _status(done, run):
    """Result code: success when ``t1`` was reached, ``max_steps_rejected`` after
    ``MAX_CONSECUTIVE_REJECTIONS`` rejected steps in a row (a member whose field turned
    non-finite, see :mod:`rollball_jax._rejection_limit`), else ``max_steps_reached``."""
    return jnp.where(done, STATUS_SUCCESS, jnp.where(run >= MAX_CONSECUTIVE_REJECTIONS, STATUS_MAX_STEPS_REJECTED,
                                                     STATUS_MAX_STEPS))


def _solve_pool_lockstep(tab, make_rhs, x0p, blp, kinksp, ts, t0, t1, rtol, atol, max_steps, dt0, group, rolled=True):
    """Per-member adaptive steps for a pool of P members on ``group`` slots.

    Every loop iteration advances each busy slot by one step of its own member; a slot
    whose member finishes takes the next member of the pool, so the slots stay busy
    until the pool runs dry (the loop runs ~ Σ steps / group + the longest member,
    instead of groups × the slowest member of each). A member's arithmetic does not
    depend on its slot or its neighbours: results are those of a solve on its own.

    ``x0p`` (N, P), ``blp`` batched leaves (..., P), ``kinksp`` (P, M); ``make_rhs(bl)``
    returns the vector field for leaves gathered to the slots (..., group).
    """
    N, P = x0p.shape
    G = int(group)
    T = ts.shape[0]
    ts_pad = jnp.concatenate([ts, jnp.full((1,), jnp.inf)])
    idx0 = jnp.sum(ts <= t0).astype(jnp.int32)

    # Pre-pass, G members at a time: f(t0, x0) and the starting step of every member.
    def init_chunk(c, carry):
        f0p, h0p = carry
        cut = lambda a: lax.dynamic_slice_in_dim(a, c * G, G, axis=a.ndim - 1)
        x0 = cut(x0p)
        rhs = make_rhs([cut(b) for b in blp])
        t = jnp.full((G,), t0, dtype=x0p.dtype)
        f0 = rhs(t, x0)
        h0 = _initial_step(tab, rhs, t, x0, f0, rtol, atol) if dt0 is None else jnp.full((G,), dt0, dtype=x0p.dtype)
        return (lax.dynamic_update_slice_in_dim(f0p, f0, c * G, axis=1), lax.dynamic_update_slice_in_dim(h0p, h0, c * G, axis=0))

    f0p, h0p = lax.fori_loop(0, P // G, init_chunk, (jnp.zeros_like(x0p), jnp.zeros((P,), x0p.dtype)))

    # Per-member outputs; column P is a scratch column for idle slots.
    buf = jnp.full((T + 1, N, P + 1), jnp.nan, dtype=x0p.dtype)  # NaN: not reached (failure)
    buf = jnp.where((jnp.arange(T + 1) < idx0)[:, None, None], jnp.pad(x0p, ((0, 0), (0, 1)))[None], buf)
    out = dict(x_end=jnp.zeros((N, P + 1), x0p.dtype), t_end=jnp.zeros((P + 1,), x0p.dtype),
               code=jnp.zeros((P + 1,), jnp.int32), n=jnp.zeros((P + 1,), jnp.int32),
               n_acc=jnp.zeros((P + 1,), jnp.int32), n_rej=jnp.zeros((P + 1,), jnp.int32),
               emax=jnp.zeros((P + 1,), x0p.dtype))
    mid = jnp.arange(G)
    zi = jnp.zeros((G,), jnp.int32)
    slot = dict(mid=mid, t=jnp.full((G,), t0, dtype=x0p.dtype), h=h0p[mid], x=x0p[:, mid], f=f0p[:, mid],
                idx=jnp.full((G,), idx0), n=zi, n_acc=zi, n_rej=zi, run=zi, emax=jnp.zeros((G,), x0p.dtype),
                active=mid < P)
    state = (slot, jnp.asarray(G, jnp.int32), buf, out)

    def cond(s):
        return jnp.any(s[0]["active"])

    def body(s):
        sl, nxt, buf, out = s
        mid, t, h, x, f, active = sl["mid"], sl["t"], sl["h"], sl["x"], sl["f"], sl["active"]
        rhs = make_rhs([jnp.take(b, mid, axis=b.ndim - 1) for b in blp])
        kinks = kinksp[mid]
        nk = jnp.min(jnp.where(kinks > t[:, None], kinks, jnp.inf), axis=1)
        stop = jnp.minimum(t1, nk)
        t_next = jnp.where(active, jnp.where(t + h >= stop, stop, t + h), t)
        h_used = t_next - t
        x1, err, ks, f1 = _rk_step(tab, rhs, t, t_next, x, f, rolled, h_vec=jnp.where(h_used > 0, h_used, 1.0))
        if f1 is None:
            f1 = rhs(t_next, x1)
        e_mem = _scaled_member_error(err, x, x1, rtol, atol)
        e_mem = jnp.where(jnp.all(jnp.isfinite(x1), axis=0) & jnp.isfinite(e_mem), e_mem, jnp.inf)
        accept = active & (e_mem <= 1.0)
        inv = jnp.where(e_mem > 0, 1.0 / e_mem, jnp.inf)
        factor = _step_factor(inv, accept, tab.error_order)
        factor = jnp.where(jnp.isnan(factor), FACTOR_MIN, factor)
        clipped = (t_next == stop) & (t + h > stop)
        h_new = jnp.where(active, jnp.where(accept & clipped, jnp.maximum(h, h_used * factor), h_used * factor), h)
        cols = jnp.where(active, mid, P)
        idx, buf = _member_save_loop(tab, ts_pad, sl["idx"], buf, t, t_next, x, x1, ks, accept, cols)
        t = jnp.where(accept, t_next, t)
        x = jnp.where(accept, x1, x)
        f = jnp.where(accept, f1, f)
        n = sl["n"] + active.astype(jnp.int32)
        n_acc = sl["n_acc"] + accept.astype(jnp.int32)
        n_rej = sl["n_rej"] + (active & ~accept).astype(jnp.int32)
        run = jnp.where(accept, 0, sl["run"] + active.astype(jnp.int32))  # rejected steps in a row
        emax = jnp.where(accept, jnp.maximum(sl["emax"], e_mem), sl["emax"])
        still = active & (t < t1) & (n < max_steps) & (run < MAX_CONSECUTIVE_REJECTIONS)
        done = active & ~still
        # finished members: record their results
        col = jnp.where(done, mid, P)
        out = dict(
            x_end=out["x_end"].at[:, col].set(x), t_end=out["t_end"].at[col].set(t),
            code=out["code"].at[col].set(_status(t >= t1, run).astype(jnp.int32)),
            n=out["n"].at[col].set(n), n_acc=out["n_acc"].at[col].set(n_acc), n_rej=out["n_rej"].at[col].set(n_rej),
            emax=out["emax"].at[col].set(emax),
        )
        # refill: the k-th finished slot takes pool member nxt + k
        new = nxt + jnp.cumsum(done.astype(jnp.int32)) - 1
        take = done & (new < P)
        newc = jnp.clip(new, 0, P - 1)
        reset = lambda fresh, cur: jnp.where(take, fresh, cur)
        sl = dict(
            mid=reset(newc, mid), t=reset(jnp.full_like(t, t0), t), h=reset(h0p[newc], h_new),
            x=reset(x0p[:, newc], x), f=reset(f0p[:, newc], f), idx=reset(jnp.full_like(idx, idx0), idx),
            n=reset(zi, n), n_acc=reset(zi, n_acc), n_rej=reset(zi, n_rej), run=reset(zi, run),
            emax=reset(jnp.zeros_like(emax), emax),
            active=still | take,
        )
        return sl, (nxt + jnp.sum(done)).astype(jnp.int32), buf, out

    _, _, buf, out = lax.while_loop(cond, body, state)
    return dict(ys=buf[:T, :, :P], x_end=out["x_end"][:, :P], t_end=out["t_end"][:P], code=out["code"][:P],
                num_steps=out["n"][:P], num_accepted_steps=out["n_acc"][:P], num_rejected_steps=out["n_rej"][:P],
                error_estimate=out["emax"][:P])


def _solve_group_shared(tab, rhs, x0, kinks, ts, t0, t1, rtol, atol, max_steps, dt0, rolled=True):
    """Shared adaptive step for the group x0 (N, G); PID controller as diffrax's default (I)."""
    N, G = x0.shape
    T = ts.shape[0]
    ts_pad = jnp.concatenate([ts, jnp.full((1,), jnp.inf)])
    f0 = rhs(t0, x0)

    if dt0 is None:  # Hairer's starting step; the norm is the max over the group of the member RMS
        h = hairer_initial_step(rhs, t0, x0, f0, rtol, atol, tab.error_order, norm=lambda v: jnp.max(_member_rms(v)))
    else:
        h = jnp.asarray(dt0, dtype=jnp.float64)

    buf = jnp.full((T + 1, N, G), jnp.nan, dtype=x0.dtype)  # NaN: not reached (failure)
    idx = jnp.sum(ts <= t0).astype(jnp.int32)
    buf = jnp.where((jnp.arange(T + 1) < idx)[:, None, None], x0[None], buf)
    zero_i = jnp.zeros((), jnp.int32)
    state = (t0, h, x0, f0, buf, idx, zero_i, zero_i, zero_i, jnp.zeros((G,)), zero_i)

    def cond(s):
        t, _, _, _, _, _, n, *_, run = s
        return (t < t1) & (n < max_steps) & (run < MAX_CONSECUTIVE_REJECTIONS)

    def body(s):
        t, h, x, f, buf, idx, n, n_acc, n_rej, emax, run = s
        nxt = jnp.min(jnp.where(kinks > t, kinks, jnp.inf))
        stop = jnp.minimum(t1, nxt)
        t_next = jnp.where(t + h >= stop, stop, t + h)
        x1, err, ks, f1 = _rk_step(tab, rhs, t, t_next, x, f, rolled)
        if f1 is None:
            f1 = rhs(t_next, x1)
        e_mem = _scaled_member_error(err, x, x1, rtol, atol)
        finite = jnp.all(jnp.isfinite(x1), axis=0) & jnp.isfinite(e_mem)
        e_mem = jnp.where(finite, e_mem, jnp.inf)
        e = jnp.max(e_mem)
        accept = e <= 1.0
        inv = jnp.where(e > 0, 1.0 / e, jnp.inf)
        factor = _step_factor(inv, accept, tab.error_order)
        factor = jnp.where(jnp.isnan(factor), FACTOR_MIN, factor)
        h_used = t_next - t
        # Keep the unclipped proposal when the step was shortened to land on a kink/t1.
        h_new = jnp.where(accept & (t_next == stop) & (t + h > stop), jnp.maximum(h, h_used * factor), h_used * factor)
        idx2, buf2 = lax.cond(accept, lambda: _save_loop(tab, ts_pad, idx, buf, t, t_next, x, x1, ks), lambda: (idx, buf))
        return (
            jnp.where(accept, t_next, t), h_new, jnp.where(accept, x1, x), jnp.where(accept, f1, f), buf2, idx2,
            n + 1, n_acc + accept.astype(jnp.int32), n_rej + (~accept).astype(jnp.int32),
            jnp.where(accept, jnp.maximum(emax, e_mem), emax), jnp.where(accept, 0, run + 1),
        )

    t, h, x, f, buf, idx, n, n_acc, n_rej, emax, run = lax.while_loop(cond, body, state)
    code = _status(t >= t1, run).astype(jnp.int32)
    ones = jnp.ones((G,), jnp.int32)
    return _group_outputs(buf, x, jnp.full((G,), t), code * ones, n * ones, n_acc * ones, n_rej * ones, emax, T)


def _solve_group_fixed(tab, rhs, x0, grid, n_intervals, ts, rtol, atol, rolled=True):
    """Fixed steps over ``grid[:n_intervals + 1]``; members with a non-finite step are frozen."""
    N, G = x0.shape
    T = ts.shape[0]
    ts_pad = jnp.concatenate([ts, jnp.full((1,), jnp.inf)])
    t0 = grid[0]
    f0 = rhs(t0, x0)
    buf = jnp.full((T + 1, N, G), jnp.nan, dtype=x0.dtype)  # NaN: not reached (failure)
    idx = jnp.sum(ts <= t0).astype(jnp.int32)
    buf = jnp.where((jnp.arange(T + 1) < idx)[:, None, None], x0[None], buf)
    alive = jnp.ones((G,), dtype=bool)
    state = (x0, f0, buf, idx, alive, jnp.full((G,), t0), jnp.zeros((G,)))

    def body(i, s):
        x, f, buf, idx, alive, t_end, emax = s
        t, t_next = grid[i], grid[i + 1]
        x1, err, ks, f1 = _rk_step(tab, rhs, t, t_next, x, f, rolled)
        if f1 is None:
            f1 = rhs(t_next, x1)
        e_mem = _scaled_member_error(err, x, x1, rtol, atol)
        ok = alive & jnp.all(jnp.isfinite(x1), axis=0) & jnp.all(jnp.isfinite(f1), axis=0) & jnp.isfinite(e_mem)
        # Failed members: saved values become NaN, the carried state stays at the last good one.
        idx, buf = _save_loop(tab, ts_pad, idx, buf, t, t_next, jnp.where(ok, x, jnp.nan), jnp.where(ok, x1, jnp.nan),
                              jnp.where(ok, ks, 0.0))
        return (jnp.where(ok, x1, x), jnp.where(ok, f1, f), buf, idx, ok, jnp.where(ok, t_next, t_end),
                jnp.where(ok, jnp.maximum(emax, e_mem), emax))

    x, f, buf, idx, alive, t_end, emax = lax.fori_loop(0, n_intervals, body, state)
    code = jnp.where(alive, STATUS_SUCCESS, STATUS_NONFINITE).astype(jnp.int32)
    n = jnp.full((G,), n_intervals, dtype=jnp.int32)
    return _group_outputs(buf, x, t_end, code, n, n, jnp.zeros((G,), jnp.int32), emax, T)
