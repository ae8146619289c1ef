"""Shared fixtures: the paper's two examples and their reference solutions."""

import contextlib
import gc
import json
import os
from pathlib import Path


def _pin_worker_to_one_core() -> None:
    """Each pytest-xdist worker on a core of its own (Linux) when there are exactly as many
    workers as cores (the README's command on a 2-core machine), set before JAX starts any
    thread: threads inherit the affinity of the thread that creates them. Measured
    2026-12-07 (2 cores): a compiled derivative that XLA:CPU spread over both cores took
    1.24 ms against 0.97 ms pinned to one (benchmarks/README.md); the whole suite, in
    alternating runs, 348.7 and 352.7 s pinned against 368.3 s not. With more cores than
    workers, or ``-n 0``, nothing is pinned. ``ROLLBALL_JAX_TEST_PIN=0`` turns it off."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if (not worker.startswith("gw") or not hasattr(os, "sched_setaffinity")
            or os.environ.get("ROLLBALL_JAX_TEST_PIN", "1") == "0"):
        return
    cpus = sorted(os.sched_getaffinity(0))
    if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0")) == len(cpus):
        os.sched_setaffinity(0, {cpus[int(worker[2:]) % len(cpus)]})


_pin_worker_to_one_core()

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import rollball_jax as rb  # noqa: E402

# Python's cyclic garbage collector at its default thresholds (700, 10, 10) makes a full
# collection whenever the long-lived objects have grown by a quarter; in a test process
# that keeps JAX's caches of traced and compiled programs each one scans millions of
# objects (0.6-0.7 s). Rarer collections, same memory. Measured with a gc.callbacks probe
# on the whole suite (2 workers, 2 cores; the workers' time): 64 s collecting (88 full
# collections) at the defaults, 19-23 s (17-21) at these in two runs; peak RSS 3.70 and
# 3.71 GB.
gc.set_threshold(50_000, 20, 20)

# Reference solutions of the paper examples (facts, shipped with the tests).
REFERENCE = Path(__file__).resolve().parent / "data" / "paper_examples.json"

BALL_RADII = [0.95, 0.9, 0.85]
BALL_V = [[0.0, 0.0, 1.0], [np.pi / 2, 0.0, 1.0], [np.pi / 4, np.pi / 4, 1.0]]
DISK_RADII = [0.9, 0.6333333333333333, 0.36666666666666664, 0.1]


_COMPILE_SINKS: list[list] = []


def _on_jax_event(name, _duration, **kwargs):
    if name.endswith("backend_compile_duration"):
        for sink in _COMPILE_SINKS:
            sink.append(kwargs.get("fun_name"))


# One listener for the whole run (JAX has no public way to remove one).
jax.monitoring.register_event_duration_secs_listener(_on_jax_event)


@contextlib.contextmanager
def recorded_compiles():
    """The names (``"jit(f)"``) of the XLA compilations made inside the ``with`` block, as
    a list that fills while the block runs."""
    names: list = []
    _COMPILE_SINKS.append(names)
    try:
        yield names
    finally:
        _COMPILE_SINKS.remove(names)


def _memory_maps() -> tuple[int, int] | None:
    """(memory mappings of this process, the kernel's limit), or None off Linux."""
    try:
        with open("/proc/self/maps") as f:
            n = sum(1 for _ in f)
        with open("/proc/sys/vm/max_map_count") as f:
            return n, int(f.read())
    except OSError:
        return None


# Two tiers. The tests marked ``slow`` (those that took >= 4 s on 2 cores, 2026-12-08:
# the experiments' quick runs, the tests that start other processes, the heavier
# derivative, batch and design checks; kept in the default tier although as long are
# first-line checks: the paper ball's gradient against finite differences, reverse =
# forward mode at T = 20, the state-transition matrix at rest, derivatives at rest, energy
# conservation, the non-finite field's error, the CM acceleration's closed form, the shared
# batch mode) are deselected by the README's command ``python -m pytest -q`` and run by
# ``python -m pytest -q -m slow``; ``--run-slow`` runs both tiers in one session. CI runs
# both commands. Naming tests (``file.py::test``) or a marker expression (``-m``) deselects
# nothing: what is asked for runs.
def pytest_addoption(parser):
    parser.addoption("--run-slow", action="store_true", default=False,
                     help="also run the tests marked slow (deselected by default; -m slow runs them alone)")


def _tier(config) -> str:
    if config.getoption("--run-slow") or config.option.markexpr not in ("", "slow"):
        return "all"
    if config.option.markexpr == "slow":
        return "slow"
    # explicit test ids select what they name
    return "all" if any("::" in str(a) for a in config.args) else "default"


# Longest test files first. The workers take whole files (``--dist loadfile``) in the order
# the controller queues them; ``--no-loadscope-reorder`` (pyproject.toml) keeps this order
# instead of xdist's default, most *tests* first, which put long files with few tests
# last: one worker then ran on alone for up to ~40 s (measured: 416 vs 455 s of tests).
# Seconds per file and tier as measured on 2 cores with 2 workers (2026-12-08,
# --durations=0); files not listed are short and go last, in collection order.
FILE_SECONDS = {
    "default": {
        "test_discrete_adjoint.py": 53, "test_batch.py": 37, "test_feedback.py": 22, "test_gradients.py": 22,
        "test_ball.py": 19, "test_bad_input.py": 19, "test_reverse_sweep.py": 17, "test_safe_derivatives.py": 14,
        "test_contact.py": 13, "test_implicit.py": 11, "test_jacobians.py": 11, "test_rigid_se3.py": 10,
        "test_dae.py": 9, "test_costs.py": 9, "test_disk.py": 8, "test_design.py": 8, "test_cli.py": 8,
        "test_extras.py": 8, "test_field_vjp.py": 7, "test_validation.py": 6, "test_sweep.py": 6,
        "test_rigid_free_body.py": 6, "test_docs.py": 6,
    },
    "slow": {
        "test_discrete_adjoint.py": 145, "test_design.py": 125, "test_gradients.py": 74, "test_batch.py": 74,
        "test_reverse_sweep.py": 63, "test_sweep.py": 46, "test_shooting.py": 40, "test_feedback.py": 37,
        "test_docs.py": 22, "test_bad_input.py": 21, "test_xla_flags.py": 14, "test_bad_input_property.py": 12,
        "test_implicit.py": 10, "test_rigid_se3.py": 8, "test_compilation_cache.py": 7, "test_executor.py": 6,
    },
}
FILE_SECONDS["all"] = {name: FILE_SECONDS["default"].get(name, 0) + FILE_SECONDS["slow"].get(name, 0)
                       for name in {*FILE_SECONDS["default"], *FILE_SECONDS["slow"]}}


def pytest_collection_modifyitems(config, items):
    """Deselect the tests marked ``slow`` unless asked for (see :func:`_tier`), then order
    the rest by :data:`FILE_SECONDS` of the tier, longest file first (a stable sort: the
    order inside a file is kept)."""
    tier = _tier(config)
    if tier == "default":
        slow = [item for item in items if item.get_closest_marker("slow")]
        if slow:
            config.hook.pytest_deselected(items=slow)
            items[:] = [item for item in items if not item.get_closest_marker("slow")]
    seconds = FILE_SECONDS[tier]
    items.sort(key=lambda item: -seconds.get(Path(str(item.fspath)).name, 0))


def pytest_terminal_summary(terminalreporter, config):
    """Say which tier ran: with xdist the workers deselect, and the summary line does not
    count their deselected tests."""
    if hasattr(config, "workerinput"):
        return
    tier = _tier(config)
    if tier == "default":
        terminalreporter.write_line("tests marked slow were not run: `python -m pytest -q -m slow` runs them, "
                                    "`--run-slow` runs every test")
    elif tier == "slow":
        terminalreporter.write_line("only the tests marked slow ran (the rest: `python -m pytest -q`)")


@pytest.fixture
def unchecked_types():
    """Run a test with jaxtyping's run-time checks off: for tests that pass ill-typed input on
    purpose (``control=None``, ``max_steps=1.5``) to see the package's own error message,
    which the checks (on for the suite, see ``pyproject.toml``) would pre-empt."""
    import jaxtyping

    before = jaxtyping.config.jaxtyping_disable
    jaxtyping.config.update("jaxtyping_disable", True)
    yield
    jaxtyping.config.update("jaxtyping_disable", before)


@pytest.fixture(autouse=True)
def _bound_compiled_code():
    """Drop JAX's compiled executables when they hold too many memory mappings.

    Every compiled XLA CPU program keeps hundreds of mappings (~370 for one compiled
    ``rb.simulate``); a suite of this size compiles enough programs to reach the kernel's
    ``vm.max_map_count`` (65 530 by default), after which XLA crashes while compiling
    (seen as a segfault or abort in ``backend_compile_and_load``). Clearing the caches
    at 40 % of the limit keeps the sharing of compiled code between tests mostly intact.
    """
    yield
    info = _memory_maps()
    if info is not None and info[0] > 0.4 * info[1]:
        jax.clear_caches()
        gc.collect()


@pytest.fixture(scope="session")
def reference():
    return json.loads(REFERENCE.read_text())


def make_paper_ball():
    rails = [rb.CircleRail.paper(r, v) for r, v in zip(BALL_RADII, BALL_V)]
    return rb.Ball(1.0, 1.0, [0.9, 1.0, 1.1], [0.0, 0.0, -0.05], 1.0, [1.0, 1.0, 1.0], rails)


def make_paper_disk():
    rails = [rb.CircleRail(r) for r in DISK_RADII]
    return rb.Disk(1.0, 1.0, 1.0, (0.0, 0.0), 1.0, [1.0] * 4, rails)


@pytest.fixture(scope="session")
def paper_ball():
    return make_paper_ball()


@pytest.fixture(scope="session")
def paper_disk():
    return make_paper_disk()


PAPER_BALL_X0 = np.array([0.0, 2.0369, 0.7044, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0], dtype=float)
PAPER_DISK_X0 = np.array([-np.pi / 2] * 4 + [0.0] * 6)
