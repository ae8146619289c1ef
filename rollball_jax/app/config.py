"""Run configuration: a TOML file → model, control, initial state, times and solver settings.

Load a file or a shipped example with :func:`load_config`, or build from an already
parsed mapping with :func:`build_from_mapping`; both return a :class:`RunConfig`.
Every error — unknown key, missing or wrongly typed key, a parameter the model rejects —
raises :class:`~rollball_jax.errors.ConfigError` whose message starts with the full
path of the offending key, e.g. ``masses[2].rail.radius: must be positive``.

Format (units: any consistent set; angles in radians; vectors in the body frame
translated to the geometric centre (GC) unless stated)::

    description = "free text"                  # optional

    [model]
    type = "ball"                              # "ball" (sec. 4, 7) or "disk" (sec. 5.4, 6)
    m0 = 1.0                                   # mass of the shell + static structure
    radius = 1.0                               # r
    inertia = [0.9, 1.0, 1.1]                  # ball: principal moments (d1, d2, d3)
    # d2 = 1.0                                 # disk: polar moment about E2 (instead of inertia)
    chi0 = [0.0, 0.0, -0.05]                   # GC → CM of m0; disk also accepts [x, z]. Default 0
    g = 1.0                                    # gravity (−g e3, spatial frame)
    force = [0.0, 0.0, 0.0]                    # optional constant F_e at the GC, spatial frame

    [[masses]]                                 # one table per point mass, in order (may be absent)
    mass = 1.0
    rail = { type = "circle", radius = 0.95, v = [0.0, 0.0, 1.0] }
    theta = 0.0                                # initial rail parameter θ_i (default 0)
    theta_dot = 0.0                            # initial rate θ̇_i (default 0)

    [control]                                  # θ̈(t) = u(t); absent: u ≡ 0
    type = "paper_step"                        # (6.6)/(7.11): signs, amplitude = 1, t_a = 0.1, t_b = 0.2
    signs = "ball"                             # "ball": all +1 (7.11); "disk": (−1)^i (6.6); or [s1, ..., sn]

    [initial]                                  # ball: q = [1,0,0,0], Omega = [0,0,0], z = [0,0]
    q = [1.0, 0.0, 0.0, 0.0]                   # disk: phi = 0, phi_dot = 0, z = 0 (GC position z_a, 5.41)

    [time]
    t0 = 0.0                                   # default 0
    t1 = 20.0
    n_save = 2001                              # equally spaced save times over [t0, t1]
    ts = [0.0, 0.1, 1.0, 20.0]                 # explicit save times; with n_save: the sorted union

    [solver]                                   # all optional
    name = "Dopri8"                            # one of SOLVERS (diffrax explicit adaptive RK)
    rtol = 1e-10
    atol = 1e-10
    max_steps = 100000
    # dt0 = 1e-3                               # initial step (default: automatic)

Rails (``rail`` of each mass), all with an optional ``center = [x, y, z]``:

- ``{type = "circle", radius = ρ}`` — ζ = c + R ρ (cos θ, 0, sin θ); orientation R from
  ``v = [φ, θ, ρ]`` (spherical coordinates + Frisvad basis, eqs. 7.8–7.10) or
  ``rotation = [[...], [...], [...]]`` (rows of R; columns are the rail frame axes);
  default identity: the body x–z plane (the disk's rails, 6.5).
- ``{type = "ellipse", a = ..., b = ...}`` and ``{type = "figure_eight", a = ..., b = ...}``
  with the same ``v``/``rotation`` options.
- ``{type = "spoke", direction = [dx, dy, dz], limits = [θ_min, θ_max]}`` — ζ = c + θ d/|d|.

Controls: ``paper_step`` (``signs``, ``amplitude``, ``t_a``, ``t_b``), ``constant``
(``values = [u1, ..., un]``), ``piecewise_linear`` and ``cubic_spline`` (``knots`` = K
times, ``values`` = n rows of K values, one row per mass).
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import json
import math
import re
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib  # type: ignore[no-redef]

import diffrax as dfx
import numpy as np

from .._typing import RealScalar, TimeSpan
from ..controls import AbstractControl, ConstantControl, CubicSplineControl, PaperStep, PiecewiseLinearControl
from ..errors import ConfigError, ModelError
from ..forces import ConstantForce
from ..geometry import paper_rail_rotation
from ..models import Ball, Disk
from ..rails import AbstractRail, CircleRail, EllipseRail, FigureEightRail, SpokeRail
from ..solve import DEFAULT_ATOL, DEFAULT_MAX_STEPS, DEFAULT_RTOL, Solution, simulate

__all__ = [
    "DEFAULT_N_SAVE",
    "SOLVERS",
    "RunConfig",
    "build_from_mapping",
    "dump_toml",
    "example_path",
    "example_text",
    "list_examples",
    "load_config",
    "make_solver",
]

#: Save points used when ``[time]`` gives neither ``ts`` nor ``n_save``.
DEFAULT_N_SAVE = 2001

#: Solver names accepted in ``[solver] name`` (case-insensitive) → diffrax classes.
#: Only explicit Runge–Kutta methods with an embedded error estimate (adaptive steps).
SOLVERS: dict[str, type[dfx.AbstractSolver]] = {
    "Dopri8": dfx.Dopri8,
    "Dopri5": dfx.Dopri5,
    "Tsit5": dfx.Tsit5,
    "Bosh3": dfx.Bosh3,
    "Heun": dfx.Heun,
    "Midpoint": dfx.Midpoint,
    "Ralston": dfx.Ralston,
}

RAIL_TYPES = ("circle", "ellipse", "figure_eight", "spoke")
CONTROL_TYPES = ("paper_step", "constant", "piecewise_linear", "cubic_spline")
MODEL_TYPES = ("ball", "disk")

_MISSING = object()


def make_solver(name: str) -> dfx.AbstractSolver:
    """A diffrax solver instance from its name (case-insensitive, see :data:`SOLVERS`)."""
    for key, cls in SOLVERS.items():
        if key.lower() == str(name).lower():
            return cls()
    raise ConfigError(f"solver.name: unknown solver {name!r} (choose one of: {', '.join(SOLVERS)})")


# --------------------------------------------------------------------------------------
# Typed, path-aware access to one TOML table
# --------------------------------------------------------------------------------------


def _describe(value: Any) -> str:
    """Short description of a TOML value's type for error messages."""
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, (int, float)):
        return f"number {value!r}"
    if isinstance(value, str):
        return f"string {value!r}"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return f"an array of length {len(value)}"
    return type(value).__name__


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _close_key(k, candidates) -> list:
    """The candidate key closest to the misspelt ``k`` (``[]`` or one), ignoring case and
    with difflib's cutoff at 0.5 (its default 0.6 missed ``mo`` for ``m0``, ``RTOL`` for
    ``rtol``)."""
    if not isinstance(k, str):
        return []
    by_lower = {c.lower(): c for c in candidates if isinstance(c, str)}
    close = difflib.get_close_matches(k.lower(), list(by_lower), n=1, cutoff=0.5)
    return [by_lower[close[0]]] if close else []


class _Table:
    """One TOML table with its key path; typed getters raise ConfigError naming the key."""

    def __init__(self, mapping: Any, path: str):
        if not isinstance(mapping, dict):
            raise ConfigError(f"{path}: expected a table, got {_describe(mapping)}")
        self.mapping = mapping
        self.path = path
        self.used: set[str] = set()

    def key(self, k: str) -> str:
        return f"{self.path}.{k}" if self.path else k

    def error(self, k: str | None, message: str) -> ConfigError:
        return ConfigError(f"{self.key(k) if k else self.path}: {message}")

    def has(self, k: str) -> bool:
        return k in self.mapping

    def allow(self, *keys: str) -> None:
        """Declare optional keys read conditionally, so :meth:`finish` accepts and lists them."""
        self.used.update(keys)

    def raw(self, k: str, default: Any = _MISSING) -> Any:
        self.used.add(k)
        if k in self.mapping:
            return self.mapping[k]
        if default is _MISSING:
            # A misspelt key is the usual reason: name it rather than only the missing one.
            unknown = [u for u in self.mapping if u not in self.used and isinstance(u, str)]
            close = _close_key(k, unknown)
            hint = f" (found unknown key {self.key(close[0])!r}: did you mean {k!r}?)" if close else ""
            raise ConfigError(f"{self.key(k)}: required key is missing{hint}")
        return default

    def number(self, k, default=_MISSING, *, positive=False, nonnegative=False) -> float:
        v = self.raw(k, default)
        return _check_number(v, self.key(k), positive=positive, nonnegative=nonnegative)

    def integer(self, k, default=_MISSING, *, minimum: int | None = None) -> int:
        v = self.raw(k, default)
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.error(k, f"expected an integer, got {_describe(v)}")
        if minimum is not None and v < minimum:
            raise self.error(k, f"must be at least {minimum}; got {v}")
        return v

    def string(self, k, default=_MISSING, *, choices: tuple[str, ...] | None = None) -> str:
        v = self.raw(k, default)
        if not isinstance(v, str):
            raise self.error(k, f"expected a string, got {_describe(v)}")
        if choices is not None and v not in choices:
            raise self.error(k, f"unknown value {v!r} (choose one of: {', '.join(repr(c) for c in choices)})")
        return v

    def vector(self, k, default=_MISSING, *, length: int | tuple[int, ...] | None = None) -> np.ndarray | None:
        v = self.raw(k, default)
        if v is None and default is None:
            return None
        return _check_vector(v, self.key(k), length)

    def matrix(self, k, default=_MISSING, *, shape: tuple[int | None, int | None]) -> np.ndarray | None:
        v = self.raw(k, default)
        if v is None and default is None:
            return None
        key = self.key(k)
        rows_expected, cols_expected = shape
        if not isinstance(v, list) or not all(isinstance(row, list) for row in v):
            raise ConfigError(f"{key}: expected an array of arrays (one row per line), got {_describe(v)}")
        if rows_expected is not None and len(v) != rows_expected:
            raise ConfigError(f"{key}: expected {rows_expected} rows, got {len(v)}")
        rows = [_check_vector(row, f"{key}[{i}]", cols_expected) for i, row in enumerate(v)]
        if len({r.shape[0] for r in rows}) > 1:
            raise ConfigError(f"{key}: rows have different lengths {[r.shape[0] for r in rows]}")
        return np.stack(rows) if rows else np.zeros((0, cols_expected or 0))

    def table(self, k, *, required: bool = True) -> "_Table | None":
        v = self.raw(k, _MISSING if required else None)
        if v is None:
            return None
        return _Table(v, self.key(k))

    def finish(self) -> None:
        """Raise for keys that were never read (unknown keys), suggesting close matches."""
        unknown = [k for k in self.mapping if k not in self.used]
        if unknown:
            k = unknown[0]
            known = sorted(self.used)
            close = _close_key(k, known)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            allowed = f" (allowed here: {', '.join(known)})" if known else ""
            raise self.error(k, f"unknown key{hint}{allowed}")


def _check_number(v, key, *, positive=False, nonnegative=False) -> float:
    if not _is_number(v):
        raise ConfigError(f"{key}: expected a number, got {_describe(v)}")
    v = float(v)
    if not math.isfinite(v):
        raise ConfigError(f"{key}: must be finite; got {v}")
    if positive and not v > 0:
        raise ConfigError(f"{key}: must be positive; got {v!r}")
    if nonnegative and not v >= 0:
        raise ConfigError(f"{key}: must be non-negative; got {v!r}")
    return v


def _check_vector(v, key, length) -> np.ndarray:
    if not isinstance(v, list):
        raise ConfigError(f"{key}: expected an array of numbers, got {_describe(v)}")
    if length is not None:
        lengths = (length,) if isinstance(length, int) else tuple(length)
        if len(v) not in lengths:
            want = " or ".join(str(n) for n in lengths)
            raise ConfigError(f"{key}: expected {want} numbers, got {len(v)}")
    return np.array([_check_number(x, f"{key}[{i}]") for i, x in enumerate(v)], dtype=np.float64)


# --------------------------------------------------------------------------------------
# RunConfig
# --------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, eq=False)
class RunConfig:
    """A validated run: everything :func:`rollball_jax.simulate` needs, plus metadata.

    Attributes
    ----------
    name : str              config name (file stem or example name).
    model : Ball | Disk
    control : AbstractControl   θ̈(t), shape ``(n,)``.
    x0 : (N,)               initial state in the paper's order, (7.1) ball / (6.1) disk.
    t_span : (t0, t1)
    ts : (T,)               save times (sorted; includes ``ts_requested``).
    ts_requested : (K,)     the explicitly listed ``[time] ts`` (may be empty).
    n_save : int | None     equally spaced points merged into ``ts`` (None: ``ts`` only).
    solver : str            diffrax solver class name (key of :data:`SOLVERS`).
    rtol, atol : float
    max_steps : int
    dt0 : float | None      initial step (None: automatic).
    z_a : float             disk only: initial GC position along e1 (5.41).
    mapping : dict          the configuration mapping as parsed (a copy; with overrides applied);
                            TOML text via :meth:`to_toml`.
    source : Path | None    the file read, if any.
    """

    name: str
    model: Ball | Disk
    control: AbstractControl
    x0: np.ndarray
    t_span: TimeSpan
    ts: np.ndarray
    ts_requested: np.ndarray
    n_save: int | None
    solver: str
    rtol: float
    atol: float
    max_steps: int
    dt0: float | None
    z_a: float
    mapping: dict
    source: Path | None = None

    @property
    def model_type(self) -> str:
        """``"ball"`` or ``"disk"``."""
        return self.model.kind

    def make_solver(self) -> dfx.AbstractSolver:
        """A fresh diffrax solver instance of :attr:`solver`."""
        return make_solver(self.solver)

    def simulate_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of :func:`rollball_jax.simulate` (after model, control, x0)."""
        return dict(
            t_span=self.t_span, ts=self.ts, solver=self.make_solver(), rtol=self.rtol, atol=self.atol,
            max_steps=self.max_steps, dt0=self.dt0, z_a=self.z_a,
        )

    def simulate(self) -> Solution:
        """Run :func:`rollball_jax.simulate` with this configuration; returns a ``Solution``."""
        return simulate(self.model, self.control, self.x0, **self.simulate_kwargs())

    def to_toml(self) -> str:
        """The configuration as TOML text (round-trips through :func:`load_config`)."""
        header = f"# rollball configuration {self.name!r}" + (f" (from {self.source})" if self.source else "")
        return header + "\n" + dump_toml(self.mapping)

    def with_overrides(
        self,
        *,
        rtol: RealScalar | None = None,
        atol: RealScalar | None = None,
        solver: str | None = None,
        max_steps: int | None = None,
        n_save: int | None = None,
    ) -> "RunConfig":
        """A new, re-validated config with some ``[solver]``/``[time]`` settings replaced.

        The overrides are written into :attr:`mapping`, so saved metadata shows them.
        """
        mapping = copy.deepcopy(self.mapping)
        sol = mapping.setdefault("solver", {})
        for key, value in (("rtol", rtol), ("atol", atol), ("name", solver), ("max_steps", max_steps)):
            if value is not None:
                sol[key] = value
        if n_save is not None:
            mapping.setdefault("time", {})["n_save"] = n_save
        return build_from_mapping(mapping, name=self.name, source=self.source)


# --------------------------------------------------------------------------------------
# Building
# --------------------------------------------------------------------------------------


def _orientation(t: _Table) -> np.ndarray | None:
    """Rotation R of a planar rail from ``v`` (7.8–7.10) or ``rotation`` (3×3); None: identity."""
    t.allow("v", "rotation")
    has_v, has_rot = t.has("v"), t.has("rotation")
    if has_v and has_rot:
        raise t.error(None, "give either 'v' (spherical coordinates) or 'rotation' (3×3 matrix), not both")
    if has_v:
        v = t.vector("v", length=3)
        if not v[2] > 0:
            raise t.error("v", f"the length ρ = v[2] must be positive; got {float(v[2])!r}")
        return np.asarray(paper_rail_rotation(v))
    if has_rot:
        rot = t.matrix("rotation", shape=(3, 3))
        if np.max(np.abs(rot.T @ rot - np.eye(3))) > 1e-9 or np.linalg.det(rot) < 0:
            raise t.error("rotation", "must be a proper rotation matrix (orthonormal rows, determinant +1)")
        return rot
    return None


def _build_rail(t: _Table) -> AbstractRail:
    kind = t.string("type", choices=RAIL_TYPES)
    center = t.vector("center", None, length=3)
    try:
        if kind == "circle":
            radius = t.number("radius", positive=True)
            rail = CircleRail(radius, rotation=_orientation(t), center=center)
        elif kind in ("ellipse", "figure_eight"):
            a = t.number("a", positive=True)
            b = t.number("b", positive=True)
            cls = EllipseRail if kind == "ellipse" else FigureEightRail
            rail = cls(a, b, rotation=_orientation(t), center=center)
        else:
            direction = t.vector("direction", length=3)
            if not np.any(direction != 0):
                raise t.error("direction", "must be non-zero")
            limits = t.vector("limits", length=2)
            if not limits[0] < limits[1]:
                raise t.error("limits", f"must satisfy limits[0] < limits[1]; got {limits.tolist()}")
            rail = SpokeRail(direction, limits, center=center)
    except ModelError as e:
        raise t.error(None, str(e)) from e
    t.finish()
    return rail


def _model(t: _Table, rails: list[AbstractRail], masses: np.ndarray):
    kind = t.string("type", choices=MODEL_TYPES)
    m0 = t.number("m0", positive=True)
    radius = t.number("radius", positive=True)
    g = t.number("g")
    force = t.vector("force", None, length=3)
    force_obj = None if force is None else ConstantForce(force)
    if kind == "ball" and t.has("d2"):
        raise t.error("d2", "unknown key for type = 'ball' (a ball takes inertia = [d1, d2, d3])")
    if kind == "disk" and t.has("inertia"):
        raise t.error("inertia", "unknown key for type = 'disk' (a disk takes the scalar d2)")
    if kind == "ball":
        inertia = t.vector("inertia", length=3)
        for i, d in enumerate(inertia):
            if not d > 0:
                raise t.error(f"inertia[{i}]", f"must be positive; got {float(d)!r}")
        chi0 = t.vector("chi0", [0.0, 0.0, 0.0], length=3)
    else:
        d2 = t.number("d2", positive=True)
        chi0 = t.vector("chi0", [0.0, 0.0, 0.0], length=(2, 3))
        if chi0.shape == (3,) and chi0[1] != 0.0:
            raise t.error("chi0", "a disk's χ0 must lie in the x–z plane: chi0[1] must be 0 (or give [x, z])")
    t.finish()
    if not np.linalg.norm(chi0) < radius:
        raise t.error("chi0", f"|χ0| = {np.linalg.norm(chi0):.6g} must be smaller than the radius {radius:.6g}")
    try:
        if kind == "ball":
            return Ball(m0, radius, inertia, chi0, g, masses, rails, force_obj)
        return Disk(m0, radius, d2, chi0, g, masses, rails, force_obj)
    except ModelError as e:
        if e.mass is not None:  # the model names the mass from 1; the file's path from 0
            raise ConfigError(f"masses[{e.mass}].rail: the rail {e.detail}") from e
        raise ConfigError(f"{t.path}: {e}") from e


def _control(t: _Table | None, n: int) -> AbstractControl:
    if t is None:
        return ConstantControl(np.zeros(n))
    kind = t.string("type", choices=CONTROL_TYPES)
    try:
        if kind == "paper_step":
            signs_raw = t.raw("signs", "ball")
            if isinstance(signs_raw, str):
                if signs_raw == "ball":
                    signs = np.ones(n)
                elif signs_raw == "disk":
                    signs = np.array([(-1.0) ** i for i in range(1, n + 1)])
                else:
                    raise t.error("signs", f"unknown value {signs_raw!r} (use 'ball', 'disk' or an array of n numbers)")
            else:
                signs = t.vector("signs", length=n)
            amplitude = t.number("amplitude", 1.0)
            t_a = t.number("t_a", 0.1)
            t_b = t.number("t_b", 0.2)
            if not t_a < t_b:
                raise t.error("t_b", f"must be larger than t_a; got t_a = {t_a!r}, t_b = {t_b!r}")
            control = PaperStep(signs, amplitude=amplitude, t_a=t_a, t_b=t_b)
        elif kind == "constant":
            control = ConstantControl(t.vector("values", length=n))
        else:
            knots = t.vector("knots")
            if knots.shape[0] < 2:
                raise t.error("knots", f"needs at least 2 times; got {knots.shape[0]}")
            if np.any(np.diff(knots) <= 0):
                raise t.error("knots", f"must be strictly increasing; got {knots.tolist()}")
            values = t.matrix("values", shape=(n, knots.shape[0]))
            cls = PiecewiseLinearControl if kind == "piecewise_linear" else CubicSplineControl
            control = cls(knots, values)
    except ModelError as e:
        raise t.error(None, str(e)) from e
    t.finish()
    return control


def _save_times(t: _Table) -> tuple[tuple[float, float], np.ndarray, np.ndarray, int | None]:
    t0 = t.number("t0", 0.0)
    t1 = t.number("t1")
    if not t1 > t0:
        raise t.error("t1", f"must be larger than t0 = {t0!r}; got {t1!r}")
    requested = t.vector("ts", None)
    t.allow("n_save")
    n_save = t.integer("n_save", None, minimum=2) if t.has("n_save") else None
    t.finish()
    if requested is not None:
        if requested.size == 0:
            raise t.error("ts", "must list at least one time")
        bad = np.nonzero((requested < t0) | (requested > t1))[0]
        if bad.size:
            i = int(bad[0])
            raise t.error(f"ts[{i}]", f"{float(requested[i])!r} lies outside [t0, t1] = [{t0!r}, {t1!r}]")
        requested = np.unique(requested)
    else:
        requested = np.zeros(0)
    if n_save is None and requested.size == 0:
        n_save = DEFAULT_N_SAVE
    if n_save is None:
        return (t0, t1), requested, requested, None
    dense = np.linspace(t0, t1, n_save)
    if requested.size:
        # Drop grid points that duplicate a requested time up to rounding; keep the exact request.
        gap = np.min(np.abs(dense[:, None] - requested[None, :]), axis=1)
        dense = dense[gap > 1e-12 * (t1 - t0)]
    ts = np.sort(np.concatenate([dense, requested]))
    return (t0, t1), ts, requested, n_save


def _initial(t: _Table | None, model_type: str, theta, theta_dot, model) -> tuple[np.ndarray, float]:
    t = _Table({}, "initial") if t is None else t
    if model_type == "ball":
        q = t.vector("q", [1.0, 0.0, 0.0, 0.0], length=4)
        if abs(np.linalg.norm(q) - 1.0) > 1e-8:
            raise t.error("q", f"the versor must have unit length; |q| = {np.linalg.norm(q):.12g}")
        omega = t.vector("Omega", [0.0, 0.0, 0.0], length=3)
        z = t.vector("z", [0.0, 0.0], length=2)
        t.finish()
        x0 = model.initial_state(theta=theta, theta_dot=theta_dot, q=q, Omega=omega, z=z)
        return np.asarray(x0), 0.0
    phi = t.number("phi", 0.0)
    phi_dot = t.number("phi_dot", 0.0)
    z = t.number("z", 0.0)
    t.finish()
    x0 = model.initial_state(theta=theta, theta_dot=theta_dot, phi=phi, phi_dot=phi_dot)
    return np.asarray(x0), z


def _solver(t: _Table | None) -> tuple[str, float, float, int, float | None]:
    t = _Table({}, "solver") if t is None else t
    name = t.string("name", "Dopri8")
    canonical = next((k for k in SOLVERS if k.lower() == name.lower()), None)
    if canonical is None:
        raise t.error("name", f"unknown solver {name!r} (choose one of: {', '.join(SOLVERS)})")
    rtol = t.number("rtol", DEFAULT_RTOL, positive=True)
    atol = t.number("atol", DEFAULT_ATOL, positive=True)
    max_steps = t.integer("max_steps", DEFAULT_MAX_STEPS, minimum=1)
    t.allow("dt0")
    dt0 = t.number("dt0", positive=True) if t.has("dt0") else None
    t.finish()
    return canonical, rtol, atol, max_steps, dt0


def build_from_mapping(mapping: Mapping[str, Any], *, name: str = "config", source: Path | str | None = None) -> RunConfig:
    """Validate a parsed configuration mapping (see the module docstring) into a :class:`RunConfig`.

    Raises :class:`ConfigError` naming the offending key's full path.
    """
    if not isinstance(mapping, Mapping):
        raise ConfigError(f"configuration: expected a table of tables, got {_describe(mapping)}")
    mapping = copy.deepcopy(dict(mapping))
    root = _Table(mapping, "")
    root.string("description", "")
    model_t = root.table("model")
    model_type = model_t.string("type", choices=MODEL_TYPES)

    mass_list = root.raw("masses", [])
    if not isinstance(mass_list, list):
        raise ConfigError(f"masses: expected an array of tables ([[masses]]), got {_describe(mass_list)}")
    rails, masses, theta, theta_dot = [], [], [], []
    for i, entry in enumerate(mass_list):
        mt = _Table(entry, f"masses[{i}]")
        masses.append(mt.number("mass", positive=True))
        rail_t = mt.table("rail")
        rail = _build_rail(rail_t)
        rails.append(rail)
        theta.append(mt.number("theta", 0.0))
        theta_dot.append(mt.number("theta_dot", 0.0))
        mt.finish()
    n = len(rails)

    model = _model(model_t, rails, np.asarray(masses, dtype=np.float64))
    control = _control(root.table("control", required=False), n)
    try:
        x0, z_a = _initial(root.table("initial", required=False), model_type, theta, theta_dot, model)
    except ModelError as e:
        raise ConfigError(f"initial: {e}") from e
    t_span, ts, requested, n_save = _save_times(root.table("time"))
    solver, rtol, atol, max_steps, dt0 = _solver(root.table("solver", required=False))
    root.finish()
    return RunConfig(
        name=name, model=model, control=control, x0=x0, t_span=t_span, ts=ts, ts_requested=requested,
        n_save=n_save, solver=solver, rtol=rtol, atol=atol, max_steps=max_steps, dt0=dt0, z_a=z_a,
        mapping=mapping, source=None if source is None else Path(source),
    )


# --------------------------------------------------------------------------------------
# Files and shipped examples
# --------------------------------------------------------------------------------------


def _examples_dir():
    return resources.files("rollball_jax") / "examples"


def list_examples() -> list[str]:
    """Names of the shipped example configs (e.g. ``paper-ball``, ``paper-disk``)."""
    return sorted(p.name[: -len(".toml")] for p in _examples_dir().iterdir() if p.name.endswith(".toml"))


def example_path(name: str) -> Path:
    """Path of a shipped example by name (with or without ``.toml``); ConfigError if unknown."""
    stem = name[: -len(".toml")] if name.endswith(".toml") else name
    if stem not in list_examples():
        raise ConfigError(f"no shipped example named {name!r} (available: {', '.join(list_examples())})")
    return Path(str(_examples_dir() / f"{stem}.toml"))


def example_text(name: str) -> str:
    """TOML text of a shipped example."""
    return example_path(name).read_text(encoding="utf-8")


def load_config(path_or_name: str | Path) -> RunConfig:
    """Read a TOML file, or a shipped example by name, into a validated :class:`RunConfig`.

    An existing file path wins over an example of the same name. Raises
    :class:`ConfigError` for a missing file, TOML syntax errors and invalid content.
    """
    p = Path(path_or_name)
    if p.is_file():
        path = p
    elif isinstance(path_or_name, str) and "/" not in path_or_name and path_or_name.removesuffix(".toml") in list_examples():
        path = example_path(path_or_name)
    else:
        raise ConfigError(
            f"{path_or_name}: no such config file, and not a shipped example (available: {', '.join(list_examples())})"
        )
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"{path}: cannot read ({e.strerror or e})") from e
    try:
        mapping = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: invalid TOML: {e}") from e
    if "model" not in mapping and ("base" in mapping or "grid" in mapping or "random" in mapping):
        raise ConfigError(f"{path}: this is a sweep file (base/grid/random); run it with `rollball sweep {path_or_name}`")
    return build_from_mapping(mapping, name=path.stem, source=path)


# --------------------------------------------------------------------------------------
# TOML writing (the subset used by configurations)
# --------------------------------------------------------------------------------------

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _toml_key(k: str) -> str:
    return k if _BARE_KEY.match(k) else json.dumps(k, ensure_ascii=False)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)  # shortest round-trip representation
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)  # JSON string escapes are valid TOML basic strings
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, np.ndarray):
        return _toml_value(v.tolist())
    if isinstance(v, (np.floating, np.integer)):
        return _toml_value(v.item())
    if isinstance(v, Mapping):
        return "{ " + ", ".join(f"{_toml_key(k)} = {_toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def _is_table_array(v: Any) -> bool:
    return isinstance(v, list) and len(v) > 0 and all(isinstance(x, Mapping) for x in v)


def dump_toml(mapping: Mapping[str, Any]) -> str:
    """TOML text of a configuration mapping: top-level tables as ``[table]``/``[[table]]``,
    deeper tables inline. ``tomllib.loads(dump_toml(m)) == m`` for such mappings."""
    lines: list[str] = []
    scalars = {k: v for k, v in mapping.items() if not isinstance(v, Mapping) and not _is_table_array(v)}
    for k, v in scalars.items():
        lines.append(f"{_toml_key(k)} = {_toml_value(v)}")
    for k, v in mapping.items():
        if k in scalars:
            continue
        for entry in v if _is_table_array(v) else [v]:
            lines.append("")
            lines.append(f"[[{_toml_key(k)}]]" if _is_table_array(v) else f"[{_toml_key(k)}]")
            lines.extend(f"{_toml_key(kk)} = {_toml_value(vv)}" for kk, vv in entry.items())
    return "\n".join(lines).lstrip("\n") + "\n"
