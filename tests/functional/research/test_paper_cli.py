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

"""``resex-sim paper``: every figure's table, JSON and plots (short runs)."""

import contextlib
import io
import json
import os
import tempfile
import unittest

from resex_research import resex_sim


class PaperCommandTest(unittest.TestCase):

    def test_paper_tables_json_and_plots(self):
        out, err = io.StringIO(), io.StringIO()
        with tempfile.TemporaryDirectory() as d:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                rc = resex_sim.main(["paper", "--duration", "1.2", "--out", d, "--no-frontier"])
            self.assertEqual(0, rc)
            for png in ("fig5_7.png", "fig6.png", "fig8.png", "fig9.png"):
                with open(os.path.join(d, png), "rb") as f:
                    self.assertEqual(b"\x89PNG", f.read(4))
            with open(os.path.join(d, "paper.json")) as f:
                data = json.load(f)
        text = out.getvalue()
        for title in ("Figs. 5 and 7", "Fig. 6", "Fig. 8", "Fig. 9"):
            self.assertIn(title, text)
        for case in ("base", "interfered", "FreeMarket", "IOShares", "64KB-64KB",
                     "64KB-2MB-nointf", "128KB", "2MB"):
            self.assertIn(case, text)
        self.assertEqual(22, len(data["runs"]))
        self.assertRegex(text, r"\n22 runs in [0-9.]+ s\n")
        self.assertEqual(10, len(data["fig6"]["rows"]))
        self.assertEqual(["base", "interfered", "FreeMarket", "IOShares"],
                         [r["case"] for r in data["fig5_7"]])

    def test_paper_json_is_per_vm_and_policy(self):
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            rc = resex_sim.main(["paper", "--duration", "0.2", "--json", "--no-frontier"])
        self.assertEqual(0, rc)
        runs = json.loads(out.getvalue())["runs"]
        policies = {(r["scenario"], r["policy"]) for r in runs}
        # The figures run the paper's algorithms exactly: the paper variants.
        self.assertIn(("paper_64k_vs_2m", "io_shares_paper"), policies)
        self.assertIn(("paper_64k_vs_1m", "free_market_paper"), policies)
        self.assertNotIn(("paper_64k_vs_2m", "io_shares"), policies)
        rec = next(r for r in runs if r["scenario"] == "paper_64k_vs_2m"
                   and r["policy"] == "none")["vms"]["vm2m"]
        for key in ("latency_mean_us", "latency_p50_us", "latency_p99_us", "latency_std_us",
                    "throughput_mb_s", "cap_mean_pct", "cap_min_pct"):
            self.assertIn(key, rec)


class FrontierTest(unittest.TestCase):

    def test_paper_prints_and_plots_the_static_cap_frontier_with_each_policy(self):
        out = io.StringIO()
        with tempfile.TemporaryDirectory() as d:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
                rc = resex_sim.main(["paper", "--duration", "0.3", "--out", d])
            self.assertEqual(0, rc)
            with open(os.path.join(d, "frontier.png"), "rb") as f:
                self.assertEqual(b"\x89PNG", f.read(4))
            with open(os.path.join(d, "paper.json")) as f:
                data = json.load(f)
        text = out.getvalue()
        self.assertIn("Static-cap frontier", text)
        for label in ("IOS paper", "LatencyTarget", "frontier MB/s"):
            self.assertIn(label, text)
        rows = data["frontier"]
        # The closing line counts every run made: the frontier's capped runs too,
        # each cap below 100% once (100% is the uncontrolled run).
        capped = len({(r["interferer"], p["cap_pct"]) for r in rows for p in r["sweep"]
                      if p["cap_pct"] < 100.0})
        policy_runs = len(data["runs"])
        self.assertIn("\n%d runs in " % (policy_runs + capped), text)
        self.assertIn(" s (%d under a policy, %d at a static cap)\n" % (policy_runs, capped), text)
        self.assertEqual(["128KB", "256KB", "512KB", "1MB", "2MB"],
                         [r["interferer"] for r in rows])
        for r in rows:
            caps = [p["cap_pct"] for p in r["sweep"]]
            self.assertEqual(sorted(caps), caps)
            self.assertIn(100.0, caps)
            if r["frontier_mb_s"] is not None:
                best = max(p["interferer_mb_s"] for p in r["sweep"] if p["meets"])
                self.assertEqual(best, r["frontier_mb_s"])
            self.assertEqual({"free_market_paper", "io_shares_paper", "free_market",
                              "io_shares", "latency_target"}, set(r["policies"]))
