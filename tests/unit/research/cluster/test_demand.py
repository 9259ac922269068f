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

"""The fleet's demand: repeatable, heavy-tailed, swinging with the day."""

from resex_research.cluster import demand
from resex_research.cluster import spec


def _scenario(**over):
    sc = spec.load("cluster_small").with_duration(86400.0)
    import dataclasses
    return dataclasses.replace(sc, **over)


def test_the_same_seed_gives_the_same_requests_and_another_seed_others():
    sc = _scenario()
    assert demand.generate(sc) == demand.generate(sc)
    assert demand.generate(sc) != demand.generate(sc.with_seed(sc.seed + 1))


def test_lifetimes_are_heavy_tailed_and_truncated():
    sc = _scenario(mean_per_hour=400.0)
    lives = sorted(r.lifetime_s for r in demand.generate(sc))
    assert lives[0] >= sc.lifetime_min_s
    assert lives[-1] <= sc.lifetime_max_s
    median = lives[len(lives) // 2]
    # Pareto(1.5): the mean is well above the median, the p99 far above.
    assert sum(lives) / len(lives) > 1.3 * median
    assert lives[int(0.99 * len(lives))] > 10 * median


def test_arrivals_peak_at_the_peak_hour_and_the_mix_swings():
    sc = _scenario(mean_per_hour=400.0, initial_vms=0)
    reqs = demand.generate(sc)
    peak = [r for r in reqs if abs(r.arrive_s / 3600.0 - sc.peak_hour) < 2]
    trough = [r for r in reqs if abs(r.arrive_s / 3600.0 - (sc.peak_hour - 12) % 24) < 2]
    assert len(peak) > 1.5 * len(trough)
    kinds = [f.kind for f in sc.flavors]

    def share(group, kind):
        return sum(kinds[r.flavor] == kind for r in group) / len(group)

    assert share(peak, spec.SENSITIVE) > share(trough, spec.SENSITIVE)
    assert share(peak, spec.BULK) < share(trough, spec.BULK)


def test_initial_vms_arrive_in_the_first_minutes():
    sc = _scenario()
    reqs = demand.generate(sc)
    early = [r for r in reqs if r.arrive_s < demand.INITIAL_SPREAD_S]
    assert len(early) >= sc.initial_vms
