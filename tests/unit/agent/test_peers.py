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

"""The agent's bytes per peer: rates from the kernel's totals, failures, metrics, the check.

The counter is a stand-in recording what the agent asks of ``nft`` (the
kernel's side: tests/functional/fabric/test_peers_kernel.py).
"""

import logging
import time
import unittest
from unittest import mock

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
import prometheus_client

from resex_agent import builder
from resex_agent import loop
from resex_agent import metrics as metrics_mod
from resex_agent import peers
from resex_libvirt import market as market_mod
from tests.unit.agent import test_check
from tests.unit.agent import test_loop


class Counter:
    """Totals the test sets; ``sync`` and ``close`` recorded; ``fail`` raises."""

    def __init__(self):
        self.totals_now = {}
        self.synced = []
        self.closed = 0
        self.fail = None

    def sync(self, taps):
        if self.fail:
            raise RuntimeError(self.fail)
        self.synced.append(sorted(taps))

    def totals(self):
        return {tap: dict(found) for tap, found in self.totals_now.items()}

    def close(self):
        self.closed += 1


class RatesTest(unittest.TestCase):

    def test_rates_per_vm_by_destination_from_two_readings(self):
        clock = [100.0]
        counter = Counter()
        sampler = peers.PeerRates(counter, period_s=1.0, clock=lambda: clock[0])
        sampler.set_taps({"tap1": "vm-a", "tap2": "vm-a", "tap3": "vm-b"})
        counter.totals_now = {"tap1": {"10.0.0.2": 1000}, "tap3": {"10.0.0.9": 50}}
        sampler.sample()
        self.assertEqual({}, sampler.rates())       # one reading: no rate yet
        clock[0] = 102.0
        counter.totals_now = {"tap1": {"10.0.0.2": 5000, "10.0.0.3": 400},
                              "tap2": {"10.0.0.2": 600}, "tap3": {"10.0.0.9": 50},
                              "tapX": {"10.0.0.1": 999}}
        sampler.sample()
        self.assertEqual({"vm-a": {"10.0.0.2": 2300.0, "10.0.0.3": 200.0}}, sampler.rates())
        self.assertEqual([["tap1", "tap2", "tap3"]] * 2, counter.synced)

    def test_a_total_that_fell_counts_from_zero(self):
        got = peers.rates_by_vm({("t", "p"): 900}, {("t", "p"): 300}, 1.0, {"t": "vm"})
        self.assertEqual({"vm": {"p": 300.0}}, got)

    @settings(max_examples=200, deadline=None)
    @given(st.dictionaries(st.tuples(st.sampled_from(["t1", "t2"]),
                                     st.sampled_from(["p%d" % k for k in range(12)])),
                           st.integers(0, 10 ** 6), max_size=24),
           st.integers(1, 5))
    def test_the_busiest_peers_are_kept_and_the_rest_summed_as_other(self, after, top):
        got = peers.rates_by_vm({}, after, 2.0, {"t1": "vm", "t2": "vm"}, top=top)
        total = sum(after.values()) / 2.0
        if not total:
            self.assertEqual({}, got)
            return
        rates = got["vm"]
        named = [r for p, r in rates.items() if p != peers.OTHER]
        self.assertLessEqual(len(named), top)
        self.assertAlmostEqual(total, sum(rates.values()))
        if peers.OTHER in rates:
            self.assertTrue(all(r > 0 for r in named))

    def test_a_failure_is_said_once_counted_and_tried_again(self):
        counter = Counter()
        counter.fail = "nft: Operation not permitted"
        sampler = peers.PeerRates(counter, period_s=1.0)
        with self.assertLogs("resex_agent.peers", logging.WARNING) as logs:
            sampler.sample()
            sampler.sample()
        self.assertEqual(1, len(logs.output))
        self.assertIn("Operation not permitted", logs.output[0])
        self.assertEqual(2, sampler.errors)
        counter.fail = None
        with self.assertLogs("resex_agent.peers", logging.INFO) as logs:
            sampler.sample()
        self.assertIn("counted again", logs.output[0])

    def test_the_thread_samples_and_close_deletes_the_table(self):
        counter = Counter()
        sampler = peers.PeerRates(counter, period_s=0.01).start()
        deadline = time.monotonic() + 5.0
        while not counter.synced and time.monotonic() < deadline:
            time.sleep(0.01)
        sampler.close()
        self.assertTrue(counter.synced)
        self.assertEqual(1, counter.closed)


class MetricsTest(unittest.TestCase):

    def test_each_vms_rates_reach_the_endpoint_by_peer(self):
        sink = metrics_mod.PrometheusMetrics("127.0.0.1", 0)
        summary = market_mod.EpochSummary(epoch=1, intervals=10, vms=(), link_utilisation=0.1,
                                          cpu_price=1.0, io_price=1.0,
                                          latency_inflation_pct=0.0)
        sink.observe_epoch(loop.EpochRecord(
            1, 0.0, summary, None, 0.0, 10, loop.Health(),
            peer_rates={"u1": {"10.0.0.2": 1250.0, peers.OTHER: 5.0}}))
        text = prometheus_client.generate_latest(sink.registry).decode()
        self.assertIn('resex_vm_peer_transmit_bytes_per_second{peer="10.0.0.2",project="",'
                      'uuid="u1",vm="u1"} 1250.0', text)
        self.assertIn('peer="other"', text)


class WiringTest(unittest.TestCase):

    def test_the_option_builds_the_sampler_and_the_agent_starts_and_closes_it(self):
        conf = test_loop.make_conf(agent={"host_driver": "simulated", "host": "sim-cmp1"},
                                   fabric={"count_peers": True}, board={"url": ""})
        with mock.patch.object(peers.PeerRates, "start") as start, \
                mock.patch.object(peers.PeerRates, "close") as close:
            parts = builder.build_parts(conf)
            self.assertIsInstance(parts.peers, peers.PeerRates)
            agent = builder.build_agent(conf, parts)
            self.assertIs(parts.peers, agent.peers)
            agent.start()
            start.assert_called_once_with()
            agent.shutdown()
            close.assert_called_once_with()
        # Off by default: nothing built.
        parts = builder.build_parts(test_loop.make_conf(
            agent={"host_driver": "simulated", "host": "sim-cmp1"}, board={"url": ""}))
        self.addCleanup(parts.close)
        self.assertIsNone(parts.peers)

    def test_the_check_says_whether_bytes_per_peer_are_counted(self):
        code, text = test_check.run("[agent]\nhost = cmp1\n")
        self.assertIn("bytes per peer: off", text)
        with mock.patch("shutil.which", return_value="/usr/sbin/nft"):
            code, text = test_check.run("[agent]\nhost = cmp1\n[fabric]\ncount_peers = true\n")
        self.assertEqual(0, code, text)
        self.assertIn("bytes per peer: on (/usr/sbin/nft; the agent needs CAP_NET_ADMIN",
                      text)
        with mock.patch("shutil.which", return_value=None):
            code, text = test_check.run("[agent]\nhost = cmp1\n[fabric]\ncount_peers = true\n")
        self.assertNotEqual(0, code, text)
        self.assertIn("ERROR: bytes per peer: [fabric] count_peers needs nft", text)


if __name__ == "__main__":
    unittest.main()
