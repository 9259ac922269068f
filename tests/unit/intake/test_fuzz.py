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

"""Fuzzing the wire format and the store: hostile input never crashes, grows or leaks.

Bulk inputs are fed to the parser and the store directly (the socket layer
only frames bytes; :mod:`tests.functional.intake.test_channels` pushes a
smaller hostile stream through real sockets). Inputs in total:
``TestParserFuzz`` 60 x 1,000, ``TestStoreFuzz`` 40 x 1,000 lines plus
20 x 1,000 flood lines, ``TestStructuredFuzz`` 300 examples: 120,300.
Each bulk example expands a hypothesis-drawn seed with :class:`random.Random`,
so a failure is reported as a reproducible seed.
"""

import dataclasses
import json
import math
import random
import unittest

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from benchex import framing
from benchex import wire
from resex_agent.intake import params as params_mod
from resex_agent.intake import store as store_mod
from resex_agent.intake import window
from resex_libvirt import sla as sla_mod

LIAR = "aaaaaaaa-0000-4000-8000-00000000000a"
HONEST = "bbbbbbbb-0000-4000-8000-00000000000b"
PLAIN = "cccccccc-0000-4000-8000-00000000000c"
STRANGER = "dddddddd-0000-4000-8000-00000000000d"
LIMITS = wire.Limits()

NASTY = [float("nan"), float("inf"), -float("inf"), -1, 0, -0.0, 1e308, 5e-324, 10 ** 30,
         -10 ** 30, 2 ** 63, 2 ** 64 + 1, True, False, None, "", "NaN", "1e3", [], {}, [1],
         {"a": 1}, 1.5e7, 3.6e9, 10_000_000.000001, 1_000_001, 0.5, "\u0000", "\ud800"]
KEYS = ["v", "n", "mean_us", "std_us", "p99_us", "vm", "peer", "x", "", "V", "mean", "\u00e9"]


def valid(rng, vm=None):
    obj = {"v": 1, "n": rng.randint(1, 5000), "mean_us": rng.uniform(1.0, 1e6),
           "std_us": rng.uniform(0.0, 1e5), "p99_us": rng.uniform(1.0, 1e6)}
    if vm is not None:
        obj["vm"] = vm
    return obj


def dumps(obj):
    return json.dumps(obj, allow_nan=True, ensure_ascii=False).encode("utf-8", "surrogatepass")


def hostile_line(rng, vm=None):
    """One malformed, huge, truncated, NaN/negative/overflowing or lying report line."""
    kind = rng.randrange(13)
    obj = valid(rng, vm)
    if kind == 0:
        return rng.randbytes(rng.randrange(0, 700))
    if kind == 1:
        data = dumps(obj)
        return data[:rng.randrange(0, len(data))]
    if kind == 2:
        obj[rng.choice(list(obj))] = rng.choice(NASTY)
        return dumps(obj)
    if kind == 3:
        del obj[rng.choice(list(obj))]
        return dumps(obj)
    if kind == 4:
        obj[rng.choice(KEYS)] = rng.choice([LIAR, STRANGER, 1, "x"])
        return dumps(obj)
    if kind == 5:
        return dumps(obj)[:-1] + b" " * rng.randrange(400, 5000) + b"}"
    if kind == 6:
        depth = rng.randrange(1, 3000)
        return b"[" * depth + b"1" + b"]" * rng.randrange(0, depth + 1)
    if kind == 7:
        key = rng.choice(["mean_us", "std_us", "p99_us", "n"])
        number = rng.choice(["1e%d" % rng.randrange(300, 5000), "-%d" % rng.randrange(10 ** 6),
                             "9" * rng.randrange(300, 600), "-0", "0e0", "1" + "0" * 20])
        return dumps(obj).replace(('"%s": ' % key).encode(), ('"%s": %s, "_":' % (key, number))
                                  .encode(), 1)
    if kind == 8:
        text = "".join(chr(rng.randrange(0, 0x110000)) for _ in range(rng.randrange(1, 60)))
        return text.encode("utf-8", "surrogatepass")
    if kind == 9:
        obj["v"] = rng.choice([0, 2, -1, 1.0, "1", None, 10 ** 20])
        return dumps(obj)
    if kind == 10:
        data = dumps(obj)
        return data[:-1] + b', "mean_us": 1}'
    if kind == 11:
        data = bytearray(dumps(obj))
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        return bytes(data)
    # A well-formed lie: the largest plausible latencies.
    obj.update(mean_us=LIMITS.plausible_max_us, std_us=LIMITS.plausible_max_us,
               p99_us=LIMITS.plausible_max_us)
    return dumps(obj)


class TestParserFuzz(unittest.TestCase):

    @settings(max_examples=60, deadline=None, database=None)
    @given(st.integers(0, 2 ** 64))
    def test_hostile_lines_give_a_valid_report_or_a_known_reason(self, seed):
        rng = random.Random(seed)
        for _ in range(1000):
            source = rng.choice(wire.SOURCES)
            line = hostile_line(rng, vm=HONEST if source == wire.SOURCE_PROBE else None)
            try:
                r = wire.parse(line, source, LIMITS)
            except wire.Rejected as exc:
                self.assertIn(exc.reason, wire.REASONS)
                continue
            self.assertLessEqual(len(line), LIMITS.max_bytes)
            self.assertTrue(1 <= r.n <= LIMITS.max_n)
            self.assertTrue(r.mean_us > 0 and r.p99_us > 0 and r.std_us >= 0)
            for v in (r.mean_us, r.std_us, r.p99_us):
                self.assertTrue(math.isfinite(v) and v <= LIMITS.plausible_max_us)
            self.assertEqual(source == wire.SOURCE_PROBE, r.vm is not None)


class TestStructuredFuzz(unittest.TestCase):

    json_values = st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                    max_size=3),
        max_leaves=8)

    @settings(max_examples=300, deadline=None, database=None)
    @given(st.dictionaries(st.sampled_from(KEYS), json_values, max_size=7))
    def test_any_json_object_is_accepted_only_when_it_is_a_valid_report(self, obj):
        data = dumps(obj)
        try:
            r = wire.parse(data, wire.SOURCE_CHANNEL, LIMITS)
        except wire.Rejected as exc:
            self.assertIn(exc.reason, wire.REASONS)
            return
        optional = {"peer"} if obj["v"] == 2 else set()
        self.assertEqual({"v", "n", "mean_us", "std_us", "p99_us"}, set(obj) - optional)
        self.assertEqual(wire.canonical_peer(obj.get("peer")), r.peer)
        self.assertIs(type(obj["v"]), int)
        self.assertIs(type(obj["n"]), int)
        self.assertEqual(float(obj["mean_us"]), r.mean_us)


class TestStoreFuzz(unittest.TestCase):
    """Honest VMs' windows are unharmed and every table stays bounded."""

    WINDOW = 8

    def make(self, rng):
        clock = [0.0]
        params = params_mod.IntakeParams(
            max_message_bytes=512, rate_limit_per_s=10.0,
            rate_burst=rng.choice([5, 100_000]), window_reports=self.WINDOW,
            freshness_s=1e9, log_interval_s=rng.choice([0.5, 60.0]))
        store = store_mod.ReportStore(params, lambda: clock[0])
        store.set_vms({LIAR: sla_mod.SLA(latency_sla_us=100.0),
                       HONEST: sla_mod.SLA(latency_sla_us=200.0),
                       PLAIN: sla_mod.SLA()})
        return store, clock, params

    def assertBounded(self, store, framers, params):
        fp = store.footprint()
        self.assertLessEqual(fp["reports"], self.WINDOW * 3 * 2)
        self.assertLessEqual(fp["windows"], 3 * 2)
        self.assertLessEqual(fp["buckets"], 3 * 2)
        self.assertLessEqual(fp["counters"], 4)
        self.assertLessEqual(fp["log_throttles"], 4 * len(wire.REASONS) + 3 * 2)
        for f in framers:
            self.assertLess(f.pending, params.max_message_bytes)

    @settings(max_examples=40, deadline=None, database=None)
    @given(st.integers(0, 2 ** 64))
    def test_hostile_streams_leave_honest_windows_exact(self, seed):
        rng = random.Random(seed)
        store, clock, params = self.make(rng)
        framers = {LIAR: framing.LineFramer(params.max_message_bytes),
                   PLAIN: framing.LineFramer(params.max_message_bytes),
                   None: framing.LineFramer(params.max_message_bytes)}
        honest = []
        for i in range(1000):
            who = rng.choice([LIAR, PLAIN, None])
            source = wire.SOURCE_PROBE if who is None else wire.SOURCE_CHANNEL
            # Probes are trusted to name any VM: only the channels of LIAR and PLAIN,
            # and probe lines naming them or strangers, are hostile here.
            line = hostile_line(rng, vm=rng.choice([LIAR, PLAIN, STRANGER])
                                if who is None else None)
            data = line + b"\n"
            cut = rng.randrange(len(data) + 1)
            for piece in (data[:cut], data[cut:]):
                for framed in framers[who].feed(piece):
                    store.offer(source, framed, vm=who)
            if i % 50 == 0:
                clock[0] += 1.0
                r = wire.parse(wire.encode(rng.randint(1, 100), rng.uniform(150, 250),
                                           rng.uniform(0, 20), 300.0),
                               wire.SOURCE_CHANNEL, LIMITS)
                honest.append(r)
                line = wire.encode(r.n, r.mean_us, r.std_us, r.p99_us)
                for framed in framing.LineFramer(512).feed(line):
                    self.assertIsNotNone(store.offer(wire.SOURCE_CHANNEL, framed, vm=HONEST))
        self.assertBounded(store, framers.values(), params)
        kept = honest[-self.WINDOW:]
        # The first window handed: every request it pools is new.
        self.assertEqual(window.pool(kept, new=sum(r.n for r in kept)), store.windows()[HONEST])
        self.assertNotIn(PLAIN, store.windows())
        stats = store.stats()
        self.assertEqual({}, stats[HONEST]["rejected"])
        total = sum(c["accepted"] + sum(c["rejected"].values()) for c in stats.values())
        self.assertGreaterEqual(total, 1000)

    @settings(max_examples=20, deadline=None, database=None)
    @given(st.integers(0, 2 ** 64))
    def test_a_flood_is_rate_limited_without_touching_others(self, seed):
        rng = random.Random(seed)
        store, clock, params = self.make(rng)
        store.offer(wire.SOURCE_CHANNEL, wire.encode(10, 210.0, 3.0, 230.0).rstrip(), vm=HONEST)
        before = store.windows()[HONEST]
        accepted = 0
        for _ in range(1000):
            clock[0] += rng.choice([0.0, 0.0, 0.001])
            line = wire.encode(1, rng.uniform(1, 1e7), 0.0, 1e7).rstrip()
            accepted += store.offer(wire.SOURCE_CHANNEL, line, vm=LIAR) is not None
        elapsed = clock[0]
        self.assertLessEqual(accepted, params.rate_burst + params.rate_limit_per_s * elapsed + 1)
        # The same figures, and no new requests: the flood added none to HONEST.
        self.assertEqual(dataclasses.replace(before, new=0), store.windows()[HONEST])
        self.assertBounded(store, [], params)


if __name__ == "__main__":
    unittest.main()
