"""Structure-of-arrays vector field: the model's own jaxpr re-executed over a group axis."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend import core as jcore

from ._group_field import MemberProgram
from ._sincos import sincos


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
    """``lax.pad`` on NumPy (object or numeric) arrays: per dimension ``(low, high,
    interior)``, negative ``low``/``high`` crop."""
    pv = padding_value[()] if isinstance(padding_value, np.ndarray) else padding_value
    out = np.asarray(operand)
    for d, (lo, hi, interior) in enumerate(padding_config):
        n = out.shape[d]
        core = n + max(n - 1, 0) * interior
        shape = list(out.shape)
        shape[d] = max(lo, 0) + core + max(hi, 0)
        new = np.empty(shape, dtype=out.dtype)
        new.fill(pv)
        put = [slice(None)] * out.ndim
        put[d] = slice(max(lo, 0), max(lo, 0) + core, interior + 1)
        new[tuple(put)] = out
        crop = [slice(None)] * out.ndim
        crop[d] = slice(max(-lo, 0), shape[d] - max(-hi, 0))
        out = new[tuple(crop)]
    return out


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
        self.elements = 0  # scalarised elements so far (bounded by MAX_SCALARISED_ELEMENTS)

    def count(self, n: int) -> None:
        """Add ``n`` scalarised elements; raises :class:`ExpansionTooLarge` past the budget."""
        self.elements += int(n)
        if self.elements > MAX_SCALARISED_ELEMENTS:
            raise ExpansionTooLarge(
                f"the member program has more than {MAX_SCALARISED_ELEMENTS} non-constant array elements "
                "to scalarise (large array parameters, e.g. a feedback gain table)")

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
        self.count(sum(int(np.prod(v.aval.shape, dtype=int)) for v in eqn.outvars))
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
        if name == "dot_general" and _dot_general_size(params, eqn.invars, eqn.outvars[0].aval) <= MAX_EXPANDED_PRODUCTS:
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


#: Budget of the interpreter: the non-constant array elements (leaves of the model and
#: control, outputs of the equations it evaluates) of one member program it scalarises.
#: A program past it raises :class:`ExpansionTooLarge`, and the batch uses ``jax.vmap`` of
#: the member's field instead (``_group_field.GroupVectorField``): XLA's compile time grows
#: faster than linearly with the scalarised program. Measured: the largest program of the
#: tests (a ball with every rail kind, F_e and a 40-knot cubic spline) scalarises 6,886
#: elements (the disk with it 5,547) and compiles in ~2 s; a TVLQR feedback control with
#: a (101, 3, 14) gain table (experiment (e) quick) 15,027 elements into 27,693 equations,
#: whose group solve XLA had not compiled after minutes (its (401, 3, 14) form: > 10 min).
#: The bound is about twice the largest tested program.
MAX_SCALARISED_ELEMENTS = 12_000


class ExpansionTooLarge(Exception):
    """The member program is too large to scalarise (see :data:`MAX_SCALARISED_ELEMENTS`)."""


#: A ``dot_general`` is expanded into scalar multiply-adds only up to this many products
#: (a 3×3 matrix times a 3-vector is 9); larger ones (e.g. a spline's K×K operator) are
#: evaluated as one batched ``dot_general`` by ``jax.vmap`` over the group instead.
MAX_EXPANDED_PRODUCTS = 512


def _dot_general_size(params, invars, out_aval) -> int:
    """Number of scalar products of the expanded ``dot_general`` (output size × contraction)."""
    (lc, _), _ = params["dimension_numbers"]
    k = int(np.prod([invars[0].aval.shape[i] for i in lc], dtype=int))
    return int(np.prod(out_aval.shape, dtype=int)) * k


def _simplify(name, elems):
    """Exact algebraic shortcuts with trace-time constants (x·1, x+0, x−0). No x·0 → 0:
    that would turn a NaN or inf x into 0 and hide a failing member."""
    if name == "mul":
        a, b = elems
        if _is_value(a, 1):
            return b
        if _is_value(b, 1):
            return a
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


class SoAVectorField(MemberProgram):
    """The vector field of a batch of same-structure models in structure-of-arrays form.

    Built from the jaxpr of ``model.vector_field(t, x, control)`` for one member
    (constructor: :class:`~._group_field.MemberProgram`). Call
    ``field(t, X, batched_leaves, uniform_leaves)`` with ``X`` of shape ``(N, G)``
    (state components × group members), the leaves of ``(model, control)`` flagged in
    ``batched_mask`` in batch-last layout ``(*leaf_shape, G)`` and the others (the same
    for every member) in their own shape; returns ``(N, G)``. ``t``: a scalar shared by
    the group or ``(G,)``, one time per member (lockstep).
    """

    def __call__(self, t, X, bleaves, uleaves):
        it = _Interpreter(self.group, self.fast_trig)
        t_obj = np.empty((), dtype=object)
        t_obj[()] = t
        x_obj = np.empty((self.n_state,), dtype=object)
        for i in range(self.n_state):
            x_obj[i] = X[i]
        args = [t_obj, x_obj]
        it.count(sum(int(np.prod(shape, dtype=int)) for shape in self.leaf_shapes))
        b_iter, u_iter = iter(bleaves), iter(uleaves)
        for b, shape in zip(self.batched_mask, self.leaf_shapes):
            arr = next(b_iter) if b else next(u_iter)
            o = np.empty(shape, dtype=object)
            for idx in np.ndindex(shape):
                o[idx] = arr[idx]
            args.append(o)
        (out,) = it.eval_jaxpr(self.jaxpr.jaxpr, self.jaxpr.consts, args)
        return jnp.stack([it._lift(e, jnp.float64, True) for e in out.flat])
