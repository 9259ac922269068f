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

"""The report's ``peer`` under hypothesis: untrusted guest input never crashes the parser,
every peer it keeps is canonical, and every real address or GID is kept as what it is."""

import ipaddress
import json
import re
import unittest

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from benchex import wire

LIMITS = wire.Limits()
VM = "6f2b8a3e-1c4d-4e5f-9a0b-1c2d3e4f5a6b"

#: Text that looks like a peer, mutated: the characters peers are made of, and a few others.
PEERISH = st.text(alphabet="0123456789abcdefABCDEF:.[]%x -\u0000\u00e9\u0661", max_size=70)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | PEERISH,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                max_size=3),
    max_leaves=8)
PORTS = st.integers(1, 65535)
FULL_GROUPS = re.compile(r"\A[0-9a-f]{4}(:[0-9a-f]{4}){7}\Z")


def report(peer, version=2, vm=None):
    obj = {"v": version, "n": 10, "mean_us": 200.0, "std_us": 5.0, "p99_us": 230.0,
           "peer": peer}
    if vm is not None:
        obj["vm"] = vm
    return json.dumps(obj, ensure_ascii=False).encode("utf-8", "surrogatepass")


def gid_text(raw):
    return ":".join(raw[i:i + 2].hex() for i in range(0, 16, 2))


class TestPeerParser(unittest.TestCase):

    @settings(max_examples=500, deadline=None)
    @given(JSON_VALUES, st.sampled_from(wire.SOURCES))
    def test_any_peer_value_gives_a_canonical_peer_or_bad_peer(self, peer, source):
        line = report(peer, vm=VM if source == wire.SOURCE_PROBE else None)
        try:
            r = wire.parse(line, source, LIMITS)
        except wire.Rejected as exc:
            self.assertIn(exc.reason, (wire.BAD_PEER, wire.TOO_LONG, wire.NOT_UTF8,
                                       wire.NOT_FINITE), peer)
            return
        self.assertIsInstance(peer, str)
        self.assertEqual(r.peer, wire.canonical_peer(r.peer))   # kept canonical
        self.assertLessEqual(len(r.peer), wire.MAX_PEER_CHARS)
        self.assertEqual(wire.parse_peer(peer), wire.parse_peer(r.peer))

    @settings(max_examples=300, deadline=None)
    @given(PEERISH)
    def test_canonical_form_is_a_fixed_point_of_the_same_address(self, text):
        peer = wire.parse_peer(text)
        if peer is None:
            self.assertIsNone(wire.canonical_peer(text))
            return
        again = wire.parse_peer(str(peer))
        self.assertEqual(peer, again)
        self.assertEqual(str(peer), str(again))

    @given(st.ip_addresses(v=4), st.none() | PORTS)
    def test_every_ipv4_address_with_or_without_a_port_is_kept(self, address, port):
        text = str(address) if port is None else "%s:%d" % (address, port)
        r = wire.parse(report(text), wire.SOURCE_CHANNEL, LIMITS)
        peer = wire.parse_peer(r.peer)
        self.assertEqual((wire.PEER_IPV4, address, port), (peer.kind, peer.address, peer.port))

    @given(st.ip_addresses(v=6), st.none() | PORTS, st.booleans())
    def test_every_ipv6_address_in_any_case_is_kept(self, address, port, upper):
        text = address.exploded if upper else str(address)
        text = text.upper() if upper else text
        if port is not None:
            text = "[%s]:%d" % (text, port)
        r = wire.parse(report(text), wire.SOURCE_CHANNEL, LIMITS)
        peer = wire.parse_peer(r.peer)
        self.assertEqual(address, peer.address)
        self.assertEqual(port, peer.port)
        # Eight full groups without a port is how a GID is written: the same 128 bits.
        full = port is None and FULL_GROUPS.match(text.lower())
        self.assertEqual(wire.PEER_GID if full else wire.PEER_IPV6, peer.kind)

    @given(st.binary(min_size=16, max_size=16))
    def test_every_gid_is_kept_in_full(self, raw):
        r = wire.parse(report(gid_text(raw).upper()), wire.SOURCE_CHANNEL, LIMITS)
        self.assertEqual(gid_text(raw), r.peer)
        self.assertEqual(ipaddress.IPv6Address(raw), wire.parse_peer(r.peer).address)

    @given(JSON_VALUES)
    def test_a_peer_key_in_a_version_1_report_is_a_schema_error(self, peer):
        with self.assertRaises(wire.Rejected) as ctx:
            wire.parse(report(peer, version=1), wire.SOURCE_CHANNEL, LIMITS)
        self.assertIn(ctx.exception.reason, (wire.SCHEMA, wire.TOO_LONG, wire.NOT_UTF8,
                                             wire.NOT_FINITE))

    @given(st.ip_addresses(), st.none() | PORTS)
    def test_encode_then_parse_names_the_same_peer(self, address, port):
        text = str(address)
        if port is not None:
            text = ("[%s]:%d" if address.version == 6 else "%s:%d") % (text, port)
        data = wire.encode(5, 100.0, 1.0, 110.0, peer=text)
        self.assertEqual(wire.canonical_peer(text),
                         wire.parse(data.rstrip(b"\n"), wire.SOURCE_CHANNEL, LIMITS).peer)
