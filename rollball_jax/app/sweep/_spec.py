"""The sweep specification: a sweep file's grids, random samples and run settings
(:class:`SweepSpec`), read from TOML or a mapping and validated, and the key paths that
address any parameter of the base configuration (``masses[1].rail.radius``)."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..._typing import RealScalar
from ...errors import ConfigError, RollballError

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib  # type: ignore[no-redef]


RUN_MODES = ("adaptive", "lockstep", "shared", "fixed")


class SweepError(RollballError, ValueError):
    """An invalid sweep file, or a results directory holding a different sweep."""


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
        from ...batch import strategy_from_name

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
    from ..config import build_from_mapping, example_text, list_examples

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
