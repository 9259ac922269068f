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

"""The libvirt adapter's parts on their own: SLA layers, channel policy, originals.

The driver composing them runs on libvirt's test driver in
tests/functional/hypervisor; these are the parts' rules without libvirt.
"""

import collections
import unittest

from resex_libvirt import exceptions
from resex_libvirt.hypervisor import channel
from resex_libvirt.hypervisor import domains
from resex_libvirt.hypervisor import knobs
from resex_libvirt.hypervisor import metadata
from resex_libvirt.hypervisor import nova_metadata
from resex_libvirt.hypervisor import nova_sla
from resex_libvirt.hypervisor import originals
from resex_libvirt.hypervisor import sla_layers
from resex_libvirt import sla as sla_mod

UUID = "11111111-2222-3333-4444-555555555555"


def facts(sla_specs=None, flavor_specs=None, latency_channel=None, virtio_serial=True):
    nova = (nova_metadata.NovaFlavor("m1", 1, dict(flavor_specs))
            if flavor_specs is not None else None)
    return metadata.DomainFacts(
        uuid=UUID, name="vm", vcpus=1, sla_specs=dict(sla_specs or {}),
        latency_channel=latency_channel, interfaces=(), hostdevs=(), nova=nova,
        virtio_serial=virtio_serial)


class _Nova:
    def __init__(self, specs):
        self.specs = specs

    def lookup(self, uuid):
        return self.specs


class SLALayersTest(unittest.TestCase):

    def test_each_layer_overrides_the_one_below_key_by_key(self):
        resolver = sla_layers.SLAResolver(sla_mod.SLA(shares=10),
                                          _Nova({"resex:shares": "20", "resex:io_class": "bulk"}))
        got, source = resolver.resolve(facts(sla_specs={"resex:shares": "40"},
                                             flavor_specs={"resex:shares": "30"}))
        self.assertEqual((40, "bulk", "metadata"), (got.shares, got.io_class, source))
        got, source = resolver.resolve(facts(flavor_specs={"resex:shares": "30"}))
        self.assertEqual((30, "flavor"), (got.shares, source))
        got, source = resolver.resolve(facts())
        self.assertEqual((20, "nova"), (got.shares, source))
        got, source = sla_layers.SLAResolver(sla_mod.SLA(shares=10)).resolve(facts())
        self.assertEqual((10, "default"), (got.shares, source))

    def test_an_invalid_value_is_warned_once_and_the_lower_layer_applies(self):
        resolver = sla_layers.SLAResolver(sla_mod.SLA(shares=10))
        bad = facts(sla_specs={"resex:shares": "many"})
        with self.assertLogs("resex_libvirt.hypervisor.sla_layers", "WARNING") as logs:
            self.assertEqual(10, resolver.resolve(bad)[0].shares)
            self.assertEqual(10, resolver.resolve(bad)[0].shares)
        self.assertEqual(1, len(logs.records))
        self.assertIn("resex:shares from metadata", logs.output[0])

    def test_what_was_said_of_a_vm_is_dropped_with_it(self):
        resolver = sla_layers.SLAResolver(sla_mod.SLA(shares=10))
        bad = facts(sla_specs={"resex:shares": "many"})
        with self.assertLogs("resex_libvirt.hypervisor.sla_layers", "WARNING") as logs:
            resolver.resolve(bad)
            resolver.forget(UUID)
            # Back (the same uuid, restarted): said again.
            resolver.resolve(bad)
        self.assertEqual(2, len(logs.records))
        resolver.forget(UUID)
        self.assertEqual(set(), resolver._warned)


class EnsembleTest(unittest.TestCase):
    """A VM's ensemble: its own metadata, else Nova's server group; never its flavor."""

    GROUP = "3f1c2b9e-5d7a-4c11-9b0e-8a2f6c4d1e77"

    def test_metadata_over_the_server_group_and_no_part_of_the_sla(self):
        nova = _Nova({"resex:shares": "20", nova_sla.SERVER_GROUP: self.GROUP})
        resolver = sla_layers.SLAResolver(sla_mod.SLA(), nova)
        own = facts(sla_specs={"resex:ensemble": " web-tier.1 ", "resex:shares": "40"})
        self.assertEqual("web-tier.1", resolver.ensemble(own))
        got, source = resolver.resolve(own)
        self.assertEqual((40, "metadata"), (got.shares, source))
        self.assertEqual(self.GROUP, resolver.ensemble(facts()))
        self.assertIsNone(sla_layers.SLAResolver(sla_mod.SLA()).ensemble(facts()))

    def test_a_bad_value_is_warned_once_and_ignored(self):
        nova = _Nova({nova_sla.SERVER_GROUP: self.GROUP})
        resolver = sla_layers.SLAResolver(sla_mod.SLA(), nova)
        for bad in ("two words", "x" * 65, "", "gr\u00fcppe"):
            vm = facts(sla_specs={"resex:ensemble": bad})
            with self.assertLogs("resex_libvirt.hypervisor.sla_layers", "WARNING") as logs:
                self.assertEqual(self.GROUP, resolver.ensemble(vm))
                self.assertEqual(self.GROUP, resolver.ensemble(vm))
                sla_layers.LOG.warning("end")
            self.assertEqual(2, len(logs.records), bad)
            self.assertIn("resex:ensemble from metadata", logs.output[0])
        self.assertIsNone(sla_layers.SLAResolver(sla_mod.SLA()).ensemble(
            facts(sla_specs={"resex:ensemble": "a/b"})))

    def test_a_flavor_that_sets_it_is_wrong_and_ignored(self):
        resolver = sla_layers.SLAResolver(sla_mod.SLA())
        vm = facts(flavor_specs={"resex:ensemble": "e1", "resex:shares": "30"})
        with self.assertLogs("resex_libvirt.hypervisor.sla_layers", "WARNING") as logs:
            got, _source = resolver.resolve(vm)
        self.assertIn("unknown key", logs.output[0])
        self.assertEqual(30, got.shares)
        self.assertIsNone(resolver.ensemble(vm))
        self.assertNotIn("resex:ensemble", sla_mod.KEYS)   # so nova-api refuses it too

    def test_the_server_group_is_read_from_the_servers_body(self):
        server = {"flavor": {"extra_specs": {}}, "server_groups": [self.GROUP]}
        self.assertEqual(self.GROUP, nova_sla.server_group_of(server))
        for body in ({}, {"server_groups": []}, {"server_groups": "x"},
                     {"server_groups": [7, "a b"]}, None):
            self.assertIsNone(nova_sla.server_group_of(body), body)
        self.assertEqual("2.71", nova_sla.MIN_MICROVERSION)


class ChannelPolicyTest(unittest.TestCase):

    def test_an_unknown_policy_is_refused(self):
        with self.assertRaises(exceptions.ConfigError):
            channel.ChannelHotplug("some", clock=lambda: 0.0, started_at=lambda uuid: None)

    def test_which_vms_want_a_channel(self):
        sensitive = sla_mod.SLA(latency_sla_us=200.0)
        plain = sla_mod.SLA()
        for policy, want in (("sensitive", (True, False)), ("all", (True, True)),
                             ("none", (False, False))):
            plug = channel.ChannelHotplug(policy, lambda: 0.0, lambda uuid: None)
            self.assertEqual(want, (plug.wants(sensitive, facts()), plug.wants(plain, facts())),
                             policy)
            # A VM that has its channel wants none.
            self.assertFalse(plug.wants(sensitive, facts(latency_channel="/run/x.sock")))

    def test_no_controller_is_said_once_and_nothing_is_attached(self):
        plug = channel.ChannelHotplug("all", lambda: 0.0, lambda uuid: None)
        no_dom = object()    # never called: there is nothing to attach to
        with self.assertLogs("resex_libvirt.hypervisor.channel", "WARNING") as logs:
            for _ in range(2):
                got, problem = plug.plug(no_dom, facts(virtio_serial=False))
                self.assertEqual(channel.NO_CONTROLLER, problem)
        self.assertEqual(1, len(logs.records))


class _Mapping:
    restorable = ("cpu_shares",)


class OriginalsTest(unittest.TestCase):

    def _vm(self):
        vm = domains.Adopted(info=None, facts=None, mapping=_Mapping(), written={},
                             adopted_at=0.0)
        vm.ours["cpu_shares"] = collections.deque([512, 256])
        return vm

    def test_a_tunable_the_agent_wrote_is_not_a_change_and_a_foreign_one_is(self):
        book = originals.Originals()
        cache = {UUID: self._vm()}
        self.assertEqual(set(), book.changed_tunables(cache, [(UUID, {"cputune.shares": 256})]))
        self.assertEqual({UUID}, book.changed_tunables(cache, [(UUID, {"cputune.shares": 999})]))
        # A VM nobody adopted, or a knob the agent never wrote, marks nothing.
        self.assertEqual(set(), book.changed_tunables(cache, [("other", {"cputune.shares": 1})]))
        self.assertEqual(set(), book.changed_tunables(
            cache, [(UUID, {"cputune.vcpu_quota": 1})]))

    def test_updates_are_handed_out_once_oldest_first(self):
        book = originals.Originals()
        vm = self._vm()
        vm.info = type("Info", (), {"uuid": UUID})()
        book.stopped(vm)
        book.stopped(vm)
        got = book.updates()
        self.assertEqual([(UUID, None, "stopped")] * 2,
                         [(u.uuid, u.originals, u.reason) for u in got])
        self.assertEqual([], book.updates())

    def test_a_refused_original_said_of_a_vm_is_dropped_with_it(self):
        book = originals.Originals()
        refusing = type("Refusing", (), {
            "originals": lambda self, persistent, flavor, nova: ({}, "vcpu_quota")})()
        with self.assertLogs("resex_libvirt.hypervisor.originals", "WARNING") as logs:
            for k in range(20):
                churned = metadata.DomainFacts(
                    uuid="7b2f5d9c-0000-4000-8000-%012d" % k, name="churn-%d" % k, vcpus=1,
                    sla_specs={}, latency_channel=None, interfaces=(), hostdevs=(), nova=None,
                    virtio_serial=False)
                book.of_definition(churned, refusing, persistent={}, flavor=None)
                book.of_definition(churned, refusing, persistent={}, flavor=None)
                book.forget(churned.uuid)
        self.assertEqual(20, len(logs.records))
        self.assertEqual(set(), book._warned)


class ArrivalTest(unittest.TestCase):
    """A Nova instance that arrives capped (a live migration) is re-written at once."""

    def _vm(self, live, persistent, nova=True):
        mapping = knobs.QemuPosixMapping(period_us=100000)
        info = type("Info", (), {"uuid": UUID, "name": "vm", "vcpus": 1})()
        found = facts(flavor_specs={} if nova else None)
        originals_ = mapping.originals(persistent, {}, nova=nova)[0]
        return domains.Adopted(info=info, facts=found, mapping=mapping, written=dict(live),
                               adopted_at=0.0, originals=originals_)

    def _arrive(self, vm):
        book = originals.Originals()
        book.seed(vm)
        return [(u.reason, u.reassert) for u in book.updates()]

    def test_a_nova_instance_with_a_cap_nova_did_not_set_is_reasserted(self):
        # node2 got the source agent's 6% cap in the live XML Nova copied over.
        vm = self._vm({"global_period": 16556, "global_quota": 1000},
                      {"global_period": 100000, "global_quota": -1})
        self.assertEqual([("arrived", True)], self._arrive(vm))

    def test_an_uncapped_arrival_or_a_vm_outside_nova_is_left_alone(self):
        uncapped = self._vm({"global_period": 100000, "global_quota": -1},
                            {"global_period": 100000, "global_quota": -1})
        self.assertEqual([], self._arrive(uncapped))
        # An operator's cap on a VM Nova does not manage is the operator's.
        theirs = self._vm({"global_period": 100000, "global_quota": 50000},
                          {"global_period": 100000, "global_quota": 50000}, nova=False)
        self.assertEqual([], self._arrive(theirs))
