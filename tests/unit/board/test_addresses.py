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

"""Report 1.4: the VMs' addresses on the board, and a peer traced to its host and VM."""

import json
import unittest

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from benchex import wire
from resex_libvirt.board import addresses
from resex_libvirt.board import report as report_mod
from tests.unit.board import reports
from tests.unit.board.test_report import summary
from tests.unit.board.test_report import vm_epoch

A = "aaaaaaaa-0000-4000-8000-000000000001"
B = "bbbbbbbb-0000-4000-8000-000000000002"
C = "cccccccc-0000-4000-8000-000000000003"


def published(host, vm_addresses, ts=100.0, vms=8):
    """A report of ``host`` publishing ``{vm: [address, ...]}``."""
    return reports.make(host, ts=ts, vms=vms, addresses=vm_addresses)


class TestCanonicalForms(unittest.TestCase):

    def test_each_kind_has_one_written_form(self):
        for given_, kept in (("10.0.0.7", "10.0.0.7"), ("2001:DB8:0::7", "2001:db8::7"),
                             ("FA:16:3E:11:22:33", "fa:16:3e:11:22:33"),
                             ("0002:C903:0003:1234", "0002:c903:0003:1234")):
            self.assertEqual(kept, addresses.canonical(given_), given_)

    def test_what_is_no_address_is_none(self):
        for bad in ("", "host.example", "10.0.0.07", "fe80::1%eth0", "10.0.0.0/8",
                    "fa:16:3e:11:22", "fa-16-3e-11-22-33", "0002:c903:0003", None, 7, "x" * 46):
            self.assertIsNone(addresses.canonical(bad), bad)


class TestTheField(unittest.TestCase):

    def test_the_field_round_trips(self):
        rec = published("c1", {A: ["10.0.0.7", "FA:16:3E:11:22:33"], B: ["2001:db8::9"]})
        data = json.loads(rec.to_json())
        self.assertEqual({A: ["10.0.0.7", "fa:16:3e:11:22:33"], B: ["2001:db8::9"]},
                         data["addresses"])
        self.assertEqual(rec, report_mod.HostReport.from_json(rec.to_json()))

    def test_an_older_record_has_none(self):
        data = json.loads(reports.make().to_json())
        del data["addresses"]
        data["version"] = "1.3"
        self.assertEqual((), report_mod.HostReport.from_dict(data).addresses)

    def test_a_reader_leaves_out_what_it_does_not_know_and_keeps_each_once(self):
        rec = published("c1", {A: ["10.0.0.7", "tomorrow's-kind", "10.0.0.7"], B: ["?"]})
        self.assertEqual(((A, ("10.0.0.7",)),), rec.addresses)

    def test_a_wrong_shape_rejects_the_record(self):
        for bad in ("10.0.0.7", ["10.0.0.7"], {A: "10.0.0.7"}, {A: [7]}, {"": ["10.0.0.7"]},
                    {"x" * 65: ["10.0.0.7"]}, {A: ["10.0.0.%d" % k for k in range(9)]},
                    {"vm-%d" % k: ["10.0.0.7"] for k in range(9)}):      # more than vms
            with self.assertRaises(report_mod.InvalidReport, msg=repr(bad)):
                published("c1", bad)

    def test_the_agent_publishes_its_vms_addresses_sensitive_ones_first(self):
        vms = [vm_epoch(A), vm_epoch(B, sensitive=True), vm_epoch(C)]
        rec = report_mod.HostReport.from_summary(
            "c1", 1.0, summary(vms, 0.1), 1e9, "test",
            addresses={A: ("10.0.0.1",), B: ("10.0.0.2", "fa:16:3e:00:00:02"), C: ()})
        self.assertEqual(((A, ("10.0.0.1",)), (B, ("10.0.0.2", "fa:16:3e:00:00:02"))),
                         rec.addresses)
        entry = len(json.dumps({B: ["10.0.0.2", "fa:16:3e:00:00:02"]}, separators=(",", ":")))
        self.assertEqual(((B, ("10.0.0.2", "fa:16:3e:00:00:02")),),
                         addresses.fit({A: ["10.0.0.1"], B: ["10.0.0.2", "fa:16:3e:00:00:02"]},
                                       entry, first=[B]))

    @settings(max_examples=40, deadline=None)
    @given(st.integers(1, 400), st.integers(0, 40), st.integers(1, 8))
    def test_the_record_stays_within_what_every_reader_accepts(self, n, n_projects, per_vm):
        # Many VMs with the longest addresses, and the projects' worst case.
        vms = [vm_epoch("%08d-0000-4000-8000-000000000000" % k, sensitive=k % 3 == 0)
               for k in range(n)]
        names = [v.vm for v in vms]
        projects = {vm: ("%05d" % (k % max(1, n_projects))).rjust(
            report_mod.MAX_PROJECT_CHARS, "f") for k, vm in enumerate(names) if n_projects}
        given_ = {vm: ["FFFF:ffff:ffff:ffff:ffff:ffff:ffff:%x" % (0xf000 + j)
                       for j in range(per_vm)] for vm in names}
        rec = report_mod.HostReport.from_summary(
            "h" * 255, 1.7e9, summary(vms, 0.123456789, 12.3456789), 1.23456789e10,
            "x" * 255, projects=projects, addresses=given_)
        text = rec.to_json()
        self.assertLessEqual(len(text.encode()), report_mod.MAX_RECORD_BYTES)
        self.assertEqual(rec, report_mod.HostReport.from_json(text))
        for vm, kept in rec.addresses:
            self.assertEqual(tuple(addresses.canonical(a) for a in given_[vm]), kept)
        # Sensitive VMs are published before any other.
        sensitive = {v.vm for v in vms if v.sensitive}
        kept_vms = {vm for vm, _a in rec.addresses}
        if kept_vms - sensitive:
            self.assertLessEqual(sensitive, kept_vms)


class TestResolve(unittest.TestCase):

    def setUp(self):
        super().setUp()
        self.board = {
            "c1": published("c1", {A: ["10.0.0.7", "fa:16:3e:11:22:33"]}),
            "c2": published("c2", {B: ["2001:db8::9", "0002:c903:0003:1234"],
                                   C: ["10.1.0.5"]}),
        }

    def test_an_ipv4_peer_with_or_without_its_port(self):
        self.assertEqual(("c1", A), addresses.resolve("10.0.0.7:7788", self.board))
        self.assertEqual(("c1", A), addresses.resolve("10.0.0.7", self.board.values()))

    def test_an_ipv6_peer_in_any_spelling(self):
        self.assertEqual(("c2", B), addresses.resolve("[2001:DB8:0:0::9]:80", self.board))

    def test_a_gid_is_its_port_guid_its_ipv4_or_its_mac(self):
        # InfiniBand: subnet prefix and port GUID.
        self.assertEqual(("c2", B), addresses.resolve(
            "fe80:0000:0000:0000:0002:c903:0003:1234", self.board))
        # RoCE v2 over IPv4: the IPv4-mapped address.
        self.assertEqual(("c2", C), addresses.resolve(
            "0000:0000:0000:0000:0000:ffff:0a01:0005", self.board))
        # RoCE v1: the link-local EUI-64 of the interface's MAC.
        self.assertEqual(("c1", A), addresses.resolve(
            "fe80:0000:0000:0000:f816:3eff:fe11:2233", self.board))

    def test_an_unknown_or_bad_peer_is_nowhere(self):
        self.assertIsNone(addresses.resolve("10.9.9.9", self.board))
        self.assertIsNone(addresses.resolve("server.example", self.board))
        self.assertIsNone(addresses.resolve("10.0.0.7", {}))

    def test_two_vms_with_one_address_are_no_answer(self):
        # Tenant networks may reuse a private address: a guess would tax the wrong host.
        self.board["c3"] = published("c3", {"other-vm": ["10.0.0.7"]})
        self.assertIsNone(addresses.resolve("10.0.0.7", self.board))

    def test_a_migrated_vm_is_where_the_newer_report_says(self):
        self.board["c3"] = published("c3", {A: ["10.0.0.7"]}, ts=200.0)
        self.assertEqual(("c3", A), addresses.resolve("10.0.0.7", self.board))
        self.board["c3"] = published("c3", {A: ["10.0.0.7"]}, ts=50.0)
        self.assertEqual(("c1", A), addresses.resolve("10.0.0.7", self.board))

    @settings(max_examples=100, deadline=None)
    @given(st.ip_addresses(), st.integers(1, 65535))
    def test_every_published_ip_resolves_to_its_vm(self, address, port):
        board = dict(self.board, c9=published("c9", {"vm-x": [str(address)]}))
        peer = ("[%s]:%d" if address.version == 6 else "%s:%d") % (address, port)
        others = {a for r in self.board.values() for _vm, addrs in r.addresses for a in addrs}
        if addresses.keys_of(wire.parse_peer(peer)) & others:
            return      # it is also one of the others': no single answer
        self.assertEqual(("c9", "vm-x"), addresses.resolve(peer, board))
