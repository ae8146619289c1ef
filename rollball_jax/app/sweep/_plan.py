"""How a chunk's members are built: which leaves of the design the swept paths move (one
compiled program for every chunk), the ``build = "fast"`` assembly that writes swept values
into the base design's arrays, and the pilot step of mode ``fixed``. Each is computed once
per sweep (by its digest) and kept for the process's later chunks."""

from __future__ import annotations

import contextlib

import numpy as np

from ...errors import ConfigError
from ._spec import SweepError, SweepSpec


_MASK_CACHE: dict[str, list] = {}


def _batched_mask(spec: SweepSpec, table: dict[str, np.ndarray]) -> list[bool] | None:
    """Leaves of (model, control) that any swept path can change (same for every chunk,
    so every chunk runs the same compiled program)."""
    import jax

    from ..config import build_from_mapping

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

        from ..config import build_from_mapping

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


def _pilot_dt(spec: SweepSpec, table) -> float:
    """Mode fixed without run.dt: the step chosen by rollball_jax.batch on chunk 0."""
    from ...batch import Fixed, simulate_batch, stack
    from ..config import build_from_mapping, make_solver

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
