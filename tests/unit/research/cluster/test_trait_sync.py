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

"""resex-placement-sync as the fleet study models it (resex_research.cluster.trait_sync)."""

import dataclasses

from hypothesis import given
from hypothesis import strategies as st
import pytest

from resex_nova import traits
from resex_research.cluster import trait_sync
from tests.unit.board import reports

T, H, TAU, MAX_AGE = 20.0, 0.3, 20.0, 60.0
QUIET = trait_sync.SyncModel(conflict_probability=0.0)


def rep(host, ts, index):
    """A report of ``host`` at ``ts`` whose congestion index is ``index`` (percent)."""
    return reports.make(host, ts=ts, link_utilisation=index / (100.0 + index))


def service(model=QUIET, tau=TAU, hosts=("h",)):
    """A service that saw every host idle at 0 and began the day in step."""
    s = trait_sync.TraitSync(model, T, H, tau, MAX_AGE)
    for host in hosts:
        s.report(host, rep(host, 0.0, 0.0), 0.0)
    assert s.begin() == {host: False for host in hosts}
    return s


def drain(s, now):
    """Run the worker as the fleet does until it is idle: ``[(end, host, closed)]``."""
    done, t = [], now
    while s.ready_at() is not None:
        t = max(t, s.ready_at())
        job = s.work(t)
        if job is None:
            continue
        t, result = job
        if result is not None:
            s.applied(result[0], result[1], t)
            done.append((t,) + result)
    return done


def test_a_flip_reaches_placement_after_the_watch_and_a_read_and_a_write():
    s = service()
    assert s.report("h", rep("h", 10.0, 100.0), 10.0)
    [(end, host, closed)] = drain(s, 10.0)
    assert (host, closed) == ("h", True)
    assert end == pytest.approx(10.0 + 0.3 + 2 * 0.05)
    assert dict(s.calls) == {"GET traits": 1, "PUT traits": 1}
    assert s.summary(60.0)["lag_s_max"] == pytest.approx(0.4)


def test_a_burst_of_flips_is_paced_by_max_calls_per_second():
    hosts = ["h%02d" % i for i in range(50)]
    paced = service(hosts=hosts)
    free = service(dataclasses.replace(QUIET, max_calls_per_second=0.0), hosts=hosts)
    for s in (paced, free):
        for host in hosts:
            s.report(host, rep(host, 100.0, 100.0), 100.0)
    last_free = drain(free, 100.0)[-1][0]
    last_paced = drain(paced, 100.0)[-1][0]
    assert last_free == pytest.approx(100.3 + 100 * 0.05)
    # A burst of ten tokens, then ten calls a second: 100 calls take about 9 s.
    assert last_paced >= 100.3 + 8.0
    summary = paced.summary(600.0)
    assert summary["calls"] == 100 and summary["calls_per_min_peak"] == 100
    assert summary["set"] == 50 and summary["closed_peak"] == 50
    assert summary["lag_s_max"] >= 8.0


def test_a_change_undone_before_its_turn_costs_no_call():
    s = service(tau=0.0)
    assert s.report("h", rep("h", 10.0, 100.0), 10.0)
    s.report("h", rep("h", 10.1, 0.0), 10.1)
    assert drain(s, 10.0) == []
    assert sum(s.calls.values()) == 0 and s.since == {}


def test_conflicts_repeat_the_read_and_the_write_and_every_trait_lands():
    hosts = ["h%02d" % i for i in range(20)]
    s = service(dataclasses.replace(QUIET, conflict_probability=0.5), hosts=hosts)
    for host in hosts:
        s.report(host, rep(host, 100.0, 100.0), 100.0)
    drain(s, 100.0)
    assert s.conflicts > 0
    assert s.calls["PUT traits"] == s.calls["GET traits"] == 20 + s.conflicts
    assert all(s.actual[host] for host in hosts)


@pytest.mark.parametrize("policy,writes", [(traits.UNKNOWN_CLOSED, 1), (traits.UNKNOWN_KEEP, 0),
                                           (traits.UNKNOWN_OPEN, 0)])
def test_a_silent_host_follows_the_unknown_host_policy(policy, writes):
    s = service(dataclasses.replace(QUIET, unknown_host_policy=policy))
    s.silent("h", 70.0)
    assert len(drain(s, 70.0)) == writes


def test_a_reconciliation_is_two_listings():
    s = service()
    s.reconcile_due(60.0)
    assert drain(s, 60.0) == []
    assert dict(s.calls) == {"GET resource_providers": 2} and s.reconciliations == 1


@given(st.lists(st.floats(0.0, 60.0), min_size=1, max_size=80))
def test_with_instant_calls_the_trait_is_always_the_filters_verdict(indices):
    s = service(dataclasses.replace(QUIET, watch_latency_s=0.0, call_s=0.0,
                                    max_calls_per_second=0.0))
    for i, index in enumerate(indices, start=1):
        s.report("h", rep("h", float(i), index), float(i))
        drain(s, float(i))
        assert s.actual["h"] == s.state["h"].refuses(T)
