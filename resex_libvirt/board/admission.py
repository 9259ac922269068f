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

"""A host's admission signal: its congestion index, smoothed, with hysteresis.

One epoch's congestion index (:attr:`~resex_libvirt.board.report.HostReport.congestion_index`)
is noisy: a host near the scheduler's threshold would admit and refuse
latency-sensitive VMs by turns. The scheduler therefore decides on a
**latched** value derived from each host's stream of reports:

1. **Smoothing.** An exponentially weighted moving average with time
   constant ``tau`` seconds, driven by the reports' own timestamps, so that
   it does not matter how often a host publishes or a scheduler reads::

       S <- S + (1 - exp(-dt / tau)) * (CI - S),   dt = ts - previous ts

   (the exact update for an index that held its value between reports). The
   first report of a host, or the first after it went stale, starts at its
   own index.
2. **Hysteresis** (a backlash of relative width ``h``). The latched value
   ``L`` follows ``S`` up at once, and down only once ``S`` has fallen a
   fraction ``h`` below it::

       if S > L:              L = S
       elif S < (1 - h) L:    L = S / (1 - h)

   A host **refuses** a request with threshold ``T`` while ``L > T``. It
   starts refusing when ``S`` rises above ``T`` (the *enter* threshold) and
   admits again only when ``S`` falls to ``(1 - h) T`` (the *leave*
   threshold). One latched value serves every threshold at once (flavors
   carry their own ``resex:interference_threshold_pct``; aggregates
   override the default), so the state is one number per host.

On a steady host whose index wanders within a band narrower than ``h``
(relative) the latched value settles on the band's top and never moves
again: no flips. The smoothing divides epoch-to-epoch noise by about
``sqrt(2 tau / dt)`` before it reaches the band.
"""

import dataclasses
import math


@dataclasses.dataclass(frozen=True, slots=True)
class Admission:
    """One host's admission state after its report of ``ts``."""

    ts: float
    smoothed: float
    latched: float

    def refuses(self, threshold):
        """True when a request whose threshold is ``threshold`` (percent) must not land."""
        return self.latched > threshold


def start(report):
    """The state of a host seen for the first time (or again after going stale)."""
    index = report.congestion_index
    return Admission(report.ts, index, index)


def advance(state, report, tau, hysteresis):
    """The state after ``report``; ``state`` unchanged for an older or repeated report.

    ``tau`` is the time constant in seconds (0: no smoothing), ``hysteresis``
    the relative width ``h`` in [0, 1) (0: none).
    """
    if state is None:
        return start(report)
    dt = report.ts - state.ts
    if dt <= 0.0:
        return state
    index = report.congestion_index
    if tau > 0.0:
        smoothed = state.smoothed + (1.0 - math.exp(-dt / tau)) * (index - state.smoothed)
    else:
        smoothed = index
    latched = state.latched
    if smoothed > latched:
        latched = smoothed
    elif smoothed < (1.0 - hysteresis) * latched:
        latched = smoothed / (1.0 - hysteresis)
    return Admission(report.ts, smoothed, latched)
