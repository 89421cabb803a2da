"""Where a chunk of steps ends: the next report, checkpoint or exchange."""

from __future__ import annotations


def next_stop(done: int, total: int, *intervals: int) -> int:
    """The first step after ``done`` that is a multiple of one of ``intervals``, or ``total``.

    Parameters
    ----------
    done : int
        Steps taken so far.
    total : int
        Last step of the run.
    *intervals : int
        Positive step intervals (reports, checkpoints, exchanges).
    """
    return min([total, *((done // i + 1) * i for i in intervals)])
