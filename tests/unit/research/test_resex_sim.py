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

"""resex-sim: list, run (tables, JSON, --out), calibrate, errors."""

import contextlib
import io
import json
import os
import tempfile
import unittest

from resex_research import resex_sim


def call(*argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = resex_sim.main(list(argv))
    return rc, out.getvalue(), err.getvalue()


class CliTest(unittest.TestCase):

    def test_list_names_the_packaged_scenarios(self):
        rc, out, _ = call("list")
        self.assertEqual(0, rc)
        self.assertIn("paper_64k_vs_2m_10rpe", out)
        self.assertIn("paper_64k_alone", out)

    def test_run_prints_a_table_per_vm(self):
        rc, out, _ = call("run", "paper_64k_vs_2m", "--policy", "free_market",
                          "--duration", "0.2")
        self.assertEqual(0, rc)
        self.assertIn("vm64k", out)
        self.assertIn("vm2m", out)
        self.assertIn("p99 us", out)

    def test_run_json_has_the_figures_per_vm(self):
        rc, out, _ = call("run", "paper_64k_vs_2m", "--policy", "io_shares", "--json",
                          "--duration", "0.2", "--policy-arg", "target=0.8")
        self.assertEqual(0, rc)
        data = json.loads(out)
        self.assertEqual("io_shares", data["policy"])
        self.assertEqual({"target": 0.8}, data["policy_kwargs"])
        for vm in ("vm64k", "vm2m"):
            rec = data["vms"][vm]
            for key in ("latency_mean_us", "latency_p50_us", "latency_p99_us",
                        "latency_std_us", "throughput_mb_s", "cap_mean_pct", "cap_min_pct"):
                self.assertIn(key, rec)

    def test_run_out_writes_json_and_a_plot(self):
        with tempfile.TemporaryDirectory() as d:
            rc, _, _ = call("run", "paper_64k_alone", "--policy", "none", "--json",
                            "--duration", "0.05", "--out", d)
            self.assertEqual(0, rc)
            with open(os.path.join(d, "paper_64k_alone-none.json")) as f:
                data = json.load(f)
            self.assertIn("series", data)
            with open(os.path.join(d, "paper_64k_alone-none.png"), "rb") as f:
                self.assertEqual(b"\x89PNG", f.read(4))

    def test_an_unknown_scenario_is_an_error_exit(self):
        rc, _, err = call("run", "nope", "--policy", "none")
        self.assertEqual(2, rc)
        self.assertIn("no scenario 'nope'", err)

    def test_a_bad_policy_argument_is_an_error_exit(self):
        rc, _, err = call("run", "paper_64k_alone", "--policy", "io_shares", "--duration",
                          "0.01", "--policy-arg", "heavier=0.5")
        self.assertEqual(2, rc)
        self.assertIn("heavier", err)

    def test_an_unknown_policy_is_refused_by_the_parser(self):
        with contextlib.redirect_stderr(io.StringIO()):
            with self.assertRaises(SystemExit):
                resex_sim.main(["run", "paper_64k_alone", "--policy", "nope"])

    def test_calibrate_prints_the_figures(self):
        rc, out, _ = call("calibrate", "--duration", "0.1")
        self.assertEqual(0, rc)
        self.assertIn("Fig. 1", out)
        self.assertIn("32 (2M)", out)


class TimelineTest(unittest.TestCase):

    def test_run_json_carries_a_per_epoch_timeline_with_the_reason_for_each_cap(self):
        rc, out, _ = call("run", "paper_64k_vs_2m", "--policy", "io_shares", "--json",
                          "--duration", "2.0")
        self.assertEqual(0, rc)
        timeline = json.loads(out)["timeline"]
        self.assertEqual([1, 2], [e["epoch"] for e in timeline])
        for e in timeline:
            for vm in ("vm64k", "vm2m"):
                rec = e["vms"][vm]
                for key in ("cap_pct", "rate", "interference_pct", "balance", "reason"):
                    self.assertIn(key, rec)
        self.assertIn(timeline[1]["vms"]["vm2m"]["reason"], ("tax", "decay"))
        self.assertGreater(timeline[1]["vms"]["vm2m"]["rate"], 1.0)
        self.assertEqual("uncapped", timeline[1]["vms"]["vm64k"]["reason"])
        self.assertIsNotNone(timeline[1]["vms"]["vm64k"]["interference_pct"])

    def test_run_verbose_prints_the_compact_timeline(self):
        rc, out, _ = call("run", "paper_64k_vs_2m", "--policy", "io_shares", "-v",
                          "--duration", "1.0")
        self.assertEqual(0, rc)
        self.assertIn("Timeline", out)
        self.assertRegex(out, " (tax|decay)")
        self.assertIn("intf ", out)

    def test_run_prints_scenario_warnings_on_stderr(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "late.toml")
            with open(path, "w") as f:
                f.write('duration_s = 0.05\n[[vms]]\nname = "a"\nbuffer = "64K"\n'
                        'compute_us = 148.0\nclients = 1\nstop_s = 9.0\n')
            rc, _, err = call("run", path, "--policy", "none")
        self.assertEqual(0, rc)
        self.assertIn("warning", err)
        self.assertIn("stop_s", err)


class CompareTest(unittest.TestCase):

    def test_compare_puts_each_sla_vm_against_its_sla_per_policy(self):
        rc, out, _ = call("compare", "two_sensitive", "--policies", "none,io_shares",
                          "--duration", "0.3", "--json")
        self.assertEqual(0, rc)
        rows = json.loads(out)
        self.assertEqual([("two_sensitive", "none"), ("two_sensitive", "io_shares")],
                         [(r["scenario"], r["policy"]) for r in rows])
        for r in rows:
            self.assertEqual({"vm64k", "vm512k_sla"}, set(r["sla_vms"]))
            self.assertAlmostEqual(1.5, r["sla_vms"]["vm512k_sla"]["bound"])

    def test_compare_prints_the_time_to_protect_and_the_cap_swing(self):
        rc, out, _ = call("compare", "paper_64k_vs_2m", "--policies", "none,io_shares",
                          "--duration", "0.6")
        self.assertEqual(0, rc)
        self.assertIn("protect ms", out)
        none, taxed = [line.split() for line in out.splitlines()
                       if line.startswith("paper_64k_vs_2m")]
        # Uncontrolled, the 2 MB sender keeps the 64 KB server over its SLA.
        self.assertEqual("never", none[-2])
        self.assertNotEqual("never", taxed[-2])
        self.assertGreater(float(taxed[-1]), 0.0)

    def test_the_models_cut_protects_where_a_timid_gain_does_not(self):
        def protect_ms(*extra):
            rc, out, _ = call("compare", "paper_64k_vs_2m", "--policies", "latency_target",
                              "--duration", "2", "--json", *extra)
            self.assertEqual(0, rc)
            (row,) = json.loads(out)
            return row["protect_s"]
        full = protect_ms()
        self.assertIsNotNone(full)
        self.assertLess(full, 0.1)
        # A tenth of the model's cut takes several times as long, if it protects at all.
        timid = protect_ms("--policy-arg", "gain=0.1")
        self.assertTrue(timid is None or timid > 4.0 * full, (timid, full))

    def test_compare_refuses_an_unknown_policy_parameter(self):
        rc, _, err = call("compare", "paper_64k_vs_2m", "--policies", "latency_target",
                          "--policy-arg", "nope=1", "--duration", "0.2")
        self.assertEqual(2, rc)
        self.assertIn("nope", err)

    def test_compare_refuses_an_unknown_policy(self):
        rc, _, err = call("compare", "two_sensitive", "--policies", "nope")
        self.assertEqual(2, rc)
        self.assertIn("nope", err)
