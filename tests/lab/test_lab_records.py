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

"""The lab experiment's readers and figures, on real output captured from the lab.

No services: the texts below are verbatim ``tc -s qdisc show`` output of the
lab's tbf and summary lines of a real ``resex-agent`` log, so these run
anywhere (the lab itself needs root; see ``test_lab_smoke.py``).
"""

import unittest

from tests.lab import experiment
from tests.lab import network

TBF_STATS = """qdisc tbf 8025: root refcnt 2 rate 20Mbit burst 16Kb lat 200ms
 Sent 171795578 bytes 141596 pkt (dropped 90, overlimits 253878 requeues 0)
 backlog 0b 0p requeues 0
"""

AGENT_LOG = """\
2026-11-22 04:56:04.500 29385 INFO resex_agent.loop [-] epoch 12: 2 VMs, link 1%, prices cpu 1.00 \
io 1.00, inflation 36.9% | resex-bulk cap 100/100% rate 1.00; resex-lat cap 100/100% rate 1.00 \
lat 1330us
2026-11-22 04:40:11.120 21377 INFO resex_agent.intake.store [-] VM 1 claims latency mean 5.0 us
2026-11-22 04:40:12.200 21377 INFO resex_agent.loop [-] epoch 7: 2 VMs, link 70%, prices cpu 5.30 \
io 40.37, inflation 772.5% | resex-bulk cap 3/1% rate 33.23; resex-lat cap 100/100% rate 1.00 \
lat 28345us
"""


def _run(name, p99, mean, mbit):
    return {"name": name, "latency": {"p99_us": p99, "mean_us": mean},
            "interferer_mbit_s": mbit}


class TbfStatsTest(unittest.TestCase):

    def test_counters_are_read_from_tc_output(self):
        self.assertEqual({"sent_bytes": 171795578, "sent_pkts": 141596, "dropped": 90,
                          "overlimits": 253878, "backlog_bytes": 0},
                         network.parse_tbf_stats(TBF_STATS))

    def test_backlog_units_are_bytes_kibibytes_and_mebibytes(self):
        for text, expected in (("24224b", 24224), ("12Kb", 12 * 1024), ("2Mb", 2 << 20)):
            stats = network.parse_tbf_stats(" backlog %s 16p requeues 0" % text)
            self.assertEqual(expected, stats["backlog_bytes"], text)

    def test_guest_addresses_follow_the_host_in_its_slash_24(self):
        self.assertEqual("10.231.0.1", network.host_ip())
        self.assertEqual(["10.231.0.2", "10.231.0.3"],
                         [network.guest_ip(1), network.guest_ip(2)])


class AgentLogTest(unittest.TestCase):

    def test_epoch_lines_give_each_vms_cap_mean_min_and_rate(self):
        self.assertEqual(
            [(12, {"resex-bulk": (100.0, 100.0, 1.0), "resex-lat": (100.0, 100.0, 1.0)}),
             (7, {"resex-bulk": (3.0, 1.0, 33.23), "resex-lat": (100.0, 100.0, 1.0)})],
            experiment.epoch_caps(AGENT_LOG))


class FiguresTest(unittest.TestCase):

    def test_a_scheduler_cap_is_quota_over_period_and_none_when_unlimited(self):
        self.assertIsNone(experiment.cap_of({"global_period": 100000, "global_quota": -1}))
        self.assertEqual(5.0, experiment.cap_of({"global_period": 100000,
                                                 "global_quota": 5000}))

    def test_interference_is_measured_above_the_base_run(self):
        runs = [_run("base", 2000.0, 1000.0, 0.0), _run("interfered", 202000.0, 101000.0, 20.0),
                _run("io_shares", 52000.0, 11000.0, 12.0)]
        fig = experiment.figures(runs)["io_shares"]
        self.assertAlmostEqual(75.0, fig["interference_cut_pct"])
        self.assertAlmostEqual(90.0, fig["mean_interference_cut_pct"])
        self.assertAlmostEqual(60.0, fig["throughput_kept_pct"])
        self.assertEqual(50000.0, fig["p99_interference_us"])

    def test_no_figures_without_a_base_and_an_uncontrolled_run(self):
        self.assertEqual({}, experiment.figures([_run("io_shares", 1.0, 1.0, 1.0)]))

    def test_each_policy_is_placed_against_the_static_cap_sweep(self):
        def polled(caps):
            return [{"t": float(i), experiment.INTERFERER: {"cap_pct": c}}
                    for i, c in enumerate(caps)]
        runs = [_run("base", 2000.0, 1000.0, 0.0), _run("interfered", 202000.0, 101000.0, 20.0),
                dict(_run("latency_target", 52000.0, 11000.0, 9.0), policy="latency_target",
                     interferer_cap_mean_pct=10.0, interferer_cap_min_pct=8.0,
                     polls=polled([50.0, 20.0, 10.0, 12.0, 9.0, 11.0]))]
        sweep = [{"cap_pct": None, "interferer_mbit_s": 20.0,
                  "latency": {"p99_us": 202000.0, "mean_us": 101000.0}},
                 {"cap_pct": 10.0, "interferer_mbit_s": 10.0,
                  "latency": {"p99_us": 50000.0, "mean_us": 9000.0}},
                 {"cap_pct": 5.0, "interferer_mbit_s": 5.0,
                  "latency": {"p99_us": 2100.0, "mean_us": 1050.0}}]
        data = experiment.frontier(runs, sweep, threshold_pct=10.0)
        self.assertAlmostEqual(2200.0, data["p99_target_us"])
        self.assertEqual(5.0, data["frontier_at_target_mbit_s"])
        self.assertEqual([True, False, False][::-1], [r["meets_p99"] for r in data["static"]])
        pol = data["policies"][0]
        self.assertEqual(10.0, pol["frontier_same_p99_mbit_s"])  # 10 % does as well
        self.assertAlmostEqual(90.0, pol["pct_of_frontier_same_p99"])
        self.assertIsNone(pol["pct_of_frontier_at_target"])        # it misses the target
        self.assertAlmostEqual(3.0, pol["swing_pct"])              # 12, 9, 11 late
        self.assertIn("latency_target", experiment.format_frontier(data))

    def test_latency_stats_use_nearest_rank_percentiles(self):
        stats = experiment.latency_stats([float(v) for v in range(1, 101)])
        self.assertEqual((100, 50.0, 99.0, 50.5), (stats["n"], stats["p50_us"],
                                                   stats["p99_us"], stats["mean_us"]))

    def test_samples_are_binned_per_second(self):
        series = experiment.per_second([(0.1, 10.0), (0.9, 30.0), (1.5, 5.0)])
        self.assertEqual([(0, 2, 20.0, 30.0), (1, 1, 5.0, 5.0)], series)


if __name__ == "__main__":
    unittest.main()
