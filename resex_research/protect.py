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

"""Time to protect and cap swing: how fast and how steadily a run held its SLAs.

**Time to protect**: from the moment the first VM without a latency SLA
(an interferer) starts, to the moment each latency-sensitive VM's latency
is back within its SLA bound (``latency_sla_us x (1 +
interference_threshold_pct / 100)``, the bound every table of the
simulator uses) for good: the first request completion at which both the
sliding-window mean (the requests of the last ``window_s``) and the mean
of every later request until the interferer stops (or the run ends) are
within the bound, and that leaves at least :data:`HOLD_S` (half the span,
if it is shorter) to hold it: a short lucky tail at the end of a run
protects no one. A VM never interfered with is protected at its first
request (about 0 ms); one whose SLA is not met on average until then has
none (``None``: never). A run's figure is its slowest sensitive VM's.

**Cap swing**: the interferers' CPU cap, its largest minus its smallest
value in the second half of the run (percent of one CPU), as the lab
reports it: how much a policy moves the cap it holds once it has
protected.
"""

import numpy as np

#: The sliding window of the time to protect (s): 100 ms, a tenth of an epoch.
WINDOW_S = 0.1
#: How long, at least, the SLA must then hold until the interferer stops (s).
HOLD_S = 0.5


def bound_us(sla):
    """The latency a VM's mean may reach and still meet its SLA (us)."""
    return sla.latency_sla_us * (1.0 + sla.interference_threshold_pct / 100.0)


def interference_span(scenario):
    """``(start_s, stop_s)`` of the first interferer to start, or None without one."""
    others = [vm for vm in scenario.vms if not vm.sla.sensitive]
    if not others:
        return None
    first = min(others, key=lambda vm: vm.start_s)
    stop = scenario.duration_s
    if first.stop_s is not None:
        stop = min(first.stop_s, stop)
    return first.start_s, stop


def vm_time_to_protect(log, bound, start_s, stop_s, window_s=WINDOW_S, hold_s=HOLD_S):
    """Seconds from ``start_s`` until ``log``'s latency is within ``bound`` for good.

    ``log`` is ``[(completion s, latency us), ...]`` in completion order.
    None when no request completed in ``[start_s, stop_s]`` or the SLA is
    not held on average until ``stop_s`` from any request on, at least
    ``hold_s`` (half the span, if shorter) before ``stop_s``.
    """
    if not log:
        return None
    done = np.fromiter((d for d, _lat in log), np.float64, len(log))
    lat = np.fromiter((v for _d, v in log), np.float64, len(log))
    keep = (done >= start_s) & (done <= stop_s)
    done, lat = done[keep], lat[keep]
    n = len(done)
    if not n:
        return None
    csum = np.concatenate(([0.0], np.cumsum(lat)))
    idx = np.arange(n)
    # The window of request i: the requests completed in (done[i] - window_s, done[i]].
    first = np.searchsorted(done, done - window_s, side="right")
    window = (csum[idx + 1] - csum[first]) / (idx + 1 - first)
    # The mean of request i and of every later one.
    suffix = (csum[n] - csum[idx]) / (n - idx)
    latest = stop_s - min(hold_s, (stop_s - start_s) / 2.0)
    ok = np.flatnonzero((window <= bound) & (suffix <= bound) & (done <= latest))
    if not len(ok):
        return None
    return max(0.0, float(done[ok[0]]) - start_s)


def time_to_protect(scenario, result, window_s=WINDOW_S):
    """A run's time to protect (s): its slowest sensitive VM's; None if one is never.

    ``result`` is a :class:`~resex_libvirt.sim.runner.RunResult` of
    ``scenario``. Also None when the scenario has no interferer or no
    sensitive VM (nothing to protect from, or no one to protect).
    """
    span = interference_span(scenario)
    sensitive = [vm for vm in scenario.vms if vm.sla.sensitive]
    if span is None or not sensitive:
        return None
    worst = 0.0
    for vm in sensitive:
        t = vm_time_to_protect(result.latency_log.get(vm.name, ()), bound_us(vm.sla),
                               max(span[0], vm.start_s), span[1], window_s)
        if t is None:
            return None
        worst = max(worst, t)
    return worst


def cap_swing(scenario, result):
    """The interferers' largest cap swing in steady state (percent); None without one.

    Steady state is the second half of the run (after the warm-up if that
    is longer): the swing a controller keeps once it has protected, not the
    cut that protected.
    """
    ts = result.series.get("t_s", ())
    since = max(scenario.warmup_s, scenario.duration_s / 2.0)
    swings = []
    for vm in scenario.vms:
        if vm.sla.sensitive:
            continue
        caps = [c for t, c in zip(ts, result.series["cap_pct"].get(vm.name, ()))
                if c is not None and t > since]
        if caps:
            swings.append(max(caps) - min(caps))
    return max(swings) if swings else None
