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

"""Acting on remote claims: the agent's market judges a local peer by a remote victim's SLA.

Driven against the simulated host (paper_64k_vs_2m with the 64 KB VM's
SLA removed: it plays the server of a victim on another host, the 2 MB VM
floods the port). The board is a snapshot the test writes: the reader's
thread is replaced by calling ``on_change`` (what it does on each change).
"""

import dataclasses
import logging
import unittest

import hypothesis
from hypothesis import strategies as st

from resex_agent import builder
from resex_agent import remote as remote_agent
from resex_libvirt.board import remote_claims
from resex_libvirt.market import records
from resex_libvirt.sim import scenario as scenario_mod
from resex_libvirt import sla as sla_mod
from tests.unit.agent import test_loop
from tests.unit.board import reports

TS = 1_000_000.0
PEER = "10.0.2.7"
VICTIM = "aaaaaaaa-0000-4000-8000-000000000001"


def server_scenario(duration=3.0):
    """The paper's 64 KB / 2 MB pair, the 64 KB VM with no SLA of its own (the server)."""
    scenario = scenario_mod.load("paper_64k_vs_2m").with_duration(duration)
    vms = tuple(dataclasses.replace(v, sla=sla_mod.SLA()) if v.name == "vm64k" else v
                for v in scenario.vms)
    return dataclasses.replace(scenario, vms=vms)


def a_claim(mean_us=400.0, sla_us=200.0, threshold_pct=10.0, statistic="mean", count=40):
    return remote_claims.Claim(vm=VICTIM, peer=PEER + ":7788", sla_us=sla_us,
                               threshold_pct=threshold_pct, statistic=statistic, count=count,
                               mean_us=mean_us, std_us=9.0, p99_us=mean_us * 1.5)


class Snapshot:
    """A board the test writes (``reports``), handed whole; starts and stops counted."""

    started = stopped = 0
    reports = {}

    def start(self):
        self.started += 1

    def stop(self):
        self.stopped += 1

    def snapshot(self, now=None):
        return dict(self.reports)


class Reader(Snapshot):
    """The board as the test writes it: this host's addresses and the claimant's report."""

    def __init__(self, host, server, claims, ts=TS):
        self.reports = {
            host: reports.make(host, ts=ts, addresses={server: [PEER]}),
            "node1": reports.make("node1", ts=ts, sensitive_vms=len(claims),
                                  remote_claims=claims)}


class PinnedPort(remote_agent.RemoteVictims):
    """The evidence rule fed a port slowdown the test chooses, whatever the host measured."""

    pinned = None

    def set_port_load(self, link_utilisation, holding=False, senders=()):
        super().set_port_load(link_utilisation, holding, senders)
        if self.pinned is not None:
            self.port_inflation_pct = self.pinned


def sim_parts(scenario, host_class=test_loop.CountingHost):
    """``(conf, parts, sim, vm64k)``: the simulated host of ``scenario`` under the paper's market.

    The agent's parts but its remote source, which the caller adds
    (``parts.remote``) before :func:`run_agent`.
    """
    sim = host_class(scenario)
    vm64k = next(u for u in sim.vms() if sim.name_of(u) == "vm64k")
    # The paper's market: its 2 MB sender never opted in, and is capped.
    conf = test_loop.make_conf(market={"policy": "io_shares"},
                               agent={"cap_consent": test_loop.PAPER_MARKET})
    parts = builder.Parts()
    parts.hypervisor = parts.fabric = sim
    parts.latency_sources = [sim]
    parts.clock = sim.clock()
    parts.interval_s, parts.epoch_s = scenario.interval_s, scenario.epoch_s
    return conf, parts, sim, vm64k


def run_agent(conf, parts):
    """The agent of ``parts``, after its run."""
    agent = builder.build_agent(conf, parts)
    agent.run()
    return agent


def run(claims, now=TS + 1.0, pinned=None, duration=3.0):
    """``(agent, sim, remote, server)`` after a run with ``claims`` on the board."""
    conf, parts, sim, server = sim_parts(server_scenario(duration))
    source = PinnedPort(conf.agent.host, Reader(conf.agent.host, server, claims), 10.0,
                        clock=lambda: now)
    source.pinned = pinned
    source.recompute()
    parts.remote = source
    return run_agent(conf, parts), sim, source, server


def capped(sim):
    return {name for name, cap, _w in sim.writes if cap is not None}


class RemoteVictimTest(unittest.TestCase):

    def test_without_a_claim_no_vm_is_capped(self):
        _agent, sim, _source, _server = run([])
        self.assertEqual(set(), capped(sim))

    def test_a_remote_victim_over_its_sla_gets_this_ports_sender_capped(self):
        with self.assertLogs("resex_agent.loop", level=logging.INFO) as logs:
            agent, sim, source, server = run([a_claim()])
        self.assertEqual({"vm2m"}, capped(sim))
        rows = {r["vm"]: r for r in agent.table()}
        self.assertLess(rows["vm2m"]["cap_mean_pct"], 100.0)
        self.assertEqual(100.0, rows["vm64k"]["cap_min_pct"])
        # The operator's line names the remote victim, its host and the local peer.
        named = [m for m in logs.output if "remote victim %s on node1" % VICTIM in m]
        self.assertTrue(named and all("via vm64k" in m for m in named), logs.output)
        self.assertEqual((server,), source.slas_in_force())
        self.assertEqual(1, agent.health().remote_victims)

    def test_a_claim_under_its_threshold_moves_no_cap(self):
        _agent, sim, _source, _server = run([a_claim(mean_us=205.0)])
        self.assertEqual(set(), capped(sim))

    def test_an_expired_claim_moves_no_cap(self):
        _agent, sim, source, _server = run([a_claim()], now=TS + 11.0)
        self.assertEqual(set(), capped(sim))
        self.assertEqual((), source.slas_in_force())

    def test_the_tenant_of_the_peer_is_never_told_the_remote_window(self):
        agent, _sim, _source, server = run([a_claim()], duration=2.0)
        line = agent.statuses([server])[server]
        self.assertNotIn(b"mean_us", line)
        self.assertNotIn(VICTIM.encode(), line)
        self.assertNotIn(b"node1", line)

    @hypothesis.settings(max_examples=12, deadline=None)
    @hypothesis.given(threshold=st.floats(5.0, 200.0), over=st.floats(1.01, 20.0),
                      port=st.floats(0.0, 0.999), statistic=st.sampled_from(["mean", "p99"]))
    def test_a_claim_this_ports_counters_contradict_moves_no_cap(self, threshold, over, port,
                                                                 statistic):
        # The claim is over its threshold; the port could slow a request by
        # less than that: the congestion is not here, no cap moves.
        sla_us = 200.0
        value = sla_us * (1.0 + over * threshold / 100.0)
        mean = value / 1.5 if statistic == "p99" else value
        claim = a_claim(mean_us=mean, sla_us=sla_us, threshold_pct=threshold,
                        statistic=statistic)
        self.assertGreater(remote_claims.claimed_pct(claim), threshold)
        _agent, sim, source, _server = run([claim], pinned=threshold * port, duration=1.5)
        self.assertEqual(set(), capped(sim))
        self.assertGreaterEqual(source.ignored["contradicted"], 1)


#: The part of a VMInfo the source reads.
Info = dataclasses.make_dataclass("Info", ["sla", ("ensemble", object, None)])


class SourceTest(unittest.TestCase):
    """The source alone: what it hands the market, interval by interval."""

    def source(self, claims, now=TS + 1.0, own_sla=False):
        server = "bbbbbbbb-0000-4000-8000-000000000002"
        src = remote_agent.RemoteVictims("node2", Reader("node2", server, claims), 10.0,
                                         clock=lambda: now)
        src.recompute()
        info = Info(sla_mod.SLA(latency_sla_us=100.0) if own_sla else sla_mod.SLA())
        src.sync({server: info})
        src.set_port_load(0.9)
        return src, server

    def test_a_window_is_new_evidence_once(self):
        src, server = self.source([a_claim(count=40)])
        self.assertEqual({server: {"latency_sla_us": 200.0, "interference_threshold_pct": 10.0,
                                   "latency_statistic": "mean"}}, src.slas())
        first = src.windows()[server]
        self.assertEqual((40, 400.0, 40), (first.count, first.mean_us, first.new))
        src.slas()
        self.assertEqual(0, src.windows()[server].new)

    def test_a_window_counts_as_new_what_its_claimant_counted_since_its_last_report(self):
        src, server = self.source([a_claim(count=40)._replace(new=10)])
        src.slas()
        self.assertEqual(10, src.windows()[server].new)

    def test_a_vm_with_an_sla_of_its_own_is_never_judged_by_a_claim(self):
        src, _server = self.source([a_claim()], own_sla=True)
        self.assertEqual({}, src.slas())
        self.assertEqual({}, src.windows())

    def test_the_worst_of_several_claims_on_one_vm_judges_it(self):
        worse = a_claim(mean_us=900.0)._replace(vm="aaaaaaaa-0000-4000-8000-000000000009")
        src, server = self.source([a_claim(), worse])
        src.slas()
        self.assertEqual(900.0, src.windows()[server].mean_us)
        self.assertIn("+350%", src.describe(server))

    def test_an_idle_port_contradicts_a_claim_unless_a_sender_is_held_already(self):
        src, server = self.source([a_claim()])
        src.set_port_load(0.0)
        src.slas()
        self.assertEqual({}, src.windows())
        self.assertEqual(1, src.ignored["contradicted"])
        # The market holds a sender: the idle port is the cap's doing.
        src.set_port_load(0.0, holding=True)
        src.slas()
        self.assertEqual({server}, set(src.windows()))

    def test_a_claim_its_host_stops_carrying_stays_until_it_expires(self):
        now = [TS + 1.0]
        server = "bbbbbbbb-0000-4000-8000-000000000002"
        reader = Reader("node2", server, [a_claim()])
        src = remote_agent.RemoteVictims("node2", reader, 10.0, clock=lambda: now[0])
        src.sync({server: Info(sla_mod.SLA())})
        src.set_port_load(0.9)
        src.recompute()
        src.slas()
        self.assertEqual(40, src.windows()[server].new)
        # node1's next report (2 s on) carries no claim: the victim's window went quiet.
        now[0] += 2.0
        reader.reports["node1"] = reports.make("node1", ts=now[0])
        src.recompute()
        self.assertIn(server, src.slas())
        self.assertEqual(0, src.windows()[server].new)      # held, nothing new
        now[0] += 8.5                                       # 10.5 s after the last claim
        src.recompute()
        self.assertEqual({}, src.slas())
        self.assertEqual(1, src.ignored["expired"])

    def test_an_expiry_of_zero_is_refused(self):
        with self.assertRaises(ValueError):
            remote_agent.RemoteVictims("node2", Reader("node2", "x", []), 0.0)

    def test_windows_are_latency_windows(self):
        src, server = self.source([a_claim()])
        src.slas()
        self.assertIsInstance(src.windows()[server], records.LatencyWindow)


class BuildTest(unittest.TestCase):

    def test_enabled_without_a_board_is_a_configuration_error(self):
        conf = test_loop.make_conf(remote_claims={"enabled": True}, board={"url": ""},
                                   agent={"host_driver": "simulated", "host": "sim-remote"})
        with self.assertRaisesRegex(Exception, r"\[board\] url"):
            builder.build_parts(conf)
