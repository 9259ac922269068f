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

"""A tiny fleet whose first candidates are all closed: the filter alone against the traits.

Nova 34's own HostManager and the ResEx filter over a real SQLite board;
the hosts' reports come from a stand-in surrogate (a bulk tenant saturates
the link, sensitive ones use 3 % of it each) instead of a calibration.
"""

import pytest

from resex_libvirt.board import reader as reader_mod
from resex_research.cluster import demand
from resex_research.cluster import fleet
from resex_research.cluster import spec
from resex_research.cluster import study
from resex_research.cluster import surrogate as surrogate_mod
from tests.unit.board import reports

SCENARIO = """
name = "tiny_traits"
duration_s = 600.0

[hosts]
count = 6
vcpus = 8
ram_mb = 32768

[host_sim]
sensitive_points = [0, 1, 2]
max_bulk = 1
sensitive_workload = { buffer = "64K", compute_us = 148.0, clients = 1, think_us = 2000.0 }
bulk_workload = { buffer = "1M", compute_us = 148.0, clients = 1 }

[[flavors]]
name = "sensitive.small"
vcpus = 2
ram_mb = 4096
share = 0.5
[flavors.extra_specs]
"resex:latency_sla_us" = "209"
"resex:interference_threshold_pct" = "20"
"trait:CUSTOM_RESEX_MANAGED" = "required"
"trait:CUSTOM_RESEX_CLOSED" = "forbidden"

[[flavors]]
name = "bulk.large"
vcpus = 4
ram_mb = 16384
share = 0.5
extra_specs = { "resex:io_class" = "bulk" }

[arrivals]
mean_per_hour = 1.0

[lifetimes]
min_s = 3600.0
max_s = 7200.0

[congested_region]
hosts = 3

[nova.scheduler]
max_placement_results = 2

[nova.filter_scheduler]
available_filters = ["nova.scheduler.filters.all_filters",
                     "resex_nova.filter.ResExCongestionFilter"]
enabled_filters = ["ComputeFilter", "ResExCongestionFilter"]
weight_classes = ["nova.scheduler.weights.ram.RAMWeigher"]

[nova.resex]
congestion_threshold = 20.0

[[configurations]]
name = "filter"
host_policy = "none"

[[configurations]]
name = "traits"
host_policy = "none"
placement_sync = true

[[configurations]]
name = "traits_only"
host_policy = "none"
placement_sync = true
[configurations.nova.filter_scheduler]
enabled_filters = ["ComputeFilter"]
"""


class StandInSurrogate:
    """A host's outcome from its mix alone: a bulk tenant saturates the link."""

    def lookup(self, policy, n_sensitive, n_bulk):
        util = 0.99 if n_bulk else 0.03 * n_sensitive
        rec = reports.make("calibration", ts=0.0, link_utilisation=util,
                           vms=n_sensitive + n_bulk, sensitive_vms=n_sensitive,
                           heavy_io_vms=n_bulk).to_dict()
        return surrogate_mod.HostOutcome(50.0 if n_bulk else 0.0,
                                         1.0 if n_bulk and n_sensitive else 0.0,
                                         100.0 if n_bulk else 0.0, rec, False)


@pytest.fixture(scope="module")
def scenario():
    return spec.loads(SCENARIO)


def run(scenario, name, tmp_path):
    # One latency-sensitive boot after the day's first reports.
    requests = [demand.Request(0, 0, 30.0, 3600.0, "p")]
    try:
        return fleet.run(scenario, scenario.configuration(name), requests, StandInSurrogate(),
                         "sqlite://%s" % (tmp_path / ("board-%s.sqlite" % name)),
                         board_opts={"ttl": 0})
    finally:
        reader_mod.stop_all()


def test_the_filter_alone_refuses_when_every_candidate_is_closed(scenario, tmp_path):
    r = run(scenario, "filter", tmp_path)
    assert r.candidate_limit == 2 and r.pinned_vms == 3
    assert r.no_valid_host == r.no_valid_host_sensitive == 1
    assert not r.placement_sync and r.sync is None


def test_the_traits_let_placement_return_open_hosts_past_the_closed_ones(scenario, tmp_path):
    r = run(scenario, "traits", tmp_path)
    assert r.no_valid_host == 0
    assert r.hosts_in_use_peak == 4       # the three region hosts and an open one
    assert r.sync["closed_peak"] == 3
    # The day started in step; the reconciliations are all the service did.
    assert r.sync["set"] == 0 and r.sync["calls"] == 2 * r.sync["reconciliations"] > 0


def test_placement_alone_keeps_the_vm_off_closed_hosts_without_the_filter(scenario, tmp_path):
    r = run(scenario, "traits_only", tmp_path)
    assert not r.reads_board and r.publishes > 0
    assert r.no_valid_host == 0 and r.hosts_in_use_peak == 4


def test_the_table_compares_refusals_and_the_services_calls(scenario, tmp_path):
    results = [run(scenario, name, tmp_path) for name in ("filter", "traits")]
    rows = study.trait_rows(results)
    assert [row[:4] for row in rows] == [["filter", "no", "1", "1"], ["traits", "yes", "0", "0"]]
    assert rows[0][7:] == ["-"] * (len(study.TRAIT_COLUMNS) - 7)
    assert [row[4] for row in rows] == ["0", "1"]      # latency-sensitive VMs placed
    text = "\n".join(study.trait_table(results))
    assert "max_placement_results = 2" in text and "3 VMs pinned" in text
