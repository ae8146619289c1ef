"""Batched simulation: thousands of designs in one compiled solve, on every local device.

A *batch* is the same pytree as one model (or control) with a leading axis of length B on
every array leaf: build it with :func:`stack` from a list of same-structure modules, or
with ``eqx.filter_vmap`` over a constructor. :func:`simulate_batch` solves all members
with one compilation and returns a :class:`BatchResult` in which every member carries its
own status (``diffrax.RESULTS`` names, e.g. ``max_steps_reached``, ``nonfinite``): a
failed member does not disturb the others.

Strategies (``mode=``), see ``docs/batch.md`` for measurements:

``"adaptive"`` (default)
    ``jax.vmap`` of :func:`rollball_jax.integrate`: every member has its own adaptive
    step sequence, exactly as a single :func:`rollball_jax.simulate` call with the same
    settings (results agree to within the tolerance, not bit for bit: see ``docs/batch.md``). Under ``vmap`` the members advance in
    lockstep: the batch runs as many loop iterations as its slowest member, and every
    iteration pays for diffrax's per-member control flow.
``"lockstep"``
    The same per-member adaptive stepping (diffrax's default controller: I-control,
    safety 0.9, step factors in [0.2, 10], Hairer's initial step, steps landing on the
    control's kinks) written as one loop over a *group* of ``group_size`` members in
    structure-of-arrays layout: every iteration advances each unfinished member by one
    of its own steps. Same accuracy class as ``"adaptive"`` (not bit-identical: the
    arithmetic is reordered and sin/cos are computed by :func:`sincos`), several times
    faster. Failures are per member (``max_steps`` counts each member's own steps).
``"shared"``
    One adaptive step for the whole group: the error norm is the max over the group's
    members of their RMS scaled error, so every member meets the tolerance, but every
    member also takes the steps its hardest neighbour needs. Worth it when members are
    similar (small perturbations of one design). A group whose shared solve fails (e.g.
    one member makes the step collapse and the group runs out of steps) is re-solved
    member by member in ``"adaptive"`` mode, so failures stay isolated.
``"fixed"``
    The structure-of-arrays system on a fixed step grid (step ``dt``, refined so that
    steps land on every control kink): no step control and no rejected steps. The
    embedded error estimate of every step is still computed and its maximum per member
    is reported (``BatchResult.error_estimate``, in units of the tolerance: ≤ 1 means
    every step met ``rtol``/``atol``). ``dt=None`` picks the step from the first unit
    of the batch (pilot) so that this estimate is ≤ 1; members that still exceed it are
    re-solved in ``"adaptive"`` mode (``refine=True``).

The fast modes evaluate the vector field through a structure-of-arrays transformation
of the model's own jaxpr (:class:`SoAVectorField`): every scalar of the single-member
computation becomes one vector over the group, constants are folded at trace time, and
sin/cos are replaced by a vectorisable polynomial :func:`sincos` (≤ 2 ulp for
|x| < 1e5). The physics is not duplicated: the program is derived from
``model.vector_field`` by tracing, so it works for every model, rail and control.

Devices: batches are split over ``devices`` (default: all local devices) with
``jax.shard_map`` over a :class:`jax.sharding.Mesh`, padding B with copies of the first
member. On the CPU, XLA gives one device per process; set
``XLA_FLAGS=--xla_force_host_platform_device_count=<cores>`` before importing JAX to use
every core (:func:`host_device_flags`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend import core as jcore
from jax.sharding import Mesh, PartitionSpec

from . import checks
from .errors import ModelError
from .models import AbstractModel
from .solve import DEFAULT_ATOL, DEFAULT_MAX_STEPS, DEFAULT_RTOL, default_solver, integrate

__all__ = [
    "MODES",
    "BatchResult",
    "SoAVectorField",
    "STATUS_NONFINITE",
    "STATUS_SUCCESS",
    "batch_size",
    "choose_fixed_dt",
    "host_device_flags",
    "member",
    "simulate_batch",
    "sincos",
    "stack",
    "status_name",
]

MODES = ("adaptive", "lockstep", "shared", "fixed")

#: diffrax result names by code (``diffrax.RESULTS``), e.g. 0 successful, 1 max_steps_reached.
STATUS_NAMES: dict[int, str] = {
    int(np.asarray(item._value)): name for name, item in dfx.RESULTS._name_to_item.items()
}
STATUS_SUCCESS = 0
STATUS_MAX_STEPS = next(k for k, v in STATUS_NAMES.items() if v == "max_steps_reached")
STATUS_NONFINITE = next(k for k, v in STATUS_NAMES.items() if v == "nonfinite")
#: Codes used by sweeps for members that were never solved.
STATUS_INVALID = 100
STATUS_NOT_RUN = -1
#: Codes set by the checks after a solve (the cause detail is in ``BatchResult.causes``).
STATUS_NONFINITE_FIELD = 101
STATUS_RAIL_LEFT = 102
STATUS_NAMES[STATUS_INVALID] = "invalid_config"
STATUS_NAMES[STATUS_NOT_RUN] = "not_run"
STATUS_NAMES[STATUS_NONFINITE_FIELD] = "nonfinite_vector_field"
STATUS_NAMES[STATUS_RAIL_LEFT] = "rail_left"


def status_name(code: int) -> str:
    """Name of a member status code (diffrax ``RESULTS`` name, or ``invalid_config``)."""
    return STATUS_NAMES.get(int(code), f"code_{int(code)}")


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
# Stacking
# ======================================================================================


def stack(items: Sequence[Any]) -> Any:
    """Stack same-structure pytrees (models, controls, states) along a new leading axis.

    Raises :class:`ModelError` naming the first member whose structure (number and kinds
    of rails, control type, static fields) differs from member 0.
    """
    items = list(items)
    if not items:
        raise ModelError("cannot stack an empty sequence")
    ref = jax.tree.structure(items[0])
    for i, it in enumerate(items[1:], 1):
        if jax.tree.structure(it) != ref:
            raise ModelError(
                f"member {i} differs in structure from member 0 (number or kinds of rails, control type, "
                "static fields): a batch holds same-structure designs only; group members by structure"
            )
    return jax.tree.map(lambda *xs: jnp.stack([jnp.asarray(x) for x in xs]), *items)


def member(batched: Any, i: int) -> Any:
    """Member ``i`` of a batched pytree (every array leaf indexed on its leading axis)."""
    return jax.tree.map(lambda x: x[i] if eqx.is_array(x) else x, batched)


def batch_size(batched: Any) -> int:
    """Length of the leading axis shared by the array leaves of ``batched``."""
    sizes = {int(np.shape(x)[0]) for x in jax.tree.leaves(batched) if eqx.is_array(x) and np.ndim(x) > 0}
    if len(sizes) != 1:
        raise ModelError(f"array leaves do not share one leading batch axis (sizes {sorted(sizes)})")
    return sizes.pop()


# ======================================================================================
# Vectorisable sin/cos
# ======================================================================================

# Cody–Waite split of π/2 (fdlibm): k·_PIO2_1 is exact for |k| < 2^20.
_PIO2_1 = 1.57079632673412561417e00
_PIO2_2 = 6.07710050630396597660e-11
_PIO2_3 = 2.02226624871116645580e-21
_TWO_OVER_PI = 6.36619772367581382433e-01
_SIN_COEFFS = [(-1.0) ** k / math.factorial(2 * k + 1) for k in range(1, 9)]  # r^3 ... r^17
_COS_COEFFS = [(-1.0) ** k / math.factorial(2 * k) for k in range(1, 10)]  # r^2 ... r^18


def sincos(x):
    """``(sin x, cos x)`` from elementwise arithmetic only (vectorises on every backend).

    Reduction r = x − kπ/2 with a three-part π/2 (Cody–Waite), then Taylor polynomials on
    |r| ≤ π/4 (truncation < 1e-19). Error ≤ 2 ulp for |x| < 1e5 (tested against libm);
    beyond ~1e6 the reduction loses accuracy. XLA's float64 sin/cos on the CPU cost about
    17 ns per element (scalar libm calls); this costs about 2.
    """
    k = jnp.round(x * _TWO_OVER_PI)
    r = ((x - k * _PIO2_1) - k * _PIO2_2) - k * _PIO2_3
    z = r * r
    ps = _SIN_COEFFS[-1]
    for c in _SIN_COEFFS[-2::-1]:
        ps = ps * z + c
    s = r + r * z * ps
    pc = _COS_COEFFS[-1]
    for c in _COS_COEFFS[-2::-1]:
        pc = pc * z + c
    c = 1.0 + z * pc
    q = k - 4.0 * jnp.floor(k * 0.25)  # quadrant 0..3
    sin = jnp.where(q == 0, s, jnp.where(q == 1, c, jnp.where(q == 2, -s, -c)))
    cos = jnp.where(q == 0, c, jnp.where(q == 1, -s, jnp.where(q == 2, -c, s)))
    return sin, cos


# ======================================================================================
# Structure-of-arrays interpreter
# ======================================================================================

_STRUCTURAL = {
    "slice", "squeeze", "reshape", "transpose", "broadcast_in_dim", "concatenate", "pad", "rev",
    "expand_dims", "copy", "copy_p", "stack", "unstack", "gather", "dynamic_slice", "dynamic_update_slice",
}
_DATA_OPERANDS = {"gather": (0,), "dynamic_slice": (0,), "dynamic_update_slice": (0, 1)}
_ELEMENTWISE = {
    "add", "sub", "mul", "div", "neg", "max", "min", "sin", "cos", "tan", "exp", "log", "sqrt", "rsqrt",
    "integer_pow", "pow", "abs", "sign", "select_n", "eq", "ne", "lt", "le", "gt", "ge", "and", "or", "not",
    "convert_element_type", "clamp", "atan2", "asin", "acos", "atan", "tanh", "sinh", "cosh", "expm1",
    "log1p", "floor", "ceil", "round", "rem", "square", "logistic", "exp2", "cbrt", "is_finite",
    "erf", "erfc", "stop_gradient", "xor", "reduce_precision",
}
_REDUCTIONS = {"reduce_sum": "add", "reduce_max": "max", "reduce_min": "min", "reduce_prod": "mul"}
_BINOPS = {"add": lax.add_p, "mul": lax.mul_p, "max": lax.max_p, "min": lax.min_p}
_CALL_PARAMS = ("jaxpr", "call_jaxpr", "fun_jaxpr")


def _concrete(e) -> bool:
    return isinstance(e, (np.generic, np.ndarray))


def _is_value(e, value) -> bool:
    return _concrete(e) and np.ndim(e) == 0 and bool(np.asarray(e) == value)


def _obj(value, dtype=None) -> np.ndarray:
    a = np.asarray(value, dtype=dtype)
    out = np.empty(a.shape, dtype=object)
    for idx in np.ndindex(a.shape):
        out[idx] = a[idx]
    return out


def _np_gather(operand, indices, *, dimension_numbers, slice_sizes, mode, fill_value=None, **_):
    dn = dimension_numbers
    if getattr(dn, "operand_batching_dims", ()) or getattr(dn, "start_indices_batching_dims", ()):
        return None
    offset_dims, collapsed, start_map = tuple(dn.offset_dims), tuple(dn.collapsed_slice_dims), tuple(dn.start_index_map)
    kept = [d for d in range(operand.ndim) if d not in collapsed]
    batch_shape = indices.shape[:-1]
    out_rank = len(batch_shape) + len(kept)
    out_shape, bi, ki = [], 0, 0
    for pos in range(out_rank):
        if pos in offset_dims:
            out_shape.append(slice_sizes[kept[ki]])
            ki += 1
        else:
            out_shape.append(batch_shape[bi])
            bi += 1
    mode_name = getattr(mode, "name", str(mode))
    fill = fill_value if fill_value is not None else (np.nan if operand.dtype.kind == "f" else 0)
    out = np.empty(out_shape, dtype=operand.dtype)
    for b in np.ndindex(batch_shape):
        start = [0] * operand.ndim
        for k, d in enumerate(start_map):
            start[d] = int(indices[b + (k,)])
        oob = any(start[d] < 0 or start[d] + slice_sizes[d] > operand.shape[d] for d in range(operand.ndim))
        if oob and "FILL" in mode_name:
            piece = np.full([slice_sizes[d] for d in kept], fill, dtype=operand.dtype)
        else:
            start = [min(max(start[d], 0), operand.shape[d] - slice_sizes[d]) for d in range(operand.ndim)]
            piece = operand[tuple(slice(start[d], start[d] + slice_sizes[d]) for d in range(operand.ndim))]
            piece = piece.reshape([slice_sizes[d] for d in kept])
        idx, bi = [], 0
        for pos in range(out_rank):
            if pos in offset_dims:
                idx.append(slice(None))
            else:
                idx.append(b[bi])
                bi += 1
        out[tuple(idx)] = piece
    return out


def _np_round(x, rounding_method=0, **_):
    if int(getattr(rounding_method, "value", rounding_method)) == 1:
        return np.round(x)
    return np.trunc(x + np.copysign(0.5, x))


def _np_div(a, b, **_):
    if np.asarray(a).dtype.kind in "iu":
        return (np.trunc(np.asarray(a) / np.asarray(b))).astype(np.asarray(a).dtype)
    return np.divide(a, b)


def _np_iota(*, dtype, shape, dimension, **_):
    r = np.arange(shape[dimension], dtype=dtype)
    return np.broadcast_to(r.reshape([-1 if i == dimension else 1 for i in range(len(shape))]), shape).copy()


def _np_select_n(which, *cases, **_):
    return np.choose(np.asarray(which).astype(np.int64), cases)


def _np_dynamic_slice(operand, *starts, slice_sizes, **_):
    st = [min(max(int(s), 0), operand.shape[d] - slice_sizes[d]) for d, s in enumerate(starts)]
    return operand[tuple(slice(a, a + n) for a, n in zip(st, slice_sizes))]


def _np_dynamic_update_slice(operand, update, *starts, **_):
    out = np.array(operand, copy=True)
    st = [min(max(int(s), 0), operand.shape[d] - update.shape[d]) for d, s in enumerate(starts)]
    out[tuple(slice(a, a + n) for a, n in zip(st, update.shape))] = update
    return out


def _np_pad(operand, padding_value, *, padding_config, **_):
    from jax._src import lax_reference

    return lax_reference.pad(operand, padding_value, padding_config)


def _np_dot_general(lhs, rhs, *, dimension_numbers, preferred_element_type=None, **_):
    (lc, rc), (lb, rb) = dimension_numbers
    lf = [i for i in range(lhs.ndim) if i not in lc and i not in lb]
    rf = [i for i in range(rhs.ndim) if i not in rc and i not in rb]
    L = np.transpose(lhs, list(lb) + lf + list(lc))
    R = np.transpose(rhs, list(rb) + rf + list(rc))
    nb, k = len(lb), int(np.prod([lhs.shape[i] for i in lc], dtype=int))
    L = L.reshape(L.shape[: nb + len(lf)] + (k,))
    R = R.reshape(R.shape[: nb + len(rf)] + (k,))
    b = "abcdefgh"[:nb]
    i = "ijkl"[: len(lf)]
    j = "mnop"[: len(rf)]
    out = np.einsum(f"{b}{i}z,{b}{j}z->{b}{i}{j}", L, R)
    return out.astype(preferred_element_type) if preferred_element_type is not None else out


def _np_reduce(fn):
    return lambda x, *, axes, **_: fn(x, axis=tuple(axes))


_NP_EVAL: dict[str, Callable] = {
    "add": lambda a, b, **_: np.add(a, b), "sub": lambda a, b, **_: np.subtract(a, b),
    "mul": lambda a, b, **_: np.multiply(a, b), "div": _np_div, "neg": lambda a, **_: np.negative(a),
    "max": lambda a, b, **_: np.maximum(a, b), "min": lambda a, b, **_: np.minimum(a, b),
    "eq": lambda a, b, **_: np.equal(a, b), "ne": lambda a, b, **_: np.not_equal(a, b),
    "lt": lambda a, b, **_: np.less(a, b), "le": lambda a, b, **_: np.less_equal(a, b),
    "gt": lambda a, b, **_: np.greater(a, b), "ge": lambda a, b, **_: np.greater_equal(a, b),
    "and": lambda a, b, **_: np.bitwise_and(a, b), "or": lambda a, b, **_: np.bitwise_or(a, b),
    "not": lambda a, **_: np.invert(a), "abs": lambda a, **_: np.abs(a), "sign": lambda a, **_: np.sign(a),
    "sin": lambda a, **_: np.sin(a), "cos": lambda a, **_: np.cos(a), "sqrt": lambda a, **_: np.sqrt(a),
    "exp": lambda a, **_: np.exp(a), "log": lambda a, **_: np.log(a), "floor": lambda a, **_: np.floor(a),
    "ceil": lambda a, **_: np.ceil(a), "round": _np_round, "square": lambda a, **_: np.square(a),
    "integer_pow": lambda a, *, y, **_: np.power(a, y) if y >= 0 else 1.0 / np.power(a, -y),
    "pow": lambda a, b, **_: np.power(a, b), "atan2": lambda a, b, **_: np.arctan2(a, b),
    "is_finite": lambda a, **_: np.isfinite(a), "rem": lambda a, b, **_: np.fmod(a, b),
    "convert_element_type": lambda a, *, new_dtype, **_: np.asarray(a).astype(new_dtype),
    "select_n": _np_select_n, "clamp": lambda lo, x, hi, **_: np.clip(x, lo, hi),
    "stop_gradient": lambda a, **_: a, "copy": lambda a, **_: np.array(a), "copy_p": lambda a, **_: np.array(a),
    "iota": _np_iota,
    "slice": lambda a, *, start_indices, limit_indices, strides=None, **_: a[
        tuple(slice(s, l, st) for s, l, st in zip(start_indices, limit_indices, strides or (1,) * a.ndim))],
    "squeeze": lambda a, *, dimensions, **_: np.squeeze(a, axis=tuple(dimensions)),
    "reshape": lambda a, *, new_sizes, dimensions=None, **_: np.reshape(a, new_sizes),
    "transpose": lambda a, *, permutation, **_: np.transpose(a, permutation),
    "broadcast_in_dim": lambda a, *, shape, broadcast_dimensions, **_: np.broadcast_to(
        np.reshape(a, [a.shape[broadcast_dimensions.index(i)] if i in broadcast_dimensions else 1 for i in range(len(shape))]),
        shape).copy(),
    "concatenate": lambda *a, dimension, **_: np.concatenate(a, axis=dimension),
    "stack": lambda *a, axis, **_: np.stack(a, axis=axis),
    "expand_dims": lambda a, *, dimensions, **_: np.expand_dims(a, tuple(dimensions)),
    "rev": lambda a, *, dimensions, **_: np.flip(a, axis=tuple(dimensions)),
    "pad": _np_pad, "gather": _np_gather, "dynamic_slice": _np_dynamic_slice,
    "dynamic_update_slice": _np_dynamic_update_slice, "dot_general": _np_dot_general,
    "reduce_sum": _np_reduce(np.sum), "reduce_max": _np_reduce(np.max), "reduce_min": _np_reduce(np.min),
    "reduce_prod": _np_reduce(np.prod),
}
_NP_MULTI = {"unstack": lambda a, *, axis, **_: [np.take(a, i, axis=axis) for i in range(a.shape[axis])]}


def _eval_concrete(prim, vals, params, out_avals):
    """Evaluate a primitive on NumPy values at trace time (NumPy first: eager JAX would
    compile one tiny XLA program per new signature)."""
    fn = _NP_EVAL.get(prim.name)
    multi = _NP_MULTI.get(prim.name)
    res = None
    try:
        if fn is not None:
            r = fn(*vals, **params)
            res = None if r is None else [r]
        elif multi is not None:
            res = multi(*vals, **params)
    except Exception:  # unusual parameters: let JAX evaluate it
        res = None
    if res is None:
        with jax.ensure_compile_time_eval():
            res = prim.bind(*vals, **params)
        res = res if prim.multiple_results else [res]
    return [np.asarray(r).astype(av.dtype, copy=False).reshape(av.shape) for r, av in zip(res, out_avals)]


class _Interpreter:
    """Evaluate a single-member jaxpr on object arrays whose elements are group vectors.

    Every value of the jaxpr is an ``np.ndarray(dtype=object)`` of its shape; an element is
    either a NumPy scalar (known at trace time: folded immediately) or a JAX array of shape
    ``()`` (uniform over the group) or ``(G,)`` (one entry per member). Shape
    manipulations cost nothing; elementwise ops, reductions and small ``dot_general``s
    become elementwise ops on group vectors. Anything else is evaluated by ``jax.vmap``
    of the primitive over the group (correct, just not scalarised).
    """

    def __init__(self, group: int, fast_trig: bool = True):
        self.G = group
        self.fast_trig = fast_trig
        self._trig: dict[int, tuple[Any, tuple[Any, Any]]] = {}

    # ---- conversions -----------------------------------------------------------
    def _lift(self, e, dtype, batched: bool):
        if _concrete(e):
            e = jnp.asarray(e, dtype=dtype)
        if batched and e.ndim == 0:
            e = jnp.broadcast_to(e, (self.G,))
        return e

    @staticmethod
    def _dtype(e):
        return np.asarray(e).dtype if _concrete(e) else e.dtype

    def _all_concrete(self, arr) -> bool:
        return all(_concrete(e) for e in arr.flat)

    @staticmethod
    def _concrete_array(arr, dtype):
        return np.array(list(arr.flat), dtype=dtype).reshape(arr.shape)

    def materialize(self, arr, dtype):
        """Object array → (JAX array of shape ``(*shape, G)`` or ``shape``, batched?)."""
        flat = list(arr.flat)
        if not flat or all(_concrete(e) for e in flat):
            return np.array(flat, dtype=dtype).reshape(arr.shape), False
        batched = any((not _concrete(e)) and e.ndim == 1 for e in flat)
        elems = [self._lift(e, dtype, batched) for e in flat]
        if batched:
            return jnp.stack(elems).reshape(*arr.shape, self.G), True
        return jnp.stack(elems).reshape(arr.shape), False

    def split(self, value, batched: bool, shape) -> np.ndarray:
        out = np.empty(shape, dtype=object)
        flat = value.reshape(-1, self.G) if batched else value.reshape(-1)
        for k, idx in enumerate(np.ndindex(tuple(shape))):
            out[idx] = flat[k]
        return out

    # ---- evaluation --------------------------------------------------------------
    def eval_jaxpr(self, jaxpr, consts, args):
        env: dict[Any, np.ndarray] = {}

        def read(v):
            if isinstance(v, jcore.Literal):
                return _obj(v.val, dtype=v.aval.dtype)
            return env[v]

        for var, c in zip(jaxpr.constvars, consts):
            env[var] = c if isinstance(c, np.ndarray) and c.dtype == object else _obj(np.asarray(c))
        for var, a in zip(jaxpr.invars, args):
            env[var] = a
        for eqn in jaxpr.eqns:
            outs = self.eval_eqn(eqn, [read(v) for v in eqn.invars])
            for var, o in zip(eqn.outvars, outs):
                env[var] = o
        return [read(v) for v in jaxpr.outvars]

    def eval_eqn(self, eqn, ins):
        prim, params, name = eqn.primitive, eqn.params, eqn.primitive.name
        if all(self._all_concrete(a) for a in ins):
            vals = [self._concrete_array(a, v.aval.dtype) for a, v in zip(ins, eqn.invars)]
            res = _eval_concrete(prim, vals, params, [v.aval for v in eqn.outvars])
            return [_obj(r, dtype=v.aval.dtype) for r, v in zip(res, eqn.outvars)]
        if name not in ("scan", "while", "cond"):
            for key in _CALL_PARAMS:
                sub = params.get(key)
                if isinstance(sub, jcore.ClosedJaxpr):
                    return self.eval_jaxpr(sub.jaxpr, [_obj(np.asarray(c)) for c in sub.consts], ins)
                if isinstance(sub, jcore.Jaxpr):
                    return self.eval_jaxpr(sub, [], ins)
        if name in _STRUCTURAL:
            out = self._structural(eqn, ins)
            if out is not None:
                return out
        if name in ("sin", "cos") and self.fast_trig and eqn.outvars[0].aval.dtype == np.float64:
            return [self._trig_op(name, ins[0])]
        if name in _ELEMENTWISE:
            return [self._elementwise(prim, params, ins, eqn.outvars[0].aval)]
        if name in _REDUCTIONS:
            return [self._reduce(_REDUCTIONS[name], params["axes"], ins[0], eqn.outvars[0].aval)]
        if name == "dot_general":
            return [self._dot_general(params, ins, eqn.outvars[0].aval)]
        if name == "scan" and params["length"] <= 64 and not params.get("_split_transpose", False):
            return self._scan(params, ins)
        return self._fallback(eqn, ins)

    def _fallback(self, eqn, ins):
        prim, params = eqn.primitive, eqn.params
        mats = [self.materialize(a, v.aval.dtype) for a, v in zip(ins, eqn.invars)]
        vals = [m for m, _ in mats]
        batched = [b for _, b in mats]
        if not any(batched):
            res = prim.bind(*vals, **params)
            res = res if prim.multiple_results else [res]
            return [self.split(r, False, v.aval.shape) for r, v in zip(res, eqn.outvars)]
        res = jax.vmap(lambda *a: prim.bind(*a, **params), in_axes=[-1 if b else None for b in batched], out_axes=-1)(*vals)
        res = res if prim.multiple_results else [res]
        return [self.split(r, True, v.aval.shape) for r, v in zip(res, eqn.outvars)]

    def _structural(self, eqn, ins):
        name = eqn.primitive.name
        data = _DATA_OPERANDS.get(name, tuple(range(len(ins))))
        if any(i not in data and not self._all_concrete(a) for i, a in enumerate(ins)):
            return None
        pool: list[Any] = [None]  # id 0: out-of-bounds fill
        vals = []
        for i, a in enumerate(ins):
            if i in data:
                vals.append(np.arange(len(pool), len(pool) + a.size, dtype=np.int64).reshape(a.shape))
                pool.extend(a.flat)
            else:
                vals.append(self._concrete_array(a, eqn.invars[i].aval.dtype))
        params = dict(eqn.params)
        if name == "gather":
            params["fill_value"] = 0
        id_avals = [jax.ShapeDtypeStruct(v.aval.shape, np.int64) for v in eqn.outvars]
        res = _eval_concrete(eqn.primitive, vals, params, id_avals)
        outs = []
        for r, v in zip(res, eqn.outvars):
            r = np.asarray(r)
            o = np.empty(r.shape, dtype=object)
            for idx in np.ndindex(r.shape):
                k = int(r[idx])
                o[idx] = pool[k] if k > 0 else np.asarray(np.nan if v.aval.dtype.kind == "f" else 0, dtype=v.aval.dtype)[()]
            outs.append(o)
        return outs

    def _bind(self, prim, params, elems):
        dtypes = [self._dtype(e) for e in elems]
        if all(_concrete(e) for e in elems):
            vals = [np.asarray(e, dtype=d) for e, d in zip(elems, dtypes)]
            aval = jax.eval_shape(lambda *a: prim.bind(*a, **params), *vals)
            return _eval_concrete(prim, vals, params, [aval])[0][()]
        batched = any((not _concrete(e)) and e.ndim == 1 for e in elems)
        return prim.bind(*[self._lift(e, d, batched) for e, d in zip(elems, dtypes)], **params)

    def _trig_op(self, name, a):
        out = np.empty(a.shape, dtype=object)
        for idx in np.ndindex(a.shape):
            e = a[idx]
            if _concrete(e):
                out[idx] = np.asarray(np.sin(e) if name == "sin" else np.cos(e))[()]
                continue
            hit = self._trig.get(id(e))
            if hit is None or hit[0] is not e:
                hit = (e, sincos(e))
                self._trig[id(e)] = hit
            out[idx] = hit[1][0] if name == "sin" else hit[1][1]
        return out

    def _elementwise(self, prim, params, ins, out_aval):
        shape = out_aval.shape
        ins = [a if a.shape == shape else np.broadcast_to(a, shape) for a in ins]
        out = np.empty(shape, dtype=object)
        for idx in np.ndindex(shape):
            elems = [a[idx] for a in ins]
            simple = _simplify(prim.name, elems)
            out[idx] = simple if simple is not None else self._bind(prim, params, elems)
        return out

    def _binop(self, op, a, b):
        simple = _simplify(op, [a, b])
        if simple is not None:
            return simple
        dt = np.result_type(self._dtype(a), self._dtype(b))
        if _concrete(a):
            a = np.asarray(a, dtype=dt)[()]
        if _concrete(b):
            b = np.asarray(b, dtype=dt)[()]
        return self._bind(_BINOPS[op], {}, [a, b])

    def _reduce(self, op, axes, a, out_aval):
        keep = [i for i in range(a.ndim) if i not in axes]
        t = np.transpose(a, keep + list(axes)).reshape(tuple(out_aval.shape) + (-1,))
        out = np.empty(out_aval.shape, dtype=object)
        for idx in np.ndindex(tuple(out_aval.shape)):
            row = t[idx]
            if row.size == 0:
                init = {"add": 0, "mul": 1, "max": -np.inf, "min": np.inf}[op]
                out[idx] = np.asarray(init, dtype=out_aval.dtype)[()]
                continue
            acc = row[0]
            for e in row[1:]:
                acc = self._binop(op, acc, e)
            out[idx] = acc
        return out

    def _dot_general(self, params, ins, out_aval):
        (lc, rc), (lb, rb) = params["dimension_numbers"]
        lhs, rhs = ins
        lf = [i for i in range(lhs.ndim) if i not in lc and i not in lb]
        rf = [i for i in range(rhs.ndim) if i not in rc and i not in rb]
        L = np.transpose(lhs, list(lb) + lf + list(lc))
        R = np.transpose(rhs, list(rb) + rf + list(rc))
        nb, nl = len(lb), len(lf)
        k = int(np.prod(L.shape[nb + nl :], dtype=int))
        L = L.reshape(L.shape[: nb + nl] + (k,))
        R = R.reshape(R.shape[: nb + len(rf)] + (k,))
        out = np.empty(out_aval.shape, dtype=object)
        zero = np.asarray(0, dtype=out_aval.dtype)[()]
        for idx in np.ndindex(tuple(out_aval.shape)):
            b, i, j = idx[:nb], idx[nb : nb + nl], idx[nb + nl :]
            acc = zero
            for kk in range(k):
                acc = self._binop("add", acc, self._binop("mul", L[b + i + (kk,)], R[b + j + (kk,)]))
            out[idx] = acc
        return out

    def _scan(self, params, ins):
        nc, ncar, length = params["num_consts"], params["num_carry"], params["length"]
        closed = params["jaxpr"]
        consts, carry, xs = ins[:nc], list(ins[nc : nc + ncar]), ins[nc + ncar :]
        ys_acc = []
        steps = range(length - 1, -1, -1) if params["reverse"] else range(length)
        for i in steps:
            outs = self.eval_jaxpr(closed.jaxpr, [_obj(np.asarray(c)) for c in closed.consts], consts + carry + [x[i] for x in xs])
            carry, y = outs[:ncar], outs[ncar:]
            ys_acc.append(y)
        if params["reverse"]:
            ys_acc = ys_acc[::-1]
        ys = []
        for k, v in enumerate(closed.jaxpr.outvars[ncar:]):
            arr = np.empty((length,) + tuple(v.aval.shape), dtype=object)
            for i in range(length):
                arr[i] = ys_acc[i][k]
            ys.append(arr)
        return carry + ys


def _simplify(name, elems):
    """Exact algebraic shortcuts with trace-time constants (x·1, x+0, x−0, x·0 for finite x)."""
    if name == "mul":
        a, b = elems
        if _is_value(a, 1):
            return b
        if _is_value(b, 1):
            return a
        if (_is_value(a, 0) and not _concrete(b)) or (_is_value(b, 0) and not _concrete(a)):
            return a if _concrete(a) else b
    elif name == "add":
        a, b = elems
        if _is_value(a, 0):
            return b
        if _is_value(b, 0):
            return a
    elif name == "sub":
        if _is_value(elems[1], 0):
            return elems[0]
    return None


class SoAVectorField:
    """The vector field of a batch of same-structure models in structure-of-arrays form.

    Built from the jaxpr of ``model.vector_field(t, x, control)`` for one member (the
    template ``model``/``control`` may hold arrays or ``jax.ShapeDtypeStruct`` leaves).
    Call ``field(t, X, batched_leaves, uniform_leaves)`` with ``X`` of shape ``(N, G)``
    (state components × group members), the leaves of ``(model, control)`` flagged in
    ``batched_mask`` in batch-last layout ``(*leaf_shape, G)`` and the others (the same
    for every member) in their own shape; returns ``(N, G)``. ``t`` is a scalar shared
    by the group.
    """

    def __init__(self, model, control, batched_mask: Sequence[bool], group: int, *, fast_trig: bool = True):
        leaves, self.treedef = jax.tree.flatten((model, control))
        self.batched_mask = tuple(bool(b) for b in batched_mask)
        if len(self.batched_mask) != len(leaves):
            raise ValueError("batched_mask must have one entry per array leaf of (model, control)")
        self.leaf_shapes = [tuple(np.shape(x)) for x in leaves]
        self.group = int(group)
        self.fast_trig = fast_trig
        self.n_state = int(model.state_size)
        treedef = self.treedef

        def single(t, x, *lv):
            m, c = jax.tree.unflatten(treedef, lv)
            return m.vector_field(t, x, c)

        x_aval = jax.ShapeDtypeStruct((self.n_state,), jnp.float64)
        leaf_avals = [jax.ShapeDtypeStruct(np.shape(x), x.dtype if hasattr(x, "dtype") else jnp.result_type(x)) for x in leaves]
        self.single = jax.make_jaxpr(single)(jax.ShapeDtypeStruct((), jnp.float64), x_aval, *leaf_avals)

    def __call__(self, t, X, bleaves, uleaves):
        it = _Interpreter(self.group, self.fast_trig)
        t_obj = np.empty((), dtype=object)
        t_obj[()] = t
        x_obj = np.empty((self.n_state,), dtype=object)
        for i in range(self.n_state):
            x_obj[i] = X[i]
        args = [t_obj, x_obj]
        b_iter, u_iter = iter(bleaves), iter(uleaves)
        for b, shape in zip(self.batched_mask, self.leaf_shapes):
            arr = next(b_iter) if b else next(u_iter)
            o = np.empty(shape, dtype=object)
            for idx in np.ndindex(shape):
                o[idx] = arr[idx]
            args.append(o)
        (out,) = it.eval_jaxpr(self.single.jaxpr, self.single.consts, args)
        return jnp.stack([it._lift(e, jnp.float64, True) for e in out.flat])


# ======================================================================================
# Explicit Runge–Kutta on a group (shared steps)
# ======================================================================================


class _Tableau:
    def __init__(self, solver):
        tab = getattr(solver, "tableau", None)
        if tab is None or not hasattr(tab, "a_lower"):
            raise ModelError(
                f"modes 'shared'/'fixed' need an explicit Runge–Kutta solver with a Butcher tableau "
                f"(Dopri8, Dopri5, Tsit5, Bosh3, ...); got {type(solver).__name__}"
            )
        self.a = [np.asarray(r, dtype=np.float64) for r in tab.a_lower]
        self.c = np.asarray(tab.c, dtype=np.float64)
        self.b_sol = np.asarray(tab.b_sol, dtype=np.float64)
        self.b_err = np.asarray(tab.b_error, dtype=np.float64)
        self.fsal = bool(tab.fsal)
        self.ssal = bool(tab.ssal)
        self.interpolation = type(solver).interpolation_cls
        self.error_order = float(solver.error_order(dfx.ODETerm(lambda t, y, args: y)))


def _combine(x, coeffs, ks):
    acc = x
    for c, k in zip(coeffs, ks):
        if c != 0.0:
            acc = acc + float(c) * k
    return acc


def _rk_step(tab: _Tableau, rhs, t, t_next, x, f0, rolled: bool = True, h_vec=None):
    """One explicit RK step from (t, x) to t_next; returns (x1, error, ks, f1), ``ks`` = h·f.

    ``rolled``: the stages run in a ``fori_loop`` around one copy of the vector field
    (compiles ~10x faster; every stage input is formed by a small dense product with the
    Butcher matrix, which XLA keeps as its own kernel). Otherwise the stages are unrolled
    and only the non-zero coefficients are used. ``t``, ``t_next`` may be per-member
    vectors ``(G,)`` (then ``h_vec`` is the non-zero step used for scaling).
    """
    h = t_next - t if h_vec is None else h_vec
    if rolled:
        S = len(tab.a) + 1
        A = np.zeros((S, S))
        for i, a in enumerate(tab.a):
            A[i + 1, : len(a)] = a
        C = np.concatenate([[0.0], tab.c])
        K = jnp.zeros((S,) + x.shape, dtype=x.dtype).at[0].set(h * f0)
        A_j, C_j = jnp.asarray(A), jnp.asarray(C)

        def stage(i, K):
            y = x + jnp.tensordot(A_j[i], K, axes=1)
            ti = jnp.where(C_j[i] == 1.0, t_next, t + C_j[i] * h)
            return lax.dynamic_update_index_in_dim(K, h * rhs(ti, y), i, 0)

        K = lax.fori_loop(1, S, stage, K)
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


def _initial_step(tab, rhs, t0, x0, f0, rtol, atol):
    """Hairer's starting step per member (as diffrax's PIDController), ``(G,)``."""
    scale = atol + rtol * jnp.abs(x0)

    def norm(v):
        return jnp.sqrt(jnp.mean(v**2, axis=0))

    d0, d1 = norm(x0 / scale), norm(f0 / scale)
    small = (d0 < 1e-5) | (d1 < 1e-5)
    h0 = jnp.where(small, 1e-6, 0.01 * d0 / jnp.where(small, 1.0, d1))
    f1 = rhs(t0 + h0, x0 + h0 * f0)
    d2 = norm((f1 - f0) / scale) / h0
    dmax = jnp.maximum(d1, d2)
    h1 = jnp.where(dmax <= 1e-15, jnp.maximum(1e-6, h0 * 1e-3),
                   (0.01 / jnp.where(dmax <= 1e-15, 1.0, dmax)) ** (1.0 / tab.error_order))
    return jnp.minimum(100 * h0, h1)


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
                idx=jnp.full((G,), idx0), n=zi, n_acc=zi, n_rej=zi, emax=jnp.zeros((G,), x0p.dtype),
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
        factor = jnp.clip(0.9 * inv ** (1.0 / tab.error_order), jnp.where(accept, 1.0, 0.2), jnp.where(accept, 10.0, 0.9))
        factor = jnp.where(jnp.isnan(factor), 0.2, factor)
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
        emax = jnp.where(accept, jnp.maximum(sl["emax"], e_mem), sl["emax"])
        still = active & (t < t1) & (n < max_steps)
        done = active & ~still
        # finished members: record their results
        col = jnp.where(done, mid, P)
        out = dict(
            x_end=out["x_end"].at[:, col].set(x), t_end=out["t_end"].at[col].set(t),
            code=out["code"].at[col].set(jnp.where(t >= t1, STATUS_SUCCESS, STATUS_MAX_STEPS).astype(jnp.int32)),
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
            n=reset(zi, n), n_acc=reset(zi, n_acc), n_rej=reset(zi, n_rej), emax=reset(jnp.zeros_like(emax), emax),
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

    def group_norm(v):  # per-member RMS, max over the group
        return jnp.max(jnp.sqrt(jnp.mean(v**2, axis=0)))

    if dt0 is None:  # Hairer's starting step, as diffrax's PIDController
        scale = atol + rtol * jnp.abs(x0)
        d0, d1 = group_norm(x0 / scale), group_norm(f0 / scale)
        small = (d0 < 1e-5) | (d1 < 1e-5)
        h0 = jnp.where(small, 1e-6, 0.01 * d0 / jnp.where(small, 1.0, d1))
        f1 = rhs(t0 + h0, x0 + h0 * f0)
        d2 = group_norm((f1 - f0) / scale) / h0
        dmax = jnp.maximum(d1, d2)
        h1 = jnp.where(dmax <= 1e-15, jnp.maximum(1e-6, h0 * 1e-3), (0.01 / jnp.where(dmax <= 1e-15, 1.0, dmax)) ** (1.0 / tab.error_order))
        h = jnp.minimum(100 * h0, h1)
    else:
        h = jnp.asarray(dt0, dtype=jnp.float64)

    buf = jnp.full((T + 1, N, G), jnp.nan, dtype=x0.dtype)  # NaN: not reached (failure)
    idx = jnp.sum(ts <= t0).astype(jnp.int32)
    buf = jnp.where((jnp.arange(T + 1) < idx)[:, None, None], x0[None], buf)
    zero_i = jnp.zeros((), jnp.int32)
    state = (t0, h, x0, f0, buf, idx, zero_i, zero_i, zero_i, jnp.zeros((G,)))

    def cond(s):
        t, _, _, _, _, _, n, *_ = s
        return (t < t1) & (n < max_steps)

    def body(s):
        t, h, x, f, buf, idx, n, n_acc, n_rej, emax = s
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
        factor = jnp.clip(0.9 * inv ** (1.0 / tab.error_order), jnp.where(accept, 1.0, 0.2), jnp.where(accept, 10.0, 0.9))
        factor = jnp.where(jnp.isnan(factor), 0.2, factor)
        h_used = t_next - t
        # Keep the unclipped proposal when the step was shortened to land on a kink/t1.
        h_new = jnp.where(accept & (t_next == stop) & (t + h > stop), jnp.maximum(h, h_used * factor), h_used * factor)
        idx2, buf2 = lax.cond(accept, lambda: _save_loop(tab, ts_pad, idx, buf, t, t_next, x, x1, ks), lambda: (idx, buf))
        return (
            jnp.where(accept, t_next, t), h_new, jnp.where(accept, x1, x), jnp.where(accept, f1, f), buf2, idx2,
            n + 1, n_acc + accept.astype(jnp.int32), n_rej + (~accept).astype(jnp.int32),
            jnp.where(accept, jnp.maximum(emax, e_mem), emax),
        )

    t, h, x, f, buf, idx, n, n_acc, n_rej, emax = lax.while_loop(cond, body, state)
    done = t >= t1
    code = jnp.where(done, STATUS_SUCCESS, STATUS_MAX_STEPS).astype(jnp.int32)
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


# ======================================================================================
# Results
# ======================================================================================


@dataclasses.dataclass(frozen=True)
class BatchResult:
    """Results of :func:`simulate_batch` (NumPy arrays, member first).

    Attributes
    ----------
    ts : (T,)                  save times.
    ys : (B, T, N)             states at ``ts`` (paper ordering); NaN/inf after a failure.
    x_final : (B, N)           state at ``t_final``.
    t_final : (B,)             time reached (t1 on success).
    status : (B,) int          0 = success, else a diffrax ``RESULTS`` code (:func:`status_name`).
    num_steps, num_accepted_steps, num_rejected_steps : (B,) int
        step counts (shared by a group in modes ``shared``/``fixed``).
    error_estimate : (B,)      modes ``shared``/``fixed``: max over accepted steps of the
                               member's scaled embedded error estimate (≤ 1: every step met
                               the tolerance); NaN in mode ``adaptive``.
    refined : (B,) bool        re-solved in ``adaptive`` mode (failed shared group, or a
                               fixed-step member whose estimate exceeded the tolerance).
    mode, rtol, atol, dt, group_size, n_devices, wall_time : run settings and timing.
    """

    ts: np.ndarray
    ys: np.ndarray
    x_final: np.ndarray
    t_final: np.ndarray
    status: np.ndarray
    num_steps: np.ndarray
    num_accepted_steps: np.ndarray
    num_rejected_steps: np.ndarray
    error_estimate: np.ndarray
    refined: np.ndarray
    mode: str
    rtol: float
    atol: float
    dt: float | None
    group_size: int | None
    n_devices: int
    wall_time: float
    details: tuple = ()

    @property
    def size(self) -> int:
        return int(self.status.shape[0])

    @property
    def ok(self) -> np.ndarray:
        """``(B,)`` True where the member was solved successfully."""
        return self.status == STATUS_SUCCESS

    @property
    def causes(self) -> list[str]:
        """Per member: ``""`` on success, else the status name and diffrax's message."""
        out = []
        for i, code in enumerate(self.status):
            if code == STATUS_SUCCESS:
                out.append("")
                continue
            name = status_name(code)
            if i < len(self.details) and self.details[i]:
                out.append(f"{name}: {self.details[i]}")
                continue
            msg = dfx.RESULTS._index_to_message[int(code)] if int(code) in STATUS_NAMES and 0 <= int(code) < len(dfx.RESULTS._index_to_message) else ""
            out.append(f"{name}: {msg}" if msg else name)
        return out

    @property
    def lockstep_efficiency(self) -> float:
        """mean/max steps over members (1: no member waited for another)."""
        n = self.num_steps[self.ok] if np.any(self.ok) else self.num_steps
        return float(np.mean(n) / max(np.max(n), 1)) if n.size else float("nan")


# ======================================================================================
# Driver
# ======================================================================================


def _as_batched(x, name: str, axis, B: int):
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
                f"pass a list, a batch made by rollball_jax.batch.stack, or {name[:-1]}_axis=None for one "
                f"{name[:-1]} shared by all members"
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


@functools.lru_cache(maxsize=64)
def _adaptive_fn(solver, max_steps, control_axis, devices):
    def one(m, c, x0, ts, t0, t1, rtol, atol, dt0):
        sol = integrate(m, c, x0, ts, t0=t0, t1=t1, solver=solver, rtol=rtol, atol=atol, max_steps=max_steps, dt0=dt0)
        ys, y_end = sol.ys
        st = sol.stats
        return dict(ys=ys, x_end=y_end[-1], t_end=sol.ts[1][-1], code=sol.result._value.astype(jnp.int32),
                    num_steps=st["num_steps"], num_accepted_steps=st["num_accepted_steps"],
                    num_rejected_steps=st["num_rejected_steps"])

    def run(models, controls, x0s, ts, t0, t1, rtol, atol, dt0):
        return jax.vmap(one, in_axes=(0, control_axis, 0, None, None, None, None, None, None))(
            models, controls, x0s, ts, t0, t1, rtol, atol, dt0)

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
    # at least 2 members per device: XLA compiles a vmap of size 1 differently (rounding)
    unit = max(2 * nd, (min(unit, B) + nd - 1) // nd * nd)
    fn = _adaptive_fn(solver, int(max_steps), control_axis, tuple(devices))
    outs = []
    f64 = np.float64
    for s in range(0, B, unit):
        e = min(s + unit, B)
        sl = lambda tree: jax.tree.map(lambda a: a[s:e] if eqx.is_array(a) else a, tree)
        m, x = _pad_rows(sl(models), unit - (e - s)), _pad_rows(sl(x0s), unit - (e - s))
        c = _pad_rows(sl(controls), unit - (e - s)) if control_axis == 0 else controls
        out = fn(m, c, x, jnp.asarray(ts), *(np.asarray(v, f64) for v in (t0, t1, rtol, atol)),
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
def _soa_fn(kind, solver, max_steps, devices, treedef, batched_mask, leaf_specs, group, fast_trig, rolled):
    tab = _Tableau(solver)
    template = jax.tree.unflatten(treedef, [jax.ShapeDtypeStruct(s, np.dtype(d)) for s, d in leaf_specs])
    field_cache: dict = {}

    def field():
        if "f" not in field_cache:
            field_cache["f"] = SoAVectorField(*template, batched_mask, group, fast_trig=fast_trig)
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
    return jax.jit(run)


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


def _group_size(mode: str, requested: int, B: int, n_devices: int) -> int:
    """Members per group: a multiple of 8 (XLA's code for odd lengths rounds differently),
    at most ``requested`` (rounded up). Modes lockstep/fixed: small enough that every
    device gets work (a member's result does not depend on its group). Mode shared:
    independent of the device count, because a group shares its steps."""
    up8 = lambda n: max(8, -(-int(n) // 8) * 8)
    if mode == "shared":
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
    fn = _soa_fn(kind, solver, int(max_steps), tuple(devices), treedef, tuple(mask), leaf_specs, int(group),
                 fast_trig, bool(rolled))
    kinks_all = _kinks(controls, control_axis, B)
    n_groups = -(-B // group)
    calls = -(-n_groups // per_call)
    per_call = min(per_call, -(-n_groups // nd) * nd)
    x, bl, ul = _pack_groups(models, controls, control_axis, x0s, mask, group, calls * per_call)
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


def simulate_batch(
    models,
    controls,
    x0s,
    t_span: tuple[float, float] | None = None,
    *,
    ts=None,
    n_save: int = 21,
    mode: str = "adaptive",
    solver: dfx.AbstractSolver | None = None,
    rtol: float = DEFAULT_RTOL,
    atol: float = DEFAULT_ATOL,
    max_steps: int = DEFAULT_MAX_STEPS,
    dt0: float | None = None,
    dt: float | None = None,
    group_size: int = 256,
    devices=None,
    control_axis: int | None = 0,
    unit: int = 4096,
    refine: bool = True,
    batched_mask: Sequence[bool] | None = None,
    fast_trig: bool = True,
    rolled: bool = True,
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
    mode : ``"adaptive"`` (default; equals per-member :func:`rollball_jax.simulate`),
        ``"lockstep"``, ``"shared"`` or ``"fixed"`` — see the module docstring and
        ``docs/batch.md``.
    solver, rtol, atol, max_steps, dt0 : as for :func:`rollball_jax.simulate`
        (default ``Dopri8``). The other modes take explicit RK solvers with a Butcher
        tableau (Dopri8, Dopri5, Tsit5, ...); ``max_steps`` counts each member's steps
        (lockstep) or the group's (shared).
    dt : mode ``fixed``: the step (``None``: chosen from a pilot so that every step's
        embedded error estimate meets the tolerance).
    group_size : modes ``lockstep``/``shared``/``fixed``: members per structure-of-arrays
        group (rounded up to a multiple of 8; lockstep: slots per device; shared: the
        members that share their steps). Results do not depend on the number of devices.
    devices : devices to shard over (default: all local devices; an int takes the first n).
    unit : members per compiled call (bounds memory; the batch is processed in units).
    refine : re-solve failed shared groups and fixed-step members above the tolerance
        in mode ``adaptive``.
    batched_mask : fast modes: per array leaf of (model, control), whether it varies over
        members (default: detected from the values). Sweeps pass it so that every chunk
        compiles the same program.
    fast_trig : fast modes: polynomial :func:`sincos` instead of XLA's sin/cos.
    rolled : fast modes: Runge–Kutta stages in a loop (fast compilation) or unrolled.

    Returns a :class:`BatchResult`. Never raises for a failed member: check ``status``.
    """
    checks.require_x64("simulate_batch")
    if mode not in MODES:
        raise ModelError(f"mode must be one of {MODES}; got {mode!r}")
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
    controls, control_axis = _as_batched(controls, "controls", control_axis, B)
    m_t, c_t = _template(models, controls, control_axis)
    if x0s.shape[1] != m_t.state_size:
        raise ModelError(f"x0s must have {m_t.state_size} columns ({', '.join(m_t.state_labels())}); got {x0s.shape[1]}")
    if not np.all(np.isfinite(x0s)):
        bad = int(np.argmax(~np.all(np.isfinite(x0s), axis=1)))
        raise ModelError(f"x0s of member {bad} contains non-finite values")
    if not isinstance(m_t, AbstractModel):
        raise ModelError(f"'models' must be rollball_jax models (Ball, Disk, ...); got {type(m_t).__name__}")
    checks.control(m_t, c_t, "controls")
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
    start = time.perf_counter()
    refined = np.zeros((B,), dtype=bool)
    used_dt = None

    def adaptive(idx):
        sub = lambda tree, axis=0: jax.tree.map(lambda a: a[idx] if eqx.is_array(a) else a, tree) if axis == 0 else tree
        return _run_adaptive(sub(models), sub(controls, control_axis), control_axis, x0s[idx], ts, t0, t1, solver,
                             rtol, atol, max_steps, dt0, devs, unit)

    if mode == "adaptive":
        res = adaptive(np.arange(B))
        group = None
    else:
        group = _group_size(mode, int(group_size), B, len(devs))
        mask = list(batched_mask) if batched_mask is not None else _leaf_mask(models, controls, control_axis, B)
        common = dict(models=models, controls=controls, control_axis=control_axis, ts=ts, t0=t0, t1=t1,
                      solver=solver, rtol=rtol, atol=atol, max_steps=max_steps, dt0=dt0, devices=devs, group=group,
                      mask=mask, rolled=rolled, fast_trig=fast_trig)
        if mode in ("shared", "lockstep"):
            res = _run_soa(mode, x0s=x0s, dt=None, unit=unit, **common)
            # lockstep: every member already has its own steps and status; shared: a failed
            # group is re-solved member by member.
            bad = (res["code"] != STATUS_SUCCESS) if mode == "shared" else np.zeros((B,), dtype=bool)
        else:
            if dt is None:
                # Pilot: the first unit of the batch, with the compiled program of the real run.
                pilot_idx = np.arange(min(B, max(group * len(devs), unit)))
                sub = lambda tree: jax.tree.map(lambda a: a[pilot_idx] if eqx.is_array(a) else a, tree)
                pcommon = dict(common, models=sub(models), controls=sub(controls) if control_axis == 0 else controls)
                kinks_all = np.unique(_kinks(controls, control_axis, B))

                def run_fixed(d):
                    n = len(_fixed_grid(t0, t1, d, kinks_all))
                    cap = 1 << max(6, int(math.ceil(math.log2(n))))
                    r = _run_soa("fixed", x0s=x0s[pilot_idx], dt=d, unit=unit, grid_capacity=cap, **pcommon)
                    return r["error_estimate"], r["code"]

                dt, _ = choose_fixed_dt(run_fixed, t0, t1)
            used_dt = float(dt)
            res = _run_soa("fixed", x0s=x0s, dt=dt, unit=unit, **common)
            bad = (res["code"] != STATUS_SUCCESS) | ~(res["error_estimate"] <= 1.0)
        if refine and np.any(bad):
            idx = np.nonzero(bad)[0]
            sub = adaptive(idx)
            for k, v in sub.items():
                if k == "error_estimate":
                    continue
                res[k][idx] = v
            res["error_estimate"][idx] = np.nan
            refined[idx] = True
    ys = res["ys"]
    if mode == "adaptive":
        # Non-finite values that diffrax accepted (or left after a failure) → "nonfinite".
        nonfinite = ~np.all(np.isfinite(ys.reshape(B, -1)), axis=1) & (res["code"] == STATUS_SUCCESS)
        res["code"] = np.where(nonfinite, STATUS_NONFINITE, res["code"])
    details = _post_checks(models, controls, control_axis, m_t, ts, res)
    return BatchResult(
        ts=ts, ys=ys, x_final=res["x_end"], t_final=res["t_end"], status=res["code"].astype(np.int32),
        num_steps=res["num_steps"].astype(np.int64), num_accepted_steps=res["num_accepted_steps"].astype(np.int64),
        num_rejected_steps=res["num_rejected_steps"].astype(np.int64), error_estimate=res["error_estimate"],
        refined=refined, mode=mode, rtol=float(rtol), atol=float(atol), dt=used_dt, group_size=group,
        n_devices=len(devs), wall_time=time.perf_counter() - start, details=details,
    )


def _check_initial_states(models, x0s, m_t) -> None:
    """Refuse a member whose initial versor is not unit or whose masses start outside the shell."""
    k = m_t.versor_index
    if k is not None:
        norms = np.linalg.norm(x0s[:, k : k + 4], axis=1)
        bad = np.nonzero(~(np.abs(norms - 1.0) <= checks.VERSOR_TOL))[0]
        if bad.size:
            i = int(bad[0])
            checks.versor(x0s[i, k : k + 4], f"x0s[{i}, {k}:{k + 4}] (q of member {i})")
    if m_t.n:
        out = np.asarray(_outside_fn(models, jnp.asarray(x0s)))
        if np.any(out):
            i = int(np.argmax(out))
            raise ModelError(f"x0s of member {i}: a point mass starts outside the shell (|ζ(θ)| ≥ r)")


@eqx.filter_jit
def _outside_fn(models, xs):
    return eqx.filter_vmap(lambda m, x: m.outside(x))(models, xs)


@eqx.filter_jit
def _outside_along(models, ys):
    # (B, T): a mass outside the shell at a save time (non-finite rows count as inside)
    return eqx.filter_vmap(lambda m, y: jax.vmap(m.outside)(jnp.where(jnp.isfinite(y), y, 0.0)))(models, ys)


@eqx.filter_jit
def _field_probe(models, controls, control_axis, t_end, x_end):
    from .solve import PROBE_OFFSETS

    def one(m, c, t, x):
        probe_ts = t + jnp.asarray(PROBE_OFFSETS) * (1.0 + jnp.abs(t))
        return probe_ts, jax.vmap(lambda s: m.vector_field(s, x, c))(probe_ts)

    if control_axis is None:
        return eqx.filter_vmap(lambda m, t, x: one(m, controls, t, x))(models, t_end, x_end)
    return eqx.filter_vmap(one)(models, controls, t_end, x_end)


def _post_checks(models, controls, control_axis, m_t, ts, res) -> tuple:
    """Mark members whose solve failed on a non-finite vector field, or whose masses left the
    shell at a save time; returns the per-member cause details (``""`` where none)."""
    from .solve import _nonfinite_field_message

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
