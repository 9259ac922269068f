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

"""The peers and the paper's variants on the lab's real agent, and the lab's peers table.

The real ``resex-agent`` (a subprocess, its console script) on the
simulated host, no services: what the lab's research install gives the
agent, and that without it the agent refuses the peers (they are no
production entry points). The table's inputs are shaped as the
experiments' ``results.json``.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from resex_libvirt.market import policy as policy_mod
from tests.lab import experiment
from tests.lab import peer_plugins
from tests.lab import sidebyside
from tests.lab import verbs_experiment

PEERS = ("koordinator_suppress", "crane_throttle", "ewma_step")

AGENT_CONF = """[agent]
host = sim-lab-peers
host_driver = simulated
cap_consent = all
state_dir = %(tmp)s/state
print_table = true
max_epochs = 3
[sim]
scenario = paper_64k_vs_128k
realtime = 0
[market]
policy = %(policy)s
[board]
url = sqlite:///%(tmp)s/board.sqlite
"""


class ResearchInstallTest(unittest.TestCase):

    def setUp(self):
        super().setUp()
        self.tmp = tempfile.mkdtemp(prefix="resex-lab-peers-")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def agent(self, policy, env):
        conf = os.path.join(self.tmp, "agent.conf")
        with open(conf, "w") as f:
            f.write(AGENT_CONF % {"tmp": self.tmp, "policy": policy})
        # One CPU, whatever the machine: Koordinator's rule reads the host's capacity.
        one_cpu = min(os.sched_getaffinity(0))
        return subprocess.run(experiment.agent_command() + ["--config-file", conf],
                              env=env, cwd=self.tmp, capture_output=True, text=True,
                              timeout=300,
                              preexec_fn=lambda: os.sched_setaffinity(0, {one_cpu}))

    def test_every_research_policy_loads_in_a_process_without_the_tests_package(self):
        env = experiment.research_install(os.path.join(self.tmp, "research"))
        code = ("import sys\n"
                "from resex_libvirt.market import policy\n"
                "for name in sys.argv[1:]:\n"
                "    p = policy.load(name)\n"
                "    print(name, type(p).__name__, getattr(p, 'capacity_pct', '-'))\n"
                "print('tests imported:', any(m.split('.')[0] == 'tests' for m in sys.modules))\n")
        names = sorted(experiment.research_policies())
        out = subprocess.run([sys.executable, "-c", code] + names, env=env, cwd=self.tmp,
                             capture_output=True, text=True, timeout=120)
        self.assertEqual(0, out.returncode, out.stderr)
        lines = dict(line.split(" ", 1) for line in out.stdout.splitlines())
        self.assertEqual(set(PEERS) | {"io_shares_paper", "free_market_paper"},
                         set(lines) - {"tests"})
        capacity = "%s" % peer_plugins.host_capacity_pct()
        self.assertEqual("KoordinatorSuppress %s" % capacity, lines["koordinator_suppress"])
        self.assertEqual("CraneThrottle %s" % capacity, lines["crane_throttle"])
        self.assertEqual("EWMAStep -", lines["ewma_step"])
        self.assertEqual("IOSharesPaper -", lines["io_shares_paper"])
        self.assertEqual("imported: False", lines["tests"])

    def test_the_real_agent_runs_a_peer_from_the_research_install(self):
        env = experiment.research_install(os.path.join(self.tmp, "research"))
        out = self.agent("koordinator_suppress", env)
        self.assertEqual(0, out.returncode, out.stdout + out.stderr)
        self.assertIn("policy koordinator_suppress", out.stdout)
        epochs = [line for line in out.stdout.splitlines() if " epoch " in line]
        self.assertEqual(3, len(epochs), out.stdout)
        for line in epochs:
            # The VM without a latency SLA is capped by the peer, the sensitive one never.
            self.assertRegex(line, r"vm128k cap \d+/\d+% rate [0-9.]+ \(peer\)")
            self.assertRegex(line, r"vm64k cap 100/100% .*\(uncapped\)")
        self.assertRegex(epochs[-1], r"vm128k cap (\d|[1-9]\d)/")

    def test_without_the_research_install_the_agent_refuses_the_peers(self):
        self.assertFalse(set(PEERS) & set(policy_mod.names()))
        out = self.agent("ewma_step", dict(os.environ))
        self.assertEqual(1, out.returncode, out.stdout)
        self.assertIn("unknown policy 'ewma_step'", out.stderr)

    def test_a_peer_has_no_option_group_in_the_agents_configuration(self):
        self.assertEqual("", experiment.policy_group("koordinator_suppress", 0.05))
        self.assertIn("[market_io_shares_paper]\ndecay_half_life = 0.05",
                      experiment.policy_group("io_shares_paper", 0.05))

    def test_a_policy_spec_sets_its_options_in_the_policys_group(self):
        name, options = experiment.policy_spec("io_shares@ceiling_delays=60@quiet_delays=4")
        self.assertEqual(("io_shares", {"ceiling_delays": 60.0, "quiet_delays": 4.0}),
                         (name, options))
        group = experiment.policy_group(name, 0.05, options)
        self.assertIn("[market_io_shares]\n", group)
        self.assertIn("ceiling_delays = 60\n", group)
        self.assertIn("quiet_delays = 4\n", group)
        self.assertEqual(("io_shares", {}), experiment.policy_spec("io_shares"))

    def test_a_policy_spec_with_an_unknown_or_bad_option_is_refused(self):
        with self.assertRaisesRegex(ValueError, "'ceiling=60' is not an option"):
            experiment.policy_spec("io_shares@ceiling=60")
        with self.assertRaisesRegex(ValueError, "ceiling_delays must be in"):
            experiment.policy_spec("io_shares@ceiling_delays=-1")


class VerbsPlanTest(unittest.TestCase):

    def args(self, runs):
        return verbs_experiment.parse_args(["--runs", runs, "--sweep", "20",
                                            "--sweep-periods", "10000"])

    def test_the_paper_variant_and_the_peers_are_run_by_default(self):
        names = [name for name, kind, _a in verbs_experiment.plan_of(self.args(
            ",".join(verbs_experiment.POLICIES))) if kind == "policy"]
        self.assertEqual(["io_shares", "latency_target", "io_shares_paper",
                          "koordinator_suppress", "crane_throttle", "ewma_step"], names)

    def test_a_policy_nobody_provides_is_said_and_left_out(self):
        import contextlib
        import io
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            plan = verbs_experiment.plan_of(self.args("io_shares,no_such_policy"))
        self.assertEqual(["base", "interfered", "io_shares", "static 20% /10ms"],
                         [name for name, _k, _a in plan])
        self.assertIn("policy no_such_policy is neither installed", out.getvalue())


def _series(means):
    return [(i, 10, m, m * 2) for i, m in enumerate(means)]


def tcp_summary():
    """A TCP ``results.json`` in miniature: SLA 1000 us, threshold 10 %."""
    def run(name, mean, p99, mbit, means, caps):
        return {"name": name, "latency": {"mean_us": mean, "p99_us": p99},
                "interferer_mbit_s": mbit, "latency_series": _series(means),
                "cap_swing_pct": experiment.cap_swing(
                    {"polls": [{"t": i, experiment.INTERFERER: {"cap_pct": c}}
                               for i, c in enumerate(caps)]})}
    return {
        "settings": {"threshold": 10.0, "seconds": 60.0, "sweep_seconds": 15.0},
        "sla_us": 1000.0,
        "runs": [run("base", 1000, 2000, 0.0, [1000] * 6, [None] * 4),
                 run("interfered", 9000, 90000, 18.0, [9000] * 6, [None] * 4),
                 run("io_shares", 1050, 5000, 6.0, [5000, 1000, 1000, 1000, 900, 1000],
                     [50, 20, 10, 6]),
                 run("koordinator_suppress", 1080, 4000, 6.0, [1000] * 6, [70, 70, 70, 70]),
                 run("crane_throttle", 8000, 80000, 16.0, [9000] * 6, [None, None, None, 90]),
                 run("ewma_step", 2000, 9000, 9.0, [3000, 3000, 1000, 1000, 1000, 3000],
                     [90, 81, 73, 66])],
        "sweep": [{"cap_pct": None, "interferer_mbit_s": 18.0,
                   "latency": {"mean_us": 9000, "p99_us": 90000}},
                  {"cap_pct": 5.0, "interferer_mbit_s": 5.0,
                   "latency": {"mean_us": 1090, "p99_us": 3000}},
                  {"cap_pct": 1.0, "interferer_mbit_s": 1.0,
                   "latency": {"mean_us": 1000, "p99_us": 2500}}]}


class PeersTableTest(unittest.TestCase):

    def test_tcp_rows_against_the_sla_the_uncontrolled_run_and_the_frontier(self):
        (title, data), = sidebyside.from_results(tcp_summary())
        self.assertIn("TCP (60 s runs", title)
        self.assertEqual({"cap_pct": 5.0, "name": "static", "mbit_s": 5.0, "mean_vs_sla": 1.09,
                          "p99_vs_sla": 3.0, "pct_uncontrolled": 100.0 * 5 / 18},
                         data["frontier"])
        by = {r["name"]: r for r in data["rows"]}
        self.assertEqual(["none", "io_shares", "koordinator_suppress", "crane_throttle",
                          "ewma_step"], [r["name"] for r in data["rows"]])
        self.assertTrue(by["io_shares"]["meets"])
        self.assertFalse(by["ewma_step"]["meets"])
        self.assertAlmostEqual(120.0, by["io_shares"]["pct_frontier"])
        self.assertAlmostEqual(50.0, by["ewma_step"]["pct_uncontrolled"])
        # Three windows in a row within 1100 us: from second 1; never for the uncontrolled.
        self.assertEqual(1, by["io_shares"]["protect_s"])
        self.assertEqual(0, by["koordinator_suppress"]["protect_s"])
        self.assertEqual(2, by["ewma_step"]["protect_s"])
        self.assertIsNone(by["none"]["protect_s"])
        self.assertEqual(4.0, by["io_shares"]["swing_pct"])
        self.assertEqual(10.0, by["crane_throttle"]["swing_pct"])

    def test_the_verdicts_name_each_peer_that_matched_or_beat_the_project(self):
        (_t, data), = sidebyside.from_results(tcp_summary())
        vs = {v["peer"]: v for v in sidebyside.verdicts(data)}
        self.assertEqual(("tie", "throughput", "peer"),
                         (vs["koordinator_suppress"]["winner"], vs["koordinator_suppress"]["on"],
                          vs["koordinator_suppress"]["faster"]))
        self.assertEqual(("project", "SLA", "project"),
                         (vs["crane_throttle"]["winner"], vs["crane_throttle"]["on"],
                          vs["crane_throttle"]["faster"]))
        self.assertEqual("io_shares", vs["ewma_step"]["project"])
        text = sidebyside.format_all(data, "t")
        self.assertIn("a peer matched or beat the project: koordinator_suppress (tie on "
                      "throughput)", text)
        self.assertIn("a peer protected as fast or faster: koordinator_suppress (peer)", text)
        self.assertIn("frontier (cap 5%)", text)
        self.assertIn("1.050x", text)
        self.assertIn("2.000x MISS", text)

    def test_a_sweep_where_no_cap_meets_the_sla_has_no_frontier(self):
        summary = tcp_summary()
        summary["sweep"] = summary["sweep"][:1]
        (_t, data), = sidebyside.from_results(summary)
        self.assertIsNone(data["frontier"])
        self.assertIsNone(data["rows"][1]["pct_frontier"])
        self.assertIn("frontier (no cap meets)", sidebyside.format_table(data))

    def test_verbs_rows_are_the_medians_of_each_size(self):
        def row(name, kind, mean, goodput, protect=None, never=0, cap=None):
            return {"name": name, "kind": kind, "rounds": 2, "mean_us": mean,
                    "p99_us": 3 * mean, "goodput_mbit_s": goodput, "swing_pct": None,
                    "sla_restored_s": protect, "sla_never_restored": never,
                    "cap_mean_pct": cap}
        rep = {"sla": [20000.0, 10.0], "rows": [
            row("base", "base", 20000, 0.0), row("interfered", "interfered", 90000, 16.0,
                                                 never=2),
            row("crane_throttle", "policy", 21000, 18.0, 3.0, never=1),
            row("static 5% /10ms", "static", 19000, 0.5, cap=5.0)]}
        summary = {"settings": {"rounds": 2, "seconds": 40.0}, "sizes": {"65536": rep}}
        (title, data), = sidebyside.from_results(summary)
        self.assertIn("65536-byte requests (medians of 2 rounds of 40 s)", title)
        self.assertEqual("static 5% /10ms", data["frontier"]["name"])
        crane = data["rows"][1]
        self.assertTrue(crane["meets"])
        self.assertEqual(3600.0, crane["pct_frontier"])
        table = sidebyside.format_table(data)
        self.assertIn("3.0(1 never)", table)
        self.assertIn("-(2 never)", table.splitlines()[1])
        # No policy of the project ran: nothing to set the peer against.
        self.assertEqual([], sidebyside.verdicts(data))
        self.assertIn("no verdict", sidebyside.format_verdicts(data))

    def test_when_neither_protects_nobody_protected_first(self):
        self.assertIsNone(sidebyside.faster({"protect_s": None}, {"protect_s": None}))
        self.assertEqual("peer", sidebyside.faster({"protect_s": None}, {"protect_s": 9.0}))
        self.assertEqual("tie", sidebyside.faster({"protect_s": 2.0}, {"protect_s": 2.0}))


if __name__ == "__main__":
    unittest.main()
