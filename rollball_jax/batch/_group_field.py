"""The vector field of a group of same-structure members: ``jax.vmap`` of the member's own
field, with float64 sin/cos evaluated by the vectorisable polynomial :func:`~._sincos.sincos`.

Why the substitution: XLA's float64 sin/cos on the CPU are scalar libm calls (~17 ns each),
which keep the vmapped field from vectorising; the polynomial costs ~2 ns. Everything else
is JAX's own batching of the member's program (NaN propagation, every primitive, every
model/rail/control). The batch modes use the structure-of-arrays interpreter
(``_soa.py``), measured 1.7–1.8× faster than this (``benchmarks/bench_soa_decision.py``,
``docs/batch.md``); :class:`GroupVectorField` with ``fast_trig=False`` is the reference
of the interpreter's self-check at first use.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend import core as jcore

from ._sincos import sincos

#: Call-like primitives whose body is evaluated with the substitution (the model's helper
#: functions under ``jax.jit``); any other higher-order primitive (custom derivatives,
#: control flow) is bound unchanged, its sin/cos left to XLA (correct, only slower).
_CALLS = {"jit": "jaxpr", "pjit": "jaxpr", "closed_call": "call_jaxpr", "core_call": "call_jaxpr"}


def eval_with_sincos(jaxpr: jcore.Jaxpr, consts: Sequence, *args) -> list:
    """Evaluate ``jaxpr`` binding every primitive unchanged except float64 ``sin``/``cos``,
    which become :func:`sincos` (≤ 2 ulp for |x| < 1e5); recurses into the bodies of
    ``jit``/``closed_call``. Traceable: used under ``jax.vmap`` and ``jax.jit``."""
    env: dict = {}

    def read(v):
        return v.val if isinstance(v, jcore.Literal) else env[v]

    env.update(zip(jaxpr.constvars, consts))
    env.update(zip(jaxpr.invars, args))
    for eqn in jaxpr.eqns:
        ins = [read(v) for v in eqn.invars]
        name = eqn.primitive.name
        if name in ("sin", "cos") and eqn.outvars[0].aval.dtype == np.float64:
            s, c = sincos(ins[0])
            outs = [s if name == "sin" else c]
        elif name in _CALLS and isinstance(eqn.params.get(_CALLS[name]), jcore.ClosedJaxpr):
            body = eqn.params[_CALLS[name]]
            outs = eval_with_sincos(body.jaxpr, body.consts, *ins)
        else:
            outs = eqn.primitive.bind(*ins, **eqn.params)
            outs = outs if eqn.primitive.multiple_results else [outs]
        env.update(zip(eqn.outvars, outs))
    return [read(v) for v in jaxpr.outvars]


class MemberProgram:
    """The traced program of one member's vector field, shared by the group fields.

    From ``model.vector_field(t, x, control)`` of a template member (``model``/``control``
    may hold arrays or ``jax.ShapeDtypeStruct`` leaves): ``treedef`` of ``(model,
    control)``, ``batched_mask`` (one flag per array leaf: batch-last ``(*shape, G)`` if set,
    shared otherwise), ``leaf_shapes``, ``group`` (G), ``n_state`` (N) and ``jaxpr`` (the
    closed jaxpr of ``(t, x, *leaves) -> ẋ``). Raises ``ValueError`` for a mask of the
    wrong length."""

    def __init__(self, model, control, batched_mask: Sequence[bool], group: int, *, fast_trig: bool = True):
        leaves, self.treedef = jax.tree.flatten((model, control))
        self.batched_mask = tuple(bool(b) for b in batched_mask)
        if len(self.batched_mask) != len(leaves):
            raise ValueError("batched_mask must have one entry per array leaf of (model, control)")
        self.leaf_shapes = [tuple(np.shape(x)) for x in leaves]
        self.group = int(group)
        self.fast_trig = bool(fast_trig)
        self.n_state = int(model.state_size)
        treedef = self.treedef

        def single(t, x, *lv):
            m, c = jax.tree.unflatten(treedef, lv)
            return m.vector_field(t, x, c)

        self._single = single
        x_aval = jax.ShapeDtypeStruct((self.n_state,), jnp.float64)
        leaf_avals = [jax.ShapeDtypeStruct(np.shape(x), x.dtype if hasattr(x, "dtype") else jnp.result_type(x))
                      for x in leaves]
        self.jaxpr = jax.make_jaxpr(single)(jax.ShapeDtypeStruct((), jnp.float64), x_aval, *leaf_avals)


class GroupVectorField(MemberProgram):
    """The vector field of a group of ``G`` same-structure members, group axis last, by
    ``jax.vmap`` of the member's field (constructor: :class:`MemberProgram`).

    Call ``field(t, X, batched_leaves, uniform_leaves)`` with ``X`` ``(N, G)``, ``t`` a
    scalar (shared step) or ``(G,)`` (one time per member), the batched leaves in layout
    ``(*leaf_shape, G)`` and the others in their own shape; returns ``(N, G)``.
    ``fast_trig=False`` keeps XLA's sin/cos (plain ``jax.vmap`` of the member's field).
    """

    def member(self, t, x, *leaves):
        """The field of one member ``(N,)`` (with the sin/cos substitution if ``fast_trig``)."""
        if not self.fast_trig:
            return self._single(t, x, *leaves)
        (out,) = eval_with_sincos(self.jaxpr.jaxpr, self.jaxpr.consts, t, x, *leaves)
        return out

    def __call__(self, t, X, bleaves, uleaves):
        mask = self.batched_mask

        def one(t, x, *bl):
            b_iter, u_iter = iter(bl), iter(uleaves)
            return self.member(t, x, *[next(b_iter) if b else next(u_iter) for b in mask])

        t = jnp.asarray(t, dtype=jnp.float64)
        t_axis = 0 if t.ndim == 1 else None
        return jax.vmap(one, in_axes=(t_axis, 1) + (-1,) * len(bleaves), out_axes=1)(t, X, *bleaves)
