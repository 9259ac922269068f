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

"""Placement's candidates in the fleet study: the flavor's traits first, then the limit."""

from resex_nova import traits
from resex_research.cluster import scheduler as scheduler_mod
from resex_research.cluster import spec

FORBID_CLOSED = {"trait:%s" % traits.CLOSED: "forbidden"}


def scheduler(limit=3, hosts=10, randomize=False):
    sections = {"scheduler": {"max_placement_results": limit},
                "filter_scheduler": {"enabled_filters": ["ComputeFilter"]}}
    with scheduler_mod.nova_config(sections):
        return scheduler_mod.Scheduler(["h%d" % i for i in range(hosts)], 8, 8192, 100,
                                       seed=1, randomize_candidates=randomize)


def candidates(sched, name, **extra_specs):
    flavor = sched.flavor(spec.Flavor(name, 2, 2048, 10, 1.0, 0.0, dict(extra_specs),
                                      spec.SENSITIVE))
    return [s.host for s in sched.candidates(sched.boot_spec(flavor, "uuid-1", "p"))]


def close(sched, hosts):
    for host in hosts:
        sched.set_trait(host, traits.CLOSED, True)


def test_flavor_traits_reads_placement_extra_specs():
    assert scheduler_mod.flavor_traits({
        "trait:A": "required", "trait:B": "forbidden", "resex:io_class": "bulk",
        "hw:cpu_policy": "dedicated"}) == ({"A"}, {"B"})


def test_a_forbidden_trait_drops_hosts_before_the_limit():
    sched = scheduler()
    close(sched, ["h0", "h1", "h2", "h3", "h4"])
    assert candidates(sched, "plain") == ["h0", "h1", "h2"]
    assert candidates(sched, "forbids", **FORBID_CLOSED) == ["h5", "h6", "h7"]


def test_the_limit_applies_after_the_trait_filter_in_a_random_sample_too():
    sched = scheduler(randomize=True)
    close(sched, ["h0", "h1", "h2", "h3", "h4", "h5"])
    got = candidates(sched, "forbids", **FORBID_CLOSED)
    assert len(got) == 3 and set(got) <= {"h6", "h7", "h8", "h9"}


def test_a_cleared_trait_gives_the_host_back():
    sched = scheduler()
    close(sched, ["h0", "h1"])
    sched.set_trait("h0", traits.CLOSED, False)
    assert candidates(sched, "forbids", **FORBID_CLOSED) == ["h0", "h2", "h3"]


def test_every_host_is_managed_and_a_required_trait_keeps_only_its_holders():
    sched = scheduler()
    managed = {"trait:%s" % traits.MANAGED: "required"}
    assert candidates(sched, "managed", **managed) == ["h0", "h1", "h2"]
    sched.set_trait("h1", traits.MANAGED, False)
    assert candidates(sched, "managed", **managed) == ["h0", "h2", "h3"]
    assert candidates(sched, "nobody", **{"trait:CUSTOM_NOBODY": "required"}) == []


def test_candidates_still_need_room():
    sched = scheduler()
    big = sched.flavor(spec.Flavor("big", 8, 8192, 10, 1.0, 0.0, {}, spec.NEUTRAL))
    sched.claim("h0", sched.boot_spec(big, "uuid-0", "p"))
    assert candidates(sched, "plain") == ["h1", "h2", "h3"]
