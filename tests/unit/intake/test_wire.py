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

"""The v1 latency report wire format: what is accepted, and why everything else is not."""

import json
import math
import unittest

from hypothesis import given
from hypothesis import strategies as st

from benchex import wire

VM = "6f2b8a3e-1c4d-4e5f-9a0b-1c2d3e4f5a6b"
LIMITS = wire.Limits(max_bytes=512, plausible_max_us=10_000_000.0, max_n=1_000_000)


def line(**fields):
    obj = {"v": 1, "n": 10, "mean_us": 200.0, "std_us": 5.0, "p99_us": 230.0}
    obj.update(fields)
    obj = {k: v for k, v in obj.items() if v is not Ellipsis}
    return json.dumps(obj).encode()


class TestAccepted(unittest.TestCase):

    def test_channel_report_is_parsed_without_a_vm(self):
        r = wire.parse(line(), wire.SOURCE_CHANNEL, LIMITS)
        self.assertEqual(wire.Report(n=10, mean_us=200.0, std_us=5.0, p99_us=230.0), r)

    def test_probe_report_names_its_vm_in_canonical_form(self):
        r = wire.parse(line(vm=VM.upper()), wire.SOURCE_PROBE, LIMITS)
        self.assertEqual(VM, r.vm)

    def test_integers_are_accepted_as_latencies_and_std_may_be_zero(self):
        r = wire.parse(line(n=1, mean_us=7, std_us=0, p99_us=7), wire.SOURCE_CHANNEL, LIMITS)
        self.assertEqual((7.0, 0.0, 7.0), (r.mean_us, r.std_us, r.p99_us))

    def test_the_plausibility_bound_itself_is_accepted(self):
        r = wire.parse(line(mean_us=1e7, std_us=1e7, p99_us=1e7), wire.SOURCE_CHANNEL, LIMITS)
        self.assertEqual(1e7, r.mean_us)

    @given(n=st.integers(1, 1_000_000),
           mean=st.floats(0.001, 1e7), std=st.floats(0.0, 1e7), p99=st.floats(0.001, 1e7),
           probe=st.booleans())
    def test_encode_then_parse_round_trips(self, n, mean, std, p99, probe):
        data = wire.encode(n, mean, std, p99, vm=VM if probe else None)
        self.assertTrue(data.endswith(b"\n"))
        self.assertLessEqual(len(data), 160)
        source = wire.SOURCE_PROBE if probe else wire.SOURCE_CHANNEL
        r = wire.parse(data.rstrip(b"\n"), source, LIMITS)
        self.assertEqual(n, r.n)
        self.assertAlmostEqual(mean, r.mean_us, delta=0.0006)
        self.assertAlmostEqual(std, r.std_us, delta=0.0006)


class TestRejected(unittest.TestCase):

    def assertRejected(self, reason, data, source=wire.SOURCE_CHANNEL, limits=LIMITS):
        with self.assertRaises(wire.Rejected) as ctx:
            wire.parse(data, source, limits)
        self.assertEqual(reason, ctx.exception.reason, ctx.exception)

    def test_a_vm_field_on_a_channel_is_rejected_not_ignored(self):
        self.assertRejected(wire.VM_FIELD_IN_CHANNEL, line(vm=VM))

    def test_a_probe_report_must_name_a_uuid(self):
        self.assertRejected(wire.SCHEMA, line(), wire.SOURCE_PROBE)
        self.assertRejected(wire.SCHEMA, line(vm="instance-0001"), wire.SOURCE_PROBE)
        self.assertRejected(wire.SCHEMA, line(vm=12), wire.SOURCE_PROBE)

    def test_nan_and_infinity_literals_are_not_finite(self):
        for literal in (b"NaN", b"Infinity", b"-Infinity"):
            data = line().replace(b"200.0", literal)
            self.assertRejected(wire.NOT_FINITE, data)

    def test_overflowing_numbers_are_not_finite(self):
        self.assertRejected(wire.NOT_FINITE, line().replace(b"200.0", b"1e400"))
        self.assertRejected(wire.OUT_OF_RANGE, line().replace(b"200.0", b"9" * 400))

    def test_negative_zero_and_implausible_latencies_are_out_of_range(self):
        self.assertRejected(wire.OUT_OF_RANGE, line(mean_us=-1.0))
        self.assertRejected(wire.OUT_OF_RANGE, line(mean_us=0.0))
        self.assertRejected(wire.OUT_OF_RANGE, line(p99_us=0))
        self.assertRejected(wire.OUT_OF_RANGE, line(std_us=-0.5))
        self.assertRejected(wire.OUT_OF_RANGE, line(mean_us=10_000_000.5))
        self.assertRejected(wire.OUT_OF_RANGE, line(p99_us=3.6e9))

    def test_sample_count_must_be_a_positive_bounded_integer(self):
        self.assertRejected(wire.OUT_OF_RANGE, line(n=0))
        self.assertRejected(wire.OUT_OF_RANGE, line(n=1_000_001))
        self.assertRejected(wire.SCHEMA, line(n=10.0))
        self.assertRejected(wire.SCHEMA, line(n=True))
        self.assertRejected(wire.SCHEMA, line(n="10"))

    def test_booleans_strings_and_nulls_are_not_numbers(self):
        for bad in (True, "200", None, [200], {"x": 1}):
            self.assertRejected(wire.SCHEMA, line(mean_us=bad))

    def test_missing_extra_and_duplicate_keys_break_the_schema(self):
        self.assertRejected(wire.SCHEMA, line(p99_us=...))
        self.assertRejected(wire.SCHEMA, line(extra=1))
        dup = b'{"v":1,"n":1,"mean_us":1,"std_us":0,"p99_us":1,"mean_us":2}'
        self.assertRejected(wire.SCHEMA, dup)

    def test_other_versions_are_unsupported(self):
        self.assertRejected(wire.VERSION_UNSUPPORTED, line(v=3))
        self.assertRejected(wire.VERSION_UNSUPPORTED, line(v=0))
        self.assertRejected(wire.VERSION_UNSUPPORTED, line(v=1.0))
        self.assertRejected(wire.VERSION_UNSUPPORTED, line(v=True))
        self.assertRejected(wire.VERSION_UNSUPPORTED, line(v=...))

    def test_non_objects_non_json_and_non_utf8_are_rejected(self):
        self.assertRejected(wire.NOT_OBJECT, b"[1, 2]")
        self.assertRejected(wire.NOT_OBJECT, b"42")
        self.assertRejected(wire.NOT_JSON, b"")
        self.assertRejected(wire.NOT_JSON, b'{"v":1,')
        self.assertRejected(wire.NOT_JSON, b"[" * 100_000, limits=wire.Limits(max_bytes=200_000))
        self.assertRejected(wire.NOT_UTF8, b'{"v":1,"n":"\xff"}')

    def test_a_line_over_the_byte_limit_is_too_long(self):
        self.assertRejected(wire.TOO_LONG, line() + b" " * 600)

    def test_every_rejection_is_a_value_error_carrying_its_reason(self):
        self.assertTrue(issubclass(wire.Rejected, ValueError))
        with self.assertRaises(ValueError) as ctx:
            wire.parse(b"[]", wire.SOURCE_CHANNEL)
        self.assertEqual(wire.NOT_OBJECT, ctx.exception.reason)


class TestPeer(unittest.TestCase):
    """Version 2: a report may name its peer; a bad one rejects the report (``bad_peer``)."""

    def parse(self, data, source=wire.SOURCE_CHANNEL):
        return wire.parse(data, source, LIMITS)

    def test_version_1_reports_stay_valid_and_name_no_peer(self):
        self.assertIsNone(self.parse(line()).peer)
        self.assertIsNone(self.parse(line(v=2)).peer)     # the peer is optional in 2

    def test_every_form_of_peer_is_read_and_kept_in_its_canonical_form(self):
        for text, kept in (("10.0.0.7", "10.0.0.7"), ("10.0.0.7:7788", "10.0.0.7:7788"),
                           ("2001:DB8:0:0::1", "2001:db8::1"),
                           ("[2001:db8::1]:443", "[2001:db8::1]:443"),
                           ("FE80:0000:0000:0000:0002:C903:0003:1234",
                            "fe80:0000:0000:0000:0002:c903:0003:1234"),
                           ("0000:0000:0000:0000:0000:ffff:0a00:0007",
                            "0000:0000:0000:0000:0000:ffff:0a00:0007")):
            self.assertEqual(kept, self.parse(line(v=2, peer=text)).peer, text)
            self.assertEqual(kept, self.parse(line(v=2, peer=text, vm=VM),
                                              wire.SOURCE_PROBE).peer)

    def test_a_gid_is_told_from_an_ipv6_address_by_its_full_form(self):
        self.assertEqual(wire.PEER_GID,
                         wire.parse_peer("fe80:0000:0000:0000:0000:0000:0000:0001").kind)
        self.assertEqual(wire.PEER_IPV6, wire.parse_peer("fe80:0:0:0:0:0:0:1").kind)
        self.assertEqual(wire.PEER_IPV6, wire.parse_peer("fe80::1").kind)
        self.assertEqual(wire.PEER_IPV4, wire.parse_peer("10.0.0.7:1").kind)
        self.assertEqual(7788, wire.parse_peer("[::1]:7788").port)

    def test_a_bad_peer_rejects_the_report(self):
        for bad in ("", "server.example", "10.0.0.7:0", "10.0.0.7:65536", "10.0.0.07",
                    "10.0.0.7:", "10.0.0.7:080", "fe80::1%eth0", "[fe80::1]", "[10.0.0.7]:80",
                    "2001:db8::1:80:", "1.2.3", "::ffff:1.2.3.256", "x" * 65,
                    "fe80:0000:0000:0000:0002:c903:0003", 10, None, True, ["10.0.0.7"],
                    {"ip": "10.0.0.7"}, "\u0031.2.3.4\u0000"):
            with self.assertRaises(wire.Rejected) as ctx:
                self.parse(line(v=2, peer=bad))
            self.assertEqual(wire.BAD_PEER, ctx.exception.reason, bad)

    def test_a_peer_in_a_version_1_report_breaks_its_schema(self):
        with self.assertRaises(wire.Rejected) as ctx:
            self.parse(line(peer="10.0.0.7"))
        self.assertEqual(wire.SCHEMA, ctx.exception.reason)

    def test_encode_writes_version_2_with_a_peer_and_refuses_a_bad_one(self):
        data = wire.encode(10, 200.0, 5.0, 230.0, peer="[2001:DB8::1]:80")
        self.assertEqual({"v": 2, "peer": "[2001:db8::1]:80"},
                         {k: v for k, v in json.loads(data).items() if k in ("v", "peer")})
        self.assertEqual(1, json.loads(wire.encode(10, 200.0, 5.0, 230.0))["v"])
        self.assertRaises(ValueError, wire.encode, 10, 200.0, 5.0, 230.0, peer="host")

    def test_the_longest_report_fits_the_smallest_line_bound_by_far(self):
        data = wire.encode(1_000_000, 1e7, 1e7, 1e7, vm=VM,
                           peer="[ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe]:65535")
        self.assertLess(len(data), 230)


class TestInvariant(unittest.TestCase):

    @given(st.binary(max_size=600))
    def test_any_bytes_give_a_valid_report_or_a_known_reason(self, data):
        for source in wire.SOURCES:
            try:
                r = wire.parse(data, source, LIMITS)
            except wire.Rejected as exc:
                self.assertIn(exc.reason, wire.REASONS)
            else:
                for v in (r.mean_us, r.std_us, r.p99_us):
                    self.assertTrue(math.isfinite(v) and 0 <= v <= LIMITS.plausible_max_us)
