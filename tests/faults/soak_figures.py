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

"""The soak's figures from its samples: least-squares slopes, the table, the counters.

A sample is a dict with ``t`` (seconds from the start of the run) and one
value per series (``None`` when it could not be read). Each series is
summarised by its first, last, lowest and highest value and its slope per
hour over the whole run and over its second half (the warm-up left out),
with the slope's standard error: a series is **flat** when its slope is
within two standard errors of zero. Pure functions: the lab run
(:mod:`tests.faults.soak`) reads the machine and feeds them.
"""

import dataclasses
import math
import re

HOUR_S = 3600.0


def fit(points):
    """``(slope, standard error)`` per second of the least-squares line through ``points``.

    ``points``: ``(t, y)`` pairs. ``None`` if fewer than two distinct ``t``;
    the error is ``None`` with only two points (no degree of freedom left).
    """
    n = len(points)
    if n < 2:
        return None
    mean_t = math.fsum(t for t, _y in points) / n
    mean_y = math.fsum(y for _t, y in points) / n
    sxx = math.fsum((t - mean_t) ** 2 for t, _y in points)
    if sxx <= 0.0:
        return None
    slope = math.fsum((t - mean_t) * (y - mean_y) for t, y in points) / sxx
    if n < 3:
        return slope, None
    residual = math.fsum((y - mean_y - slope * (t - mean_t)) ** 2 for t, y in points)
    return slope, math.sqrt(residual / (n - 2) / sxx)


def second_half(points):
    """The points from the middle of their time span on."""
    if not points:
        return []
    middle = (points[0][0] + points[-1][0]) / 2.0
    return [p for p in points if p[0] >= middle]


def verdict(slope, error):
    """``flat`` within two standard errors of zero, else ``rises``/``falls``; ``-`` unknown."""
    if slope is None or error is None:
        return "-"
    if abs(slope) <= 2.0 * error:
        return "flat"
    return "rises" if slope > 0 else "falls"


@dataclasses.dataclass(frozen=True)
class Summary:
    """One series over the run; slopes and their errors per hour (``None``: too few points)."""

    name: str
    points: int
    first: float = None
    last: float = None
    low: float = None
    high: float = None
    slope_h: float = None
    error_h: float = None
    late_slope_h: float = None
    late_error_h: float = None

    @property
    def late_verdict(self):
        """The second half's :func:`verdict` (the warm-up excluded)."""
        return verdict(self.late_slope_h, self.late_error_h)


def _per_hour(points):
    got = fit(points)
    if got is None:
        return None, None
    slope, error = got
    return slope * HOUR_S, None if error is None else error * HOUR_S


def summarize(samples, key):
    """The :class:`Summary` of series ``key`` over ``samples`` (in time order)."""
    points = [(s["t"], float(s[key])) for s in samples if s.get(key) is not None]
    if not points:
        return Summary(key, 0)
    values = [y for _t, y in points]
    slope, error = _per_hour(points)
    late_slope, late_error = _per_hour(second_half(points))
    return Summary(key, len(points), values[0], values[-1], min(values), max(values),
                   slope, error, late_slope, late_error)


def _num(value):
    if value is None:
        return "-"
    if float(value).is_integer() and abs(value) < 1e15:
        return "%d" % value
    return "%.4g" % value


def _slope(slope, error):
    if slope is None:
        return "-"
    if error is None:
        return "%+.3g" % slope
    return "%+.3g +- %.2g" % (slope, 2.0 * error)


def format_table(summaries):
    """The summaries as a text table, one line a series (slopes per hour, +- two errors)."""
    head = ("series", "first", "last", "min", "max", "slope/h", "2nd half slope/h",
            "2nd half")
    rows = [(s.name, _num(s.first), _num(s.last), _num(s.low), _num(s.high),
             _slope(s.slope_h, s.error_h), _slope(s.late_slope_h, s.late_error_h),
             s.late_verdict) for s in summaries]
    widths = [max(len(row[i]) for row in rows + [head]) for i in range(len(head))]
    line = " | ".join("%%-%ds" % w for w in widths)
    out = [line % head, "-+-".join("-" * w for w in widths)]
    out += [line % row for row in rows]
    return "\n".join(out)


# -- reading what the samples are made of -------------------------------------------------

def parse_proc_status(text):
    """``{"rss_kib", "threads"}`` from ``/proc/PID/status`` (a missing field is absent)."""
    out = {}
    for line in text.splitlines():
        key, _sep, value = line.partition(":")
        if key == "VmRSS":
            out["rss_kib"] = int(value.split()[0])
        elif key == "Threads":
            out["threads"] = int(value.split()[0])
    return out


_PROM_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def prom_sum(text, name):
    """The sum of every sample of metric ``name`` (all its labels) in Prometheus text, or None."""
    total = None
    for line in text.splitlines():
        match = _PROM_LINE.match(line)
        if match is None or match.group(1) != name:
            continue
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        total = (total or 0.0) + value
    return total


class LogCounter:
    """Counts of patterns in a log read piece by piece (a line cut in two is counted once).

    ``patterns``: ``{name: regex}``; a regex with a group adds up the
    integer the group matched (``skipping (\\d+) interval``), one without
    counts its lines.
    """

    def __init__(self, patterns):
        self.patterns = {name: re.compile(p) for name, p in patterns.items()}
        self.counts = {name: 0 for name in patterns}
        self._rest = ""

    def feed(self, text):
        """Count the complete lines of ``self``'s rest + ``text``; keep the unfinished one."""
        lines = (self._rest + text).split("\n")
        self._rest = lines.pop()
        for line in lines:
            for name, regex in self.patterns.items():
                match = regex.search(line)
                if match is None:
                    continue
                self.counts[name] += int(match.group(1)) if regex.groups else 1
        return dict(self.counts)


def lost_around(samples, windows, grace_s, key="lost_intervals"):
    """``(during, beyond)``: what ``key`` (a running total) gained near and away from faults.

    ``windows``: ``(begin, end)`` of each fault, in the samples' seconds. What
    a sample gained since the one before (the first: since 0 at ``t`` 0)
    counts as the faults' when that stretch of time overlaps a fault's
    window extended by ``grace_s`` (the agent's recovery), else as beyond.
    """
    during = beyond = 0
    prev_t, prev = 0.0, 0
    for sample in samples:
        value = sample.get(key)
        if value is None:
            continue
        gained = value - prev
        near = any(prev_t <= end + grace_s and sample["t"] >= begin for begin, end in windows)
        if near:
            during += gained
        else:
            beyond += gained
        prev_t, prev = sample["t"], value
    return during, beyond
