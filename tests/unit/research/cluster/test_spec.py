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

"""Fleet scenarios: parsing, validation and the per-configuration nova.conf sections."""

import pytest

from resex_libvirt import exceptions
from resex_research.cluster import spec


def _text(extra=""):
    with open(str(spec.scenarios_dir() / "cluster_small.toml")) as f:
        return f.read() + extra


def test_packaged_scenarios_load():
    assert {"cluster_default", "cluster_large", "cluster_small",
            "cluster_traits_10k"} <= set(spec.names())
    for name in spec.names():
        spec.load(name)
    for name in ("cluster_default", "cluster_large", "cluster_small"):
        sc = spec.load(name)
        assert [c.name for c in sc.configurations] == ["a", "b", "c", "d", "e", "f"]
        assert sc.region is None and not any(c.placement_sync for c in sc.configurations)


def test_the_traits_scenario_closes_more_than_placements_first_thousand():
    sc = spec.load("cluster_traits_10k")
    assert sc.hosts == 10000 and sc.duration_s == 86400 and not sc.randomize_candidates
    a, b = sc.configurations
    assert (a.name, a.placement_sync, b.name, b.placement_sync) == ("a", False, "b", True)
    limit = a.nova["scheduler"]["max_placement_results"]
    assert limit == 1000 and b.nova == a.nova
    assert sc.region.hosts >= 2 * limit and sc.region.from_s == 0.0
    sensitive = [f for f in sc.flavors if f.kind == spec.SENSITIVE]
    assert all(f.extra_specs["trait:CUSTOM_RESEX_CLOSED"] == "forbidden" for f in sensitive)
    # The trait is the filter's verdict for the flavor's own threshold.
    assert all(float(f.extra_specs["resex:interference_threshold_pct"])
               == a.nova["resex"]["congestion_threshold"] for f in sensitive)


def test_the_region_and_the_service_are_checked():
    region = '\n[congested_region]\nhosts = 4\nflavor = "bulk.large"\nuntil_s = 600.0\n'
    sc = spec.loads(_text(region))
    assert sc.region.hosts == 4 and sc.flavors[sc.region.flavor].name == "bulk.large"
    assert sc.with_hosts(sc.hosts * 2).region.hosts == 8
    assert sc.placement_sync == spec.trait_sync.SyncModel()
    with pytest.raises(exceptions.ConfigError, match="congested_region.flavor"):
        spec.loads(_text(region.replace("bulk.large", "huge")))
    with pytest.raises(exceptions.ConfigError, match="congested_region.hosts"):
        spec.loads(_text(region.replace("hosts = 4", "hosts = 400")))
    with pytest.raises(exceptions.ConfigError, match="congested_region.until_s"):
        spec.loads(_text(region.replace("until_s = 600.0", "from_s = 700.0\nuntil_s = 600.0")))
    with pytest.raises(exceptions.ConfigError, match="placement_sync.call_ms"):
        spec.loads(_text("\n[placement_sync]\ncall_ms = 5\n"))
    with pytest.raises(exceptions.ConfigError, match="unknown_host_policy"):
        spec.loads(_text('\n[placement_sync]\nunknown_host_policy = "maybe"\n'))


def test_default_scenario_is_a_few_hundred_hosts_for_a_day_and_large_is_5k():
    assert spec.load("cluster_default").hosts >= 200
    assert spec.load("cluster_default").duration_s == 86400
    assert spec.load("cluster_large").hosts >= 5000


def test_a_configuration_section_overrides_the_shared_nova_conf():
    sc = spec.load("cluster_small")
    a, b = sc.configuration("a"), sc.configuration("b")
    shared = a.nova["filter_scheduler"]["weight_classes"]
    assert "nova.scheduler.weights.io_ops.IoOpsWeigher" not in shared
    assert "nova.scheduler.weights.io_ops.IoOpsWeigher" in b.nova["filter_scheduler"][
        "weight_classes"]
    assert a.nova["filter_scheduler"]["host_subset_size"] == 1   # shared, kept


def test_unknown_keys_are_rejected_with_their_path():
    with pytest.raises(exceptions.ConfigError, match="arrivals.mean_per_hr"):
        spec.loads(_text().replace("mean_per_hour", "mean_per_hr"))


def test_a_scenario_without_a_sensitive_flavor_is_refused():
    text = _text().replace('"resex:latency_sla_us" = "209", ', "")
    with pytest.raises(exceptions.ConfigError, match="latency-sensitive"):
        spec.loads(text)


def test_an_unknown_host_policy_is_refused():
    text = _text().replace('host_policy = "io_shares"', 'host_policy = "io_sharez"', 1)
    with pytest.raises(exceptions.ConfigError, match="host_policy"):
        spec.loads(text)


def test_with_hosts_scales_the_demand():
    sc = spec.load("cluster_small")
    big = sc.with_hosts(sc.hosts * 2)
    assert big.mean_per_hour == pytest.approx(2 * sc.mean_per_hour)
    assert big.initial_vms == 2 * sc.initial_vms


def test_a_shorter_run_drops_a_failure_after_its_end():
    sc = spec.load("cluster_small")
    assert sc.with_duration(sc.failure_at_s / 2).failure_at_s is None
