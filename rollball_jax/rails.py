"""Rails: curves ζ(θ) along which the point masses move (Putkaradze & Rogers, sec. 5.3, eq. 5.27).

A rail is given in the body frame translated to the geometric centre (GC), in units of
length. Every rail class holds its parameters with a leading axis ``k``: one row per
point mass on a rail of that kind, so the dynamics evaluate all rails of one kind in a
single vectorised call. Build one rail per mass (``k = 1``) or several at once, and pass
them to a model in mass order; :class:`RailSet` groups rails of the same kind.

Derivatives ζ′ = dζ/dθ and ζ″ = d²ζ/dθ² come from closed forms where they are cheap
(circle, ellipse, figure-eight, spoke) and otherwise from nested forward-mode automatic
differentiation of ζ (:meth:`AbstractRail.derivatives`), so any user curve works.
"""

from __future__ import annotations

import abc

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Inexact, PyTree

from ._typing import ArrayInput, FloatInput

from . import _checks as checks
from .errors import ModelError, array_namespace, as_float64, concrete, to_jax
from .geometry import matvec, paper_rail_rotation

__all__ = ["AbstractRail", "CircleRail", "EllipseRail", "FigureEightRail", "SpokeRail", "FunctionRail", "RailSet"]

# Number of θ samples used to check that a rail stays inside the ball (and a disk's rails in
# its x–z plane): over one period for closed rails, between the limits for spokes.
CHECK_SAMPLES = 4097


def _rows(x: ArrayInput, k: int | None, tail: tuple[int, ...], name: str) -> Array:
    """``x`` as a float64 array of shape ``(k, *tail)``, broadcasting a single row."""
    h = concrete(x)
    xp = np if h is not None else jnp  # concrete data is shaped in NumPy (errors.array_namespace)
    if h is not None and not (np.issubdtype(h.dtype, np.number) or h.dtype == bool):
        raise ModelError(f"rail parameter '{name}' must be numeric; got {x!r}")
    x = xp.asarray(x, dtype=np.float64)
    if x.shape == tail:
        x = x[None]
    if x.ndim != len(tail) + 1 or x.shape[1:] != tail:
        raise ModelError(f"rail parameter '{name}' must have shape {tail} or (k, *{tail}); got {x.shape}")
    if k is not None and x.shape[0] != k:
        if x.shape[0] == 1:
            x = xp.broadcast_to(x, (k, *tail))
        else:
            raise ModelError(f"rail parameter '{name}' has {x.shape[0]} rows, expected {k}")
    v = concrete(x)
    if v is not None and not np.all(np.isfinite(v)):
        raise ModelError(f"rail parameter '{name}' contains non-finite values: {np.asarray(v).tolist()}")
    return to_jax(x)


def _concatenate(*xs):
    """``jnp.concatenate(xs)``, in NumPy when every part is concrete (errors.array_namespace)."""
    return to_jax(array_namespace(*xs).concatenate(xs))


def _count(*items: tuple[Any, int]) -> int:
    """Common leading length ``k`` of parameters given as ``(value, trailing ndim)``.

    ``None`` values are skipped; a parameter without a leading axis counts as 1.
    """
    sizes = set()
    for value, tail in items:
        if value is None:
            continue
        shape = np.shape(value)
        sizes.add(int(shape[0]) if len(shape) > tail else 1)
    sizes.discard(1)
    if len(sizes) > 1:
        raise ModelError(f"rail parameters have inconsistent numbers of rows: {sorted(sizes)}")
    return sizes.pop() if sizes else 1


class AbstractRail(eqx.Module):
    """Base class of rails; parameters carry a leading axis of length ``k``.

    Subclasses implement :meth:`point` (one row, scalar θ → ζ of shape ``(3,)``) and
    may override :meth:`point_derivatives` with closed forms. Two properties of the curve
    that code elsewhere needs are declared here, not found by the rail's class:
    :attr:`periodic` and :meth:`theta_limits`.
    """

    #: ``True`` for a closed curve of period 2π in θ (θ and θ + 2π are the same point, and
    #: the vector field is 2π-periodic in θ): feedback wraps such angle errors into [−π, π).
    #: A user's rail is not assumed periodic.
    periodic: ClassVar[bool] = False

    def theta_limits(self) -> np.ndarray | None:
        """``(k, 2)`` ends (θ_min, θ_max) a mass must stay between (checked along every
        solve: :class:`~rollball_jax.errors.SimulationError` past them), or ``None`` for a
        rail without ends."""
        return None

    @abc.abstractmethod
    def point(self, theta: FloatInput[""]) -> Inexact[Array, "3"]:
        """ζ(θ) for one row of parameters (``self`` unbatched); body frame at the GC."""

    def point_derivatives(
        self, theta: FloatInput[""]
    ) -> tuple[Inexact[Array, "3"], Inexact[Array, "3"], Inexact[Array, "3"]]:
        """``(ζ, ζ′, ζ″)`` at θ for one row, by nested forward-mode autodiff of ζ."""
        one = jnp.ones_like(theta)

        def first(th):
            return jax.jvp(self.point, (th,), (one,))

        (zeta, dzeta), (_, ddzeta) = jax.jvp(first, (theta,), (one,))
        return zeta, dzeta, ddzeta

    def point_derivatives_autodiff(self, theta):
        """Same as the default :meth:`point_derivatives`; kept for testing closed forms."""
        return AbstractRail.point_derivatives(self, theta)

    @property
    def size(self) -> int:
        """Number of masses ``k`` on rails of this object."""
        leaves = [x for x in jax.tree_util.tree_leaves(self) if eqx.is_array(x)]
        return int(leaves[0].shape[0]) if leaves else 0

    def theta_range(self) -> tuple[float, float]:
        """Parameter interval covering the rail (closed rails: one period)."""
        return (0.0, 2.0 * np.pi)

    # ---- vectorised over rows -------------------------------------------------
    def zeta(self, theta: FloatInput[" k"]) -> Inexact[Array, "k 3"]:
        """ζ for every row at its own θ (``theta`` shape ``(k,)``)."""
        return jax.vmap(lambda rail, th: rail.point(th))(self, theta)

    def derivatives(
        self, theta: FloatInput[" k"]
    ) -> tuple[Inexact[Array, "k 3"], Inexact[Array, "k 3"], Inexact[Array, "k 3"]]:
        """``(ζ, ζ′, ζ″)`` for every row, each of shape ``(k, 3)``."""
        return jax.vmap(lambda rail, th: rail.point_derivatives(th))(self, theta)

    def derivatives_autodiff(self, theta):
        """``(ζ, ζ′, ζ″)`` by autodiff regardless of closed forms (for verification)."""
        return jax.vmap(lambda rail, th: rail.point_derivatives_autodiff(th))(self, theta)

    def sample(self, num: int = CHECK_SAMPLES) -> np.ndarray:
        """Points ζ at ``num`` equally spaced θ over :meth:`theta_range`, shape ``(k, num, 3)``."""
        lo, hi = self.theta_range()
        th = np.linspace(lo, hi, num)
        return np.asarray(_sample_rows(self, th))

    def max_distance(self) -> np.ndarray:
        """Largest |ζ(θ)| over :meth:`theta_range`, per row ``(k,)``.

        Dense sampling (4097 points) locates the peaks; each of the (up to 4) highest
        sampled local maxima is then refined by Newton's method on d|ζ|²/dθ = 0 (with ζ′,
        ζ″), kept within one sample spacing of its sample. The result is the maximum to
        rounding for every peak wider than the sample spacing (θ-range/4096); a
        narrower spike between two samples could still be missed.
        """
        lo, hi = self.theta_range()
        pts = self.sample()
        r2 = np.sum(pts * pts, axis=-1)  # (k, num)
        num = r2.shape[1]
        spacing = (hi - lo) / (num - 1)
        # local maxima of the samples (ends included), highest first
        left = np.concatenate([np.full((r2.shape[0], 1), -np.inf), r2[:, :-1]], axis=1)
        right = np.concatenate([r2[:, 1:], np.full((r2.shape[0], 1), -np.inf)], axis=1)
        peak = np.where((r2 >= left) & (r2 >= right), r2, -np.inf)
        idx = np.argsort(-peak, axis=1)[:, :4]
        th0 = lo + idx * spacing  # (k, 4)
        refined = np.asarray(_refine_peaks(self, th0, spacing, lo, hi))  # (k, 4) |ζ|²
        refined = np.where(np.take_along_axis(peak, idx, axis=1) > -np.inf, refined, -np.inf)
        return np.sqrt(np.maximum(np.max(r2, axis=1), np.max(refined, axis=1)))


@jax.jit
def _paper_rotations(v):
    """:func:`~rollball_jax.geometry.paper_rail_rotation` of every row of ``v`` ``(3,)`` or
    ``(k, 3)``, ``(k, 3, 3)`` (one compiled program per k instead of ~20 eager operations).

    Compiled, XLA fuses the arithmetic, so the frames equal those a rail built inside a
    ``jit`` gets, and can differ from op-by-op evaluation in the last bits: measured over
    500 random ``v``, at most 6.6e-14 (Frisvad's ``1/(1 + n_z)`` amplifies rounding as
    ``n_z → −1``); the paper example's three frames are bit-identical."""
    return jax.vmap(paper_rail_rotation)(jnp.atleast_2d(v))


@eqx.filter_jit
def _sample_rows(rail, th):
    return jax.vmap(lambda row: jax.vmap(row.point)(th))(rail)


@eqx.filter_jit
def _refine_peaks(rail, th0, spacing, lo, hi):
    """|ζ|² at the local maxima near ``th0`` ``(k, P)`` (Newton on d|ζ|²/dθ, 8 iterations)."""

    def one(row, t0):
        def newton(_, th):
            z, dz, ddz = row.point_derivatives(th)
            g1 = 2.0 * jnp.dot(z, dz)
            g2 = 2.0 * (jnp.dot(dz, dz) + jnp.dot(z, ddz))
            step = jnp.where(g2 < 0.0, -g1 / jnp.where(g2 < 0.0, g2, -1.0), 0.0)
            th = jnp.clip(th + jnp.clip(step, -spacing, spacing), t0 - spacing, t0 + spacing)
            return jnp.clip(th, lo, hi)

        th = jax.lax.fori_loop(0, 8, newton, t0)
        z = row.point(th)
        return jnp.dot(z, z)

    return jax.vmap(lambda row, t: jax.vmap(lambda t_: one(row, t_))(t))(rail, th0)


def _check_rotation(rotation: Array, name: str = "rotation") -> None:
    r = concrete(rotation)
    if r is None:
        return
    eye = np.eye(3)
    err = np.max(np.abs(np.einsum("kji,kjl->kil", r, r) - eye), initial=0.0)
    det = np.linalg.det(r) if r.size else np.ones(0)
    if err > 1e-9 or np.any(det < 0):
        raise ModelError(f"rail '{name}' must be a proper rotation matrix (orthonormal, det +1)")


class _PlanarRail(AbstractRail):
    """ζ(θ) = c + R p(θ) with ``p = (x(θ), 0, z(θ))`` in the rail frame's 1–3 plane."""

    center: Inexact[Array, "k 3"]
    rotation: Inexact[Array, "k 3 3"]

    @abc.abstractmethod
    def planar(self, theta):
        """``(p, p′, p″)`` in the rail frame, each ``(3,)``."""

    def point(self, theta):
        p, _, _ = self.planar(theta)
        return self.center + matvec(self.rotation, p)

    def point_derivatives(self, theta):
        p, dp, ddp = self.planar(theta)
        return self.center + matvec(self.rotation, p), matvec(self.rotation, dp), matvec(self.rotation, ddp)


def _frame_args(k, center, rotation):
    center = _rows(np.zeros(3) if center is None else center, k, (3,), "center")
    rotation = _rows(np.eye(3) if rotation is None else rotation, k, (3, 3), "rotation")
    _check_rotation(rotation)
    return center, rotation


class CircleRail(_PlanarRail):
    """Circular rail ζ(θ) = c + R ρ (cos θ, 0, sin θ) (Putkaradze & Rogers, eqs. 5.42, 6.5, 7.8).

    Parameters (each with an optional leading axis ``k``):
    ``radius`` ρ ``(k,)`` [length]; ``rotation`` R ``(k, 3, 3)``, columns = rail frame
    axes in the body frame (default identity: the circle lies in the body x–z plane,
    as the disk's rails (6.5)); ``center`` c ``(k, 3)`` [length, default 0].
    Use :meth:`paper` for the spherical-coordinate + Frisvad orientation of (7.8)–(7.10).

    Raises :class:`~rollball_jax.errors.ModelError` for non-positive radius, a rotation
    that is not proper orthonormal, or inconsistent shapes.
    """

    periodic: ClassVar[bool] = True

    radius: Inexact[Array, " k"]

    def __init__(self, radius, rotation=None, center=None):
        k = _count((radius, 0), (rotation, 2), (center, 1))
        self.radius = _rows(radius, k, (), "radius")
        self.center, self.rotation = _frame_args(k, center, rotation)
        r = concrete(self.radius)
        if r is not None and np.any(~(r > 0)):
            raise ModelError(f"rail 'radius' must be positive; got {r.tolist()}")

    @classmethod
    def paper(cls, radius, v, center=None) -> "CircleRail":
        """Circle of radius ``radius`` oriented by spherical coordinates ``v = (φ, θ, ρ)``.

        Rotation ``B(ς(v))`` of Putkaradze & Rogers, eqs. 7.8–7.10, with the Frisvad column order
        verified against the paper's example. ``v`` has shape ``(3,)`` or ``(k, 3)``.
        """
        # concrete data reaches the jit as NumPy (an eager jnp.asarray compiles per shape)
        v = array_namespace(v).asarray(v, dtype=np.float64)
        return cls(radius, rotation=_paper_rotations(v), center=center)

    def planar(self, theta):
        c, s = jnp.cos(theta), jnp.sin(theta)
        z = jnp.zeros_like(theta)
        rho = self.radius
        return (
            rho * jnp.stack([c, z, s]),
            rho * jnp.stack([-s, z, c]),
            -rho * jnp.stack([c, z, s]),
        )


class _TwoAxisRail(_PlanarRail):
    """Planar rail with two positive shape lengths ``a``, ``b`` ``(k,)`` [length]."""

    a: Inexact[Array, " k"]
    b: Inexact[Array, " k"]

    def __init__(self, a, b, rotation=None, center=None):
        k = _count((a, 0), (b, 0), (rotation, 2), (center, 1))
        self.a = _rows(a, k, (), "a")
        self.b = _rows(b, k, (), "b")
        self.center, self.rotation = _frame_args(k, center, rotation)
        for name, val in (("a", self.a), ("b", self.b)):
            v = concrete(val)
            if v is not None and np.any(~(v > 0)):
                raise ModelError(f"{type(self).__name__} parameter '{name}' must be positive; got {v.tolist()}")


class EllipseRail(_TwoAxisRail):
    """Elliptic rail ζ(θ) = c + R (a cos θ, 0, b sin θ).

    ``a``, ``b``: semi-axes ``(k,)`` [length] along the rail frame's 1st and 3rd axes;
    ``rotation``/``center`` as in :class:`CircleRail`. Raises ``ModelError`` for
    non-positive semi-axes.
    """

    periodic: ClassVar[bool] = True

    def planar(self, theta):
        c, s = jnp.cos(theta), jnp.sin(theta)
        z = jnp.zeros_like(theta)
        a, b = self.a, self.b
        return (
            jnp.stack([a * c, z, b * s]),
            jnp.stack([-a * s, z, b * c]),
            jnp.stack([-a * c, z, -b * s]),
        )


class FigureEightRail(_TwoAxisRail):
    """Figure-eight rail (lemniscate of Gerono): ζ(θ) = c + R (a cos θ, 0, b sin θ cos θ).

    A closed curve with period 2π that crosses itself at ``c`` (θ = π/2, 3π/2); its
    lobes reach ±a along the rail frame's 1st axis and ±b/2 along its 3rd.
    ``a``, ``b`` ``(k,)`` [length] must be positive; ``rotation``/``center`` as in
    :class:`CircleRail`.
    """

    periodic: ClassVar[bool] = True

    def planar(self, theta):
        c, s = jnp.cos(theta), jnp.sin(theta)
        c2, s2 = jnp.cos(2 * theta), jnp.sin(2 * theta)
        z = jnp.zeros_like(theta)
        a, b = self.a, self.b
        return (
            jnp.stack([a * c, z, 0.5 * b * s2]),
            jnp.stack([-a * s, z, b * c2]),
            jnp.stack([-a * c, z, -2.0 * b * s2]),
        )


class SpokeRail(AbstractRail):
    """Straight tube through the body: ζ(θ) = c + θ d, θ = arc length from ``c``.

    ``direction`` d ``(k, 3)`` (normalised here), ``center`` c ``(k, 3)`` [length],
    ``limits`` ``(k, 2)`` = (θ_min, θ_max), the tube's ends [length]. Both ends must lie
    strictly inside the ball; a mass driven past an end makes ``simulate`` raise.
    """

    direction: Inexact[Array, "k 3"]
    center: Inexact[Array, "k 3"]
    limits: Inexact[Array, "k 2"]

    def __init__(self, direction, limits, center=None):
        k = _count((direction, 1), (limits, 1), (center, 1))
        d = _rows(direction, k, (3,), "direction")
        dn = concrete(d)
        if dn is not None and np.any(np.linalg.norm(dn, axis=-1) == 0):
            raise ModelError("spoke 'direction' must be non-zero")
        self.direction = d / jnp.linalg.norm(d, axis=-1, keepdims=True)
        self.limits = _rows(limits, k, (2,), "limits")
        self.center = _rows(jnp.zeros(3) if center is None else center, k, (3,), "center")
        lim = concrete(self.limits)
        if lim is not None and np.any(~(lim[:, 0] < lim[:, 1])):
            raise ModelError(f"spoke 'limits' must satisfy θ_min < θ_max; got {lim.tolist()}")

    def point(self, theta):
        return self.center + theta * self.direction

    def point_derivatives(self, theta):
        return self.point(theta), self.direction, jnp.zeros_like(self.direction)

    def theta_limits(self) -> np.ndarray:
        return np.asarray(self.limits)

    def sample(self, num: int = CHECK_SAMPLES) -> np.ndarray:
        s = np.linspace(0.0, 1.0, num)
        lim = np.asarray(self.limits)
        th = lim[:, :1] + (lim[:, 1:] - lim[:, :1]) * s  # (k, num)
        return np.asarray(self.center)[:, None, :] + th[..., None] * np.asarray(self.direction)[:, None, :]

    def max_distance(self) -> np.ndarray:
        c = np.asarray(self.center)
        d = np.asarray(self.direction)
        lim = np.asarray(self.limits)
        ends = c[:, None, :] + lim[:, :, None] * d[:, None, :]
        return np.max(np.linalg.norm(ends, axis=-1), axis=-1)  # |ζ| is convex in θ


class FunctionRail(AbstractRail):
    """A user-supplied rail ``fn(theta, params) -> (3,)``, written with ``jax.numpy``.

    ``params`` is any pytree whose array leaves carry a leading axis ``k`` (one row per
    mass; a pytree without that axis is treated as ``k = 1``). ζ′, ζ″ come from
    autodiff. ``period`` is the θ-interval checked to stay inside the ball
    (default ``(0, 2π)``). ``fn`` must be differentiable twice in ``theta``.
    """

    params: PyTree
    fn: Callable[[Array, Any], Array] = eqx.field(static=True)
    period: tuple[float, float] = eqx.field(static=True)

    def __init__(self, fn, params=None, period=(0.0, 2.0 * np.pi), batched=False):
        if not callable(fn):
            raise ModelError("FunctionRail 'fn' must be callable: fn(theta, params) -> (3,)")
        params = jax.tree_util.tree_map(as_float64, params)
        if not batched:
            params = jax.tree_util.tree_map(lambda x: x[None], params)
        elif (leaves := jax.tree_util.tree_leaves(params)) and (
                any(np.ndim(x) == 0 for x in leaves) or len({np.shape(x)[0] for x in leaves}) > 1):
            raise ModelError("FunctionRail with batched=True: every leaf of 'params' needs the same leading axis "
                             f"(one row per mass); got shapes {[np.shape(x) for x in leaves]}")
        if params is None or not jax.tree_util.tree_leaves(params):
            params = {"_k": jnp.zeros((1,))}
        for leaf in jax.tree_util.tree_leaves(params):
            v = concrete(leaf)
            if v is not None and not np.all(np.isfinite(v)):
                raise ModelError(f"FunctionRail 'params' contain non-finite values: {np.asarray(v).tolist()}")
        self.params = params
        self.fn = fn
        if np.shape(period) != (2,):
            raise ModelError(f"FunctionRail 'period' must be (θ_lo, θ_hi); got {period!r}")
        lo, hi = (checks.finite_number(v, f"FunctionRail period[{i}]") for i, v in enumerate(period))
        if not lo < hi:
            raise ModelError(f"FunctionRail 'period' must satisfy θ_lo < θ_hi; got {tuple(period)}")
        self.period = (lo, hi)
        out = checks.traced_output(lambda p: self.fn(jnp.zeros(()), p), (jax.tree_util.tree_map(lambda x: x[0], params),),
                                   "FunctionRail 'fn'", "fn(theta, params) with theta a scalar and params one row")
        if not isinstance(out, jax.ShapeDtypeStruct):  # a tuple (x, y, z) is not an array: the field needs one
            raise ModelError(f"FunctionRail fn must return an array of shape (3,) (e.g. jnp.array([x, y, z])); got {out!r}")
        if out.shape != (3,):
            raise ModelError(f"FunctionRail fn must return shape (3,), got {out.shape}")

    def point(self, theta):
        return self.fn(theta, self.params)

    def theta_range(self):
        return self.period


class RailSet(eqx.Module):
    """Rails of all point masses, in mass order, grouped by kind for vectorisation.

    ``groups`` holds one rail object per kind (rows concatenated); ``order`` is the
    static permutation taking the concatenated group rows back to mass order.
    """

    groups: tuple[AbstractRail, ...]
    order: tuple[int, ...] = eqx.field(static=True)

    def __init__(self, rails: Sequence[AbstractRail] | AbstractRail | "RailSet" = ()):
        if isinstance(rails, RailSet):
            self.groups, self.order = rails.groups, rails.order
            return
        if isinstance(rails, AbstractRail):
            rails = [rails]
        rails = list(rails)
        for i, rail in enumerate(rails):
            if not isinstance(rail, AbstractRail):
                raise ModelError(f"rails[{i}] is not a rail (got {type(rail).__name__})")
        buckets: dict[Any, list[tuple[int, AbstractRail]]] = {}
        start = 0
        for rail in rails:
            key = jax.tree_util.tree_structure(rail)
            buckets.setdefault(key, []).append((start, rail))
            start += rail.size
        groups, positions = [], []
        for members in buckets.values():
            rs = [r for _, r in members]
            groups.append(rs[0] if len(rs) == 1 else jax.tree_util.tree_map(_concatenate, *rs))
            for s, r in members:
                positions.extend(range(s, s + r.size))
        self.groups = tuple(groups)
        self.order = tuple(int(i) for i in np.argsort(np.asarray(positions, dtype=int))) if positions else ()

    @property
    def size(self) -> int:
        """Number of point masses ``n``."""
        return len(self.order)

    def _split(self, theta):
        out, start = [], 0
        for g in self.groups:
            k = g.size
            out.append((g, theta[start : start + k]))
            start += k
        return out

    def _theta_by_group(self, theta: FloatInput[" n"]) -> Inexact[Array, " n"]:
        # mass order -> concatenated-group order
        inverse = np.argsort(np.asarray(self.order, dtype=int))
        theta = jnp.asarray(theta)
        return theta[inverse] if self.size else theta

    def evaluate(
        self, theta: FloatInput[" n"]
    ) -> tuple[Inexact[Array, "n 3"], Inexact[Array, "n 3"], Inexact[Array, "n 3"]]:
        """``(ζ, ζ′, ζ″)`` for all masses, each ``(n, 3)``, body frame at the GC (5.27)."""
        if self.size == 0:
            e = jnp.zeros((0, 3))
            return e, e, e
        parts = [g.derivatives(th) for g, th in self._split(self._theta_by_group(theta))]
        order = np.asarray(self.order, dtype=int)
        return tuple(jnp.concatenate([p[j] for p in parts])[order] for j in range(3))

    def positions(self, theta: FloatInput[" n"]) -> Inexact[Array, "n 3"]:
        """ζ for all masses ``(n, 3)``."""
        if self.size == 0:
            return jnp.zeros((0, 3))
        parts = [g.zeta(th) for g, th in self._split(self._theta_by_group(theta))]
        return jnp.concatenate(parts)[np.asarray(self.order, dtype=int)]

    def max_distance(self) -> np.ndarray:
        """Largest |ζ| of each mass's rail, in mass order ``(n,)``."""
        if self.size == 0:
            return np.zeros(0)
        d = np.concatenate([g.max_distance() for g in self.groups])
        return d[np.asarray(self.order, dtype=int)]

    def sample(self, num: int = 97) -> np.ndarray:
        """Points of every rail over its θ range, in mass order, shape ``(n, num, 3)``."""
        if self.size == 0:
            return np.zeros((0, num, 3))
        pts = np.concatenate([g.sample(num) for g in self.groups])
        return pts[np.asarray(self.order, dtype=int)]

    def bounded(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """``(mass indices (k,), limits (k, 2))`` of every group whose rails have ends
        (:meth:`AbstractRail.theta_limits`; spokes), for checking θ stays between them."""
        out, start = [], 0
        positions = np.argsort(np.asarray(self.order, dtype=int))  # group row -> mass
        for g in self.groups:
            limits = g.theta_limits()
            if limits is not None:
                out.append((positions[start : start + g.size], np.asarray(limits)))
            start += g.size
        return out
