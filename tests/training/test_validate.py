"""Validation numbers on synthetic series, a tiny teacher-vs-itself run, and the comparison
of two force paths."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import tiny_system

from workbench.model.options import KernelOptions
from workbench.teacher import teacher_potential
from workbench.training.validate import (
    compare_force_paths,
    compare_q,
    count_transitions,
    folded_fraction,
    force_rmse,
    histogram_intersection,
    pearson,
    validate_against_teacher,
)


def test_histogram_intersection():
    a = torch.linspace(0.0, 0.99, 1000)
    assert math.isclose(histogram_intersection(a, a), 1.0)
    assert histogram_intersection(a * 0.3, 0.6 + a * 0.3) == 0.0


def test_transitions_need_both_thresholds():
    q = torch.tensor([[0.1, 0.5, 0.9, 0.6, 0.3, 0.85], [0.9, 0.5, 0.7, 0.9, 0.45, 0.9]])
    assert count_transitions(q) == (2, 1)
    assert count_transitions(q[1]) == (0, 0)


def test_fractions_correlation_and_rmse():
    q = torch.tensor([0.1, 0.5, 0.9, 0.95])
    assert folded_fraction(q) == 0.5
    assert math.isclose(pearson(q, 3.0 - 2.0 * q), -1.0)
    assert math.isnan(pearson(q, torch.ones(4)))
    assert math.isclose(force_rmse(torch.ones(2, 3), torch.zeros(2, 3)), 1.0)
    result = compare_q(q[None], q[None], (1.0 - q)[None])
    assert all(result["passes"].values())


def test_teacher_validated_against_itself_passes(tmp_path):
    sys = tiny_system()
    teacher = teacher_potential(sys)
    summary = validate_against_teacher(
        sys, teacher, teacher, [300.0, 400.0], 2, 20, 5, plot_path=tmp_path / "v.png",
        series_path=tmp_path / "v.pt",
    )
    assert len(summary["results"]) == 2
    assert all(r["q_intersection"] == 1.0 for r in summary["results"])
    series = torch.load(tmp_path / "v.pt", weights_only=True)
    assert series["temperatures"] == [300.0, 400.0]
    assert series["model_q"].shape == series["teacher_rmsd"].shape == (2, 2, 4)
    assert torch.equal(series["model_q"], series["teacher_q"])


def test_force_paths_compared_on_the_same_replicas():
    sys = tiny_system()
    teacher = teacher_potential(sys)
    same = compare_force_paths(
        sys, teacher, {"a": KernelOptions(), "b": KernelOptions()}, 300.0, 2, 20, 5
    )
    assert same["q_intersection"] == 1.0 and same["paths"] == ["a", "b"]
    assert same["folded"]["a"] == same["folded"]["b"]
    with pytest.raises(ValueError, match="two force paths"):
        compare_force_paths(sys, teacher, {"a": KernelOptions()}, 300.0, 2, 20, 5)
