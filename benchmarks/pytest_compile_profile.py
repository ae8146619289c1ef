"""pytest plugin: where the test suite's time goes (XLA compilation, tracing, lowering).

Listens to JAX's duration events (``jax.monitoring``) and writes, per worker process,
the seconds of ``backend_compile_duration`` (XLA compilation), ``jaxpr_trace_duration``
(tracing) and ``jaxpr_to_mlir_module_duration`` (lowering) of every test, then prints a
summary from the controller (totals, the 15 files and 20 tests with most compilation).

Run from the repository root::

    PYTHONPATH=benchmarks python -m pytest -p pytest_compile_profile

Measured 2026-12-04 (2 cores, 2 workers, 447 tests): 579 s compiling, 150 s tracing,
83 s lowering, of ~880 s of the workers' test time.
"""

from __future__ import annotations

import collections
import json
import os
import tempfile
from pathlib import Path

import jax

_EVENTS = ("backend_compile_duration", "jaxpr_trace_duration", "jaxpr_to_mlir_module_duration")
_current = ["<outside tests>"]
_seconds: dict = collections.defaultdict(collections.Counter)


def _on_event(name, duration, **_):
    short = name.rsplit("/", 1)[-1]
    if short in _EVENTS:
        _seconds[_current[0]][short] += duration


jax.monitoring.register_event_duration_secs_listener(_on_event)


_DIR_VARIABLE = "ROLLBALL_JAX_COMPILE_PROFILE_DIR"


def pytest_configure(config):
    # the controller picks the directory; xdist's workers, started later, inherit it
    if not hasattr(config, "workerinput") and _DIR_VARIABLE not in os.environ:
        os.environ[_DIR_VARIABLE] = tempfile.mkdtemp(prefix="rollball_jax_compile_profile_")


def _directory() -> Path:
    return Path(os.environ[_DIR_VARIABLE])


def pytest_runtest_setup(item):
    _current[0] = item.nodeid


def pytest_sessionfinish(session):
    d = _directory()
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    (d / f"{worker}.json").write_text(json.dumps({k: dict(v) for k, v in _seconds.items()}))


def pytest_terminal_summary(terminalreporter, config):
    if hasattr(config, "workerinput"):
        return
    per_test: dict = {}
    for f in sorted(_directory().glob("*.json")):
        per_test.update(json.loads(f.read_text()))
    totals = collections.Counter()
    per_file = collections.Counter()
    for test, ev in per_test.items():
        totals.update(ev)
        per_file[test.split("::")[0]] += ev.get(_EVENTS[0], 0.0)
    w = terminalreporter.write_line
    w("compile profile: " + ", ".join(f"{k} {totals[k]:.0f} s" for k in _EVENTS))
    w("compilation by file [s]:")
    for name, s in per_file.most_common(15):
        w(f"  {s:7.1f}  {name}")
    w("compilation by test [s] (trace, lowering):")
    ranked = sorted(per_test.items(), key=lambda kv: -kv[1].get(_EVENTS[0], 0.0))[:20]
    for test, ev in ranked:
        w(f"  {ev.get(_EVENTS[0], 0):6.1f} ({ev.get(_EVENTS[1], 0):4.1f}, {ev.get(_EVENTS[2], 0):4.1f})  {test}")
