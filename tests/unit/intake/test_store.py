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

"""The report store: who may report, what is kept, what is counted and logged."""

import logging
import unittest

from benchex import framing
from benchex import wire
from resex_agent.intake import params as params_mod
from resex_agent.intake import store as store_mod
from resex_libvirt import sla as sla_mod

A = "aaaaaaaa-0000-4000-8000-000000000001"
B = "bbbbbbbb-0000-4000-8000-000000000002"
PLAIN = "cccccccc-0000-4000-8000-000000000003"
STRANGER = "dddddddd-0000-4000-8000-000000000004"


class ManualClock:
    """The store's clock, moved by the test (the store reads no other time)."""

    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def make_store(**kw):
    kw.setdefault("rate_limit_per_s", 10.0)
    kw.setdefault("rate_burst", 5)
    kw.setdefault("window_reports", 4)
    kw.setdefault("freshness_s", 3.0)
    kw.setdefault("log_interval_s", 60.0)
    clock = ManualClock()
    store = store_mod.ReportStore(params_mod.IntakeParams(**kw), clock)
    store.set_vms({A: sla_mod.SLA(latency_sla_us=100.0), B: sla_mod.SLA(latency_sla_us=200.0),
                   PLAIN: sla_mod.SLA()})
    return store, clock


def rep(mean, n=10, vm=None):
    return wire.encode(n, mean, 1.0, mean + 5, vm=vm).rstrip(b"\n")


class TestReportStore(unittest.TestCase):

    def test_a_channel_report_lands_in_its_own_vms_window(self):
        store, _ = make_store()
        self.assertIsNotNone(store.offer(wire.SOURCE_CHANNEL, rep(120.0), vm=A))
        wins = store.windows()
        self.assertEqual({A}, set(wins))
        self.assertEqual((10, 120.0), (wins[A].count, wins[A].mean_us))

    def test_a_channel_cannot_report_for_another_vm(self):
        store, _ = make_store()
        self.assertIsNone(store.offer(wire.SOURCE_CHANNEL, rep(999.0, vm=B), vm=A))
        self.assertEqual({}, store.windows())
        self.assertEqual({wire.VM_FIELD_IN_CHANNEL: 1}, store.stats()[A]["rejected"])
        self.assertNotIn(B, store.stats())

    def test_a_vm_without_a_latency_sla_has_no_window(self):
        store, _ = make_store()
        self.assertIsNone(store.offer(wire.SOURCE_CHANNEL, rep(5e6), vm=PLAIN))
        self.assertIsNone(store.offer(wire.SOURCE_PROBE, rep(5e6, vm=PLAIN)))
        self.assertEqual({}, store.windows())
        self.assertEqual({wire.NO_LATENCY_SLA: 2}, store.stats()[PLAIN]["rejected"])

    def test_probe_reports_for_unknown_vms_store_nothing_about_them(self):
        store, _ = make_store()
        for _ in range(100):
            store.offer(wire.SOURCE_PROBE, rep(100.0, vm=STRANGER))
        self.assertNotIn(STRANGER, store.stats())
        self.assertEqual({wire.UNKNOWN_VM: 100},
                         store.stats()[store_mod.UNATTRIBUTED]["rejected"])
        self.assertEqual(0, store.footprint()["windows"])

    def test_probe_and_channel_reports_of_a_vm_are_pooled(self):
        store, _ = make_store()
        store.offer(wire.SOURCE_CHANNEL, rep(100.0, n=10), vm=A)
        store.offer(wire.SOURCE_PROBE, rep(200.0, n=30, vm=A))
        w = store.windows()[A]
        self.assertEqual(40, w.count)
        self.assertAlmostEqual(175.0, w.mean_us)

    def test_stale_reports_expire_after_the_freshness_horizon(self):
        store, clock = make_store(freshness_s=3.0)
        store.offer(wire.SOURCE_CHANNEL, rep(100.0), vm=A)
        clock.t += 2.0
        store.offer(wire.SOURCE_CHANNEL, rep(300.0), vm=A)
        self.assertEqual(20, store.windows()[A].count)
        clock.t += 1.5
        self.assertEqual((10, 300.0), (store.windows()[A].count, store.windows()[A].mean_us))
        clock.t += 2.0
        self.assertEqual({}, store.windows())
        self.assertEqual(0, store.footprint()["reports"])

    def test_reports_over_the_rate_are_dropped_per_vm_and_source(self):
        store, clock = make_store(rate_limit_per_s=10.0, rate_burst=5)
        accepted = sum(store.offer(wire.SOURCE_CHANNEL, rep(100.0), vm=A) is not None
                       for _ in range(50))
        self.assertEqual(5, accepted)
        self.assertEqual(45, store.stats()[A]["rejected"][wire.RATE_LIMITED])
        # Another VM, and the same VM through the probe socket, have their own buckets.
        self.assertIsNotNone(store.offer(wire.SOURCE_CHANNEL, rep(100.0), vm=B))
        self.assertIsNotNone(store.offer(wire.SOURCE_PROBE, rep(100.0, vm=A)))
        clock.t += 0.1
        self.assertIsNotNone(store.offer(wire.SOURCE_CHANNEL, rep(100.0), vm=A))

    def test_too_long_lines_are_counted_against_the_channels_vm(self):
        store, _ = make_store()
        store.offer(wire.SOURCE_CHANNEL, framing.TOO_LONG, vm=A)
        store.offer(wire.SOURCE_PROBE, framing.TOO_LONG)
        self.assertEqual({wire.TOO_LONG: 1}, store.stats()[A]["rejected"])
        self.assertEqual({wire.TOO_LONG: 1}, store.stats()[store_mod.UNATTRIBUTED]["rejected"])

    def test_vms_that_leave_are_forgotten(self):
        store, _ = make_store()
        store.offer(wire.SOURCE_CHANNEL, rep(100.0), vm=A)
        store.offer(wire.SOURCE_CHANNEL, b"junk", vm=B)
        store.set_vms({B: sla_mod.SLA(latency_sla_us=200.0)})
        self.assertEqual({}, store.windows())
        self.assertEqual({B}, set(store.stats()))
        self.assertIsNone(store.offer(wire.SOURCE_CHANNEL, rep(100.0), vm=A))

    def test_losing_the_latency_sla_drops_the_window(self):
        store, _ = make_store()
        store.offer(wire.SOURCE_CHANNEL, rep(100.0), vm=A)
        store.set_vms({A: sla_mod.SLA()})
        self.assertEqual({}, store.windows())

    def test_the_log_names_the_vm_and_its_claimed_mean(self):
        store, _ = make_store()
        with self.assertLogs("resex_agent.intake.store", level="INFO") as logs:
            store.offer(wire.SOURCE_CHANNEL, rep(105.0), vm=A)
            store.offer(wire.SOURCE_CHANNEL, rep(9_000_000.0), vm=A)
        self.assertIn("INFO", logs.output[0])
        self.assertIn(A, logs.output[0])
        self.assertIn("mean 105.0 us", logs.output[0])
        self.assertIn("WARNING", logs.output[1])
        self.assertIn("mean 9000000.0 us", logs.output[1])

    def test_a_bad_message_is_logged_once_per_interval_but_always_counted(self):
        store, clock = make_store(log_interval_s=60.0, rate_burst=1000)
        logger = logging.getLogger("resex_agent.intake.store")
        with self.assertLogs(logger, level="WARNING") as logs:
            for _ in range(100):
                store.offer(wire.SOURCE_CHANNEL, b"{nope", vm=A)
            clock.t += 61.0
            store.offer(wire.SOURCE_CHANNEL, b"{nope", vm=A)
        self.assertEqual(2, len(logs.output))
        self.assertEqual(101, store.stats()[A]["rejected"][wire.NOT_JSON])


class TestNewRequests(unittest.TestCase):
    """Each window handed says how many of its requests arrived since the VM's last one."""

    def test_a_window_handed_again_with_no_new_report_has_none_new(self):
        store, _ = make_store()
        store.offer(wire.SOURCE_CHANNEL, rep(120.0, n=25), vm=A)
        first = store.windows()[A]
        self.assertEqual((25, 25), (first.count, first.new))
        again = store.windows()[A]
        self.assertEqual((25, 0), (again.count, again.new))

    def test_the_requests_of_every_report_since_the_last_hand_over_are_new(self):
        store, _ = make_store()
        store.offer(wire.SOURCE_CHANNEL, rep(100.0, n=7), vm=A)
        store.windows()
        store.offer(wire.SOURCE_CHANNEL, rep(110.0, n=40), vm=A)
        store.offer(wire.SOURCE_CHANNEL, rep(120.0, n=60), vm=A)
        w = store.windows()[A]
        self.assertEqual((107, 100), (w.count, w.new))
        self.assertEqual(0, store.windows()[A].new)

    def test_a_report_aging_out_with_none_arriving_brings_nothing_new(self):
        store, clock = make_store(freshness_s=3.0)
        store.offer(wire.SOURCE_CHANNEL, rep(100.0, n=10), vm=A)
        clock.t += 2.0
        store.offer(wire.SOURCE_CHANNEL, rep(300.0, n=30), vm=A)
        self.assertEqual(40, store.windows()[A].new)
        clock.t += 1.5       # the first report leaves the window: a different window
        w = store.windows()[A]
        self.assertEqual((30, 300.0, 0), (w.count, w.mean_us, w.new))

    def test_a_report_pushed_out_by_a_new_one_counts_only_the_new_one(self):
        store, _ = make_store(window_reports=2)
        store.offer(wire.SOURCE_CHANNEL, rep(100.0, n=10), vm=A)
        store.offer(wire.SOURCE_CHANNEL, rep(100.0, n=20), vm=A)
        store.windows()
        store.offer(wire.SOURCE_CHANNEL, rep(100.0, n=30), vm=A)
        w = store.windows()[A]
        self.assertEqual((50, 30), (w.count, w.new))

    def test_more_reports_than_the_window_keeps_are_new_as_far_as_kept(self):
        store, _ = make_store(window_reports=2)
        for n in (10, 20, 30):
            store.offer(wire.SOURCE_CHANNEL, rep(100.0, n=n), vm=A)
        w = store.windows()[A]
        self.assertEqual((50, 50), (w.count, w.new))

    def test_channel_and_probe_reports_are_new_for_their_vm_only(self):
        store, _ = make_store()
        store.offer(wire.SOURCE_CHANNEL, rep(100.0, n=10), vm=A)
        store.offer(wire.SOURCE_CHANNEL, rep(200.0, n=15), vm=B)
        store.windows()
        store.offer(wire.SOURCE_PROBE, rep(100.0, n=5, vm=A))
        wins = store.windows()
        self.assertEqual({A: (15, 5), B: (15, 0)},
                         {vm: (w.count, w.new) for vm, w in wins.items()})

    def test_reports_that_arrive_after_the_window_expired_are_new(self):
        store, clock = make_store(freshness_s=3.0)
        store.offer(wire.SOURCE_CHANNEL, rep(100.0, n=10), vm=A)
        store.windows()
        clock.t += 5.0
        self.assertEqual({}, store.windows())
        store.offer(wire.SOURCE_CHANNEL, rep(100.0, n=10), vm=A)
        self.assertEqual(10, store.windows()[A].new)


def peer_rep(mean, peer, n=10, vm=None):
    return wire.encode(n, mean, 1.0, mean + 5, vm=vm, peer=peer).rstrip(b"\n")


class TestPeer(unittest.TestCase):
    """The window names the peer of the VM's newest fresh report that names one."""

    def test_a_window_names_no_peer_until_a_report_names_one(self):
        store, _ = make_store()
        store.offer(wire.SOURCE_CHANNEL, rep(100.0), vm=A)
        self.assertIsNone(store.windows()[A].peer)
        store.offer(wire.SOURCE_CHANNEL, peer_rep(100.0, "10.0.0.7:7788"), vm=A)
        self.assertEqual("10.0.0.7:7788", store.windows()[A].peer)

    def test_the_newest_peer_wins_across_channel_and_probe(self):
        store, _ = make_store()
        store.offer(wire.SOURCE_CHANNEL, peer_rep(100.0, "10.0.0.7"), vm=A)
        store.offer(wire.SOURCE_PROBE, peer_rep(100.0, "[2001:DB8::9]:80", vm=A))
        self.assertEqual("[2001:db8::9]:80", store.windows()[A].peer)
        store.offer(wire.SOURCE_CHANNEL, peer_rep(100.0, "10.0.0.8"), vm=A)
        store.offer(wire.SOURCE_CHANNEL, rep(100.0), vm=A)    # names none: the last one holds
        self.assertEqual("10.0.0.8", store.windows()[A].peer)

    def test_a_peer_ages_out_with_its_report(self):
        store, clock = make_store(freshness_s=3.0)
        store.offer(wire.SOURCE_CHANNEL, peer_rep(100.0, "10.0.0.7"), vm=A)
        clock.t += 2.0
        store.offer(wire.SOURCE_CHANNEL, rep(100.0), vm=A)
        clock.t += 1.5
        w = store.windows()[A]
        self.assertEqual((10, None), (w.count, w.peer))

    def test_each_vm_has_its_own_peer(self):
        store, _ = make_store()
        store.offer(wire.SOURCE_CHANNEL, peer_rep(100.0, "10.0.0.7"), vm=A)
        store.offer(wire.SOURCE_CHANNEL, peer_rep(200.0, "10.0.0.9"), vm=B)
        self.assertEqual({A: "10.0.0.7", B: "10.0.0.9"},
                         {vm: w.peer for vm, w in store.windows().items()})

    def test_a_bad_peer_drops_the_report_and_is_counted_and_logged(self):
        store, _ = make_store()
        bad = b'{"v":2,"peer":"server.example:80","n":10,"mean_us":100,"std_us":1,"p99_us":105}'
        with self.assertLogs("resex_agent.intake.store", logging.WARNING) as logs:
            self.assertIsNone(store.offer(wire.SOURCE_CHANNEL, bad, vm=A))
        self.assertIn("bad_peer", logs.output[0])
        self.assertEqual({wire.BAD_PEER: 1}, store.stats()[A]["rejected"])
        self.assertEqual({}, store.windows())

    def test_the_claim_is_logged_with_its_peer(self):
        store, _ = make_store()
        with self.assertLogs("resex_agent.intake.store", logging.INFO) as logs:
            store.offer(wire.SOURCE_CHANNEL, peer_rep(100.0, "10.0.0.7:7788"), vm=A)
        self.assertIn("via channel to peer 10.0.0.7:7788", logs.output[0])
