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

"""The fleet's requests: who arrives when, with which flavor, for how long.

Generated once per run from the scenario's seed (its own
``random.Random``), and the same sequence is replayed under every
configuration, so configurations are compared on identical demand.

* **Arrivals**: a non-homogeneous Poisson process (drawn by thinning) whose
  rate swings over the day::

      rate(t) = mean_per_hour / 3600 * (1 + daily_swing * cos(2 pi (h(t) - peak_hour) / 24))

  with ``h(t)`` the hour of day. ``initial_vms`` requests arrive in the
  first five minutes (the fleet is not empty at midnight).
* **Flavors**: each flavor's ``share`` of the arrivals swings by its
  ``day_swing`` in the same rhythm (a positive swing peaks with the day, a
  negative one at night: interactive latency-sensitive services by day,
  batch bulk I/O by night).
* **Lifetimes** are heavy-tailed: Pareto with shape ``alpha`` and scale
  ``min_s`` (most VMs are short, a few run for days), truncated at
  ``max_s``.
"""

import dataclasses
import math
import random

DAY_S = 86400.0
INITIAL_SPREAD_S = 300.0


@dataclasses.dataclass(frozen=True, slots=True)
class Request:
    """One VM's life: its index, flavor, arrival and lifetime (seconds)."""

    index: int
    flavor: int
    arrive_s: float
    lifetime_s: float
    project: str


def _cycle(t_s, peak_hour):
    return math.cos(2.0 * math.pi * ((t_s / 3600.0) - peak_hour) / 24.0)


def rate_per_s(scenario, t_s):
    return scenario.mean_per_hour / 3600.0 * (1.0 + scenario.daily_swing
                                              * _cycle(t_s, scenario.peak_hour))


def flavor_weights(scenario, t_s):
    c = _cycle(t_s, scenario.peak_hour)
    return [max(0.0, f.share * (1.0 + f.day_swing * c)) for f in scenario.flavors]


def lifetime(rng, scenario):
    u = 1.0 - rng.random()          # (0, 1]
    life = scenario.lifetime_min_s * u ** (-1.0 / scenario.lifetime_alpha)
    return min(scenario.lifetime_max_s, life)


def generate(scenario):
    """Every request of the run, in arrival order."""
    rng = random.Random("fleet:%d" % scenario.seed)
    out = []
    projects = max(4, scenario.hosts // 4)

    def add(t):
        weights = flavor_weights(scenario, t)
        flavor = rng.choices(range(len(weights)), weights=weights)[0]
        out.append(Request(len(out), flavor, t, lifetime(rng, scenario),
                           "project-%d" % rng.randrange(projects)))

    for t in sorted(rng.uniform(0.0, INITIAL_SPREAD_S) for _ in range(scenario.initial_vms)):
        add(t)
    peak = scenario.mean_per_hour / 3600.0 * (1.0 + scenario.daily_swing)
    t = 0.0
    while True:
        t += rng.expovariate(peak)
        if t >= scenario.duration_s:
            break
        if rng.random() * peak <= rate_per_s(scenario, t):
            add(t)
    out.sort(key=lambda r: (r.arrive_s, r.index))
    return out
