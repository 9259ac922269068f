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

"""Ensembles in the agent: a member over its bound on another host gets this port's sender capped.

Driven against the simulated host (paper_64k_vs_2m: the 64 KB VM is this
host's member of the ensemble, the 2 MB VM floods the port). The board is a
snapshot the test writes: node1's report says how its member of the same
ensemble fares.
"""

import dataclasses
import logging
import unittest

from resex_agent import remote as remote_agent
from resex_libvirt.board import ensembles
from resex_libvirt.sim import scenario as scenario_mod
from resex_libvirt import sla as sla_mod
from tests.unit.agent import test_loop
from tests.unit.agent import test_remote
from tests.unit.board import reports

TS = 1_000_000.0
GROUP = "3f1c2b9e-5d7a-4c11-9b0e-8a2f6c4d1e77"
REMOTE_MEMBER = "aaaaaaaa-0000-4000-8000-0000000000e1"
#: An SLA of its own this host's member meets under any load: only its group can judge it over.
LAX = sla_mod.SLA(latency_sla_us=1e6)


def a_member(mean_us=400.0, sla_us=200.0, vm=REMOTE_MEMBER):
    return ensembles.Member(ensemble=GROUP, vm=vm, sla_us=sla_us, threshold_pct=10.0,
                            statistic="mean", count=40, mean_us=mean_us, std_us=9.0,
                            p99_us=mean_us * 1.5)


class MemberHost(test_loop.CountingHost):
    """The simulated host whose 64 KB VM is a member of :data:`GROUP`."""

    def vms(self):
        return {u: dataclasses.replace(i, ensemble=GROUP) if i.name == "vm64k" else i
                for u, i in super().vms().items()}


class Reader(test_remote.Snapshot):
    """The board: node1's report with its member, and this host's own (with ``own`` members)."""

    def __init__(self, host, members, own=(), ts=TS):
        self.host, self.members, self.own = host, members, own
        self.publish(ts)

    def publish(self, ts):
        """Both hosts' reports of ``ts`` (the same windows: each report's are new)."""
        self.ts = ts
        self.reports = {
            "node1": reports.make("node1", ts=ts, sensitive_vms=len(self.members),
                                  ensembles=[m._asdict() for m in self.members]),
            self.host: reports.make(self.host, ts=ts, sensitive_vms=len(self.own),
                                    ensembles=[m._asdict() for m in self.own])}


class Following(remote_agent.RemoteVictims):
    """The source as the agent runs it: each epoch, both hosts publish again and it reads them.

    The board's clock follows the epochs (a report a second, its reader one
    second behind); without ``follow`` the board stays as first read, and
    the clock at ``now``.
    """

    follow = True

    def set_port_load(self, link_utilisation, holding=False, senders=()):
        super().set_port_load(link_utilisation, holding, senders)
        if self.follow:
            self.reader.publish(self.reader.ts + 1.0)
            self.recompute()


def run(members, own=(), sla=None, now=TS + 1.0, duration=3.0, follow=True):
    """``(agent, sim, source, member)`` after a run with node1's ``members`` on the board."""
    scenario = scenario_mod.load("paper_64k_vs_2m").with_duration(duration)
    scenario = dataclasses.replace(scenario, vms=tuple(
        dataclasses.replace(v, sla=sla if sla is not None else sla_mod.SLA())
        if v.name == "vm64k" else v for v in scenario.vms))
    conf, parts, sim, member = test_remote.sim_parts(scenario, MemberHost)
    own = [m._replace(vm=member) for m in own]
    reader = Reader(conf.agent.host, members, own)
    clock = [TS + 1.0]          # the board is read fresh; the run is at ``now``
    source = Following(conf.agent.host, reader, 10.0,
                       clock=lambda: reader.ts + 1.0 if follow else clock[0])
    source.follow = follow
    source.recompute()
    clock[0] = now
    parts.remote = source
    return test_remote.run_agent(conf, parts), sim, source, member


capped = test_remote.capped


class EnsembleAgentTest(unittest.TestCase):

    def test_a_member_over_its_bound_elsewhere_gets_this_ports_sender_capped(self):
        with self.assertLogs("resex_agent.loop", level=logging.INFO) as logs:
            agent, sim, source, member = run([a_member()])
        self.assertEqual({"vm2m"}, capped(sim))
        self.assertEqual((member,), source.slas_in_force())
        named = [m for m in logs.output
                 if "ensemble %s: member %s on node1" % (GROUP, REMOTE_MEMBER) in m]
        self.assertTrue(named and all("via vm64k" in m for m in named), logs.output)

    def test_a_member_with_an_sla_of_its_own_is_judged_by_its_worse_group(self):
        agent, sim, _source, member = run([], sla=LAX)
        self.assertEqual(set(), capped(sim))       # its own SLA alone: nothing to protect
        # It publishes its own window and SLA under its group.
        (own,) = agent.last_report.ensembles
        self.assertEqual((GROUP, member, 1e6), (own.ensemble, own.vm, own.sla_us))
        agent, sim, source, member = run([a_member()], sla=LAX)
        self.assertEqual({"vm2m"}, capped(sim))
        # Never the window the group's judgement handed the market as its own.
        self.assertIn(member, source.handed())
        for m in agent.last_report.ensembles:
            self.assertEqual((1e6, False), (m.sla_us, m.mean_us == 400.0))

    def test_nothing_moves_while_the_group_is_within_its_bound(self):
        _agent, sim, source, _member = run([a_member(mean_us=210.0)])
        self.assertEqual(set(), capped(sim))
        self.assertEqual((), source.slas_in_force())

    def test_an_expired_member_moves_no_cap(self):
        # Read while fresh, judged 11 s after its report (the expiry is 10 s).
        _agent, sim, source, _member = run([a_member()], now=TS + 11.0, follow=False)
        self.assertEqual(set(), capped(sim))
        self.assertEqual((), source.slas_in_force())
        self.assertEqual(1, source.ignored["expired"])

    def test_the_host_of_the_worst_member_does_not_count_it_twice(self):
        # This host's own member is the worst: its market judges it already, by its own SLA.
        _agent, sim, source, _member = run([a_member(mean_us=300.0)],
                                           own=[a_member(mean_us=900.0)], sla=LAX)
        self.assertEqual(set(), capped(sim))
        self.assertEqual((), source.slas_in_force())

    def test_a_vm_outside_the_group_is_never_judged_by_it(self):
        _agent, sim, source, _member = run(
            [a_member()._replace(ensemble="another-group")])
        self.assertEqual(set(), capped(sim))
        self.assertEqual((), source.slas_in_force())


class Info:
    """The part of a VMInfo the source reads."""

    def __init__(self, sla=None, ensemble=GROUP):
        self.sla = sla if sla is not None else sla_mod.SLA()
        self.ensemble = ensemble


class SourceTest(unittest.TestCase):
    """The source alone: which judgement it hands the market."""

    SERVER = "bbbbbbbb-0000-4000-8000-000000000002"

    def test_a_worst_member_its_host_stops_carrying_judges_until_it_expires(self):
        now = [TS + 1.0]
        reader = Reader("node2", [a_member()])
        src = remote_agent.RemoteVictims("node2", reader, 10.0, clock=lambda: now[0])
        src.sync({self.SERVER: Info()})
        src.set_port_load(0.9)
        src.recompute()
        self.assertEqual(GROUP, src.slas()[self.SERVER]["ensemble"])
        now[0] += 2.0
        reader.reports["node1"] = reports.make("node1", ts=now[0])   # the member went quiet
        src.recompute()
        self.assertIn(self.SERVER, src.slas())
        self.assertEqual(40, src.windows()[self.SERVER].count)
        now[0] += 8.5
        src.recompute()
        self.assertEqual({}, src.slas())
        self.assertEqual(1, src.ignored["expired"])

    def test_a_vm_judged_by_a_claim_and_by_its_group_is_judged_by_the_worse(self):
        claim = test_remote.a_claim(mean_us=400.0)           # +100 %
        for mean, worse in ((900.0, GROUP), (300.0, None)):   # +350 % / +50 %
            reader = test_remote.Reader("node2", self.SERVER, [claim])
            reader.reports["node1"] = dataclasses.replace(
                reader.reports["node1"], sensitive_vms=2,
                ensembles=(a_member(mean_us=mean),))
            src = remote_agent.RemoteVictims("node2", reader, 10.0, clock=lambda: TS + 1.0)
            src.sync({self.SERVER: Info()})
            src.recompute()
            self.assertEqual(worse, src.slas()[self.SERVER].get("ensemble"), mean)

    def test_a_member_with_an_sla_of_its_own_is_judged_by_its_group_not_by_a_claim(self):
        reader = test_remote.Reader("node2", self.SERVER, [test_remote.a_claim()])
        reader.reports["node1"] = dataclasses.replace(
            reader.reports["node1"], sensitive_vms=2, ensembles=(a_member(mean_us=210.0),))
        src = remote_agent.RemoteVictims("node2", reader, 10.0, clock=lambda: TS + 1.0)
        src.sync({self.SERVER: Info(sla=LAX)})
        src.recompute()
        self.assertEqual({}, src.slas())      # the claim: its own SLA stands; the group: within

    def test_a_member_with_an_sla_of_its_own_keeps_it_where_the_port_contradicts_its_group(self):
        # Given the group's SLA without the group's window, its own window would be
        # judged by another member's SLA: its own SLA stands.
        src = remote_agent.RemoteVictims("node2", Reader("node2", [a_member()]), 10.0,
                                         clock=lambda: TS + 1.0)
        src.sync({self.SERVER: Info(sla=LAX)})
        src.recompute()
        self.assertEqual({}, src.slas())            # no epoch measured the port yet
        src.set_port_load(0.0)
        self.assertEqual({}, src.slas())
        self.assertEqual({}, src.windows())
        src.slas()
        self.assertEqual(1, src.ignored["contradicted"])     # once per report
        src.set_port_load(0.0, holding=True)        # a sender held: the idle port is the cap's
        self.assertIn(self.SERVER, src.slas())
        self.assertEqual(400.0, src.windows()[self.SERVER].mean_us)
        # A member without an SLA of its own is judged as a claim's peer is: the SLA in
        # force, the window withheld while contradicted.
        src.sync({self.SERVER: Info()})
        src.set_port_load(0.0)
        self.assertIn(self.SERVER, src.slas())
        self.assertEqual({}, src.windows())
