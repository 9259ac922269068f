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

"""The shared control step: the deadband rule, sparse actuation with retries, capabilities."""

import dataclasses
import os
import tempfile
import unittest

from resex_agent import journal as journal_mod
from resex_libvirt import control
from resex_libvirt import exceptions
from resex_libvirt.fabric import base as fabric_base
from resex_libvirt.hypervisor import base as hyp_base
from resex_libvirt.hypervisor import originals as originals_mod
from resex_libvirt import market as market_mod
from resex_libvirt.market import policy as policy_mod
from resex_libvirt.market import records
from resex_libvirt.sim import host as host_mod
from resex_libvirt.sim import scenario as scenario_mod
from resex_libvirt import sla as sla_mod


class MovedTest(unittest.TestCase):

    def test_a_small_change_is_held_back_by_the_deadband(self):
        self.assertFalse(control.moved((50.0, 256), (50.5, 256), 1.0))
        self.assertTrue(control.moved((50.0, 256), (49.0, 256), 1.0))

    def test_without_a_deadband_any_change_but_no_change_is_written(self):
        self.assertTrue(control.moved((50.0, 256), (50.01, 256), 0.0))
        self.assertFalse(control.moved((50.0, 256), (50.0, 256), 0.0))

    def test_to_or_from_uncapped_and_weight_changes_always_count(self):
        self.assertTrue(control.moved((99.5, 256), (None, 256), 5.0))
        self.assertTrue(control.moved((None, 256), (99.5, 256), 5.0))
        self.assertTrue(control.moved((None, 256), (None, 512), 5.0))
        self.assertFalse(control.moved((None, 256), (None, 256), 5.0))


class _FlakyHost(host_mod.SimHost):
    """The simulated host, whose knob writes can be made to fail (and are counted)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.writes = []
        self.fail = 0

    def set_knobs(self, uuid, cap_pct, weight):
        self.writes.append((uuid, cap_pct, weight))
        if self.fail:
            self.fail -= 1
            raise exceptions.HypervisorError("injected failure")
        super().set_knobs(uuid, cap_pct, weight)


def _controller(policy="free_market"):
    sc = scenario_mod.load("paper_64k_vs_2m").with_duration(1.0)
    host = _FlakyHost(sc)
    link = host.link()
    params = market_mod.MarketParams(interval_s=sc.interval_s,
                                     intervals_per_epoch=sc.intervals_per_epoch,
                                     pcpus=host.pcpus(),
                                     link_bytes_per_s=link.capacity_bytes_per_s, mtu=link.mtu)
    ctl = control.Controller(market_mod.Market(params, policy_mod.load(policy)), host, host,
                             [host])
    ctl.prime(host.now())
    return ctl, host, sc


def _steps(ctl, host, sc, first, last):
    for i in range(first, last):
        host.advance_to(i * sc.interval_s)
        ctl.step(host.now())


class SparseActuationTest(unittest.TestCase):

    def test_only_the_vms_whose_decision_changed_are_visited(self):
        ctl, host, sc = _controller()
        _steps(ctl, host, sc, 1, 3)
        self.assertEqual(2, len(host.writes))   # each VM once, at adoption
        rec = next(iter(ctl.vms.values()))
        rec.applied = None                     # would be written if visited
        ctl.actuate(ctl.market.step({}, {}), changed=())
        self.assertEqual(2, len(host.writes))
        ctl.actuate(ctl.market.step({}, {}))   # no ``changed``: every VM is visited
        self.assertEqual(3, len(host.writes))

    def test_a_failed_write_is_retried_next_interval_without_a_new_decision(self):
        ctl, host, sc = _controller(policy="none")
        host.fail = 1
        _steps(ctl, host, sc, 1, 2)
        failed = host.writes[0][0]
        self.assertIsNone(ctl.vms[failed].applied)
        _steps(ctl, host, sc, 2, 4)
        self.assertEqual(((None, 256)), ctl.vms[failed].applied)
        self.assertEqual(3, len(host.writes))   # the failed one, then both

    def test_the_decisions_dict_is_not_copied_while_nothing_changes(self):
        ctl, host, sc = _controller(policy="none")
        _steps(ctl, host, sc, 1, 3)
        first = ctl.last.decisions
        _steps(ctl, host, sc, 3, 10)
        self.assertIs(first, ctl.last.decisions)
        self.assertEqual((), ctl.market.changed)


class _ReportingHost(host_mod.SimHost):
    """The simulated host, reporting original-knob changes as libvirt's adapter does.

    ``LibvirtHypervisor.original_updates()`` needs QEMU's scheduler (the lab
    runs it); here the same records are queued by the test.
    """

    capabilities = host_mod.SimHost.capabilities | {hyp_base.Capability.REPORTS_ORIGINALS}

    def __init__(self, scenario):
        super().__init__(scenario)
        self.updates = []
        self.writes = []

    def original_updates(self):
        updates, self.updates = self.updates, []
        return updates

    def set_knobs(self, uuid, cap_pct, weight):
        self.writes.append(uuid)
        return super().set_knobs(uuid, cap_pct, weight)


class JournalFollowsTheHypervisorTest(unittest.TestCase):

    def setUp(self):
        super().setUp()
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.host = _ReportingHost(scenario_mod.load("paper_64k_vs_2m").with_duration(5.0))
        self.journal = journal_mod.Journal(os.path.join(tmp.name, "journal.json"))
        market = market_mod.Market(market_mod.MarketParams(
            interval_s=self.host.scenario.interval_s, intervals_per_epoch=10, pcpus=1,
            link_bytes_per_s=1e9, mtu=1024), policy_mod.load("free_market"))
        self.ctl = control.Controller(market, self.host, journal=self.journal)
        self.ctl.prime(self.host.clock().now())
        self.uuid = sorted(self.host.vms())[0]
        self.journal.remember(self.uuid, {"cap": 0, "weight": 256})
        self.ctl.vms[self.uuid].journaled = True

    def test_a_stopped_or_undefined_vm_is_forgotten(self):
        self.host.updates.append(originals_mod.OriginalsUpdate(self.uuid, None, "stopped"))
        self.ctl.discover()
        self.assertNotIn(self.uuid, self.journal)
        self.assertFalse(self.ctl.vms[self.uuid].journaled)

    def test_a_redefined_vm_gets_its_new_originals(self):
        self.host.updates.append(originals_mod.OriginalsUpdate(
            self.uuid, {"cap": 0, "weight": 512}, "redefined"))
        self.ctl.discover()
        self.assertEqual({"cap": 0, "weight": 512}, self.journal.originals()[self.uuid])

    def test_a_vm_not_yet_journaled_is_not_recorded_by_an_update(self):
        other = sorted(self.host.vms())[1]
        self.host.updates.append(originals_mod.OriginalsUpdate(
            other, {"cap": 0, "weight": 512}, "redefined"))
        self.ctl.discover()
        self.assertNotIn(other, self.journal)

    def test_an_operators_change_is_journaled_and_not_written_back(self):
        rec = self.ctl.vms[self.uuid]
        rec.applied = (50.0, 256)
        self.host.updates.append(originals_mod.OriginalsUpdate(
            self.uuid, {"cap": 0, "weight": 700}, "operator", operator={"weight": 700},
            dom_id=3))
        self.ctl.discover()
        self.assertEqual({"cap": 0, "weight": 700}, self.journal.originals()[self.uuid])
        self.assertEqual({self.uuid: {"dom_id": 3, "values": {"weight": 700}}},
                         self.journal.operator_values())
        self.ctl.actuate({self.uuid: records.Decision(cap_pct=50.0, weight=256)}, changed=())
        self.assertEqual([], self.host.writes)
        self.host.updates.append(originals_mod.OriginalsUpdate(
            self.uuid, {"cap": 0, "weight": 256}, "restarted", reassert=True, operator={},
            dom_id=4))
        self.ctl.discover()
        self.assertEqual({}, self.journal.operator_values())

    def test_a_restarted_vm_has_its_knobs_written_again_though_the_decision_did_not_change(self):
        rec = self.ctl.vms[self.uuid]
        rec.applied = (50.0, 256)
        decision = records.Decision(cap_pct=50.0, weight=256)
        self.ctl.actuate({self.uuid: decision}, changed=())
        self.assertEqual([], self.host.writes)
        self.host.updates.append(originals_mod.OriginalsUpdate(
            self.uuid, {"cap": 0, "weight": 256}, "restarted", reassert=True))
        self.ctl.discover()
        self.ctl.actuate({self.uuid: decision}, changed=())
        self.assertEqual([self.uuid], self.host.writes)

    def test_a_vm_that_arrives_with_a_foreign_cap_is_written_at_its_first_interval(self):
        # The hypervisor adopts a VM and reports, in the same sweep, that its
        # live cap is not Nova's (a live migration): the controller has no
        # record of it yet when it hears so, and writes it all the same.
        other = sorted(self.host.vms())[1]
        del self.ctl.vms[other]
        self.ctl.market.remove(other)
        self.host.testbed.changes += 1        # the sweep that finds it
        self.host.updates.append(originals_mod.OriginalsUpdate(
            other, {"cap": 0, "weight": 256}, "arrived", reassert=True))
        self.ctl.discover()
        self.assertIn(other, self.ctl.vms)
        self.ctl.actuate({other: records.Decision(cap_pct=100.0, weight=256)}, changed=())
        self.assertEqual([other], self.host.writes)


class _LateHost(_ReportingHost):
    """Its CPU sweep is late once ``late`` is set (libvirtd busy, a guest destroyed)."""

    late = False

    def cpu_times_rows(self, rows):
        if self.late:
            raise exceptions.SampleLate("cpu_times still running after 50 ms")
        return super().cpu_times_rows(rows)

    def cpu_times(self):
        if self.late:
            raise exceptions.SampleLate("cpu_times still running after 50 ms")
        return super().cpu_times()


class LateSweepTest(unittest.TestCase):

    def test_a_vm_that_arrives_capped_is_written_though_every_sweep_is_late(self):
        # Seen on a Nova node, when libvirt's statistics waited on QEMU: the
        # arriving guest's foreign cap made every sweep late, and the cap stayed.
        host = _LateHost(scenario_mod.load("paper_64k_vs_2m").with_duration(5.0))
        market = market_mod.Market(market_mod.MarketParams(
            interval_s=host.scenario.interval_s, intervals_per_epoch=10, pcpus=1,
            link_bytes_per_s=1e9, mtu=1024), policy_mod.load("free_market"))
        ctl = control.Controller(market, host)
        ctl.prime(host.clock().now())
        ctl.step(host.clock().now())
        host.writes.clear()
        uuid = sorted(host.vms())[0]
        host.late = True
        host.updates.append(originals_mod.OriginalsUpdate(
            uuid, {"cap": 0, "weight": 256}, "arrived", reassert=True))
        self.assertIsNone(ctl.step(host.clock().now()))
        self.assertEqual(control.LATE, ctl.skipped)
        self.assertEqual([uuid], host.writes)
        self.assertIsNone(ctl.step(host.clock().now()))
        self.assertEqual([uuid], host.writes)       # written once


#: What reads by rows: a host that does not declare them is read through mappings.
_BY_ROWS = {hyp_base.Capability.CPU_BY_ROWS, hyp_base.Capability.DELAY_BY_ROWS,
            fabric_base.Capability.COUNTS_BY_ROWS}


class _MappingsOnly:
    """A simulated host that does not declare reading by rows (its ``*_rows`` refuse)."""

    def __init__(self, host):
        self._host = host
        self.capabilities = host.capabilities - _BY_ROWS

    def __getattr__(self, name):
        if name.endswith("_rows"):
            raise AssertionError("%s called on a host that does not declare it" % name)
        return getattr(self._host, name)


class ReadingsByRowsTest(unittest.TestCase):

    def _run(self, wrap, policy="io_shares", name="paper_64k_vs_2m"):
        sc = scenario_mod.load(name).with_duration(0.3)
        host = host_mod.SimHost(sc)
        link = host.link()
        params = market_mod.MarketParams(
            interval_s=sc.interval_s, intervals_per_epoch=100, pcpus=host.pcpus(),
            link_bytes_per_s=link.capacity_bytes_per_s, mtu=link.mtu)
        adapter = wrap(host)
        ctl = control.Controller(market_mod.Market(params, policy_mod.load(policy)),
                                 adapter, adapter, [adapter])
        ctl.prime(host.now())
        caps = []
        for i in range(1, 300):
            host.advance_to(i * sc.interval_s)
            done = ctl.step(host.now())
            caps.append(sorted((vm, d.cap_pct, d.rate, d.weight)
                               for vm, d in done.decisions.items()))
            if i % 100 == 0:
                ctl.market.end_epoch()
        return caps, ctl.table(sc.interval_s)

    def test_rows_and_mappings_give_the_same_run(self):
        by_rows = self._run(lambda host: host)
        by_mappings = self._run(_MappingsOnly)
        self.assertTrue(hasattr(host_mod.SimHost, "cpu_times_rows"))
        self.assertEqual(by_mappings, by_rows)
        self.assertTrue(any(cap < 100.0 for step in by_rows[0] for _vm, cap, _rate, _w in step))

    def test_run_delay_reaches_the_market_by_rows_and_by_mappings(self):
        # CPU contention: the sensitive VM's weight rises on its run delay,
        # read by rows (the simulated host) or from vcpu_times (libvirt's way).
        by_rows = self._run(lambda host: host, name="cpu_and_io")
        by_mappings = self._run(_MappingsOnly, name="cpu_and_io")
        self.assertEqual(by_mappings, by_rows)
        self.assertTrue(any(w > market_mod.market.BASE_WEIGHT
                            for step in by_rows[0] for _vm, _cap, _rate, w in step))


class _Declaring:
    """The simulated host declaring ``capabilities``; a call outside them fails the test."""

    _BRINGS = {"cpu_times_rows": hyp_base.Capability.CPU_BY_ROWS,
               "delay_times_rows": hyp_base.Capability.DELAY_BY_ROWS,
               "vcpu_times": hyp_base.Capability.RUN_DELAY,
               "original_updates": hyp_base.Capability.REPORTS_ORIGINALS,
               "counters_rows": fabric_base.Capability.COUNTS_BY_ROWS,
               "set_knobs": hyp_base.Capability.ACTUATES,
               "original_knobs": hyp_base.Capability.ACTUATES}

    def __init__(self, host, capabilities):
        self._host = host
        self.capabilities = frozenset(capabilities)

    def __getattr__(self, name):
        brings = self._BRINGS.get(name)
        if brings is not None and brings not in self.capabilities:
            raise AssertionError("%s called on a host that does not declare %s"
                                 % (name, brings))
        return getattr(self._host, name)


class CapabilitiesTest(unittest.TestCase):
    """What an adapter can do is read from the capabilities it declares, never probed."""

    def _controller(self, capabilities):
        sc = scenario_mod.load("paper_64k_vs_2m").with_duration(1.0)
        host = host_mod.SimHost(sc)
        adapter = _Declaring(host, capabilities)
        params = market_mod.MarketParams(interval_s=sc.interval_s, intervals_per_epoch=10,
                                         pcpus=2, link_bytes_per_s=1e9, mtu=1024)
        ctl = control.Controller(market_mod.Market(params, policy_mod.load("free_market")),
                                 adapter, adapter, [adapter])
        ctl.prime(host.now())
        for i in range(1, 30):
            host.advance_to(i * sc.interval_s)
            ctl.step(host.now())
        return ctl

    def test_a_hypervisor_that_does_not_declare_actuates_is_monitored_never_actuated(self):
        with self.assertLogs("resex_libvirt.control", "INFO") as logs:
            ctl = self._controller(host_mod.SimHost.capabilities
                                   - {hyp_base.Capability.ACTUATES})
        self.assertFalse(ctl.actuates)
        self.assertEqual(2, len(ctl.vms))
        self.assertTrue(all(rec.monitor_only and rec.applied is None
                            for rec in ctl.vms.values()))
        self.assertEqual(2, sum("(monitor-only)" in line for line in logs.output))
        # Still sampled, decided and reported.
        self.assertTrue(all(row["cpu_mean_pct"] > 0 for row in ctl.table(0.001)))

    def test_the_same_host_declaring_actuates_writes_its_knobs(self):
        ctl = self._controller(host_mod.SimHost.capabilities)
        self.assertTrue(ctl.actuates)
        self.assertTrue(all(rec.applied is not None for rec in ctl.vms.values()))

    def test_a_host_declaring_nothing_is_asked_only_the_interface(self):
        # _Declaring fails the test on any call a capability brings.
        ctl = self._controller(())
        self.assertFalse(ctl.actuates)
        self.assertEqual(2, len(ctl.table(0.001)))

    def test_no_probing_protocol_is_left(self):
        import typing
        for module in (control, hyp_base, fabric_base):
            protocols = [name for name, value in vars(module).items()
                         if isinstance(value, type) and issubclass(value, typing.Protocol)
                         and value is not typing.Protocol]
            self.assertEqual([], protocols, module.__name__)


class ConsentTest(unittest.TestCase):
    """The market's copy of a VM's SLA follows the consent rule, its project and its flavor."""

    def test_a_vm_resized_into_a_listed_flavor_is_given_to_the_market_again(self):
        sc = scenario_mod.load("paper_64k_vs_2m").with_duration(1.0)
        host = host_mod.SimHost(sc)
        flavors = {"vm2m": "m1.small"}

        class Resizable(_Declaring):
            def vms(self):
                return {uuid: dataclasses.replace(info, flavor=flavors.get(info.name))
                        for uuid, info in host.vms().items()}

        adapter = Resizable(host, host_mod.SimHost.capabilities
                            - {hyp_base.Capability.GENERATION})
        params = market_mod.MarketParams(interval_s=sc.interval_s, intervals_per_epoch=10,
                                         pcpus=2, link_bytes_per_s=1e9, mtu=1024)
        market = market_mod.Market(params, policy_mod.load("io_shares"))
        ctl = control.Controller(market, adapter, adapter, [adapter],
                                 consent=sla_mod.Consent("opted_in", flavors={"m1.bulk"}))
        ctl.discover()
        uuid = host.uuid_of("vm2m")
        self.assertEqual(100.0, market.specs[uuid].sla.effective_reservation(1))
        flavors["vm2m"] = "m1.bulk"
        ctl.discover()
        self.assertEqual(0.0, market.specs[uuid].sla.reservation_pct)
        self.assertEqual("m1.bulk", ctl.vms[uuid].info.flavor)


class TallyOwnerTest(unittest.TestCase):

    def test_a_vm_record_keeps_no_copy_of_the_run_tallies(self):
        self.assertEqual({"info", "applied", "journaled", "monitor_only"},
                         {f.name for f in control.dataclasses.fields(control.VMRecord)})

    def test_the_table_is_read_from_the_controllers_columns(self):
        ctl, host, sc = _controller(policy="none")
        _steps(ctl, host, sc, 1, 11)
        rows = ctl.table(sc.interval_s)
        t = ctl._aligned_tallies()
        for row in rows:
            k = t.slots[row["uuid"]]
            self.assertEqual(t.cpu_sum[k] / t.ticks[k], row["cpu_mean_pct"])
            self.assertEqual(10, t.ticks[k])
