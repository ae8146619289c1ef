"""Where the test suite's time goes: per-test wall time and XLA compilation time.

Use as a pytest plugin, then aggregate (works with the suite's xdist workers)::

    PYTHONPATH=benchmarks python -m pytest -q -p profile_tests --run-slow  # writes runs/test_profile/*.json
    python benchmarks/profile_tests.py                              # prints the table

Per test it records the wall time of the test call (fixtures excluded), JAX's
``/jax/core/compile/backend_compile_duration`` and ``jaxpr_trace_duration`` (from
``jax.monitoring``), and the number and time of *small* compilations (< 0.2 s): the
op-by-op compilations of eager JAX code, which are cheap one by one and costly by the
hundred (e.g. an eager ``jax.vmap`` of a Jacobian compiles every primitive separately).
Output directory: ``$ROLLBALL_PROFILE_DIR`` (default ``runs/test_profile``).
"""

from __future__ import annotations

import atexit
import collections
import json
import os
import sys
import time
from pathlib import Path

SMALL_S = 0.2
OUT = Path(os.environ.get("ROLLBALL_PROFILE_DIR", "runs/test_profile"))
_COMPILE = "/jax/core/compile/backend_compile_duration"
_TRACE = "/jax/core/compile/jaxpr_trace_duration"


def _install():
    import jax.monitoring
    import pytest

    totals = collections.Counter()
    small = [0.0, 0]
    rows = []

    def listener(event, duration, **kwargs):
        totals[event] += duration
        if event == _COMPILE and duration < SMALL_S:
            small[0] += duration
            small[1] += 1

    jax.monitoring.register_event_duration_secs_listener(listener)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(item):
        before, small_before, start = dict(totals), list(small), time.perf_counter()
        yield
        rows.append({"test": item.nodeid, "wall_s": time.perf_counter() - start,
                     "compile_s": totals[_COMPILE] - before.get(_COMPILE, 0.0),
                     "trace_s": totals[_TRACE] - before.get(_TRACE, 0.0),
                     "small_compile_s": small[0] - small_before[0], "small_compiles": small[1] - small_before[1]})

    def dump():
        if rows:
            OUT.mkdir(parents=True, exist_ok=True)
            (OUT / f"worker_{os.getpid()}.json").write_text(json.dumps(rows))

    atexit.register(dump)
    return pytest_runtest_call


def report(out: Path = OUT, top: int = 30) -> None:
    rows = [r for f in sorted(out.glob("worker_*.json")) for r in json.loads(f.read_text())]
    if not rows:
        sys.exit(f"no profile in {out}: run the tests with -p profile_tests first")
    tot = {k: sum(r[k] for r in rows) for k in ("wall_s", "compile_s", "trace_s", "small_compile_s", "small_compiles")}
    print(f"{len(rows)} tests: wall {tot['wall_s']:.0f} s (summed over workers), compile {tot['compile_s']:.0f} s, "
          f"trace {tot['trace_s']:.0f} s, small compiles {tot['small_compiles']} taking {tot['small_compile_s']:.0f} s")
    print(f"{'wall':>7} {'compile':>8} {'small':>13}  test")
    for r in sorted(rows, key=lambda r: -r["wall_s"])[:top]:
        print(f"{r['wall_s']:7.1f} {r['compile_s']:8.1f} {r['small_compile_s']:6.1f}/{r['small_compiles']:<6d}  {r['test']}")


if __name__ == "__main__":
    report()
else:
    pytest_runtest_call = _install()
