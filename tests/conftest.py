"""Shared fixtures: the paper's two examples and their reference solutions."""

import json
from pathlib import Path

import numpy as np
import pytest

import rollball_jax as rb

# Reference solutions of the paper examples (facts, shipped with the tests).
REFERENCE = Path(__file__).resolve().parent / "data" / "paper_examples.json"

BALL_RADII = [0.95, 0.9, 0.85]
BALL_V = [[0.0, 0.0, 1.0], [np.pi / 2, 0.0, 1.0], [np.pi / 4, np.pi / 4, 1.0]]
DISK_RADII = [0.9, 0.6333333333333333, 0.36666666666666664, 0.1]


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
