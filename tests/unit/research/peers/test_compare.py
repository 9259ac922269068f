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

"""``resex-sim compare --peers``: the verdicts, the goals and the table."""

import contextlib
import io
import json
import os
import tempfile
import unittest

from resex_research.peers import compare
from resex_research import resex_sim


def row(policy, meets, be, vs_bound=1.0, protect_s=0.1, cap=None):
    return {"policy": policy, "cap_pct": cap, "meets": meets, "be_mb_s": be,
            "sla_vms": {"vm": {"mean_us": 200.0 * vs_bound * 1.1, "p99_us": 300.0,
                               "sla_us": 200.0, "bound_us": 220.0,
                               "vs_sla": vs_bound * 1.1, "p99_vs_sla": 1.5,
                               "vs_bound": vs_bound, "meets": meets}},
            "protect_s": protect_s, "swing_pct": 10.0, "pct_uncontrolled": 50.0,
            "pct_frontier": 90.0, "wall_s": 0.1}


def data(rows):
    return {"scenarios": [{"scenario": "s", "family": "beyond", "description": "",
                           "best_effort": ["be"], "frontier": None, "rows": rows}],
            "project": ["io_shares", "latency_target"], "peers": ["koordinator_suppress"],
            "duration_s": None}


class VerdictTest(unittest.TestCase):

    def test_meeting_the_sla_beats_any_throughput(self):
        d = data([row("io_shares", True, 100.0), row("koordinator_suppress", False, 900.0, 1.2)])
        (v,) = compare.verdicts(d)
        self.assertEqual(("project", "SLA"), (v["winner"], v["on"]))

    def test_at_equal_sla_the_most_throughput_wins_and_two_percent_is_a_tie(self):
        d = data([row("io_shares", True, 100.0), row("koordinator_suppress", True, 150.0)])
        (v,) = compare.verdicts(d)
        self.assertEqual(("peer", "throughput"), (v["winner"], v["on"]))
        d = data([row("io_shares", True, 100.0), row("koordinator_suppress", True, 101.0)])
        self.assertEqual("tie", compare.verdicts(d)[0]["winner"])

    def test_the_project_is_judged_by_its_best_policy(self):
        d = data([row("io_shares", False, 500.0, 1.3), row("latency_target", True, 100.0),
                  row("koordinator_suppress", True, 90.0)])
        (v,) = compare.verdicts(d)
        self.assertEqual("latency_target", v["project"])
        self.assertEqual("project", v["winner"])

    def test_when_both_miss_the_closer_to_the_sla_wins(self):
        d = data([row("io_shares", False, 100.0, 1.05),
                  row("koordinator_suppress", False, 100.0, 1.2)])
        (v,) = compare.verdicts(d)
        self.assertEqual(("project", "latency"), (v["winner"], v["on"]))

    def test_never_protecting_is_slower_than_protecting(self):
        d = data([row("io_shares", True, 100.0, protect_s=None),
                  row("koordinator_suppress", True, 100.0, protect_s=2.0)])
        self.assertEqual("peer", compare.verdicts(d)[0]["faster"])

    def test_the_goals_name_every_case_a_peer_beat_the_project(self):
        d = data([row("io_shares", True, 100.0, protect_s=3.0),
                  row("koordinator_suppress", True, 200.0, protect_s=1.0)])
        sla, tput, fast = ((held, exc) for _goal, held, exc in compare.goals(d))
        self.assertEqual((True, []), sla)
        self.assertEqual((False, ["s vs koordinator_suppress"]), tput)
        self.assertEqual((False, ["s vs koordinator_suppress"]), fast)
        self.assertIn("NOT held: s vs koordinator_suppress", compare.format_goals(d))

    def test_the_table_shows_misses_never_and_the_frontier_cap(self):
        d = data([row("none", False, 200.0, 1.2, protect_s=None),
                  row(compare.FRONTIER, True, 100.0, cap=27.5),
                  row("io_shares", True, 95.0, protect_s=0.038)])
        text = compare.format_table(d)
        self.assertIn("1.320x MISS", text)
        self.assertIn("never", text)
        self.assertIn("frontier (cap 27.5%)", text)
        self.assertIn(" 38 ", text)

    def test_a_frontier_no_static_cap_reaches_is_shown_and_judges_no_one(self):
        unreachable = {"policy": compare.FRONTIER, "cap_pct": None, "unreachable": True,
                       "sla_vms": {}, "meets": False, "be_mb_s": None,
                       "pct_uncontrolled": None, "pct_frontier": None, "protect_s": None,
                       "swing_pct": None}
        d = data([row("none", False, 200.0, 1.5), unreachable,
                  row("io_shares", False, 50.0, 1.1),
                  row("koordinator_suppress", False, 80.0, 1.3)])
        self.assertIn("frontier (no cap meets)", compare.format_table(d))
        (v,) = compare.verdicts(d)
        self.assertEqual(("project", "latency"), (v["winner"], v["on"]))


class CompareCommandTest(unittest.TestCase):

    def test_compare_peers_runs_every_policy_and_the_frontier(self):
        with tempfile.TemporaryDirectory() as out:
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
                rc = resex_sim.main(["compare", "--peers", "paper_64k_vs_2m", "--duration", "0.3",
                                     "--jobs", "1", "--policies", "io_shares", "--json",
                                     "--out", out])
            self.assertEqual(0, rc)
            got = json.loads(buf.getvalue())
            (s,) = got["scenarios"]
            policies = [r["policy"] for r in s["rows"]]
            self.assertEqual(["none", compare.FRONTIER, "koordinator_suppress",
                              "crane_throttle", "ewma_step", "io_shares"], policies)
            none = s["rows"][0]
            self.assertEqual(100.0, none["pct_uncontrolled"])
            self.assertIsNotNone(s["frontier"]["cap_pct"])
            self.assertTrue(os.path.exists(os.path.join(out, "peers.json")))
            self.assertTrue(os.path.exists(os.path.join(out, "peers-paper.png")))

    def test_an_unknown_policy_is_refused(self):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            rc = resex_sim.main(["compare", "--peers", "--policies", "nope"])
        self.assertEqual(2, rc)
        self.assertIn("unknown policy 'nope'", err.getvalue())

    def test_run_selects_a_peer_by_name(self):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            rc = resex_sim.main(["run", "paper_64k_vs_2m", "--policy", "koordinator_suppress",
                                 "--duration", "1.2"])
        self.assertEqual(0, rc)
        self.assertIn("under koordinator_suppress", buf.getvalue())


class SummarizeTest(unittest.TestCase):

    def test_an_sla_on_the_p99_is_judged_on_the_p99(self):
        import dataclasses
        from resex_libvirt.sim import runner
        from resex_libvirt.sim import scenario as scenario_mod
        sc = scenario_mod.load("paper_64k_vs_2m").with_duration(0.3)
        res = runner.run(sc, "none")
        vm = sc.vm("vm64k")
        r = res.vm("vm64k")
        # A bound between the mean and the p99: met on the mean, missed on the p99.
        sla = dataclasses.replace(vm.sla, interference_threshold_pct=100.0 * (
            (r.latency_mean_us + r.latency_p99_us) / 2.0 / vm.sla.latency_sla_us - 1.0))
        on_mean = dataclasses.replace(sc, vms=tuple(
            dataclasses.replace(v, sla=sla) if v.name == "vm64k" else v for v in sc.vms))
        on_p99 = dataclasses.replace(sc, vms=tuple(
            dataclasses.replace(v, sla=dataclasses.replace(sla, latency_statistic="p99"))
            if v.name == "vm64k" else v for v in sc.vms))
        self.assertTrue(compare.summarize(on_mean, res)["meets"])
        self.assertFalse(compare.summarize(on_p99, res)["meets"])


class OneFrontierTest(unittest.TestCase):

    def test_compare_and_frontier_find_the_same_frontier_for_the_mean_and_the_p99(self):
        from resex_libvirt.sim import scenario as scenario_mod
        from resex_research import frontier
        name, duration = "paper_64k_vs_2m", 0.5
        data = compare.Comparison([name], project=("io_shares",), duration_s=duration).evaluate()
        (s,) = data["scenarios"]
        (t,) = data["tail"]
        for statistic, got in (("mean", s["frontier"]), ("p99", t["frontier"])):
            sc = frontier.with_statistic(
                scenario_mod.load(name).with_duration(duration), statistic)
            top = frontier.best(frontier.sweep(sc, statistic))
            self.assertEqual(None if top is None else top["cap_pct"], got["cap_pct"], statistic)
        # The 2 MB transfers already on the wire: no static cap brings the p99 back.
        self.assertIsNone(t["frontier"]["cap_pct"])
        self.assertIsNotNone(s["frontier"]["cap_pct"])

    def test_the_command_prints_the_tail_frontier_and_each_policy_against_it(self):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
            rc = resex_sim.main(["compare", "--peers", "paper_64k_vs_2m", "--duration", "0.3",
                                 "--jobs", "1", "--policies", "io_shares"])
        self.assertEqual(0, rc)
        text = buf.getvalue()
        self.assertIn("Tail SLA", text)
        tail = text[text.index("Tail SLA"):].split("\n\n")[0]
        (line,) = [x for x in tail.splitlines() if x.startswith("paper_64k_vs_2m")]
        self.assertIn("unreachable", line)
        self.assertIn("MISS", line)

    def test_the_mean_alone_runs_no_tail(self):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
            rc = resex_sim.main(["compare", "--peers", "paper_64k_vs_2m", "--duration", "0.3",
                                 "--jobs", "1", "--policies", "io_shares", "--statistic", "mean",
                                 "--json"])
        self.assertEqual(0, rc)
        self.assertNotIn("tail", json.loads(buf.getvalue()))

    def test_an_unknown_statistic_is_refused(self):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            rc = resex_sim.main(["compare", "--peers", "paper_64k_vs_2m", "--statistic", "p95"])
        self.assertEqual(2, rc)
        self.assertIn("p95", err.getvalue())
