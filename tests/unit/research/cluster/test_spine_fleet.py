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

"""The leaf-spine study's rules: who cuts which link, when, and where nova places members."""

import contextlib
import dataclasses

import pytest

from resex_research.cluster import fabric_links as fl
from resex_research.cluster import leaf_spine
from resex_research.cluster import scheduler as scheduler_mod
from resex_research.cluster import spec
from resex_research.cluster import spine_fleet as sf


def _scenario(racks=2, per=3, oversubscription=3.0, **kw):
    sc = spec.load("cluster_leaf_spine")
    topo = fl.Topology(racks, per, sc.topology.port_bytes_per_s, oversubscription)
    return dataclasses.replace(sc, topology=topo, **kw)


@contextlib.contextmanager
def _run(sc, market, placement):
    config = leaf_spine.Configuration("t", "test", market, placement)
    names = ["compute-%05d" % i for i in range(sc.topology.hosts)]
    with scheduler_mod.nova_config(sf.nova_sections(placement)):
        sched = scheduler_mod.Scheduler(names, sc.host_vcpus, sc.host_ram_mb, 10000)
        run = sf._Run(sc, config, [], sched, 0.0)
        sf.STORE = run
        try:
            yield run
        finally:
            sf.STORE = None


def _flavor(sc, kind):
    return next(f for f in sc.flavors if f.kind == kind)


def _bulk(run, host):
    vm = run.new_vm(sf.BULK, _flavor(run.sc, spec.BULK))
    run.land(vm, host)
    return vm


def _ensemble(run, server_host, client_host=None):
    ens = sf._Ensemble()
    ens.server = run.new_vm(sf.SERVER, run.sc.server_flavor, ens)
    run.land(ens.server, server_host)
    if client_host is not None:
        client = run.new_vm(sf.CLIENT, _flavor(run.sc, spec.SENSITIVE), ens)
        ens.clients.append(client)
        run.land(client, client_host)
        run.ensembles[id(ens)] = ens
        run.index_victims()
    return ens


@pytest.mark.parametrize("market,cut_at", [("fabric", 3.0), ("claims", 3.0), ("host", None),
                                           ("none", None)])
def test_a_claim_cuts_the_servers_port_after_the_claim_delay_under_the_fabric_market(
        market, cut_at):
    sc = _scenario()
    with _run(sc, market, "nova") as run:
        _bulk(run, 0)
        _ensemble(run, server_host=0, client_host=4)      # the client in the other rack
        run.recompute(0.0)
        port = (fl.PORT, 0)
        assert run.final[port] == pytest.approx(1.0)     # the bulk VM fills the server's port
        assert run.client_f[next(iter(run.clients))] == pytest.approx(1.0)
        assert port not in run.cut[0]
        acts = [(t, data) for t, _, kind, data in run.heap if kind == sf.ACT]
        if cut_at is None:
            assert acts == []
        else:
            assert acts == [(cut_at, 0)]
        run.handle(sf.ACT, sc.claim_delay_s, 0)
        run.recompute(sc.claim_delay_s)
        if cut_at is None:
            assert port not in run.cut[0] and run.final[port] == pytest.approx(1.0)
        else:
            assert port in run.cut[0]
            assert run.final[port] == pytest.approx(sc.target)
            assert run.client_f[next(iter(run.clients))] == 0.0


def test_the_victims_own_port_is_cut_within_the_hosts_delay_by_both_markets():
    sc = _scenario()
    for market in ("host", "fabric"):
        with _run(sc, market, "nova") as run:
            _bulk(run, 1)
            _ensemble(run, server_host=2, client_host=1)
            run.recompute(0.0)
            assert (fl.PORT, 1) not in run.cut[0]
            run.handle(sf.ACT, sc.host_delay_s, 0)
            run.recompute(sc.host_delay_s)
            assert (fl.PORT, 1) in run.cut[0]
            assert run.final[(fl.PORT, 1)] == pytest.approx(sc.target)


def test_no_cut_without_evidence_on_the_link():
    # The server's port carries a bulk VM offering half of it: below the evidence.
    sc = _scenario(bulk_demand=0.5, leave_rack=0.0)
    with _run(sc, "fabric", "nova") as run:
        _bulk(run, 0)
        _ensemble(run, server_host=0, client_host=4)
        run.recompute(0.0)
        assert not [e for e in run.heap if e[2] == sf.ACT]
        run.handle(sf.ACT, 100.0, 0)
        run.recompute(100.0)
        assert not any(run.cut.values()) and not any(run.capped.values())


def _congested_uplink(run):
    """Two bulk VMs in rack 0 send 1.2 uplinks' worth out of it; their ports are half full."""
    _bulk(run, 0)
    _bulk(run, 1)
    run.recompute(0.0)
    assert run.offered[(fl.UPLINK, 0)] == pytest.approx(1.0)
    assert run.offered[(fl.PORT, 0)] == pytest.approx(0.5)


@pytest.mark.parametrize("placement,rack", [("resex_fabric_members", 0), ("resex_fabric", 0),
                                            ("resex_host", 1)])
def test_a_client_stays_behind_its_servers_congested_uplink_only_under_the_fabric_rule(
        placement, rack):
    sc = _scenario(bulk_demand=0.6, leave_rack=1.0)
    with _run(sc, "none", placement) as run:
        _congested_uplink(run)
        ens = _ensemble(run, server_host=2)
        client = run.new_vm(sf.CLIENT, _flavor(sc, spec.SENSITIVE), ens)
        ens.clients.append(client)
        host = run.select(client)
        assert host != 2 and sc.topology.rack_of(host) == rack


@pytest.mark.parametrize("placement,racks", [("resex_fabric_members", {1}),
                                             ("nova", {0, 1})])
def test_a_server_avoids_a_rack_whose_uplink_is_congested_under_the_fabric_rule(
        placement, racks):
    sc = _scenario(bulk_demand=0.6, leave_rack=1.0)
    with _run(sc, "none", placement) as run:
        _congested_uplink(run)
        ens = sf._Ensemble()
        ens.server = run.new_vm(sf.SERVER, sc.server_flavor, ens)
        assert sc.topology.rack_of(run.select(ens.server)) in racks
        if placement != "nova":
            for h in sc.topology.hosts_of(0):
                assert run.resex_weight(ens.server, h) is None


def test_the_fabric_rule_weighs_bulk_away_from_a_loaded_uplink():
    sc = _scenario(bulk_demand=0.6, leave_rack=1.0)
    with _run(sc, "none", "resex_fabric") as run:
        _bulk(run, 0)
        run.recompute(0.0)
        assert run.bulk_weight(1) < run.bulk_weight(4)
    with _run(sc, "none", "resex_fabric_members") as run:
        _bulk(run, 0)
        run.recompute(0.0)
        assert run.bulk_weight(1) == run.bulk_weight(4)


def test_only_the_fabric_market_cuts_a_shared_uplink():
    # Every host of rack 0 sends all of its bulk traffic out: the uplink binds.
    sc = _scenario(bulk_demand=0.6, leave_rack=1.0)
    for market, cut in (("fabric", True), ("claims", False), ("host", False)):
        with _run(sc, market, "nova") as run:
            _congested_uplink(run)
            _ensemble(run, server_host=4, client_host=2)     # the path crosses both uplinks
            run.recompute(0.0)
            run.handle(sf.ACT, sc.claim_delay_s, 0)
            run.recompute(sc.claim_delay_s)
            up = (fl.UPLINK, 0)
            assert (up in run.cut[0]) is cut
            assert run.final[up] == pytest.approx(sc.target if cut else 1.0)


def test_the_built_link_rule_judges_a_client_by_its_racks_declared_uplink():
    # The scheduler sums its hosts' port loads over the uplink: 0.5 + 0.5 over 1.
    sc = _scenario(bulk_demand=0.6, leave_rack=1.0)
    with _run(sc, "claims", "resex_links") as run:
        _congested_uplink(run)
        assert run.declared_load(0) == pytest.approx(1.0)
        assert run.declared_load(1) == 0.0
        ens = _ensemble(run, server_host=2)
        client = run.new_vm(sf.CLIENT, _flavor(sc, spec.SENSITIVE), ens)
        ens.clients.append(client)
        assert run.resex_weight(client, 1) is None and run.resex_weight(client, 4) == 1.0
        assert run.resex_weight(ens.server, 1) == 0.0      # a plain VM: not judged


def test_a_server_judged_by_claims_keeps_bulk_away_under_the_claims_markets():
    sc = _scenario()
    for market, counted in (("host", False), ("claims", True), ("fabric", True)):
        with _run(sc, market, "resex_host") as run:
            _ensemble(run, server_host=0, client_host=4)
            assert (run.bulk_weight(0) < run.bulk_weight(1)) is counted


def test_the_study_names_the_flavor_kinds_as_the_cluster_spec_does():
    assert (spec.SENSITIVE, spec.BULK) == (sf.FLAVOR_SENSITIVE, sf.FLAVOR_BULK)
