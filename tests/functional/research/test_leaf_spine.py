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

"""The leaf-spine fleet study end to end on a cut-down ``cluster_leaf_spine``:
nova 34's own HostManager placing ensembles and bulk VMs over racks, every
configuration on the same requests, the table and its goals (structure, not
figures)."""

import contextlib
import io
import json
import math

import pytest

from resex_libvirt import exceptions
from resex_research.cluster import leaf_spine
from resex_research.cluster import spec
from resex_research.cluster import spine_fleet
from resex_research import resex_sim


@pytest.fixture(scope="module")
def scenario():
    return spec.load("cluster_leaf_spine").with_hosts(16).with_duration(2 * 3600.0)


@pytest.fixture(scope="module")
def studied(scenario):
    return leaf_spine.run(scenario)


def test_the_packaged_scenario_is_a_leaf_spine_study():
    sc = spec.load("cluster_leaf_spine")
    assert isinstance(sc, leaf_spine.LeafSpineScenario)
    assert sc.topology.racks * sc.topology.hosts_per_rack == sc.hosts == 64
    assert sc.topology.uplink_bytes_per_s < sc.topology.hosts_per_rack * \
        sc.topology.port_bytes_per_s
    assert [(c.name, c.market, c.placement) for c in sc.configurations] == [
        ("a", "none", "nova"), ("h", "host", "resex_host"), ("b", "claims", "resex_links"),
        ("w", "fabric", "resex_fabric"), ("m", "fabric", "resex_host"),
        ("p", "fabric", "resex_fabric_members")]
    assert sc.with_hosts(20).topology.racks == 3          # whole racks


def test_every_configuration_runs_on_the_same_requests(studied):
    results = studied["results"]
    assert [r.configuration for r in results] == ["a", "h", "b", "w", "m", "p"]
    assert studied["requests"] > 0 and studied["hosts"] == 16
    for r in results:
        assert r.sensitive_placed > 0 and r.ensembles_placed > 0 and r.bulk_tb > 0
        assert r.violation_s_total >= 0 and 0.0 <= r.cross_rack_share <= 1.0
        assert math.isclose(sum(r.violation_s_at.values()), r.violation_s_total,
                            rel_tol=1e-6, abs_tol=1e-6)
    ensembles = {r.ensembles_placed + r.ensembles_refused for r in results}
    assert len(ensembles) == 1


def test_each_market_cuts_only_its_own_links(studied):
    by = {r.configuration: r for r in studied["results"]}
    a, h = by["a"], by["h"]
    assert a.cut_link_s == {} and a.capped_vm_s == 0 and a.claims_mean == 0
    assert a.claim_bytes_per_host == 0
    assert set(h.cut_link_s) <= {"port"} and h.claims_acted_mean == 0
    assert set(by["b"].cut_link_s) <= {"port"}          # no agent cuts an uplink yet
    hosts = studied["hosts"]
    for name in ("h", "b"):        # claims only: no shared-link entries
        r = by[name]
        assert r.claim_bytes_per_host == pytest.approx(
            r.claims_mean * spine_fleet.CLAIM_BYTES / hosts)
    w = by["w"]
    assert w.claim_bytes_per_host > w.claims_mean * spine_fleet.CLAIM_BYTES / hosts
    for name in ("w", "m", "p"):
        assert set(by[name].cut_link_s) <= {"port", "uplink"}
    assert by["m"].claims_mean > 0 and by["m"].claim_bytes_per_host > h.claim_bytes_per_host


def test_the_same_seed_prints_the_same_table(scenario, studied):
    again = leaf_spine.run(scenario, configurations=["h", "w"])
    rows = {row[0]: row[:-1] for row in leaf_spine.rows(studied["results"])}
    assert [row[:-1] for row in leaf_spine.rows(again["results"])] == [rows["h"], rows["w"]]


def test_the_table_prints_the_goals(studied):
    text = leaf_spine.format_table(studied)
    assert "viol-s total" in text and "ensemble viol-s" in text
    assert "Goals (printed, not asserted):" in text
    assert "fabric-wide vs host-only ResEx: <= 10% of host-only's" in text
    assert "bulk throughput, fabric-wide vs host-only ResEx: >= 90%" in text
    assert leaf_spine.goals([r for r in studied["results"] if r.configuration != "w"]) == []


def test_the_cli_prints_json_and_writes_cluster_json(tmp_path):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        rc = resex_sim.main(["cluster", "cluster_leaf_spine", "--hosts", "16", "--duration",
                             "1800", "--config", "h", "--config", "w", "--json",
                             "--out", str(tmp_path)])
    assert rc == 0
    data = json.loads(out.getvalue())
    assert [r["configuration"] for r in data["results"]] == ["h", "w"]
    assert len(data["goals"]) == 2 and data["racks"] == 2
    assert json.loads((tmp_path / "cluster.json").read_text())["results"]


@pytest.mark.parametrize("extra,needle", [
    ("[traffic]\nleave_rack = 0.5\nbogus = 1\n", "traffic.bogus: unknown key"),
    ("[market]\nevidence = 0.5\ntarget = 0.6\n", "market.target: must not exceed evidence"),
    ("[[configurations]]\nname = \"z\"\nmarket = \"global\"\n",
     "must be one of none, host, claims, fabric"),
    ("[[configurations]]\nname = \"z\"\nplacement = \"cortex\"\n", "must be one of nova"),
])
def test_scenario_errors_name_the_key(extra, needle):
    with open(str(spec.scenarios_dir() / "cluster_leaf_spine.toml")) as f:
        text = f.read()
    for table in ("[traffic]", "[market]"):
        if extra.startswith(table):
            start = text.index(table)
            end = text.index("\n[", start + 1)
            text = text[:start] + text[end + 1:]
    with pytest.raises(exceptions.ConfigError) as ctx:
        spec.loads(text + "\n" + extra)
    assert needle in str(ctx.value)
