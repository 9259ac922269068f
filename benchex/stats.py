# Licensed under the Apache License, Version 2.0 (the "License"); you may
# not use this file except in compliance with the License. You may obtain
# a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
# WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
# License for the specific language governing permissions and limitations
# under the License.

"""The client's latency summary: the figures BenchEx prints (p50, p99, p99.9, mean, std)."""

import json
import math

#: The keys of a summary, in print order; the C program prints the same ones.
KEYS = ("requests", "errors", "fcfs_violations", "elapsed_s", "throughput_rps", "mean_us",
        "std_us", "min_us", "p50_us", "p99_us", "p999_us", "max_us")


def percentile(ordered, q):
    """Nearest-rank percentile ``q`` (0..100) of an ascending list."""
    if not ordered:
        return 0.0
    # round() first: 99.9 / 100 x 1000 is 999.0000000000001 in binary floating point.
    rank = max(1, math.ceil(round(q / 100.0 * len(ordered), 9)))
    return ordered[min(len(ordered), rank) - 1]


def window(values):
    """``(n, mean, population std, p99)`` of a non-empty reporting window.

    What one latency report carries (:func:`benchex.wire.encode`); the p99 is
    the nearest-rank percentile, as in :func:`percentile`.
    """
    ordered = sorted(values)
    n = len(ordered)
    mean = math.fsum(ordered) / n
    var = math.fsum((v - mean) ** 2 for v in ordered) / n
    return n, mean, math.sqrt(var), percentile(ordered, 99)


def summarize(latencies_us, elapsed_s, errors=0, fcfs_violations=0):
    ordered = sorted(latencies_us)
    n = len(ordered)
    mean = math.fsum(ordered) / n if n else 0.0
    var = math.fsum((v - mean) ** 2 for v in ordered) / n if n else 0.0
    return {
        "requests": n,
        "errors": errors,
        "fcfs_violations": fcfs_violations,
        "elapsed_s": round(elapsed_s, 6),
        "throughput_rps": round(n / elapsed_s, 3) if elapsed_s > 0 else 0.0,
        "mean_us": round(mean, 3),
        "std_us": round(math.sqrt(var), 3),
        "min_us": round(ordered[0], 3) if n else 0.0,
        "p50_us": round(percentile(ordered, 50), 3),
        "p99_us": round(percentile(ordered, 99), 3),
        "p999_us": round(percentile(ordered, 99.9), 3),
        "max_us": round(ordered[-1], 3) if n else 0.0,
    }


def render(summary, as_json=False):
    if as_json:
        return json.dumps(summary, sort_keys=False)
    return ("requests %(requests)d  errors %(errors)d  fcfs_violations %(fcfs_violations)d\n"
            "throughput %(throughput_rps).1f req/s over %(elapsed_s).3f s\n"
            "latency us: mean %(mean_us).1f  std %(std_us).1f  min %(min_us).1f  "
            "p50 %(p50_us).1f  p99 %(p99_us).1f  p99.9 %(p999_us).1f  max %(max_us).1f"
            % summary)
