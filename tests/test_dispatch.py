"""``_dispatch.array_jit``: eqx.filter_jit's tracing rule at jax.jit's call cost."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rollball_jax._dispatch import array_jit


class _Params(eqx.Module):
    a: jax.Array
    fn: object  # a callable leaf: static
    k: int  # a Python int leaf: static


def _f(p, x, scale):
    return p.fn(p.a * x) * scale + p.k


def test_array_leaves_traced_other_leaves_static_as_in_filter_jit():
    rng = np.random.default_rng(0)
    traces = []

    def body(p, x, scale):
        traces.append(1)
        return _f(p, x, scale)

    fast, ref = array_jit(body), eqx.filter_jit(_f)
    p = _Params(jnp.asarray(rng.normal(size=3)), jnp.sin, 2)
    x = rng.normal(size=3)
    np.testing.assert_array_equal(fast(p, x, 0.5), ref(p, x, 0.5))
    # New array values (NumPy or JAX) reuse the program; equal statics too.
    fast(_Params(jnp.asarray(rng.normal(size=3)), jnp.sin, 2), rng.normal(size=3), 0.5)
    assert len(traces) == 1
    # A new static leaf (callable, int, Python float argument) selects a new program ...
    for q, s in ((_Params(p.a, jnp.cos, 2), 0.5), (_Params(p.a, jnp.sin, 3), 0.5), (p, 0.25)):
        np.testing.assert_array_equal(fast(q, x, s), ref(q, x, s))
    assert len(traces) == 4
    # ... and a new shape too.
    np.testing.assert_array_equal(fast(p, x[:1], 0.5), ref(p, x[:1], 0.5))
    assert len(traces) == 5


def test_unhashable_static_leaf_is_refused_as_by_filter_jit():
    class Unhashable:
        __hash__ = None

        def __call__(self, y):
            return 2.0 * y

    p = _Params(jnp.ones(2), Unhashable(), 1)
    for jitted in (array_jit(_f), eqx.filter_jit(_f)):
        with pytest.raises(ValueError, match="hash"):
            jitted(p, np.arange(2.0), 3.0)
