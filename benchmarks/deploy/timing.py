"""Timing under shared load: interleaved rounds, ratios taken within a round, medians across them."""

from __future__ import annotations

import time

import numpy as np


def best(values: list[float]) -> float:
    return min(values)


def timed(function, *args) -> float:
    start = time.perf_counter()
    function(*args)
    return time.perf_counter() - start


def median_rounded(values, digits: int = 3) -> float:
    return round(float(np.median(values)), digits)


def interleaved(timings: dict, count: int, repeats: int, warm_up: int) -> dict:
    """`timings`: name -> function of a number of images. Each runs once on `warm_up` images
    (excluded), then `repeats` rounds run all of them in turn on `count` images, so a change of load
    on shared cores hits each alike. Returns each one's seconds per round; ratios are taken round
    by round (same load), then their median."""
    for function in timings.values():
        function(warm_up)
    rounds = {name: [] for name in timings}
    for _ in range(repeats):
        for name, function in timings.items():
            rounds[name].append(timed(function, count))
    return {name: np.asarray(values) for name, values in rounds.items()}


def rates(times: dict, count: int, digits: int = 1) -> dict:
    return {f"{name}_images_per_s": median_rounded(count / values, digits) for name, values in times.items()}
