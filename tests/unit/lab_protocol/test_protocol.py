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

"""The lab's judging protocol on synthetic run records (no libvirtd)."""

import unittest

from tests.lab import protocol


def rec(kind, mean, p99=None, mbit=0.0, cap=None, series=None, caps=None, offset=0.0,
        name=None):
    return {"name": name, "kind": kind, "cap_pct": cap, "mean_us": float(mean),
            "p99_us": float(p99 if p99 is not None else 2 * mean), "mbit_s": float(mbit),
            "series": series, "offset_s": offset, "caps": caps or []}


def round_(n, base=1000.0, load=0.3, static=None, interfered=1500.0, policies=None):
    """A round: ``static`` {cap: (mean, mbit)}, ``policies`` {name: record}."""
    if static is None:
        static = {10: (1150.0, 8.0), 5: (1080.0, 5.0), 2: (1020.0, 2.0)}
    runs = {"base": rec("base", base)}
    for cap, (mean, mbit) in static.items():
        runs["static %g%%" % cap] = rec("static", mean, mbit=mbit, cap=cap)
    runs["interfered"] = rec("interfered", interfered, mbit=12.0)
    runs.update(policies or {})
    return {"round": n, "load": load, "loud": False, "runs": runs}


class TestQuiet(unittest.TestCase):
    def test_bound_is_half_a_load_per_core(self):
        self.assertEqual(protocol.load_bound(2), 1.0)
        self.assertTrue(protocol.is_quiet(1.0, 1.0))
        self.assertFalse(protocol.is_quiet(1.01, 1.0))


class TestDrift(unittest.TestCase):
    def test_a_drifting_round_is_dropped(self):
        # threshold 9%: the bound is 3% of the first base (30 us)
        rounds = [round_(1, base=1000.0), round_(2, base=1029.0), round_(3, base=1031.0),
                  round_(4, base=969.0)]
        kept, dropped = protocol.drift_filter(rounds, 9.0)
        self.assertEqual([r["round"] for r in kept], [1, 2])
        self.assertEqual([r["round"] for r in dropped], [3, 4])

    def test_dropped_rounds_are_counted_in_the_report(self):
        rounds = [round_(1), round_(2, base=1200.0)]
        kept, dropped, choice, judged = protocol.evaluate(rounds, 10.0, 3.0)
        text = protocol.format_report(rounds, kept, dropped, choice, judged, "tcp", 10.0,
                                      3.0, True)
        self.assertIn("2 run, 1 kept, 1 dropped", text)
        self.assertIn("round 2: load 0.30, base mean 1200 us (dropped: drift)", text)


class TestChooseSLA(unittest.TestCase):
    def test_tightest_threshold_met_in_every_round_plus_margin(self):
        rounds = [round_(1, static={5: (1080.0, 5.0), 2: (1020.0, 2.0)}),
                  round_(2, static={5: (1040.0, 5.0), 2: (1050.0, 2.0)})]
        choice = protocol.choose_sla(rounds, 3.0, 10.0)
        # need: 5% -> max(8, 4) = 8; 2% -> max(2, 5) = 5; threshold 5 + 3
        self.assertAlmostEqual(choice["needs"]["static 2%"], 5.0)
        self.assertAlmostEqual(choice["needs"]["static 5%"], 8.0)
        self.assertTrue(choice["feasible"])
        self.assertAlmostEqual(choice["threshold_pct"], 8.0)

    def test_infeasible_when_no_cap_meets_within_the_bound(self):
        rounds = [round_(1, static={5: (1200.0, 5.0), 1: (1090.0, 1.0)})]
        choice = protocol.choose_sla(rounds, 3.0, 10.0)
        self.assertFalse(choice["feasible"])
        self.assertIsNone(choice["threshold_pct"])

    def test_infeasible_when_the_interferer_does_not_break_it(self):
        rounds = [round_(1, interfered=1030.0)]
        choice = protocol.choose_sla(rounds, 3.0, 10.0)
        self.assertFalse(choice["feasible"])
        self.assertIn("nothing to protect", choice["reason"])

    def test_infeasible_prints_infeasible_and_judges_nothing(self):
        pol = {"io_shares": rec("policy", 1010.0, mbit=9.0)}
        rounds = [round_(1, static={5: (1300.0, 5.0)}, policies=pol)]
        kept, dropped, choice, judged = protocol.evaluate(rounds, 10.0, 3.0)
        self.assertIsNone(judged)
        text = protocol.format_report(rounds, kept, dropped, choice, judged, "rdma", 10.0,
                                      3.0, True)
        self.assertIn("SLA: infeasible", text)
        self.assertIn("nothing judged", text)
        self.assertIn("queue", text)
        self.assertIn("CFS period", text)
        self.assertIn("--bulk-size", text)
        self.assertNotIn("io_shares", text)


class TestBestStatic(unittest.TestCase):
    def test_highest_throughput_cap_meeting_in_every_kept_round(self):
        # 10%: most throughput but misses round 2; 5% meets both; 2% meets, less throughput
        rounds = [round_(1, static={10: (1050.0, 8.0), 5: (1060.0, 5.0), 2: (1010.0, 2.0)}),
                  round_(2, static={10: (1120.0, 8.5), 5: (1070.0, 5.5), 2: (1000.0, 2.2)})]
        name, mbit = protocol.best_static(rounds, 8.0)
        self.assertEqual(name, "static 5%")
        self.assertAlmostEqual(mbit, 5.25)

    def test_none_when_no_cap_meets(self):
        rounds = [round_(1, static={5: (1200.0, 5.0)})]
        self.assertEqual(protocol.best_static(rounds, 8.0), (None, None))


class TestMeasures(unittest.TestCase):
    def test_swing_in_the_second_half(self):
        self.assertEqual(protocol.swing([1, 90, 5, 7, 6, 9]), 3.0)
        self.assertEqual(protocol.swing([5, 5, None, 20]), 80.0)
        self.assertIsNone(protocol.swing([]))

    def test_time_to_protect_from_which_every_window_stays(self):
        series = [(0, 10, 2000.0, 0), (1, 10, 900.0, 0), (2, 10, 1300.0, 0),
                  (3, 10, 1000.0, 0), (4, 0, 9000.0, 0), (5, 10, 1090.0, 0)]
        # window 2 breaks the first stretch; the empty window 4 does not count
        self.assertEqual(protocol.time_to_protect(series, 1100.0, offset_s=5.0), 8.0)

    def test_never_protected_when_the_last_window_misses(self):
        series = [(0, 10, 900.0, 0), (1, 10, 1200.0, 0)]
        self.assertIsNone(protocol.time_to_protect(series, 1100.0))
        self.assertIsNone(protocol.time_to_protect([], 1100.0))

    def test_spread_is_median_min_max_and_missing(self):
        self.assertEqual(protocol.spread([3.0, None, 1.0, 2.0]), (2.0, 1.0, 3.0, 1))
        self.assertEqual(protocol.spread([None]), (None, None, None, 1))


class TestJudge(unittest.TestCase):
    def rounds(self):
        series = [(0, 10, 1500.0, 0), (1, 10, 1050.0, 0), (2, 10, 1040.0, 0)]
        out = []
        for n, (mbit, swing_caps) in enumerate(((4.0, [50, 50, 10, 12]),
                                                (6.0, [50, 50, 10, 20])), 1):
            pol = {"io_shares": rec("policy", 1050.0, p99=2100.0, mbit=mbit,
                                    series=series, caps=swing_caps, offset=5.0)}
            out.append(round_(n, static={10: (1150.0, 8.0), 5: (1040.0, 5.0),
                                         2: (1020.0, 2.0)}, policies=pol))
        return out

    def test_share_swing_and_protect_over_rounds(self):
        kept, dropped, choice, judged = protocol.evaluate(self.rounds(), 10.0, 3.0)
        self.assertAlmostEqual(choice["threshold_pct"], 5.0)     # 2% needs 2, + 3
        self.assertEqual(judged["best_static"], "static 5%")
        row = {r["name"]: r for r in judged["rows"]}["io_shares"]
        self.assertEqual(row["share_pct"][:3], (100.0, 80.0, 120.0))
        self.assertEqual(row["swing"][:3], (6.0, 2.0, 10.0))
        self.assertEqual(row["protect_s"][:3], (6.0, 6.0, 6.0))
        self.assertTrue(row["meets_all"])
        self.assertAlmostEqual(row["mean_x"][0], 1050.0 / 1050.0)
        self.assertAlmostEqual(row["p99_x"][0], 2100.0 / 2100.0)
        intf = {r["name"]: r for r in judged["rows"]}["interfered"]
        self.assertFalse(intf["meets_all"])
        self.assertEqual(intf["protect_never"], 2)

    def test_table_prints_each_configuration_with_spread(self):
        rounds = self.rounds()
        kept, dropped, choice, judged = protocol.evaluate(rounds, 10.0, 3.0)
        text = protocol.format_report(rounds, kept, dropped, choice, judged, "tcp", 10.0,
                                      3.0, True)
        self.assertIn("best static cap meeting it in every round: static 5%, 5.00 Mbit/s",
                      text)
        line = [x for x in text.splitlines() if x.startswith("io_shares")][0]
        self.assertIn("100 (80-120)", line)
        self.assertIn("6.0 (2.0-10.0)", line)
        self.assertIn("yes", line)
        never = [x for x in text.splitlines() if x.startswith("interfered")][0]
        self.assertIn("2 never", never)
        self.assertIn("round 1: load 0.30", text)
        self.assertIn("pinned", text)


class TestRecord(unittest.TestCase):
    def test_record_of_a_lab_result(self):
        result = {"latency": {"mean_us": 1000.0, "p99_us": 3000.0, "n": 99},
                  "interferer_mbit_s": 3.5, "latency_series": [(0, 9, 1.0, 2.0)],
                  "polls": [{"t": 0, "bulk": {"cap_pct": None}}, {"t": 0.5}]}
        r = protocol.record("io_shares", "policy", result, "bulk", offset_s=5.0)
        self.assertEqual(r["caps"], [None])
        self.assertEqual(r["series"], [[0, 9, 1.0, 2.0]])
        self.assertEqual((r["mean_us"], r["p99_us"], r["mbit_s"]), (1000.0, 3000.0, 3.5))
        self.assertEqual(r["offset_s"], 5.0)


class TestPlan(unittest.TestCase):
    def test_interleaved_sweep_policies_peers(self):
        args = protocol.parse_args(["--sweep", "10,2", "--policies", "io_shares",
                                    "--peers", "ewma_step"])
        self.assertEqual([n for n, _k, _a in protocol.plan(args)],
                         ["static 10%", "static 2%", "interfered", "io_shares", "ewma_step"])
        self.assertEqual(args.seconds, 120.0)
        self.assertEqual(args.rounds, 3)
        self.assertEqual(args.queue_ms, 200.0)
        self.assertEqual(protocol.parse_args(["--transport", "rdma"]).queue_ms, 100.0)
