#!/usr/bin/env python3
"""The geometric mean of paired per-round ratios and its 95 % confidence interval.

Each argument is one round's ratio (warden's requests per second over nginx's, measured back to
back in that round). The interval is Student's t on the logarithms of the ratios, so that a round
at 0.9 and one at 1.1 weigh the same. Prints, for a table, "geometric mean 1.01x, 95 % interval
0.96-1.08x" (with one round, no interval).

Usage: bench/ratio_interval.py ratio [ratio ...]
"""
import math
import statistics
import sys

# Two-sided 95 % quantiles of Student's t for 1..30 degrees of freedom (beyond: the normal's).
T_975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
         2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
         2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def interval(ratios):
    logs = [math.log(r) for r in ratios]
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return math.exp(mean), float("nan"), float("nan")
    df = len(logs) - 1
    z = 1.960  # past the table: the normal's quantile and the first term of its expansion in 1/df
    t = T_975[df - 1] if df <= len(T_975) else z + (z**3 + z) / (4 * df)
    half = t * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


if __name__ == "__main__":
    values = [float(a) for a in sys.argv[1:]]
    if not values or any(v <= 0 for v in values):
        sys.exit("usage: ratio_interval.py ratio [ratio ...] (positive numbers)")
    mean, low, high = interval(values)
    if len(values) < 2:
        print("geometric mean %.2fx (one round: no interval)" % mean)
    else:
        print("geometric mean %.2fx, 95 %% interval %.2f-%.2fx" % (mean, low, high))
