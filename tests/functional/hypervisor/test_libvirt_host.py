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

"""LibvirtHypervisor against libvirt's built-in test driver and etc/resex/node-test.xml.

The test driver is real libvirt (its own in-process hypervisor): discovery,
domain XML, metadata, lifecycle and metadata-change events, errors. Its
scheduler (``fair``) has no cap knob, so every VM is monitor-only here; the
QEMU knobs are exercised in the lab (tests/lab).
"""

import contextlib
import functools
import os
import threading
import time
import unittest
from unittest import mock

import libvirt
from oslo_config import cfg

from resex_agent.conf import hypervisor as hyp_conf
from resex_agent.conf import nova as nova_conf
from resex_agent import hypervisor as agent_hypervisor
from resex_libvirt import exceptions
from resex_libvirt.hypervisor import base
from resex_libvirt.hypervisor import channel
from resex_libvirt.hypervisor import libvirt_host
from resex_libvirt.hypervisor import metadata
from resex_libvirt import sla
from tests import machine

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
NODE = os.path.join(ROOT, "etc", "resex", "node-test.xml")
URI = "test://" + NODE

SENSITIVE = "6a1e4b8c-0000-4000-8000-000000000001"
BULK = "6a1e4b8c-0000-4000-8000-000000000002"
BROKEN = "6a1e4b8c-0000-4000-8000-000000000003"
PLAIN = "6a1e4b8c-0000-4000-8000-000000000004"

NEW_DOMAIN = """
<domain type='test'>
  <name>%(name)s</name>
  <uuid>%(uuid)s</uuid>
  <memory>65536</memory>
  <vcpu>1</vcpu>
  <os><type arch='i686'>hvm</type></os>
</domain>
"""

SENSITIVE_WITH_CONTROLLER = """
<domain type='test'>
  <name>%(name)s</name>
  <uuid>%(uuid)s</uuid>
  <metadata>
    <resex:sla xmlns:resex="http://resex-libvirt.org/xmlns/sla/1.0">
      <resex:latency_sla_us>120</resex:latency_sla_us>
    </resex:sla>
  </metadata>
  <memory>65536</memory>
  <vcpu>1</vcpu>
  <os><type arch='i686'>hvm</type></os>
  <devices><controller type='virtio-serial' index='0'/></devices>
</domain>
"""

#: A guest whose own SLA has a value that is no number.
INVALID_SLA = """
<domain type='test'>
  <name>%(name)s</name>
  <uuid>%(uuid)s</uuid>
  <metadata>
    <resex:sla xmlns:resex="http://resex-libvirt.org/xmlns/sla/1.0">
      <resex:latency_sla_us>soon</resex:latency_sla_us>
    </resex:sla>
  </metadata>
  <memory>65536</memory>
  <vcpu>1</vcpu>
  <os><type arch='i686'>hvm</type></os>
</domain>
"""

#: A Nova guest booted from an image without hw_qemu_guest_agent: no controller.
NOVA_SENSITIVE = """
<domain type='test'>
  <name>%(name)s</name>
  <uuid>%(uuid)s</uuid>
  <metadata>
    <nova:instance xmlns:nova="http://openstack.org/xmlns/libvirt/nova/1.1">
      <nova:name>web-%(name)s</nova:name>
      <nova:flavor name="m1.latency" id="7">
        <nova:vcpus>1</nova:vcpus>
        <nova:extraSpecs>
          <nova:extraSpec name="resex:latency_sla_us">250</nova:extraSpec>
          <nova:extraSpec name="quota:cpu_shares">2048</nova:extraSpec>
        </nova:extraSpecs>
      </nova:flavor>
      <nova:owner>
        <nova:user uuid="5a4b3c2d1e0f">alice</nova:user>
        <nova:project uuid="8d6f2c0b9e1a4f3d">web-team</nova:project>
      </nova:owner>
    </nova:instance>
  </metadata>
  <memory>65536</memory>
  <vcpu>1</vcpu>
  <os><type arch='i686'>hvm</type></os>
</domain>
"""


#: A Nova guest with one port, as Nova 34 writes it (``<nova:ports>``).
NOVA_PORTS = """
<domain type='test'>
  <name>ports-1</name>
  <uuid>%(uuid)s</uuid>
  <metadata>
    <nova:instance xmlns:nova="http://openstack.org/xmlns/libvirt/nova/1.1">
      <nova:name>rdma-server</nova:name>
      <nova:ports>
        <nova:port uuid="9e8d7c6b-0d2f-4d5c-9b8c-1f2e3d4c5b6a">
          <nova:ip type="fixed" address="10.0.0.7" ipVersion="4"/>
          <nova:ip type="fixed" address="2001:db8::7" ipVersion="6"/>
        </nova:port>
      </nova:ports>
    </nova:instance>
  </metadata>
  <memory>65536</memory>
  <vcpu>1</vcpu>
  <os><type arch='i686'>hvm</type></os>
  <devices>
    <interface type='ethernet'>
      <mac address='fa:16:3e:00:00:07'/>
      <target dev='tap-ports1'/>
    </interface>
  </devices>
</domain>
"""


#: Poll a predicate until true (events arrive on another thread).
wait_for = functools.partial(machine.wait_for, timeout=10.0)


class TestDriverCase(unittest.TestCase):

    events = True

    def setUp(self):
        super().setUp()
        self.hyp = libvirt_host.LibvirtHypervisor(
            URI, sla_defaults=sla.SLA(shares=50), events=self.events, backoff_min=0.1,
            backoff_max=0.2)
        self.addCleanup(self.hyp.close)


class DiscoveryTest(TestDriverCase):

    def test_every_running_domain_of_the_node_is_discovered(self):
        vms = self.hyp.vms()
        self.assertEqual({SENSITIVE, BULK, BROKEN, PLAIN}, set(vms))
        self.assertEqual("sensitive-1", vms[SENSITIVE].name)
        self.assertEqual(2, vms[SENSITIVE].vcpus)

    def test_sla_comes_from_metadata_then_configured_defaults(self):
        vms = self.hyp.vms()
        sens = vms[SENSITIVE]
        self.assertEqual("metadata", sens.sla_source)
        self.assertEqual((180.0, 15.0, 40.0, 300, "sensitive"),
                         (sens.sla.latency_sla_us, sens.sla.interference_threshold_pct,
                          sens.sla.reservation_pct, sens.sla.shares, sens.sla.io_class))
        self.assertEqual(("bulk", 150.0, 50), (vms[BULK].sla.io_class, vms[BULK].sla.limit_pct,
                                               vms[BULK].sla.shares))
        self.assertEqual("default", vms[PLAIN].sla_source)
        self.assertEqual(sla.SLA(shares=50), vms[PLAIN].sla)
        # resex:ensemble is the VM's group, not an SLA key: no warning, no SLA field.
        self.assertEqual(("trading-web", None), (sens.ensemble, vms[PLAIN].ensemble))

    def test_invalid_metadata_warns_naming_vm_and_key_and_the_default_applies(self):
        with self.assertLogs("resex_libvirt.hypervisor", "WARNING") as logs:
            vms = self.hyp.vms()
        warning = "\n".join(line for line in logs.output if "broken-1" in line)
        self.assertIn("resex:shares", warning)
        self.assertEqual(50, vms[BROKEN].sla.shares)
        self.assertEqual("bulk", vms[BROKEN].sla.io_class)

    def test_latency_channel_taps_and_hostdevs(self):
        sens = self.hyp.vms()[SENSITIVE]
        self.assertEqual("/var/lib/resex/latency/sensitive-1.sock", sens.latency_channel)
        self.assertEqual(("tap-sens1",), sens.interfaces)
        self.assertEqual(("0000:3b:00.2",), sens.hostdevs)

    def test_a_vms_addresses_are_novas_fixed_ips_then_its_macs(self):
        self.assertEqual(("52:54:00:00:00:01",), self.hyp.vms()[SENSITIVE].addresses)
        uuid = "6a1e4b8c-0000-4000-8000-0000000000b4"
        dom = self.hyp.connection.get().createXML(NOVA_PORTS % {"uuid": uuid}, 0)
        self.addCleanup(dom.destroy)
        self.assertTrue(wait_for(lambda: uuid in self.hyp.vms()))
        self.assertEqual(("10.0.0.7", "2001:db8::7", "fa:16:3e:00:00:07"),
                         self.hyp.vms()[uuid].addresses)

    def test_pcpus_come_from_the_node(self):
        self.assertEqual(4, self.hyp.pcpus())

    def test_cpu_times_cover_every_running_vm(self):
        vms = self.hyp.vms()
        times = self.hyp.cpu_times()
        self.assertEqual(set(vms), set(times))
        for value in times.values():
            self.assertIsInstance(value, int)
            self.assertGreaterEqual(value, 0)


class MonitorOnlyTest(TestDriverCase):

    def test_test_driver_vms_are_reported_but_never_actuated(self):
        vms = self.hyp.vms()
        for info in vms.values():
            self.assertFalse(info.knobs.actuated)
        with self.assertRaises(exceptions.KnobUnsupported):
            self.hyp.set_knobs(SENSITIVE, 50.0, 256)
        self.assertEqual({}, self.hyp.get_knobs(SENSITIVE))
        self.assertIsNone(self.hyp.cap_pct(SENSITIVE))

    def test_restoring_nothing_is_a_no_op_but_restoring_knobs_is_refused(self):
        self.hyp.restore_knobs(PLAIN, {})
        with self.assertRaises(exceptions.KnobUnsupported):
            self.hyp.restore_knobs(PLAIN, {"global_quota": -1})


class OneRecordOfAdoptedVMsTest(TestDriverCase):
    """Whatever adopts a VM first, the control loop sees it (the restart-blind defect)."""

    def test_vms_adopted_by_a_journal_restore_before_the_first_list_are_listed(self):
        # The journal's reconcile at start reaches every VM it holds through
        # the knob calls before the loop ever lists the domains; here it
        # holds them all, so the first listing finds nothing new.
        everything = {SENSITIVE, BULK, BROKEN, PLAIN}
        for uuid in everything:
            self.hyp.original_knobs(uuid)
        self.assertEqual(everything, set(self.hyp.vms()))

    def test_every_later_sweep_still_lists_the_vms_adopted_early(self):
        for uuid in (SENSITIVE, BULK, BROKEN, PLAIN):
            self.hyp.get_knobs(uuid)
        for _ in range(3):
            self.assertEqual({SENSITIVE, BULK, BROKEN, PLAIN}, set(self.hyp.vms()))

    def test_an_early_adoption_moves_the_generation(self):
        generation = self.hyp.generation
        self.hyp.original_knobs(BULK)
        self.assertGreater(self.hyp.generation, generation)


class ChurnTest(TestDriverCase):

    def _start(self, name, uuid):
        conn = self.hyp.connection.get()
        return conn.createXML(NEW_DOMAIN % {"name": name, "uuid": uuid}, 0)

    def test_a_vm_that_appears_is_adopted_and_one_that_leaves_is_dropped(self):
        uuid = "6a1e4b8c-0000-4000-8000-0000000000a1"
        self.assertNotIn(uuid, self.hyp.vms())
        dom = self._start("churn-1", uuid)
        # The list follows lifecycle events (another thread): no listing per sweep.
        self.assertTrue(wait_for(lambda: uuid in self.hyp.vms()))
        self.assertEqual("churn-1", self.hyp.vms()[uuid].name)
        dom.destroy()
        self.assertTrue(wait_for(lambda: uuid not in self.hyp.vms()))
        self.assertNotIn(uuid, self.hyp.cpu_times())

    def test_a_vanished_vm_is_vm_gone_with_the_libvirt_error_chained(self):
        uuid = "6a1e4b8c-0000-4000-8000-0000000000a2"
        dom = self._start("churn-2", uuid)
        self.hyp.vms()
        dom.destroy()
        with self.assertRaises(exceptions.VMGone) as ctx:
            self.hyp.get_knobs(uuid)
        self.assertIsInstance(ctx.exception.__cause__, libvirt.libvirtError)

    def test_unknown_vm_is_vm_gone(self):
        with self.assertRaises(exceptions.VMGone) as ctx:
            self.hyp.set_knobs("6a1e4b8c-0000-4000-8000-0000000000ff", 10.0, None)
        self.assertEqual(libvirt.VIR_ERR_NO_DOMAIN, ctx.exception.__cause__.get_error_code())

    def test_vms_churned_leave_nothing_behind(self):
        # The hour's soak: a guest created and destroyed every 5 s. Adopted or
        # not (destroyed before a sweep saw it), nothing of it stays.
        for k in range(6):
            uuid = "6a1e4b8c-0000-4000-8000-0000000001%02d" % k
            dom = self._start("churn-x%d" % k, uuid)
            if k % 2:
                self.assertTrue(wait_for(lambda: uuid in self.hyp.vms()))
            else:
                self.assertTrue(wait_for(lambda: uuid in self.hyp._events.started()))
            dom.destroy()
            self.assertTrue(wait_for(lambda: uuid not in self.hyp.vms()
                                     and uuid not in self.hyp._events.started()))
        self.assertEqual([], [u for u in self.hyp._events.started()
                              if u.startswith("6a1e4b8c-0000-4000-8000-0000000001")])
        self.assertEqual(set(), {t for t in self.hyp.channel._warned
                                 if t[0].startswith("6a1e4b8c-0000-4000-8000-0000000001")})

    def test_vms_churned_with_an_invalid_sla_leave_no_warning_behind(self):
        # Each said once while it is here; nothing of it once gone.
        conn = self.hyp.connection.get()
        self.hyp.vms()
        before = set(self.hyp.sla._warned)
        for k in range(6):
            uuid = "6a1e4b8c-0000-4000-8000-0000000002%02d" % k
            dom = conn.createXML(INVALID_SLA % {"name": "churn-s%d" % k, "uuid": uuid}, 0)
            with self.assertLogs("resex_libvirt.hypervisor.sla_layers", "WARNING"):
                self.assertTrue(wait_for(lambda: uuid in self.hyp.vms()))
            self.assertIn(uuid, {t[0] for t in self.hyp.sla._warned})
            dom.destroy()
            self.assertTrue(wait_for(lambda: uuid not in self.hyp.vms()))
        self.assertEqual(before, self.hyp.sla._warned)

    def test_lifecycle_event_is_delivered_for_a_started_vm(self):
        seen = threading.Event()
        uuid = "6a1e4b8c-0000-4000-8000-0000000000a3"

        def on_event(event_uuid, event, detail):
            if event_uuid == uuid and event == libvirt.VIR_DOMAIN_EVENT_STARTED:
                seen.set()

        self.hyp.connection.on_domain_event(libvirt.VIR_DOMAIN_EVENT_ID_LIFECYCLE, on_event)
        self._start("churn-3", uuid).destroy()
        self.assertTrue(seen.wait(10.0), "no STARTED lifecycle event from the test driver")


class MetadataChangeTest(TestDriverCase):

    def _set_sla(self, uuid, specs):
        conn = self.hyp.connection.get()
        dom = conn.lookupByUUIDString(uuid)
        dom.setMetadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT, metadata.sla_xml(specs),
                        metadata.PREFIX, metadata.NAMESPACE, libvirt.VIR_DOMAIN_AFFECT_LIVE)

    def test_virsh_metadata_change_is_seen_through_the_event(self):
        self.assertEqual("default", self.hyp.vms()[PLAIN].sla_source)
        self._set_sla(PLAIN, {"resex:latency_sla_us": 90, "resex:shares": 9})
        self.assertTrue(wait_for(lambda: self.hyp.vms()[PLAIN].sla_source == "metadata"))
        info = self.hyp.vms()[PLAIN]
        self.assertEqual((90.0, 9, "sensitive"),
                         (info.sla.latency_sla_us, info.sla.shares, info.sla.io_class))


class NoEventsTest(TestDriverCase):

    events = False

    def test_without_events_metadata_is_reread_after_the_refresh_interval(self):
        self.hyp.refresh_s = 0.0
        self.hyp.vms()
        conn = self.hyp.connection.get()
        dom = conn.lookupByUUIDString(PLAIN)
        dom.setMetadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT,
                        metadata.sla_xml({"resex:io_class": "bulk"}),
                        metadata.PREFIX, metadata.NAMESPACE, libvirt.VIR_DOMAIN_AFFECT_LIVE)
        self.assertEqual("bulk", self.hyp.vms()[PLAIN].sla.io_class)


class BuildFromConfTest(unittest.TestCase):

    def test_the_agent_builds_the_hypervisor_from_the_libvirt_and_sla_groups(self):
        conf = cfg.ConfigOpts()
        hyp_conf.register_opts(conf)
        nova_conf.register_opts(conf)   # [nova]: the compute API lookup, off
        conf([], project="resex-test")
        self.addCleanup(conf.reset)   # overrides live on the shared option groups
        conf.set_override("connection_uri", URI, group="libvirt")
        conf.set_override("qemu_cap_period_us", 10000, group="libvirt")
        conf.set_override("latency_channel_hotplug", "all", group="libvirt")
        conf.set_override("shares", 77, group="sla")
        hyp = agent_hypervisor.build(conf)
        self.addCleanup(hyp.close)
        self.assertEqual(10000, hyp.adopter.qemu_period_us)
        self.assertEqual("all", hyp.channel.policy)
        self.assertIn(hyp.adopter.cgroup_version, (1, 2))
        self.assertEqual(77, hyp.vms()[PLAIN].sla.shares)
        self.assertIn(base.Capability.ACTUATES, hyp.capabilities)

    def test_the_checks_hypervisor_does_not_declare_that_it_actuates(self):
        conf = cfg.ConfigOpts()
        hyp_conf.register_opts(conf)
        nova_conf.register_opts(conf)
        conf([], project="resex-test")
        self.addCleanup(conf.reset)
        conf.set_override("connection_uri", URI, group="libvirt")
        hyp = agent_hypervisor.build(conf, read_only=True)
        self.addCleanup(hyp.close)
        self.assertNotIn(base.Capability.ACTUATES, hyp.capabilities)
        self.assertIn(base.Capability.ACTUATES, libvirt_host.LibvirtHypervisor.capabilities)


class CapabilitiesTest(TestDriverCase):
    """The libvirt host declares what it does as data; the watchdog's proxy forwards it."""

    def test_a_libvirt_host_declares_its_capabilities(self):
        self.assertEqual({base.Capability.ACTUATES, base.Capability.RUN_DELAY,
                          base.Capability.GENERATION, base.Capability.REPORTS_ORIGINALS},
                         set(self.hyp.capabilities))

    def test_the_controller_drives_it_through_the_watchdogs_proxy(self):
        from resex_agent import watchdog
        from resex_libvirt import control
        from resex_libvirt import market as market_mod
        from resex_libvirt.market import policy as policy_mod
        dog = watchdog.Watchdog(5.0, name="libvirt")
        guarded = watchdog.Guarded(self.hyp, dog, owns=False)
        self.addCleanup(dog.close)
        self.assertEqual(self.hyp.capabilities, guarded.capabilities)
        market = market_mod.Market(market_mod.MarketParams(
            interval_s=0.1, intervals_per_epoch=10, pcpus=4, link_bytes_per_s=1e9, mtu=1500),
            policy_mod.load("free_market"))
        ctl = control.Controller(market, guarded)
        self.assertTrue(ctl.actuates)
        ctl.prime(time.monotonic())
        self.assertIsNotNone(ctl.step(time.monotonic() + 0.1))
        self.assertEqual({SENSITIVE, BULK, BROKEN, PLAIN}, set(ctl.vms))
        # The test driver's scheduler has no cap knob: monitored, never actuated.
        self.assertTrue(all(rec.monitor_only for rec in ctl.vms.values()))


class EventDrivenListTest(TestDriverCase):
    """The domain list follows lifecycle events: no listAllDomains per sweep.

    ``listAllDomains`` is spied on (wrapped, the real call still runs) to
    count how often this hypervisor's connection takes the list (threads
    left by other tests may list on their own connections).
    """

    @contextlib.contextmanager
    def listings(self):
        """Count this connection's ``listAllDomains`` calls inside the block."""
        conn = self.hyp.connection.get()
        real = libvirt.virConnect.listAllDomains
        calls = []

        def spy(self_conn, *args, **kwargs):
            if self_conn is conn:
                calls.append(args)
            return real(self_conn, *args, **kwargs)

        with mock.patch.object(libvirt.virConnect, "listAllDomains", spy):
            yield calls

    def test_sweeps_without_events_list_nothing_and_keep_the_generation(self):
        self.hyp.vms()
        generation = self.hyp.generation
        with self.listings() as calls:
            for _ in range(50):
                vms = self.hyp.vms()
        self.assertEqual([], calls)
        self.assertEqual(generation, self.hyp.generation)
        self.assertEqual({SENSITIVE, BULK, BROKEN, PLAIN}, set(vms))

    def test_a_started_vm_bumps_the_generation_and_is_found_without_a_listing(self):
        self.hyp.vms()
        generation = self.hyp.generation
        uuid = "6a1e4b8c-0000-4000-8000-0000000000b1"
        conn = self.hyp.connection.get()
        with self.listings() as calls:
            dom = conn.createXML(NEW_DOMAIN % {"name": "event-1", "uuid": uuid}, 0)
            self.assertTrue(wait_for(lambda: uuid in self.hyp.vms()))
            self.assertGreater(self.hyp.generation, generation)
            dom.destroy()
            self.assertTrue(wait_for(lambda: uuid not in self.hyp.vms()))
        self.assertEqual([], calls)

    def test_the_list_is_taken_again_after_the_refresh_interval_as_a_safety_net(self):
        self.hyp.vms()
        self.hyp.refresh_s = 0.0
        with self.listings() as calls:
            self.hyp.vms()
        self.assertEqual(1, len(calls))

    def test_a_sensitive_vm_the_driver_cannot_hot_plug_into_is_named_as_unable_to_report(self):
        # The test driver has no virDomainAttachDeviceFlags: the VM is named, the loop goes on.
        uuid = "6a1e4b8c-0000-4000-8000-0000000000b2"
        conn = self.hyp.connection.get()
        dom = conn.createXML(SENSITIVE_WITH_CONTROLLER % {"name": "hotplug-1", "uuid": uuid}, 0)
        self.addCleanup(dom.destroy)
        with self.assertLogs("resex_libvirt.hypervisor", "WARNING") as logs:
            self.assertTrue(wait_for(lambda: uuid in self.hyp.vms()))
        problem = self.hyp.latency_problems()[uuid]
        self.assertIn("could not be hot-plugged", problem)
        self.assertIn("hotplug-1", "\n".join(logs.output))
        self.assertIsNone(self.hyp.vms()[uuid].latency_channel)

    def test_a_sensitive_vm_without_a_controller_needs_hw_qemu_guest_agent(self):
        # sensitive-1 has a channel already; the others have no SLA: none needs a hot-plug.
        self.hyp.vms()
        self.assertEqual({}, self.hyp.latency_problems())
        uuid = "6a1e4b8c-0000-4000-8000-0000000000b3"
        conn = self.hyp.connection.get()
        dom = conn.createXML(NOVA_SENSITIVE % {"name": "noqga-1", "uuid": uuid}, 0)
        self.addCleanup(dom.destroy)
        self.assertTrue(wait_for(lambda: uuid in self.hyp.vms()))
        info = self.hyp.vms()[uuid]
        self.assertEqual(("flavor", 250.0), (info.sla_source, info.sla.latency_sla_us))
        self.assertEqual(channel.NO_CONTROLLER, info.latency_problem)
        # Logs name it by Nova's instance name and UUID, then the domain's name.
        self.assertEqual("web-noqga-1 (%s, noqga-1)" % uuid, info.label)
        # The project that owns it labels its metrics and board entry; the
        # project and the flavor are what the operator's consent lists name.
        self.assertEqual(("8d6f2c0b9e1a4f3d", "web-team"), (info.project, info.project_name))
        self.assertEqual("m1.latency", info.flavor)
        self.assertIsNone(self.hyp.vms()[SENSITIVE].flavor)


class ControllerOnEventsTest(TestDriverCase):
    """control.Controller compares VMs only when the hypervisor's generation moved."""

    class _Source:
        """A latency source that records the VM sets it is synced with."""

        def __init__(self):
            self.synced = []

        def sync(self, vms):
            self.synced.append(set(vms))

        def windows(self):
            return {}

    def test_discover_does_work_only_when_the_generation_moved(self):
        from resex_libvirt import control
        from resex_libvirt import market as market_mod
        from resex_libvirt.market import policy as policy_mod
        market = market_mod.Market(market_mod.MarketParams(
            interval_s=0.1, intervals_per_epoch=10, pcpus=4, link_bytes_per_s=1e9, mtu=1500),
            policy_mod.load("free_market"))
        source = self._Source()
        ctl = control.Controller(market, self.hyp, latency_sources=[source])
        for _ in range(20):
            ctl.discover()
        self.assertEqual(1, len(source.synced))
        uuid = "6a1e4b8c-0000-4000-8000-0000000000c1"
        dom = self.hyp.connection.get().createXML(
            NEW_DOMAIN % {"name": "gen-1", "uuid": uuid}, 0)
        self.addCleanup(dom.destroy)
        self.assertTrue(wait_for(lambda: uuid in ctl.discover()))
        self.assertIn(uuid, ctl.vms)
        self.assertEqual(2, len(source.synced))
