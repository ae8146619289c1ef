"""Parameter sweeps: a base design plus grids and random samples, run in resumable chunks.

A sweep file (TOML) names a base run configuration (the format of
:mod:`rollball_jax.app.config`) and the parameters to vary; every parameter of the
configuration mapping is addressable by its key path, e.g. ``masses[1].rail.radius``,
``model.inertia[0]``, ``model.chi0[2]``, ``control.amplitude``, ``masses[0].theta``,
``initial.Omega[2]``::

    description = "paper ball: rail radius x control amplitude, random initial angles"
    base = "paper-ball"              # shipped example, or a path relative to this file,
                                     # or a [base] table holding a whole configuration

    [overrides]                      # set in the base before expanding (any key path)
    "time.t1" = 5.0
    "time.n_save" = 11
    "time.ts" = []                   # (an empty list removes the key)
    "solver.rtol" = 1e-8
    "solver.atol" = 1e-8

    [[grid]]                         # grids combine as an outer product
    path = "masses[1].rail.radius"
    values = [0.8, 0.85, 0.9]
    [[grid]]
    path = "control.amplitude"
    linspace = [0.5, 1.5, 5]         # start, stop, count

    [random]                         # n samples, seeded; combined with every grid point
    seed = 0
    n = 4
    [[random.params]]
    path = "masses[0].theta"
    uniform = [0.0, 6.283185307179586]
    [[random.params]]
    path = "model.chi0[2]"
    normal = [-0.05, 0.01]           # mean, standard deviation

    [run]                            # execution (all optional)
    mode = "adaptive"                # adaptive | lockstep | shared | fixed (rollball_jax.batch)
    chunk = 256                      # members per chunk: the unit of work, of writing and of resuming
    group_size = 256                 # modes lockstep/shared/fixed
    # dt = 0.05                      # mode fixed (default: chosen once by a pilot on chunk 0)
    build = "each"                   # each: every member built and validated by the config
                                     # builder (~20 ms each); fast: swept values written into
                                     # the base design's arrays (only the ends of every range
                                     # are validated; paths must enter an array unchanged)

Members are numbered grid point first, random sample fastest: member ``g·n + k`` is grid
point ``g`` with random sample ``k`` (every grid point sees the same samples). ``[time]``
and ``[solver]`` are sweep-wide (set them in ``[overrides]``): members share save times
and solver settings.

Results (:func:`run_sweep`) go to a directory ``RESULTS`` holding ``results.zarr`` (an
xarray dataset in a Zarr store, chunked along ``member`` exactly as the sweep's chunks),
``sweep.json`` (the effective sweep, its hash and the member table) and
``chunks/cNNNNNN.json`` (one completion marker per chunk, written after its data). A
chunk is *done* iff its marker exists; an interrupted sweep resumes with the same
command, recomputing nothing that is done, and gives the same numbers as an
uninterrupted run (same chunks, same compiled programs). Read results with
:func:`open_sweep`.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import json
import math
import os
import re
import shutil
import socket
import time
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .._typing import RealScalar
from ..errors import ConfigError, RollballError

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib  # type: ignore[no-redef]

__all__ = [
    "SweepError",
    "SweepSpec",
    "load_sweep_spec",
    "sweep_from_mapping",
    "run_sweep",
    "open_sweep",
    "sweep_status",
    "STORE",
    "SPEC_FILE",
]

STORE = "results.zarr"
SPEC_FILE = "sweep.json"
CHUNK_DIR = "chunks"
RUN_MODES = ("adaptive", "lockstep", "shared", "fixed")
#: Seconds to sleep after each chunk (environment; for tests and demonstrations of resuming).
THROTTLE_ENV = "ROLLBALL_SWEEP_THROTTLE"


class SweepError(RollballError, ValueError):
    """An invalid sweep file, or a results directory holding a different sweep."""


# ======================================================================================
# Key paths into a configuration mapping
# ======================================================================================

_TOKEN = re.compile(r"([A-Za-z_][A-Za-z0-9_\-]*)|\[(\d+)\]|(\.)")


def parse_path(path: str) -> list[str | int]:
    """``"masses[1].rail.radius"`` → ``["masses", 1, "rail", "radius"]``."""
    if not isinstance(path, str) or not path:
        raise SweepError(f"parameter path must be a non-empty string; got {path!r}")
    out: list[str | int] = []
    pos = 0
    expect_name = True
    while pos < len(path):
        m = _TOKEN.match(path, pos)
        if not m:
            raise SweepError(f"parameter path {path!r}: cannot parse at {path[pos:]!r}")
        name, index, dot = m.groups()
        if name is not None:
            if not expect_name:
                raise SweepError(f"parameter path {path!r}: missing '.' before {name!r}")
            out.append(name)
            expect_name = False
        elif index is not None:
            if expect_name and not out:
                raise SweepError(f"parameter path {path!r} must start with a key name")
            out.append(int(index))
            expect_name = False
        else:
            if expect_name:
                raise SweepError(f"parameter path {path!r}: misplaced '.'")
            expect_name = True
        pos = m.end()
    if expect_name:
        raise SweepError(f"parameter path {path!r} ends with '.'")
    return out


def set_path(mapping: dict, path: str, value: Any) -> None:
    """Set ``value`` at key path ``path`` in ``mapping`` (in place). Missing table keys
    are created (the configuration builder then rejects unknown ones); list indices must
    exist. ``value = []`` at a table key removes that key."""
    tokens = parse_path(path)
    node: Any = mapping
    for k, tok in enumerate(tokens[:-1]):
        nxt = tokens[k + 1]
        where = _fmt(tokens[: k + 1])
        if isinstance(tok, int):
            if not isinstance(node, list) or tok >= len(node):
                raise SweepError(f"{path}: {where} does not exist (the base has {len(node) if isinstance(node, list) else 'no'} entries)")
            node = node[tok]
        else:
            if not isinstance(node, dict):
                raise SweepError(f"{path}: {where} is not a table")
            if tok not in node:
                node[tok] = [] if isinstance(nxt, int) else {}
            node = node[tok]
    last = tokens[-1]
    if isinstance(last, int):
        if not isinstance(node, list) or last >= len(node):
            raise SweepError(f"{path}: index {last} out of range")
        node[last] = value
    else:
        if not isinstance(node, dict):
            raise SweepError(f"{path}: {_fmt(tokens[:-1])} is not a table")
        if isinstance(value, list) and not value and not isinstance(node.get(last), list):
            node.pop(last, None)
        elif isinstance(value, list) and not value:
            node.pop(last, None)
        else:
            node[last] = value


def _fmt(tokens) -> str:
    s = ""
    for t in tokens:
        s += f"[{t}]" if isinstance(t, int) else (f".{t}" if s else t)
    return s


def coord_name(path: str) -> str:
    """Variable name for a swept path: ``masses[1].rail.radius`` → ``masses_1_rail_radius``."""
    return re.sub(r"_+", "_", re.sub(r"[^A-Za-z0-9]+", "_", path)).strip("_")


# ======================================================================================
# Sweep specification
# ======================================================================================


@dataclasses.dataclass(frozen=True)
class SweepSpec:
    """A validated sweep: base mapping, swept parameters and execution settings.

    Attributes: ``name``; ``description``; ``base`` (configuration mapping with
    ``[overrides]`` applied); ``grid`` (list of ``(path, values)``); ``random_seed``,
    ``random_n``, ``random`` (list of ``(path, kind, (a, b))`` with kind ``uniform`` or
    ``normal``); ``mode``, ``chunk``, ``group_size``, ``dt`` (execution); ``source``.
    """

    name: str
    description: str
    base: dict
    grid: tuple
    random_seed: int
    random_n: int
    random: tuple
    mode: str = "adaptive"
    chunk: int = 256
    group_size: int = 256
    dt: RealScalar | None = None
    build: str = "each"
    source: str | None = None

    # ---- members ---------------------------------------------------------------------
    @property
    def paths(self) -> list[str]:
        """Swept key paths, grid first, in file order."""
        return [p for p, _ in self.grid] + [p for p, _, _ in self.random]

    @property
    def n_grid(self) -> int:
        return int(np.prod([len(v) for _, v in self.grid], dtype=np.int64)) if self.grid else 1

    @property
    def n_random(self) -> int:
        return self.random_n if self.random else 1

    @property
    def size(self) -> int:
        """Number of members."""
        return self.n_grid * self.n_random

    @property
    def n_chunks(self) -> int:
        return -(-self.size // self.chunk)

    @property
    def batch_size(self) -> int:
        """Members solved per chunk, the last chunk padded to it: ``run.chunk``, or the whole
        sweep if it is smaller (a 10-member sweep solved 256 at the default chunk)."""
        return min(self.chunk, self.size)

    def chunk_range(self, c: int) -> tuple[int, int]:
        return c * self.chunk, min((c + 1) * self.chunk, self.size)

    def table(self) -> dict[str, np.ndarray]:
        """Value of every swept path for every member: ``{path: (size,)}``."""
        out: dict[str, np.ndarray] = {}
        if self.grid:
            axes = np.meshgrid(*[np.asarray(v, dtype=np.float64) for _, v in self.grid], indexing="ij")
            for (p, _), a in zip(self.grid, axes):
                out[p] = np.repeat(a.reshape(-1), self.n_random)
        if self.random:
            rng = np.random.default_rng(self.random_seed)
            for p, kind, (a, b) in self.random:
                draw = rng.uniform(a, b, self.random_n) if kind == "uniform" else rng.normal(a, b, self.random_n)
                out[p] = np.tile(draw, self.n_grid)
        return out

    def member_mapping(self, values: Mapping[str, float]) -> dict:
        """The base mapping with the member's swept values set."""
        m = copy.deepcopy(self.base)
        for p, v in values.items():
            set_path(m, p, float(v))
        return m

    # ---- identity -------------------------------------------------------------------
    def to_json(self) -> dict:
        return {
            "name": self.name, "description": self.description, "base": self.base,
            "grid": [{"path": p, "values": [float(x) for x in v]} for p, v in self.grid],
            "random": {"seed": self.random_seed, "n": self.random_n,
                       "params": [{"path": p, kind: [float(a), float(b)]} for p, kind, (a, b) in self.random]},
            "run": {"mode": self.mode, "chunk": self.chunk, "group_size": self.group_size, "dt": self.dt,
                    "build": self.build},
        }

    def digest(self) -> str:
        """SHA-256 of everything that determines the results (not the name/description)."""
        d = self.to_json()
        d.pop("name")
        d.pop("description")
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()

    def strategy(self):
        """The batch strategy object of ``run.mode`` with this spec's ``group_size`` and ``dt``
        (those options of :mod:`rollball_jax.batch`'s strategies that the mode has)."""
        from ..batch import strategy_from_name

        options = {} if self.mode == "adaptive" else {"group_size": self.group_size}
        if self.mode == "fixed":
            options["dt"] = self.dt
        return strategy_from_name(self.mode, **options)

    def with_run(self, **kw) -> "SweepSpec":
        """A copy with execution settings replaced (``None`` values are ignored)."""
        kw = {k: v for k, v in kw.items() if v is not None}
        spec = dataclasses.replace(self, **kw)
        _check_run(spec)
        return spec


def _check_run(spec: SweepSpec) -> None:
    if spec.mode not in RUN_MODES:
        raise SweepError(f"run.mode: unknown mode {spec.mode!r} (choose one of: {', '.join(RUN_MODES)})")
    if not (isinstance(spec.chunk, int) and spec.chunk >= 1):
        raise SweepError(f"run.chunk: must be a positive integer; got {spec.chunk!r}")
    if not (isinstance(spec.group_size, int) and spec.group_size >= 1):
        raise SweepError(f"run.group_size: must be a positive integer; got {spec.group_size!r}")
    if spec.dt is not None and not (isinstance(spec.dt, (int, float)) and spec.dt > 0):
        raise SweepError(f"run.dt: must be a positive number; got {spec.dt!r}")
    if spec.build not in ("each", "fast"):
        raise SweepError(f"run.build: must be 'each' or 'fast'; got {spec.build!r}")


def _number_list(v, where) -> list[float]:
    if not isinstance(v, list) or not v:
        raise SweepError(f"{where}: expected a non-empty array of numbers")
    out = []
    for i, x in enumerate(v):
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
            raise SweepError(f"{where}[{i}]: expected a finite number, got {x!r}")
        out.append(float(x))
    return out


_SWEEPABLE_ROOTS = ("model", "masses", "control", "initial")


def sweep_from_mapping(mapping: Mapping[str, Any], *, name: str = "sweep", source: Path | str | None = None) -> SweepSpec:
    """Validate a parsed sweep mapping (see the module docstring) into a :class:`SweepSpec`.

    Every swept path is checked by building the base configuration with the path's
    first value; errors name the sweep key and the configuration key.
    """
    from .config import build_from_mapping, example_text, list_examples

    mapping = dict(mapping)
    known = {"description", "base", "overrides", "grid", "random", "run"}
    for k in mapping:
        if k not in known:
            raise SweepError(f"{k}: unknown key in a sweep file (allowed: {', '.join(sorted(known))})")
    src_dir = Path(source).parent if source else Path.cwd()
    base_v = mapping.get("base")
    if base_v is None:
        raise SweepError("base: required: a shipped example name, a config file path, or a [base] table")
    if isinstance(base_v, str):
        p = (src_dir / base_v) if not Path(base_v).is_absolute() else Path(base_v)
        if p.is_file():
            base = tomllib.loads(p.read_text(encoding="utf-8"))
        elif base_v.removesuffix(".toml") in list_examples():
            base = tomllib.loads(example_text(base_v))
        else:
            raise SweepError(f"base: {base_v!r} is neither a file (relative to the sweep file) nor a shipped example "
                             f"({', '.join(list_examples())})")
    elif isinstance(base_v, dict):
        base = copy.deepcopy(base_v)
    else:
        raise SweepError("base: expected a string (example or file) or a table")
    base.pop("description", None)
    overrides = mapping.get("overrides", {})
    if not isinstance(overrides, dict):
        raise SweepError("overrides: expected a table of \"key.path\" = value")
    for p, v in overrides.items():
        try:
            set_path(base, p, v)
        except SweepError as e:
            raise SweepError(f"overrides: {e}") from None
    try:
        build_from_mapping(base, name=name)
    except ConfigError as e:
        raise SweepError(f"base (after overrides): {e}") from None

    grid = []
    g = mapping.get("grid", [])
    if not isinstance(g, list):
        raise SweepError("grid: expected an array of tables ([[grid]])")
    for i, entry in enumerate(g):
        where = f"grid[{i}]"
        if not isinstance(entry, dict) or "path" not in entry:
            raise SweepError(f"{where}: expected a table with 'path' and 'values' (or 'linspace')")
        extra = set(entry) - {"path", "values", "linspace"}
        if extra:
            raise SweepError(f"{where}.{sorted(extra)[0]}: unknown key (allowed: path, values, linspace)")
        if ("values" in entry) == ("linspace" in entry):
            raise SweepError(f"{where}: give exactly one of 'values' or 'linspace'")
        if "values" in entry:
            vals = _number_list(entry["values"], f"{where}.values")
        else:
            ls = entry["linspace"]
            if not (isinstance(ls, list) and len(ls) == 3 and isinstance(ls[2], int) and ls[2] >= 1):
                raise SweepError(f"{where}.linspace: expected [start, stop, count] with an integer count")
            a, b = _number_list(ls[:2], f"{where}.linspace")
            vals = list(np.linspace(a, b, ls[2]))
        grid.append((entry["path"], tuple(vals)))

    rnd = mapping.get("random")
    seed, n, rparams = 0, 0, []
    if rnd is not None:
        if not isinstance(rnd, dict):
            raise SweepError("random: expected a table")
        extra = set(rnd) - {"seed", "n", "params"}
        if extra:
            raise SweepError(f"random.{sorted(extra)[0]}: unknown key (allowed: seed, n, params)")
        seed = rnd.get("seed", 0)
        n = rnd.get("n")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise SweepError(f"random.seed: expected a non-negative integer; got {seed!r}")
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise SweepError("random.n: expected a positive integer")
        params = rnd.get("params", [])
        if not isinstance(params, list) or not params:
            raise SweepError("random.params: expected a non-empty array of tables ([[random.params]])")
        for i, entry in enumerate(params):
            where = f"random.params[{i}]"
            if not isinstance(entry, dict) or "path" not in entry:
                raise SweepError(f"{where}: expected a table with 'path' and 'uniform' or 'normal'")
            kinds = [k for k in ("uniform", "normal") if k in entry]
            extra = set(entry) - {"path", "uniform", "normal"}
            if extra or len(kinds) != 1:
                raise SweepError(f"{where}: give 'path' and exactly one of 'uniform = [lo, hi]' or 'normal = [mean, std]'")
            a, b = _number_list(entry[kinds[0]], f"{where}.{kinds[0]}")[:2] if len(entry[kinds[0]]) == 2 else (None, None)
            if a is None:
                raise SweepError(f"{where}.{kinds[0]}: expected two numbers")
            if kinds[0] == "uniform" and not a < b:
                raise SweepError(f"{where}.uniform: needs lo < hi; got {[a, b]}")
            if kinds[0] == "normal" and not b >= 0:
                raise SweepError(f"{where}.normal: the standard deviation must be >= 0; got {b}")
            rparams.append((entry["path"], kinds[0], (a, b)))

    seen = set()
    for where, p, first in [(f"grid[{i}].path", p, v[0]) for i, (p, v) in enumerate(grid)] + \
                           [(f"random.params[{i}].path", p, (a + b) / 2 if k == "uniform" else a) for i, (p, k, (a, b)) in enumerate(rparams)]:
        tokens = parse_path(p)
        if tokens[0] not in _SWEEPABLE_ROOTS:
            raise SweepError(f"{where}: {p!r}: only model, masses, control and initial keys can vary "
                             "([time] and [solver] are shared by all members: set them in [overrides])")
        if p in seen:
            raise SweepError(f"{where}: {p!r} is swept twice")
        seen.add(p)
        trial = copy.deepcopy(base)
        try:
            set_path(trial, p, float(first))
            build_from_mapping(trial, name=name)
        except SweepError as e:
            raise SweepError(f"{where}: {e}") from None
        except ConfigError as e:
            raise SweepError(f"{where}: {p} = {float(first)!r}: {e}") from None

    run = mapping.get("run", {})
    if not isinstance(run, dict):
        raise SweepError("run: expected a table")
    extra = set(run) - {"mode", "chunk", "group_size", "dt", "build"}
    if extra:
        raise SweepError(f"run.{sorted(extra)[0]}: unknown key (allowed: mode, chunk, group_size, dt, build)")
    desc = mapping.get("description", "")
    spec = SweepSpec(
        name=name, description=str(desc), base=base, grid=tuple(grid), random_seed=seed, random_n=n,
        random=tuple(rparams), mode=run.get("mode", "adaptive"), chunk=run.get("chunk", 256),
        group_size=run.get("group_size", 256), dt=run.get("dt"), build=run.get("build", "each"),
        source=None if source is None else str(source),
    )
    _check_run(spec)
    return spec


def load_sweep_spec(path: str | os.PathLike) -> SweepSpec:
    """Read and validate a sweep file (see the module docstring)."""
    p = Path(path)
    if not p.is_file():
        raise SweepError(f"{path}: no such sweep file")
    try:
        mapping = tomllib.loads(p.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise SweepError(f"{path}: invalid TOML: {e}") from None
    return sweep_from_mapping(mapping, name=p.stem, source=p)


def _spec_difference(stored: "SweepSpec", requested: "SweepSpec") -> str:
    """What differs between two specs, for the message refusing to resume one into the
    other's results (``run.chunk: 256 there, 12 now``); the sections ``base``, ``grid``,
    ``random`` are named whole."""
    a, b = stored.to_json(), requested.to_json()
    parts = [f"run.{k}: {a['run'][k]!r} there, {b['run'][k]!r} now" for k in a["run"] if a["run"][k] != b["run"].get(k)]
    parts += [f"its {k} differs" for k in ("base", "grid", "random") if a[k] != b[k]]
    return "; ".join(parts) or "its spec differs"


def _spec_from_json(d: dict) -> SweepSpec:
    r = d["run"]
    return SweepSpec(
        name=d["name"], description=d["description"], base=d["base"],
        grid=tuple((g["path"], tuple(g["values"])) for g in d["grid"]),
        random_seed=d["random"]["seed"], random_n=d["random"]["n"],
        random=tuple((q["path"], k, tuple(q[k])) for q in d["random"]["params"] for k in ("uniform", "normal") if k in q),
        mode=r["mode"], chunk=r["chunk"], group_size=r["group_size"], dt=r["dt"], build=r.get("build", "each"),
    )


# ======================================================================================
# Running one chunk
# ======================================================================================

_SPEC_CACHE: dict[str, tuple[float, SweepSpec, dict]] = {}


def _load_saved(out: Path) -> tuple[SweepSpec, dict]:
    f = out / SPEC_FILE
    key = str(f.resolve())
    mtime = f.stat().st_mtime
    hit = _SPEC_CACHE.get(key)
    if hit is None or hit[0] != mtime:
        saved = json.loads(f.read_text(encoding="utf-8"))
        hit = (mtime, _spec_from_json(saved["spec"]), saved)
        _SPEC_CACHE[key] = hit
    return hit[1], hit[2]


_MASK_CACHE: dict[str, list] = {}


def _batched_mask(spec: SweepSpec, table: dict[str, np.ndarray]) -> list[bool] | None:
    """Leaves of (model, control) that any swept path can change (same for every chunk,
    so every chunk runs the same compiled program)."""
    import jax

    from .config import build_from_mapping

    key = spec.digest()
    if key in _MASK_CACHE:
        return _MASK_CACHE[key]
    base = build_from_mapping(spec.base)
    ref = [np.asarray(x) for x in jax.tree.leaves((base.model, base.control))]
    mask = [False] * len(ref)
    for p, vals in table.items():
        # Two values of the path that build and change the design are enough to see which
        # leaves it moves; invalid values and the base's own value show nothing, so the scan
        # goes on past them, up to three valid values (taking just the two smallest values, a
        # path whose smallest were invalid or the base's was held at the base value in every
        # member, silently).
        changing = valid = 0
        for v in np.unique(vals):
            try:
                cfg = build_from_mapping(spec.member_mapping({p: v}))
            except ConfigError:
                continue
            leaves = [np.asarray(x) for x in jax.tree.leaves((cfg.model, cfg.control))]
            if len(leaves) != len(ref) or any(a.shape != b.shape for a, b in zip(leaves, ref)):
                _MASK_CACHE[key] = None
                return None
            moved = [bool(np.any(a != b)) for a, b in zip(leaves, ref)]
            mask = [m or c for m, c in zip(mask, moved)]
            changing += any(moved)
            valid += 1
            # three valid values hold at least two besides the base's: a path that moves no
            # leaf (an initial angle) is not scanned over all its values (a build is ~17 ms)
            if changing == 2 or valid == 3:
                break
    _MASK_CACHE[key] = mask
    return mask


_PLANS: dict[str, "_FastPlan"] = {}


class _FastPlan:
    """``[run] build = "fast"``: members assembled by writing the swept values into the
    arrays of the base design, instead of building and validating each configuration.

    Allowed only when every swept path enters the model, control or initial state
    unchanged (an array entry equal to the value: radii, masses, moments, χ0, θ, control
    amplitudes, ...), which is checked by building the base design with each path at
    the smallest and the largest of its values (those builds are validated). Paths that
    enter through a computation (``masses[i].rail.v`` → rotation matrix) need
    ``build = "each"``. The other members are not validated.
    """

    def __init__(self, spec: SweepSpec, table: dict[str, np.ndarray]):
        import jax

        from .config import build_from_mapping

        self.base = build_from_mapping(spec.base)
        leaves, self.treedef = jax.tree.flatten((self.base.model, self.base.control))
        self.leaves = [np.asarray(x) for x in leaves]
        self.x0 = np.asarray(self.base.x0)
        self.targets: list[tuple[str, list[tuple[int, tuple]]]] = []
        taken: dict[tuple, str] = {}
        for p, vals in table.items():
            lo, hi = float(np.min(vals)), float(np.max(vals))
            found: dict[tuple, None] = {}
            for v in ((lo, hi) if hi > lo else (lo,)):
                try:
                    cfg = build_from_mapping(spec.member_mapping({p: v}))
                except ConfigError as e:
                    raise SweepError(f"run.build = 'fast': {p} = {float(v)!r} (end of its range) is invalid: {e}") from None
                new = [np.asarray(x) for x in jax.tree.leaves((cfg.model, cfg.control))] + [np.asarray(cfg.x0)]
                old = self.leaves + [self.x0]
                if jax.tree.structure((cfg.model, cfg.control)) != self.treedef or any(a.shape != b.shape for a, b in zip(new, old)):
                    raise SweepError(f"run.build = 'fast': {p} changes the structure of the design; use build = 'each'")
                for k, (a, b) in enumerate(zip(new, old)):
                    for pos in np.argwhere(np.atleast_1d(a != b).reshape(a.shape) if a.ndim else np.asarray([a != b])):
                        found[(k, tuple(int(i) for i in pos) if a.ndim else ())] = None
                if cfg.z_a != self.base.z_a:
                    raise SweepError(f"run.build = 'fast': {p} moves the disk's initial GC; use build = 'each'")
                for k, pos in found:
                    if float(new[k][pos]) != v:
                        raise SweepError(f"run.build = 'fast': {p} enters the design through a computation "
                                         f"(array entry {new[k][pos]!r} for the value {v!r}); use build = 'each'")
            if not found:
                raise SweepError(f"run.build = 'fast': {p} changes no array of the design over its range; "
                                 "use build = 'each'")
            for key in found:
                if key in taken:
                    raise SweepError(f"run.build = 'fast': {p} and {taken[key]} set the same array entry")
                taken[key] = p
            self.targets.append((p, list(found)))

    def assemble(self, table, start, stop, pad_to):
        """Batched (models, controls), x0s (pad_to, N) and observable contexts of members
        ``start``..``stop`` (padded with copies of the first)."""
        import jax

        n = stop - start
        idx = np.concatenate([np.arange(start, stop), np.full(pad_to - n, start)])
        arrays = [np.broadcast_to(a, (pad_to,) + a.shape).copy() for a in self.leaves] + [np.tile(self.x0, (pad_to, 1))]
        for p, positions in self.targets:
            vals = np.asarray(table[p], dtype=np.float64)[idx]
            for k, pos in positions:
                arrays[k][(slice(None),) + pos] = vals
        models, controls = jax.tree.unflatten(self.treedef, arrays[:-1])
        return models, controls, arrays[-1]


def _fast_plan(spec: SweepSpec, table) -> _FastPlan:
    key = spec.digest()
    if key not in _PLANS:
        _PLANS[key] = _FastPlan(spec, table)
    return _PLANS[key]


_OBS_FN: dict = {}


def _observables(models, xs, contexts, x_final):
    """gc (B, T, 3), energy (B, T), heading at the end (B,) for a batch of one structure."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    fn = _OBS_FN.get("f")
    if fn is None:
        @eqx.filter_jit
        def fn(models, xs, contexts, x_final):
            def one(m, x_t, ctx, xf):
                obs = jax.vmap(lambda x: m.observables(x, **ctx))(x_t)
                end = m.observables(xf, **ctx)
                w = end["omega_spatial"]
                v = m.radius * jnp.stack([w[1], -w[0]])  # GC velocity ω × r e3 (rolling)
                return obs["gc"], obs["energy"], jnp.arctan2(v[1], v[0])

            return jax.vmap(one)(models, xs, contexts, x_final)

        _OBS_FN["f"] = fn
    gc, energy, heading = fn(models, jnp.asarray(xs), contexts, jnp.asarray(x_final))
    return np.asarray(gc), np.asarray(energy), np.asarray(heading)


def _result_vars(T: int, N: int) -> dict[str, tuple[tuple[str, ...], Any, Any, str]]:
    """name -> (dims, dtype, fill, long name) of every per-member result variable."""
    f8 = np.float64
    return {
        "status": (("member",), np.int32, -1, "member status: 0 success, -1 not run, 100 invalid configuration, "
                   "else a diffrax RESULTS code (attribute status_names)"),
        "t_final": (("member",), f8, np.nan, "time reached"),
        "x_final": (("member", "component"), f8, np.nan, "state at t_final (paper ordering)"),
        "gc": (("member", "time", "xyz"), f8, np.nan, "geometric centre at the save times (spatial frame)"),
        "energy": (("member", "time"), f8, np.nan, "total energy T + V at the save times"),
        "distance": (("member",), f8, np.nan, "distance rolled: |GC(t_final) - GC(t0)| in the e1-e2 plane"),
        "path_length": (("member",), f8, np.nan, "length of the GC path through the save times"),
        "heading": (("member",), f8, np.nan, "final heading: direction of the GC velocity at t_final, atan2(v2, v1) [rad]"),
        "num_steps": (("member",), np.int64, -1, "solver steps (attempted)"),
        "num_accepted_steps": (("member",), np.int64, -1, "accepted steps"),
        "num_rejected_steps": (("member",), np.int64, -1, "rejected steps"),
        "error_estimate": (("member",), f8, np.nan, "modes lockstep/shared/fixed: max scaled embedded error estimate"),
        "refined": (("member",), np.int8, 0, "1: re-solved in adaptive mode"),
    }


def _solve_into(res, members, models, controls, x0s, base_cfg, spec, table, z_a=0.0):
    """Solve a padded same-structure batch and write members' results into ``res``.
    ``z_a``: a disk's initial GC position, one for all or one per member (the group took
    its first member's for all before: a sweep over a disk's ``initial.z`` wrote wrong GC
    positions)."""
    import jax

    from ..batch import simulate_batch
    from .config import make_solver

    mask = _batched_mask(spec, table) if spec.mode != "adaptive" else None
    if mask is not None and len(mask) != len(jax.tree.leaves((models, controls))):
        mask = None
    r = simulate_batch(
        models, controls, x0s, base_cfg.t_span, ts=base_cfg.ts, strategy=spec.strategy(),
        solver=make_solver(base_cfg.solver), rtol=base_cfg.rtol, atol=base_cfg.atol, max_steps=base_cfg.max_steps,
        dt0=base_cfg.dt0, unit=spec.batch_size, batched_mask=mask,
    )
    x0s = np.asarray(x0s)
    z_a = np.broadcast_to(np.asarray(z_a, dtype=np.float64), x0s.shape[:1])  # per member (a disk's initial.z)
    ctx = jax.vmap(lambda m, x, za: m.observable_context(x, z_a=za))(models, x0s, z_a)
    gc, energy, heading = _observables(models, r.ys, ctx, r.x_final)
    k = len(members)
    idx = np.asarray(members)
    res["status"][idx] = r.status[:k]
    res["t_final"][idx] = r.t_final[:k]
    res["x_final"][idx] = r.x_final[:k]
    res["gc"][idx] = gc[:k]
    res["energy"][idx] = energy[:k]
    res["heading"][idx] = heading[:k]
    with np.errstate(invalid="ignore"):  # a failed member's states are inf past its failure: NaN here
        disp = gc[:k, -1, :2] - gc[:k, 0, :2]
        res["distance"][idx] = np.hypot(disp[:, 0], disp[:, 1])
        res["path_length"][idx] = np.sum(np.hypot(*np.moveaxis(np.diff(gc[:k, :, :2], axis=1), -1, 0)), axis=1)
    for name in ("num_steps", "num_accepted_steps", "num_rejected_steps", "error_estimate"):
        res[name][idx] = getattr(r, name)[:k]
    res["refined"][idx] = r.refined[:k].astype(np.int8)


def run_chunk(out: str | os.PathLike, c: int) -> dict:
    """Compute chunk ``c`` of the sweep in ``out`` and write it (data, then marker).

    Safe to call from any process that sees ``out`` (Dask workers). Returns the marker.
    """
    import jax
    import xarray as xr

    from ..batch import STATUS_INVALID, stack
    from .config import build_from_mapping
    from .output import write_json

    out = Path(out)
    spec, saved = _load_saved(out)
    start, stop = spec.chunk_range(c)
    started = time.perf_counter()
    table = {p: np.asarray(v) for p, v in saved["table"].items()}
    n = stop - start
    base_cfg = build_from_mapping(spec.base)
    T, N = len(base_cfg.ts), int(base_cfg.model.state_size)
    res = {name: np.full((n,) + tuple({"component": N, "time": T, "xyz": 3}[d] for d in dims[1:]), fill, dtype=dt)
           for name, (dims, dt, fill, _) in _result_vars(T, N).items()}
    invalid: dict[int, str] = {}
    cfgs: list = [None] * n
    if spec.build == "fast":
        plan = _fast_plan(spec, table)
        models, controls, x0s = plan.assemble(table, start, stop, spec.batch_size)
        _solve_into(res, list(range(n)), models, controls, x0s, base_cfg, spec, table, z_a=base_cfg.z_a)
        n_build = 0
    else:
        n_build = n
    for i in range(n_build):
        try:
            cfg = build_from_mapping(spec.member_mapping({p: table[p][start + i] for p in table}))
            if int(cfg.model.state_size) != N:
                raise ConfigError(f"state size {cfg.model.state_size} differs from the base design's ({N})")
            cfgs[i] = cfg
        except ConfigError as e:
            invalid[start + i] = str(e)
            res["status"][i] = STATUS_INVALID
    valid = [i for i in range(n) if cfgs[i] is not None]
    # Same-structure groups (usually one), each padded to the chunk size: one compiled
    # program for every chunk.
    groups: dict[Any, list[int]] = {}
    for i in valid:
        groups.setdefault(jax.tree.structure((cfgs[i].model, cfgs[i].control)), []).append(i)
    for members in groups.values():
        pad = members + [members[0]] * (spec.batch_size - len(members))
        _solve_into(res, members, stack([cfgs[i].model for i in pad]), stack([cfgs[i].control for i in pad]),
                    np.stack([cfgs[i].x0 for i in pad]), base_cfg, spec, table, z_a=[cfgs[i].z_a for i in pad])
    ds = xr.Dataset({name: (dims, res[name]) for name, (dims, *_rest) in _result_vars(T, N).items()})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.to_zarr(out / STORE, region={"member": slice(start, stop)}, zarr_format=2, consolidated=False)
    status = res["status"]
    marker = {
        "chunk": c, "start": start, "stop": stop,
        "succeeded": int(np.sum(status == 0)), "failed": int(np.sum((status != 0) & (status != STATUS_INVALID))),
        "invalid": {str(k): v for k, v in invalid.items()},
        "wall_time_s": time.perf_counter() - started, "host": socket.gethostname(), "pid": os.getpid(),
        "devices": len(jax.local_devices()),
    }
    (out / CHUNK_DIR).mkdir(exist_ok=True)
    write_json(out / CHUNK_DIR / f"c{c:06d}.json", marker)
    throttle = float(os.environ.get(THROTTLE_ENV, "0") or 0)
    if throttle > 0:
        time.sleep(throttle)
    return marker


# ======================================================================================
# Store initialisation, driver
# ======================================================================================


def _done_chunks(out: Path) -> set[int]:
    d = out / CHUNK_DIR
    if not d.is_dir():
        return set()
    return {int(p.stem[1:]) for p in d.glob("c*.json") if p.stem[1:].isdigit()}


def _init_store(out: Path, spec: SweepSpec, table: dict[str, np.ndarray]) -> None:
    import dask.array as da
    import xarray as xr

    from ..batch import STATUS_NAMES
    from .config import build_from_mapping, dump_toml

    base_cfg = build_from_mapping(spec.base)
    T, N = len(base_cfg.ts), int(base_cfg.model.state_size)
    n, ch = spec.size, spec.chunk
    data = {}
    encoding = {}
    for name, (dims, dt, fill, long_name) in _result_vars(T, N).items():
        shape = tuple({"member": n, "component": N, "time": T, "xyz": 3}[d] for d in dims)
        chunks = (ch,) + shape[1:]
        arr = np.full(shape, fill, dtype=dt) if name == "status" else da.full(shape, fill, dtype=dt, chunks=chunks)
        data[name] = (dims, arr, {"long_name": long_name})
        encoding[name] = {"chunks": chunks}
    coords = {
        "member": ("member", np.arange(n, dtype=np.int64), {"long_name": "member index (grid point first, random sample fastest)"}),
        "time": ("time", np.asarray(base_cfg.ts), {"long_name": "save time"}),
        "component": ("component", np.asarray(base_cfg.model.state_labels(), dtype="U16"), {"long_name": "state label"}),
        "xyz": ("xyz", np.asarray(["x", "y", "z"], dtype="U1")),
    }
    for p, v in table.items():
        coords[coord_name(p)] = ("member", np.asarray(v, dtype=np.float64), {"path": p, "swept": "grid" if p in dict(spec.grid) else "random"})
        encoding[coord_name(p)] = {"chunks": (ch,)}
    from .. import __version__

    attrs = {
        "title": f"rollball_jax sweep {spec.name!r}",
        "rollball_jax_version": __version__,
        "sweep_name": spec.name, "description": spec.description, "sweep_digest": spec.digest(),
        "swept_paths": json.dumps(spec.paths), "grid_paths": json.dumps([p for p, _ in spec.grid]),
        "grid_shape": json.dumps([len(v) for _, v in spec.grid]), "n_random": spec.n_random,
        "mode": spec.mode, "chunk": spec.chunk, "group_size": spec.group_size,
        "dt": -1.0 if spec.dt is None else float(spec.dt),
        "model_type": base_cfg.model_type, "solver": base_cfg.solver, "rtol": base_cfg.rtol, "atol": base_cfg.atol,
        "base_config_toml": dump_toml(spec.base),
        "status_names": json.dumps({str(k): v for k, v in STATUS_NAMES.items()}),
    }
    ds = xr.Dataset(data, coords=coords, attrs=attrs)
    tmp = out / f".{STORE}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.to_zarr(tmp, mode="w", compute=False, encoding=encoding, zarr_format=2, consolidated=True)
    target = out / STORE
    if target.exists():
        shutil.rmtree(target)
    os.replace(tmp, target)


def _prepare(out: Path, spec: SweepSpec, overwrite: bool) -> tuple[SweepSpec, dict]:
    """Create or reopen the results directory; returns the effective spec and table."""
    from .output import write_json

    out.mkdir(parents=True, exist_ok=True)
    spec_file, store = out / SPEC_FILE, out / STORE
    if spec_file.exists() and store.exists() and not overwrite:
        saved = json.loads(spec_file.read_text(encoding="utf-8"))
        stored = _spec_from_json(saved["spec"])
        requested = spec if spec.dt is not None or spec.mode != "fixed" else dataclasses.replace(spec, dt=stored.dt)
        if stored.digest() != requested.digest():
            raise SweepError(
                f"{out} holds a different sweep ({saved['spec']['name']!r}, digest {stored.digest()[:12]}): "
                f"{_spec_difference(stored, requested)}; use another --out, or --overwrite to discard it"
            )
        return stored, saved
    if overwrite:
        for p in (spec_file, store, out / CHUNK_DIR):
            if p.is_dir():
                shutil.rmtree(p)
            elif p.exists():
                p.unlink()
    if spec_file.exists():
        spec_file.unlink()
    if (out / CHUNK_DIR).exists():
        shutil.rmtree(out / CHUNK_DIR)
    table = spec.table()
    if spec.build == "fast":
        _fast_plan(spec, table)  # raises SweepError if a path cannot be assembled
    if spec.mode == "fixed" and spec.dt is None:
        spec = dataclasses.replace(spec, dt=_pilot_dt(spec, table))
    _init_store(out, spec, table)
    saved = {"spec": spec.to_json(), "digest": spec.digest(), "table": {p: v.tolist() for p, v in table.items()},
             "n_members": spec.size, "n_chunks": spec.n_chunks, "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    write_json(spec_file, saved)
    return spec, saved


def _pilot_dt(spec: SweepSpec, table) -> float:
    """Mode fixed without run.dt: the step chosen by rollball_jax.batch on chunk 0."""
    from ..batch import Fixed, simulate_batch, stack
    from .config import build_from_mapping, make_solver

    start, stop = spec.chunk_range(0)
    cfgs = []
    for i in range(start, stop):
        with contextlib.suppress(ConfigError):
            cfgs.append(build_from_mapping(spec.member_mapping({p: table[p][i] for p in table})))
    if not cfgs:
        raise SweepError("mode fixed: no valid member in chunk 0 to choose dt from; give run.dt")
    base = cfgs[0]
    r = simulate_batch(stack([c.model for c in cfgs]), stack([c.control for c in cfgs]), np.stack([c.x0 for c in cfgs]),
                       base.t_span, ts=base.ts, strategy=Fixed(group_size=spec.group_size, refine=False),
                       solver=make_solver(base.solver), rtol=base.rtol, atol=base.atol)
    return float(r.dt)


def run_sweep(
    spec: SweepSpec,
    out: str | os.PathLike,
    *,
    workers: int | None = None,
    scheduler: str | None = None,
    progress: bool = True,
    overwrite: bool = False,
    on_chunk: Callable[[dict], None] | None = None,
) -> dict:
    """Run (or resume) ``spec`` into the results directory ``out``.

    Chunks already marked done are skipped. ``workers``: run the chunks on a new Dask
    ``LocalCluster`` with that many worker processes; ``scheduler``: on an existing Dask
    cluster at that address (``out`` must then be on a file system the workers share).
    Otherwise the chunks run in this process. Returns a summary (counts, wall time).
    Ctrl-C stops after the data already written; rerun to resume.
    """
    out = Path(out)
    started = time.perf_counter()
    spec, saved = _prepare(out, spec, overwrite)
    done = _done_chunks(out)
    pending = [c for c in range(spec.n_chunks) if c not in done]
    bar = _progress(spec.n_chunks, len(done), progress, spec.name)
    markers = []
    try:
        if pending and (workers or scheduler):
            markers = _run_dask(out, pending, workers, scheduler, bar, on_chunk)
        else:
            for c in pending:
                m = run_chunk(out, c)
                markers.append(m)
                bar.update(1)
                if on_chunk:
                    on_chunk(m)
    finally:
        bar.close()
    summary = sweep_status(out)
    summary["wall_time_s"] = time.perf_counter() - started
    summary["chunks_run"] = len(markers)
    return summary


def _progress(total, initial, enabled, name):
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, unit="chunk", desc=f"sweep {name}", disable=not enabled, leave=True)


def _run_dask(out: Path, pending, workers, scheduler, bar, on_chunk):
    from dask.distributed import Client, LocalCluster, as_completed

    cluster = None
    if scheduler:
        try:
            client = Client(scheduler)
        except OSError as e:  # reported as "cannot write <out>" by the CLI before
            raise SweepError(f"cannot connect to the Dask scheduler {scheduler}: {e}") from e
    else:
        cluster = LocalCluster(n_workers=int(workers), threads_per_worker=1, processes=True, dashboard_address=None)
        client = Client(cluster)
    markers = []
    try:
        futures = client.map(run_chunk, [str(out.resolve())] * len(pending), pending, pure=False)
        for fut in as_completed(futures):
            m = fut.result()
            markers.append(m)
            bar.update(1)
            if on_chunk:
                on_chunk(m)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
    return markers


def sweep_status(out: str | os.PathLike) -> dict:
    """Counts of a results directory: members, chunks done, succeeded/failed/invalid."""
    out = Path(out)
    if not (out / SPEC_FILE).exists():
        raise SweepError(f"{out}: not a sweep results directory (no {SPEC_FILE})")
    saved = json.loads((out / SPEC_FILE).read_text(encoding="utf-8"))
    done = _done_chunks(out)
    ok = failed = invalid = 0
    for c in done:
        m = json.loads((out / CHUNK_DIR / f"c{c:06d}.json").read_text(encoding="utf-8"))
        ok += m["succeeded"]
        failed += m["failed"]
        invalid += len(m["invalid"])
    return {
        "name": saved["spec"]["name"], "members": saved["n_members"], "chunks": saved["n_chunks"],
        "chunks_done": len(done), "complete": len(done) == saved["n_chunks"],
        "succeeded": ok, "failed": failed, "invalid": invalid, "mode": saved["spec"]["run"]["mode"],
    }


def open_sweep(out: str | os.PathLike, *, load: bool = True):
    """The results of a sweep as an ``xarray.Dataset`` (dimension ``member``; swept
    parameters as coordinates along it, named by :func:`coord_name`, with the key path in
    their ``path`` attribute). Members of chunks not yet done have ``status = -1`` and
    NaN results. ``invalid_messages`` (attribute, JSON) maps member → configuration error.
    """
    import xarray as xr

    out = Path(out)
    store = out / STORE if (out / STORE).exists() else out
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = xr.open_zarr(store, consolidated=True)
    if load:
        ds = ds.load()
    done = _done_chunks(out) if (out / CHUNK_DIR).exists() else set()
    chunk = int(ds.attrs.get("chunk", 1))
    is_done = np.isin(np.asarray(ds["member"]) // chunk, sorted(done))
    ds["status"] = ds["status"].where(is_done, -1)
    for name, var in ds.data_vars.items():
        if name != "status" and var.dtype.kind == "f":
            ds[name] = var.where(xr.DataArray(is_done, dims="member"))
    messages = {}
    for c in done:
        with contextlib.suppress(OSError, ValueError):
            messages.update(json.loads((out / CHUNK_DIR / f"c{c:06d}.json").read_text(encoding="utf-8"))["invalid"])
    ds.attrs["invalid_messages"] = json.dumps(messages)
    return ds
