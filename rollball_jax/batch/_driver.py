"""The driver: :func:`simulate_batch` and its strategies (:class:`Adaptive`: diffrax per member,
``lax.map`` on the CPU with the small-loop option, else ``jax.vmap``; :class:`Lockstep`/
:class:`Shared`/:class:`Fixed`: the structure-of-arrays group loops)."""

from __future__ import annotations

import functools
import math
import os
import time
import types
import warnings
from collections.abc import Sequence

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, PartitionSpec

from .._typing import RealScalar, TimeSpan
from .. import _checks as checks, _xla_flags
from ..errors import ModelError, host_only
from ..models import AbstractModel
from ..solve import DEFAULT_ATOL, DEFAULT_MAX_STEPS, DEFAULT_RTOL, FORWARD_ONLY, default_solver, integrate
from .._results import result_code
from ._group_rk import _solve_group_fixed, _solve_group_shared, _solve_pool_lockstep, _tableau
from ._result import STATUS_NONFINITE, STATUS_NONFINITE_FIELD, STATUS_RAIL_LEFT, STATUS_SUCCESS, BatchResult
from ._group_field import GroupVectorField
from ._soa import ExpansionTooLarge, SoAVectorField
from ._stacking import member, stack
from ._strategies import AbstractBatchStrategy, Adaptive, as_strategy



def host_device_flags(n: int | None = None) -> str:
    """``XLA_FLAGS`` value giving ``n`` host (CPU) devices (default: ``os.cpu_count()``).

    Must be in the environment before JAX initialises its backends, e.g.
    ``os.environ["XLA_FLAGS"] = rb.batch.host_device_flags()`` before ``import jax``.
    """
    n = os.cpu_count() or 1 if n is None else int(n)
    flags = os.environ.get("XLA_FLAGS", "")
    parts = [p for p in flags.split() if not p.startswith("--xla_force_host_platform_device_count")]
    return " ".join(parts + [f"--xla_force_host_platform_device_count={n}"])


# ======================================================================================
# Driver
# ======================================================================================


def _as_batched(x, name: str, axis, B: int, shared_option: str | None = None):
    """``(x, its batch axis)``: a list stacked, or a pytree with batch axis ``axis`` (0, or
    None for one shared by all members). ``shared_option``: the keyword that shares it
    (named in the error message), if ``simulate_batch`` has one."""
    if isinstance(x, (list, tuple)):
        if len(x) != B:
            raise ModelError(f"{name}: {len(x)} given for a batch of {B} members")
        return stack(x), 0
    if axis is None:
        return x, None
    if axis != 0:
        raise ModelError(f"{name}: the batch axis must be 0 (or None for one shared {name[:-1]})")
    for leaf in jax.tree.leaves(x):
        if eqx.is_array(leaf) and (np.ndim(leaf) == 0 or np.shape(leaf)[0] != B):
            raise ModelError(
                f"{name}: array leaf of shape {np.shape(leaf)} has no leading batch axis of length {B}; "
                f"pass a list or a batch made by rollball_jax.batch.stack"
                + (f", or {shared_option}=None for one {name[:-1]} shared by all members" if shared_option else "")
            )
    return x, 0


def _devices(devices) -> list:
    if devices is None:
        return list(jax.local_devices())
    if isinstance(devices, int):
        return list(jax.local_devices())[:devices]
    return list(devices)


def _mesh(devices) -> Mesh:
    return Mesh(np.asarray(devices), ("batch",))


def _pad_rows(tree, n_pad):
    if n_pad == 0:
        return tree
    return jax.tree.map(lambda a: jnp.concatenate([a, jnp.repeat(a[:1], n_pad, axis=0)]) if eqx.is_array(a) else a, tree)


# ---- mode "adaptive" -------------------------------------------------------------------


def _maps_members(devices) -> bool:
    """Mode adaptive solves the members one after the other (``lax.map``) on CPU devices
    when XLA compiles a solve's step loop as one kernel (the small-loop option of
    :mod:`rollball_jax._xla_flags` in ``XLA_FLAGS``); otherwise it vmaps them. Measured, 2
    cores, tol 1e-8: with the option, B = 4096, mapped 12,882 traj/s, vmapped 2,254;
    without it (threshold 1,024), B = 128 over [0, 10], mapped ~3,600, vmapped ~5,200."""
    return all(d.platform == "cpu" for d in devices) and _xla_flags.small_loops_threshold() >= 100_000


@functools.lru_cache(maxsize=64)
def _adaptive_fn(solver, max_steps, control_axis, devices):
    one_at_a_time = _maps_members(devices)

    def one(m, c, x0, ts, t0, t1, rtol, atol, dt0):
        sol = integrate(m, c, x0, ts, t0=t0, t1=t1, solver=solver, rtol=rtol, atol=atol, max_steps=max_steps, dt0=dt0,
                        adjoint=FORWARD_ONLY)
        ys, y_end = sol.ys
        st = sol.stats
        return dict(ys=ys, x_end=y_end[-1], t_end=sol.ts[1][-1], code=result_code(sol.result),
                    num_steps=st["num_steps"], num_accepted_steps=st["num_accepted_steps"],
                    num_rejected_steps=st["num_rejected_steps"])

    def run(models, controls, x0s, ts, t0, t1, rtol, atol, dt0):
        if not one_at_a_time:
            return jax.vmap(one, in_axes=(0, control_axis, 0, None, None, None, None, None, None))(
                models, controls, x0s, ts, t0, t1, rtol, atol, dt0)
        # one member after the other (``lax.map``): each solve's step loop is then small
        # enough for XLA:CPU to compile as one kernel (``rollball_jax._xla_flags``)
        m_dyn, m_static = eqx.partition(models, eqx.is_array)
        c_dyn, c_static = eqx.partition(controls, eqx.is_array) if control_axis == 0 else (None, controls)

        def member(args):
            m, c, x0 = args
            control = c_static if control_axis is None else eqx.combine(c, c_static)
            return one(eqx.combine(m, m_static), control, x0, ts, t0, t1, rtol, atol, dt0)

        return lax.map(member, (m_dyn, c_dyn, x0s))

    if len(devices) > 1:
        spec_b, spec_r = PartitionSpec("batch"), PartitionSpec()
        run = jax.shard_map(
            run, mesh=_mesh(devices),
            in_specs=(spec_b, spec_b if control_axis == 0 else spec_r, spec_b, spec_r, spec_r, spec_r, spec_r, spec_r, spec_r),
            out_specs=spec_b, check_vma=False)
    return eqx.filter_jit(run)


def _run_adaptive(models, controls, control_axis, x0s, ts, t0, t1, solver, rtol, atol, max_steps, dt0, devices, unit):
    B = x0s.shape[0]
    nd = len(devices)
    unit = (min(unit, B) + nd - 1) // nd * nd
    if not _maps_members(devices):  # at least 2 members per device: XLA compiles a vmap of size 1 differently (rounding)
        unit = max(2 * nd, unit)
    fn = _adaptive_fn(solver, int(max_steps), control_axis, tuple(devices))
    outs = []
    f64 = np.float64
    for s in range(0, B, unit):
        e = min(s + unit, B)
        sl = lambda tree: tree if (s, e) == (0, B) else jax.tree.map(lambda a: a[s:e] if eqx.is_array(a) else a, tree)
        m, x = _pad_rows(sl(models), unit - (e - s)), _pad_rows(sl(x0s), unit - (e - s))
        c = _pad_rows(sl(controls), unit - (e - s)) if control_axis == 0 else controls
        out = fn(m, c, x, np.asarray(ts, f64), *(np.asarray(v, f64) for v in (t0, t1, rtol, atol)),
                 None if dt0 is None else np.asarray(dt0, f64))
        outs.append({k: np.asarray(v)[: e - s] for k, v in out.items()})
    res = {k: np.concatenate([o[k] for o in outs]) for k in outs[0]}
    res["error_estimate"] = np.full((B,), np.nan)
    return res


# ---- modes "shared" and "fixed" ----------------------------------------------------------


def _leaf_mask(models, controls, control_axis, B):
    """Per array leaf of (model, control): True if it varies over the batch."""
    mask = []
    for tree, axis in ((models, 0), (controls, control_axis)):
        for leaf in jax.tree.leaves(tree):
            if axis is None:
                mask.append(False)
                continue
            a = np.asarray(leaf)
            mask.append(bool(a.shape[0] > 1 and np.any(a != a[:1])))
    return mask


def _kinks(controls, control_axis, B):
    if control_axis is None:
        k = np.asarray(controls.kink_times, dtype=np.float64).reshape(1, -1)
        return np.repeat(k, B, axis=0)
    return np.asarray(jax.vmap(lambda c: c.kink_times)(controls), dtype=np.float64).reshape(B, -1)


@functools.lru_cache(maxsize=64)
def _soa_fn(kind, solver, max_steps, devices, treedef, batched_mask, leaf_specs, group, fast_trig, rolled,
            interpreter=True):
    """The compiled group solve; its right-hand side is the structure-of-arrays
    interpreter, or (``interpreter=False``: a member program past the interpreter's
    budget, see :func:`_self_check`) ``jax.vmap`` of the member's field."""
    tab = _tableau(solver)
    template = jax.tree.unflatten(treedef, [jax.ShapeDtypeStruct(s, np.dtype(d)) for s, d in leaf_specs])
    field_cache: dict = {}
    field_class = SoAVectorField if interpreter else GroupVectorField

    def field():
        if "f" not in field_cache:
            field_cache["f"] = field_class(*template, batched_mask, group, fast_trig=fast_trig)
        return field_cache["f"]

    def solve_groups(x0g, bleaves, uleaves, kinks, extra, ts, rtol, atol):
        # x0g (ng, N, G); bleaves [(ng, *shape, G)]; kinks (ng, M)
        f = field()

        def one(args):
            x0, bl, km = args
            rhs = lambda t, X: f(t, X, bl, uleaves)
            if kind == "shared":
                t0, t1, dt0 = extra
                return _solve_group_shared(tab, rhs, x0, km.reshape(-1), ts, t0, t1, rtol, atol, max_steps, dt0, rolled)

            grid, n_int = extra
            return _solve_group_fixed(tab, rhs, x0, grid, n_int, ts, rtol, atol, rolled)

        if kind == "lockstep":  # one pool of all local groups, refilled slot by slot
            t0, t1, dt0 = extra
            ng, N, G = x0g.shape
            pool = lambda a: jnp.moveaxis(a, 0, -2).reshape(a.shape[1:-1] + (ng * G,))
            make_rhs = lambda bl: (lambda t, X: f(t, X, bl, uleaves))
            res = _solve_pool_lockstep(tab, make_rhs, pool(x0g), [pool(b) for b in bleaves],
                                       kinks.reshape(ng * G, -1), ts, t0, t1, rtol, atol, max_steps, dt0, G, rolled)
            return {k: jnp.moveaxis(v.reshape(v.shape[:-1] + (ng, G)), -2, 0) for k, v in res.items()}
        return lax.map(one, (x0g, bleaves, kinks))

    run = solve_groups
    if len(devices) > 1:
        sb, sr = PartitionSpec("batch"), PartitionSpec()
        run = jax.shard_map(solve_groups, mesh=_mesh(devices), in_specs=(sb, sb, sr, sb, sr, sr, sr, sr),
                            out_specs=sb, check_vma=False)
    # The wide group programs run faster with XLA's CPU fusion emitters (off by default in
    # this package for compile time): see rollball_jax._xla_flags for the measurement.
    return jax.jit(run, compiler_options=_xla_flags.group_loop_compiler_options())


def _pack_groups(models, controls, control_axis, x0s, mask, group, n_groups):
    """Pad to n_groups·group members and lay out (ng, ..., G) batch-last per group."""
    B = x0s.shape[0]
    total = n_groups * group
    leaves = jax.tree.leaves((models, controls))
    n_model = len(jax.tree.leaves(models))
    bleaves, uleaves = [], []
    for i, (leaf, b) in enumerate(zip(leaves, mask)):
        a = np.asarray(leaf)
        batched_leaf = control_axis == 0 or i < n_model
        if b:
            a = np.concatenate([a, np.repeat(a[:1], total - B, axis=0)]) if total > B else a
            a = a.reshape((n_groups, group) + a.shape[1:])
            bleaves.append(np.moveaxis(a, 1, -1))
        else:
            uleaves.append(a[0] if batched_leaf else a)
    x = np.asarray(x0s, dtype=np.float64)
    x = np.concatenate([x, np.repeat(x[:1], total - B, axis=0)]) if total > B else x
    x = np.moveaxis(x.reshape(n_groups, group, -1), 1, -1)
    return x, bleaves, uleaves


def _template(models, controls, control_axis):
    m = member(models, 0)
    c = member(controls, 0) if control_axis == 0 else controls
    return m, c


def _group_size(spans_devices: bool, requested: int, B: int, n_devices: int) -> int:
    """Members per group: a multiple of 8 (XLA's code for odd lengths rounds differently),
    at most ``requested`` (rounded up). Lockstep/fixed: small enough that every device gets
    work (a member's result does not depend on its group). Shared (``spans_devices``):
    independent of the device count, because a group shares its steps."""
    up8 = lambda n: max(8, -(-int(n) // 8) * 8)
    if spans_devices:
        return min(up8(requested), up8(B))
    return min(up8(requested), up8(-(-B // n_devices)))


def _fixed_grid(t0, t1, dt, kinks) -> np.ndarray:
    """Equal steps of at most ``dt`` between consecutive break points (t0, kinks, t1)."""
    brk = np.unique(np.concatenate([[t0, t1], kinks[(kinks > t0) & (kinks < t1)]]))
    pts = [np.array([t0])]
    for a, b in zip(brk[:-1], brk[1:]):
        n = max(1, int(math.ceil((b - a) / dt * (1 - 1e-12))))
        seg = a + (b - a) * np.arange(1, n + 1) / n
        seg[-1] = b
        pts.append(seg)
    return np.concatenate(pts)


def _run_soa(kind, models, controls, control_axis, x0s, ts, t0, t1, solver, rtol, atol, max_steps, dt0, dt,
             devices, unit, group, mask, rolled, fast_trig, grid_capacity=None):
    B, N = x0s.shape
    nd = len(devices)
    per_call = max(1, unit // (group * nd)) * nd  # groups per call, multiple of the device count
    m_t, c_t = _template(models, controls, control_axis)
    leaves_t, treedef = jax.tree.flatten((m_t, c_t))
    leaf_specs = tuple((tuple(np.shape(x)), str(np.asarray(x).dtype)) for x in leaves_t)
    kinks_all = _kinks(controls, control_axis, B)
    n_groups = -(-B // group)
    calls = -(-n_groups // per_call)
    per_call = min(per_call, -(-n_groups // nd) * nd)
    x, bl, ul = _pack_groups(models, controls, control_axis, x0s, mask, group, calls * per_call)
    check_key = (treedef, tuple(mask), leaf_specs, int(group), bool(fast_trig))
    if check_key not in _SELF_CHECKED:
        _SELF_CHECKED[check_key] = _self_check(m_t, c_t, mask, group, fast_trig, t0, x[0], [b[0] for b in bl], ul)
    fn = _soa_fn(kind, solver, int(max_steps), tuple(devices), treedef, tuple(mask), leaf_specs, int(group),
                 fast_trig, bool(rolled), _SELF_CHECKED[check_key])
    kk = np.concatenate([kinks_all, np.repeat(kinks_all[:1], calls * per_call * group - B, axis=0)])
    kk = kk.reshape(calls * per_call, group, -1) if kinks_all.shape[1] else np.full((calls * per_call, group, 1), np.inf)
    f64 = np.float64
    if kind in ("shared", "lockstep"):
        extra = (f64(t0), f64(t1), None if dt0 is None else f64(dt0))
    else:
        grid = _fixed_grid(t0, t1, dt, np.unique(kinks_all))
        cap = grid_capacity or (1 << max(6, int(math.ceil(math.log2(len(grid))))))
        gp = np.concatenate([grid, np.full(cap + 1 - len(grid), t1)])
        extra = (jnp.asarray(gp), np.int32(len(grid) - 1))
    outs = []
    for c in range(calls):
        s = slice(c * per_call, (c + 1) * per_call)
        out = fn(jnp.asarray(x[s]), [jnp.asarray(b[s]) for b in bl], [jnp.asarray(u) for u in ul], jnp.asarray(kk[s]),
                 extra, jnp.asarray(ts), f64(rtol), f64(atol))
        outs.append(jax.tree.map(np.asarray, out))
    res = {}
    for k in outs[0]:
        v = np.concatenate([o[k] for o in outs])  # (ng, ..., G)
        v = np.moveaxis(v, -1, 1)  # (ng, G, ...)
        v = v.reshape((-1,) + v.shape[2:])[:B]
        res[k] = v  # ys: (ng, T, N, G) -> (B, T, N)
    return res


#: Structures (treedef, batched mask, leaf shapes, group, fast_trig) checked by
#: :func:`_self_check` in this process → whether their group solves use the interpreter.
_SELF_CHECKED: dict = {}

#: Largest relative difference allowed between the structure-of-arrays field and the
#: model's own (vmapped) field: the polynomial sin/cos is ≤ 2 ulp per evaluation
#: (measured ≤ 1.3e-15 relative over every rail, control and model kind).
SELF_CHECK_RTOL = 1e-10


def _self_check(m_t, c_t, mask, group, fast_trig, t0, X, bleaves, uleaves) -> bool:
    """At the first use of a structure: the structure-of-arrays field of the first group at
    its initial states and ``t0`` against ``jax.vmap`` of the model's own field. Returns
    whether the group solves use the interpreter: ``False`` when the member program is past
    its budget (:data:`~._soa.MAX_SCALARISED_ELEMENTS`, e.g. a feedback control with a
    large gain table; they then use ``jax.vmap`` of the member's field). Raises
    ``RuntimeError`` (an internal error: ``Adaptive()`` does not use the interpreter)
    if they differ by more than :data:`SELF_CHECK_RTOL` relative to the field's scale."""
    soa = SoAVectorField(m_t, c_t, mask, group, fast_trig=fast_trig)
    ref = GroupVectorField(m_t, c_t, mask, group, fast_trig=False)

    @jax.jit
    def both(t, X, bl, ul):
        return soa(t, X, bl, ul), ref(t, X, bl, ul)

    args = (jnp.asarray(t0, dtype=jnp.float64), jnp.asarray(X), [jnp.asarray(b) for b in bleaves],
            [jnp.asarray(u) for u in uleaves])
    try:
        a, b = (np.asarray(v) for v in both(*args))
    except ExpansionTooLarge:
        return False
    finite = np.isfinite(b)
    scale = max(1.0, float(np.max(np.abs(b[finite]), initial=0.0)))
    err = float(np.max(np.abs(a[finite] - b[finite]), initial=0.0)) / scale
    if err > SELF_CHECK_RTOL or not np.array_equal(np.isfinite(a), finite):
        raise RuntimeError(
            f"internal error: the batch's structure-of-arrays vector field differs from the model's own field "
            f"by {err:.1e} (relative) at the first group's initial states; use strategy=Adaptive() (jax.vmap of "
            f"diffrax, no interpreter) and please report this model"
        )
    return True


def choose_fixed_dt(run_fixed, t0, t1, dt_start=None, target=1.0, max_tries=6):
    """Largest "nice" step ``dt`` for which ``run_fixed(dt)`` reports a max scaled
    embedded error estimate ≤ ``target``; ``run_fixed(dt) -> (error_estimate (B,), status)``.

    Starts from ``dt_start`` (default (t1 − t0)/64) and rescales by the error's order.
    Returns ``(dt, estimate)``.
    """
    dt = (t1 - t0) / 64 if dt_start is None else dt_start
    est = np.inf
    for _ in range(max_tries):
        est_arr, status = run_fixed(dt)
        ok = status == STATUS_SUCCESS
        est = float(np.max(est_arr[ok])) if np.any(ok) else np.inf
        if est <= target:
            if est < 0.05 * target:  # far too fine: coarsen once, keep if still fine
                dt2 = dt * min(4.0, (0.5 * target / max(est, 1e-300)) ** (1 / 8))
                est2_arr, status2 = run_fixed(dt2)
                ok2 = status2 == STATUS_SUCCESS
                est2 = float(np.max(est2_arr[ok2])) if np.any(ok2) else np.inf
                if est2 <= target:
                    return dt2, est2
            return dt, est
        dt = dt * max(0.2, min(0.9, 0.8 * (target / est) ** (1 / 8)))
    return dt, est


@host_only("simulate_batch", "it batches itself (call it outside jax.jit and jax.vmap); for derivatives of a "
           "batch, jax.vmap rb.trajectory, rb.final_state or rb.final_gc")
def simulate_batch(
    models,
    controls,
    x0s,
    t_span: TimeSpan | None = None,
    *,
    ts=None,
    n_save: int = 21,
    strategy: AbstractBatchStrategy | str = Adaptive(),
    solver: dfx.AbstractSolver | None = None,
    rtol: RealScalar = DEFAULT_RTOL,
    atol: RealScalar = DEFAULT_ATOL,
    max_steps: int = DEFAULT_MAX_STEPS,
    dt0: RealScalar | None = None,
    devices=None,
    control_axis: int | None = 0,
    unit: int = 4096,
    batched_mask: Sequence[bool] | None = None,
) -> BatchResult:
    """Simulate B same-structure designs together (one compilation for the whole batch).

    Parameters
    ----------
    models : a batched model (leading axis B on every array leaf, see :func:`stack`) or a
        list of models.
    controls : a batched control, a list, or one control shared by all members
        (``control_axis=None``).
    x0s : (B, N) initial states in the paper's order.
    t_span : (t0, t1); default ``(ts[0], ts[-1])``.
    ts : (T,) save times shared by all members (default ``n_save`` equally spaced points).
    strategy : how the members are advanced, with its own options: :class:`Adaptive`
        (default; equals per-member :func:`rollball_jax.simulate`), :class:`Lockstep`,
        :class:`Shared` or :class:`Fixed` (``group_size``, ``dt``, ``refine``, ... are
        their fields); a name from :data:`MODES` stands for that strategy with its
        default options. See the module docstring and ``docs/batch.md``.
    solver, rtol, atol, max_steps, dt0 : as for :func:`rollball_jax.simulate`
        (default ``Dopri8``). The group strategies take explicit RK solvers with a Butcher
        tableau (Dopri8, Dopri5, Tsit5, ...); ``max_steps`` counts each member's steps
        (lockstep) or the group's (shared). Results do not depend on the number of devices.
    devices : devices to shard over (default: all local devices; an int takes the first n).
    unit : members per compiled call (bounds memory; the batch is processed in units).
    batched_mask : group strategies: per array leaf of (model, control), whether it varies
        over members (default: detected from the values). Sweeps pass it so that every
        chunk compiles the same program.

    Returns a :class:`BatchResult`. Never raises for a failed member: check ``status``.
    Raises ``ModelError`` for invalid input (shapes, tolerances, an unknown strategy);
    ``NotTraceableError`` when called under ``jax.jit``, ``jax.vmap`` or autodiff.
    Warns (``RuntimeWarning``) and runs on one device when mode adaptive is given an
    implicit solver and several devices (its linear solves fail under ``jax.shard_map``).
    """
    checks.require_x64("simulate_batch")
    strategy = as_strategy(strategy)
    mode = strategy.name
    checks.tolerance(rtol, "rtol")
    checks.tolerance(atol, "atol")
    max_steps = checks.max_steps(max_steps)
    if dt0 is not None and not checks.finite_number(dt0, "dt0") > 0:
        raise ModelError(f"'dt0' must be positive; got {dt0}")
    x0s = np.asarray(x0s, dtype=np.float64)
    if x0s.ndim != 2:
        raise ModelError(f"x0s must have shape (B, N); got {x0s.shape}")
    B = x0s.shape[0]
    models, _ = _as_batched(models, "models", 0, B)
    controls, control_axis = _as_batched(controls, "controls", control_axis, B, "control_axis")
    m_t, c_t = _template(models, controls, control_axis)
    if x0s.shape[1] != m_t.state_size:
        raise ModelError(f"x0s must have {m_t.state_size} columns ({', '.join(m_t.state_labels())}); got {x0s.shape[1]}")
    if not np.all(np.isfinite(x0s)):
        bad = int(np.argmax(~np.all(np.isfinite(x0s), axis=1)))
        raise ModelError(f"x0s of member {bad} contains non-finite values")
    if not isinstance(m_t, AbstractModel):
        raise ModelError(f"'models' must be rollball_jax models (Ball, Disk, ...); got {type(m_t).__name__}")
    checks.control(c_t, "controls")
    _check_initial_states(models, x0s, m_t)
    if ts is None:
        if t_span is None:
            raise ModelError("give t_span or ts")
        ts = np.linspace(float(t_span[0]), float(t_span[1]), n_save)
    ts = np.asarray(ts, dtype=np.float64).reshape(-1)
    t0, t1 = (float(ts[0]), float(ts[-1])) if t_span is None else (float(t_span[0]), float(t_span[1]))
    if not t1 > t0:
        raise ModelError(f"t_span must satisfy t0 < t1; got {(t0, t1)}")
    if ts.size == 0 or ts[0] < t0 or ts[-1] > t1 or np.any(np.diff(ts) < 0):
        raise ModelError("save times ts must be non-decreasing and lie within t_span")
    solver = default_solver() if solver is None else solver
    devs = _devices(devices)
    if strategy.solves_with_diffrax and len(devs) > 1 and isinstance(solver, dfx.AbstractImplicitSolver):
        # Inside jax.shard_map (jax 0.10.2, lineax 0.1.1) an implicit step's linear solve
        # fails: the operator's structure carries the manual mesh's sharding and the
        # vector's does not ("pytree does not match out_structure").
        warnings.warn(f"{type(solver).__name__} is an implicit solver: mode {mode} runs it on one device "
                      f"({devs[0]}), not on the {len(devs)} requested (its linear solves fail under "
                      "jax.shard_map); BatchResult.n_devices says 1", RuntimeWarning, stacklevel=2)
        devs = devs[:1]
    start = time.perf_counter()
    refined = np.zeros((B,), dtype=bool)
    solved = {"dt": None, "group": None}  # what the strategy's run used (reported in BatchResult)

    def adaptive(idx=None):
        """Members ``idx`` (default: all) with diffrax, one solve each."""
        idx = np.arange(B) if idx is None else idx
        # every member (the first run): the stacked leaves as they are (an eager gather per leaf cost ~0.5 ms)
        everyone = idx.shape[0] == B and np.array_equal(idx, np.arange(B))
        sub = lambda tree, axis=0: jax.tree.map(lambda a: a[idx] if eqx.is_array(a) else a, tree) if axis == 0 and not everyone else tree
        return _run_adaptive(sub(models), sub(controls, control_axis), control_axis, x0s[idx], ts, t0, t1, solver,
                             rtol, atol, max_steps, dt0, devs, unit)

    def common():
        """Arguments of every group-loop run of this batch (group size and leaf mask found once)."""
        if solved["group"] is None:
            solved["group"] = _group_size(strategy.groups_span_devices, strategy.group_size, B, len(devs))
            solved["mask"] = list(batched_mask) if batched_mask is not None else _leaf_mask(models, controls, control_axis, B)
        return dict(models=models, controls=controls, control_axis=control_axis, ts=ts, t0=t0, t1=t1,
                    solver=solver, rtol=rtol, atol=atol, max_steps=max_steps, dt0=dt0, devices=devs,
                    group=solved["group"], mask=solved["mask"], rolled=strategy.rolled, fast_trig=strategy.fast_trig)

    def group(kind, dt=None):
        """The whole batch with the group loop ``kind`` (``"lockstep"``, ``"shared"``, ``"fixed"``)."""
        if kind == "fixed":
            solved["dt"] = float(dt)
        return _run_soa(kind, x0s=x0s, dt=dt, unit=unit, **common())

    def pilot_dt():
        """Fixed step from a pilot: the first unit of the batch, with the compiled program of the real run."""
        pcommon = common()
        pilot_idx = np.arange(min(B, max(pcommon["group"] * len(devs), unit)))
        sub = lambda tree: jax.tree.map(lambda a: a[pilot_idx] if eqx.is_array(a) else a, tree)
        pcommon.update(models=sub(models), controls=sub(controls) if control_axis == 0 else controls)
        kinks_all = np.unique(_kinks(controls, control_axis, B))

        def run_fixed(d):
            n = len(_fixed_grid(t0, t1, d, kinks_all))
            cap = 1 << max(6, int(math.ceil(math.log2(n))))
            r = _run_soa("fixed", x0s=x0s[pilot_idx], dt=d, unit=unit, grid_capacity=cap, **pcommon)
            return r["error_estimate"], r["code"]

        return choose_fixed_dt(run_fixed, t0, t1)[0]

    res, bad = strategy.solve_batch(types.SimpleNamespace(adaptive=adaptive, group=group, pilot_dt=pilot_dt))
    if bad is not None and np.any(bad):
        idx = np.nonzero(bad)[0]
        sub = adaptive(idx)
        for k, v in sub.items():
            if k == "error_estimate":
                continue
            res[k][idx] = v
        res["error_estimate"][idx] = np.nan
        refined[idx] = True
    used_dt, group_size = solved["dt"], solved["group"]
    ys = res["ys"]
    if strategy.solves_with_diffrax:
        # Non-finite values that diffrax accepted (or left after a failure) → "nonfinite".
        nonfinite = ~np.all(np.isfinite(ys.reshape(B, -1)), axis=1) & (res["code"] == STATUS_SUCCESS)
        res["code"] = np.where(nonfinite, STATUS_NONFINITE, res["code"])
    details = _post_checks(models, controls, control_axis, m_t, ts, res)
    return BatchResult(
        ts=ts, ys=ys, x_final=res["x_end"], t_final=res["t_end"], status=res["code"].astype(np.int32),
        num_steps=res["num_steps"].astype(np.int64), num_accepted_steps=res["num_accepted_steps"].astype(np.int64),
        num_rejected_steps=res["num_rejected_steps"].astype(np.int64), error_estimate=res["error_estimate"],
        refined=refined, mode=mode, strategy=strategy, rtol=float(rtol), atol=float(atol), dt=used_dt, group_size=group_size,
        n_devices=len(devs), wall_time=time.perf_counter() - start, details=details,
    )


def _check_initial_states(models, x0s, m_t) -> None:
    """Refuse a member whose initial versor is not unit or whose masses start outside the shell."""
    k = m_t.versor_index
    if k is not None:
        norms = np.linalg.norm(x0s[:, k : k + 4], axis=1)
        bad = np.nonzero(~checks.versor_norm_ok(norms))[0]
        if bad.size:
            i = int(bad[0])
            checks.versor(x0s[i, k : k + 4], f"x0s[{i}, {k}:{k + 4}] (q of member {i})")
    if m_t.n:
        out = np.asarray(_outside_fn(models, jnp.asarray(x0s)))
        if np.any(out):
            i = int(np.argmax(out))
            raise ModelError(f"member {i}: a point mass starts outside the shell (|ζ(θ)| ≥ r): its rail leaves the "
                             f"ball, or x0s[{i}] puts the mass where it does (a batch built by rollball_jax.batch.stack "
                             "from checked models can only get here through edited arrays or x0s)")


@eqx.filter_jit
def _outside_fn(models, xs):
    return eqx.filter_vmap(lambda m, x: m.outside(x))(models, xs)


@eqx.filter_jit
def _outside_along(models, ys):
    # (B, T): a mass outside the shell at a save time (non-finite rows count as inside)
    return eqx.filter_vmap(lambda m, y: jax.vmap(m.outside)(jnp.where(jnp.isfinite(y), y, 0.0)))(models, ys)


@eqx.filter_jit
def _field_probe(models, controls, control_axis, t_end, x_end):
    # solve's failure probe, per member
    from ..solve import _probe_field

    if control_axis is None:
        return eqx.filter_vmap(lambda m, t, x: _probe_field(m, controls, t, x))(models, t_end, x_end)
    return eqx.filter_vmap(_probe_field)(models, controls, t_end, x_end)


def _post_checks(models, controls, control_axis, m_t, ts, res) -> tuple:
    """Mark members whose solve failed on a non-finite vector field, or whose masses left the
    shell at a save time; returns the per-member cause details (``""`` where none)."""
    from ..solve import _nonfinite_field_message

    B = res["code"].shape[0]
    details = [""] * B
    failed = np.nonzero(res["code"] != STATUS_SUCCESS)[0]
    if failed.size:
        sub = lambda tree: jax.tree.map(lambda a: a[failed] if eqx.is_array(a) else a, tree)
        x_end = np.where(np.isfinite(res["x_end"][failed]), res["x_end"][failed], 0.0)
        probe_ts, probe = _field_probe(sub(models), sub(controls) if control_axis == 0 else controls, control_axis,
                                       jnp.asarray(res["t_end"][failed]), jnp.asarray(x_end))
        probe_ts, probe = np.asarray(probe_ts), np.asarray(probe)
        for j, i in enumerate(failed):
            found = _nonfinite_field_message(m_t, probe_ts[j], probe[j])
            if found is not None and np.all(np.isfinite(res["x_end"][i])):
                res["code"][i] = STATUS_NONFINITE_FIELD
                details[i] = found[1]
    if m_t.n:
        out = np.asarray(_outside_along(models, jnp.asarray(res["ys"])))
        for i in np.nonzero(np.any(out, axis=1) & (res["code"] == STATUS_SUCCESS))[0]:
            k = int(np.argmax(out[i]))
            res["code"][i] = STATUS_RAIL_LEFT
            details[i] = f"a point mass is outside the shell (|ζ(θ)| ≥ r) at t = {ts[k]:.9g}"
    return tuple(details)
