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

"""Nova-defined guests on a real libvirtd: channel hot-plug, hard reboot, resize, arrival caps.

The guests are defined from XML built by Nova 34's own config classes
(:mod:`tests.lab.nova_guest`): flavor extra specs ``resex:latency_sla_us``
and ``quota:cpu_shares`` in ``<nova:instance>``, Nova's ``<cputune>``, the
QEMU guest agent channel, and no resex channel. The agent's hypervisor
(:class:`LibvirtHypervisor`, events on) and latency intake run in this
process, driven every 100 ms by their own thread as the agent loop drives
them, while the test plays Nova on another connection. Inside the
reporting guest the static C BenchEx measures its own requests and reports
through ``/dev/virtio-ports/org.resex.latency.0``.

The sequence runs once (``setUpClass``): boot, wait for reports; a
Nova-style hard reboot (destroy, define from the same XML, start), wait for
reports again; a Nova-style resize (new extra specs, restart). The re-attach
and report times are printed, not asserted (a TCG guest's boot time is
noise); what is asserted: the channel was hot-plugged live only, reports
arrived through it before and after the reboot, the resized SLA was in
force at the first sweep after the start event, a VM without a
virtio-serial controller is named as unable to report, and a VM that
arrives capped is restored to its flavor's values.
"""

import contextlib
import os
import threading
import time

import libvirt

from resex_agent.intake import params as intake_params
from resex_agent.intake import server as intake_server
from resex_agent import journal as journal_mod
from resex_libvirt.hypervisor import channel
from resex_libvirt.hypervisor import libvirt_host
from resex_libvirt.hypervisor import metadata
from tests.lab import base
from tests.lab import experiment
from tests.lab import harness
from tests.lab import nova_guest
from tests import machine

VIRTIO_MODULES = ("virtio_ring", "virtio", "virtio_pci_legacy_dev", "virtio_pci_modern_dev",
                  "virtio_pci", "virtio_console")
SPECS = {"resex:latency_sla_us": "500", "quota:cpu_shares": "2048"}
RESIZED = {"resex:latency_sla_us": "800", "quota:cpu_shares": "3072"}
PLAIN_SPECS = {"resex:latency_sla_us": "300", "quota:cpu_shares": "1536"}
SWEEP_S = 0.1
BOOT_TIMEOUT_S = 120.0


def _inactive_xml(conn, uuid):
    return conn.lookupByUUIDString(uuid).XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)


def _destroy(guest, conn):
    with contextlib.suppress(libvirt.libvirtError):
        guest.destroy(conn)


class NovaGuestsOnRealLibvirtTest(base.LabTestCase):

    @classmethod
    def set_up_lab(cls):
        benchex = experiment.build_benchex(os.path.join(cls.workdir, "bin"))
        with open(benchex, "rb") as f:
            files = {"/bin/benchex": f.read()}
        modules = [harness.kernel_module(cls.lab.modules_dir, m) for m in VIRTIO_MODULES]
        initrd = cls.lab.initramfs(roles={"report": nova_guest.REPORT_ROLE,
                                          "idle": harness.ROLES["idle"]},
                                   modules=modules, files=files, name="nova-initramfs.img")
        cls.conn = cls.connect()
        cls.guest = nova_guest.NovaGuest("resex-nova-report", cls.lab.kernel, initrd, SPECS,
                                         cls.workdir)
        cls.plain = nova_guest.NovaGuest("resex-nova-noqga", cls.lab.kernel, initrd,
                                         PLAIN_SPECS, cls.workdir, role="idle",
                                         qemu_guest_agent=False)
        for guest in (cls.guest, cls.plain):
            cls.addClassCleanup(_destroy, guest, cls.conn)
        cls.started = {}
        cls.connected_at = {}
        cls.hyp = cls.hypervisor(backoff_min=0.2, backoff_max=2.0, qemu_period_us=10000)
        cls.hyp.connection.on_domain_event(libvirt.VIR_DOMAIN_EVENT_ID_LIFECYCLE,
                                           cls._on_lifecycle)
        cls.intake = intake_server.LatencyIntake(intake_params.IntakeParams())
        cls.addClassCleanup(cls.intake.close)
        cls.intake.start()
        cls.last_sweep = (0.0, {})
        cls.sweeps = threading.Event()
        cls.sweeper = threading.Thread(target=cls._sweep_loop, name="lab-agent-loop",
                                       daemon=True)
        cls.addClassCleanup(cls._stop_sweeping)
        cls.sweeper.start()
        cls.guest.boot(cls.conn)
        cls.plain.boot(cls.conn)
        cls.first = cls._follow("boot")
        cls.inactive_after_attach = _inactive_xml(cls.conn, cls.guest.uuid)
        cls.live_after_attach = cls.conn.lookupByUUIDString(cls.guest.uuid).XMLDesc(0)
        cls.hyp.attach_delays.pop(cls.guest.uuid, None)
        cls.guest.hard_reboot(cls.conn)
        cls.reboot = cls._follow("hard reboot")
        before = cls.started.get(cls.guest.uuid)
        cls.guest.resize(cls.conn, RESIZED)
        cls.resize = cls._first_sweep_after_start(before)
        cls._stop_sweeping()
        cls.updates = cls.hyp.original_updates()
        cls.resized_originals = cls.hyp.original_knobs(cls.guest.uuid)

    @classmethod
    def _on_lifecycle(cls, uuid, event, detail):
        if event == libvirt.VIR_DOMAIN_EVENT_STARTED:
            cls.started[uuid] = time.monotonic()
            cls.connected_at.pop(uuid, None)

    @classmethod
    def _sweep(cls):
        began = time.monotonic()
        vms = cls.hyp.vms()
        cls.intake.sync(vms)
        cls.last_sweep = (began, vms)
        for uuid in cls.intake.channels():
            cls.connected_at.setdefault(uuid, time.monotonic())
        return vms

    @classmethod
    def _sweep_loop(cls):
        while not cls.sweeps.wait(SWEEP_S):
            try:
                cls._sweep()
            except Exception as exc:   # the agent loop survives a failed interval too
                print("sweep failed: %s" % exc)

    @classmethod
    def _stop_sweeping(cls):
        if getattr(cls, "sweeper", None) is not None:
            cls.sweeps.set()
            cls.sweeper.join()
            cls.sweeper = None

    @classmethod
    def _accepted(cls):
        return cls.intake.stats().get(cls.guest.uuid, {}).get("accepted", 0)

    @classmethod
    def _follow(cls, what):
        """Sweep until the guest's reports are accepted again; the times from its start event."""
        uuid = cls.guest.uuid
        before = cls._accepted()
        seen = {}

        def reported():
            seen["now"], seen["connected"] = time.monotonic(), cls.connected_at.get(uuid)
            return cls._accepted() > before
        if machine.wait_for(reported, BOOT_TIMEOUT_S, step=SWEEP_S):
            start, connected = cls.started[uuid], seen["connected"]
            out = {"attach_s": cls.hyp.attach_delays.get(uuid),
                   "connected_s": None if connected is None else connected - start,
                   "first_report_s": seen["now"] - start}
            print("\n%s: channel attached %.0f ms, intake connected %.0f ms, first "
                  "report %.1f s after the start event (the guest boots in between)"
                  % (what, 1000.0 * (out["attach_s"] or float("nan")),
                     1000.0 * (out["connected_s"] or float("nan")), out["first_report_s"]))
            return out
        try:
            with open(cls.guest.console, errors="replace") as f:
                console = f.read()[-3000:]
        except OSError as exc:
            console = str(exc)
        raise AssertionError("no latency report through the hot-plugged channel after %s "
                             "within %.0f s (intake %s, channels %s); console:\n%s"
                             % (what, BOOT_TIMEOUT_S, cls.intake.stats(),
                                cls.intake.channels(), console))

    @classmethod
    def _first_sweep_after_start(cls, seen_at):
        """The VM as the first sweep after its next start event sees it."""
        uuid = cls.guest.uuid

        def swept_after_start():
            start = cls.started.get(uuid)
            swept_at, vms = cls.last_sweep
            if start != seen_at and swept_at > start and uuid in vms:
                return swept_at - start, vms[uuid]
            return None
        after_s, vm = machine.wait_for(swept_after_start, 30.0, step=0.01,
                                       what="a sweep after a start event after the resize")
        print("\nresize: new SLA seen by the first sweep, %.0f ms after the start "
              "event" % (1000.0 * after_s))
        return vm

    def test_the_channel_is_hot_plugged_into_the_live_domain_only(self):
        self.assertNotIn(metadata.LATENCY_CHANNEL_NAME, self.guest.xml())
        self.assertIn(metadata.LATENCY_CHANNEL_NAME, self.live_after_attach)
        self.assertNotIn(metadata.LATENCY_CHANNEL_NAME, self.inactive_after_attach)

    def test_benchex_in_the_guest_reports_through_the_channel_before_and_after_a_reboot(self):
        self.assertIsNotNone(self.first["attach_s"])
        self.assertIsNotNone(self.reboot["attach_s"], "the channel was not re-attached")
        self.assertIsNotNone(self.reboot["connected_s"])

    def test_the_resized_flavor_is_in_force_at_the_first_sweep_after_the_start(self):
        self.assertEqual("flavor", self.resize.sla_source)
        self.assertEqual(800.0, self.resize.sla.latency_sla_us)
        self.assertEqual(3072, self.resized_originals["cpu_shares"])

    def test_shares_never_go_below_what_nova_set(self):
        # An agent of its own: another test hands cpu_shares to an operator,
        # and the class's agent then leaves that knob alone.
        uuid = self.guest.uuid
        hyp = libvirt_host.LibvirtHypervisor(harness.URI, qemu_period_us=10000,
                                             channel_hotplug="none")
        self.addCleanup(hyp.close)
        hyp.vms()
        original = hyp.original_knobs(uuid)
        self.addCleanup(hyp.restore_knobs, uuid, original)
        hyp.set_knobs(uuid, 50.0, 1)
        self.assertEqual(3072, hyp.get_knobs(uuid)["cpu_shares"])

    def test_a_vm_without_a_virtio_serial_controller_is_named_as_unable_to_report(self):
        self.assertEqual({self.plain.uuid: channel.NO_CONTROLLER},
                         {u: p for u, p in self.hyp.latency_problems().items()
                          if u == self.plain.uuid})
        self.assertIsNone(self.hyp.vms()[self.plain.uuid].latency_channel)

    def test_a_vm_that_arrives_capped_is_restored_to_its_flavor_values(self):
        uuid = self.plain.uuid
        # The source host's agent left a cap in the live domain (a live migration).
        self.conn.lookupByUUIDString(uuid).setSchedulerParametersFlags(
            {"global_period": 10000, "global_quota": 3000, "cpu_shares": 600},
            libvirt.VIR_DOMAIN_AFFECT_LIVE)
        arrival = libvirt_host.LibvirtHypervisor(harness.URI, qemu_period_us=10000,
                                                 channel_hotplug="none")
        self.addCleanup(arrival.close)
        arrival.vms()
        journal = journal_mod.Journal(os.path.join(self.workdir, "arrival-journal.json"))
        journal.remember(uuid, arrival.original_knobs(uuid))
        arrival.set_knobs(uuid, 20.0, 256)
        self.assertEqual({}, journal.restore_all(arrival))
        live = self.conn.lookupByUUIDString(uuid).schedulerParameters()
        self.assertEqual((-1, 1536), (live["global_quota"], live["cpu_shares"]))

    def test_a_vm_that_arrives_capped_is_reasserted_at_adoption(self):
        uuid = self.plain.uuid
        # The source host's agent left a cap in the live domain (a live migration):
        # the target's adapter says so in the sweep that adopts it, so the
        # controller writes the market's decision at once.
        self.conn.lookupByUUIDString(uuid).setSchedulerParametersFlags(
            {"global_period": 16556, "global_quota": 1000}, libvirt.VIR_DOMAIN_AFFECT_LIVE)
        arrival = libvirt_host.LibvirtHypervisor(harness.URI, qemu_period_us=10000,
                                                 channel_hotplug="none")
        self.addCleanup(arrival.close)
        arrival.vms()
        arrived = [u for u in arrival.original_updates() if u.uuid == uuid]
        self.assertEqual([("arrived", True)], [(u.reason, u.reassert) for u in arrived])
        self.assertEqual(-1, arrived[0].originals["global_quota"])
        arrival.set_knobs(uuid, None, 256)
        live = self.conn.lookupByUUIDString(uuid).schedulerParameters()
        self.assertEqual(-1, live["global_quota"])

    def test_the_journal_is_handed_the_redefined_flavors_originals(self):
        mine = [u for u in self.updates if u.uuid == self.guest.uuid]
        self.assertTrue(mine, "no originals update after the reboot and the resize")
        self.assertTrue(all(u.reason in ("restarted", "redefined", "stopped") for u in mine))
        if mine[-1].originals is None:
            # A sweep ran between the resize's destroy and its new definition:
            # the domain left ("stopped": the journal forgets it) and came back
            # as a new VM, whose originals the journal takes at its first cap.
            self.assertEqual("stopped", mine[-1].reason)
            self.assertEqual(3072, self.resized_originals["cpu_shares"])
        else:
            self.assertEqual(3072, mine[-1].originals["cpu_shares"])

    def test_an_operators_change_to_a_knob_the_agent_set_becomes_the_original(self):
        uuid = self.guest.uuid
        self.hyp.vms()
        self.hyp.original_updates()
        self.hyp.set_knobs(uuid, 40.0, 1024)
        self.conn.lookupByUUIDString(uuid).setSchedulerParametersFlags(
            {"cpu_shares": 5000}, libvirt.VIR_DOMAIN_AFFECT_LIVE)

        def operator_updates():
            self.hyp.vms()
            return [u for u in self.hyp.original_updates() if u.reason == "operator"]
        updates = machine.wait_for(operator_updates, 10.0, step=0.05)
        self.assertTrue(updates, "the operator's cpu_shares change was not detected")
        self.assertEqual(5000, updates[-1].originals["cpu_shares"])
        self.assertEqual(5000, self.hyp.original_knobs(uuid)["cpu_shares"])
