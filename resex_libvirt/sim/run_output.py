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

"""Statistics, text tables and JSON of simulated runs.

Latency percentiles are nearest-rank (the same rule as
:func:`resex_libvirt.market.latency.summarize`); the standard deviation is
the population one. The plots are the research's (``resex_research.plots``).
"""

import itertools
import json
import math
import operator
import os


def percentile(ordered, q):
    """Nearest-rank ``q`` percentile (0..100) of an ascending list."""
    if not ordered:
        return None
    rank = max(0, min(len(ordered) - 1, math.ceil(q / 100.0 * len(ordered)) - 1))
    return ordered[rank]


def latency_stats(values):
    """count, mean, p50, p99 and population std of ``values`` (us); ``None`` when empty."""
    n = len(values)
    if n == 0:
        return {"count": 0, "mean_us": None, "p50_us": None, "p99_us": None, "std_us": None}
    mean = math.fsum(values) / n
    # fsum of (v - mean) ** 2, its terms made in C (the same operations: float - and **).
    squares = map(pow, map(operator.sub, values, itertools.repeat(mean)), itertools.repeat(2))
    std = math.sqrt(math.fsum(squares) / n)
    ordered = sorted(values)
    return {"count": n, "mean_us": mean, "p50_us": percentile(ordered, 50),
            "p99_us": percentile(ordered, 99), "std_us": std}


def fmt(value, spec="%.1f"):
    return "-" if value is None else spec % value


def table(title, headers, rows):
    """A plain-text table: title, header, rule, rows (right-aligned but the first column)."""
    cells = [list(map(str, headers))] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = [title] if title else []
    for k, row in enumerate(cells):
        parts = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:])]
        lines.append("  ".join(parts).rstrip())
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def write_json(path, data):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)
