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

"""The Prometheus rules (etc/prometheus/resex-rules.yml) under Debian's ``promtool``.

``promtool check rules`` parses them; ``promtool test rules`` runs
resex-rules-test.yml, where every alert fires for one host or VM and stays
silent for another. The rest checks what an operator relies on: every alert
has a summary, a description naming the host (and the VM), a runbook link
whose section exists, and every series a rule reads is one the agent
exports (scraped from a real agent on the simulated testbed).
"""

import os
import re
import subprocess
import unittest
import urllib.request

from prometheus_client import parser
import yaml

from resex_agent import builder
from resex_agent import metrics as metrics_mod
from tests.unit.agent import conf_helpers

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
RULES = os.path.join(ROOT, "etc", "prometheus", "resex-rules.yml")
RULES_TEST = os.path.join(os.path.dirname(__file__), "resex-rules-test.yml")
RUNBOOK = os.path.join(ROOT, "doc", "source", "monitoring.rst")
RUNBOOK_URL = "https://docs.openstack.org/resex-libvirt/latest/monitoring.html#"
PROMTOOL = "/usr/bin/promtool"


def load(path):
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


def alerts():
    return [rule for group in load(RULES)["groups"] for rule in group["rules"]
            if "alert" in rule]


def promtool(*args):
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=300,
                          cwd=ROOT)


@unittest.skipUnless(os.access(PROMTOOL, os.X_OK),
                     "needs /usr/bin/promtool (Debian package prometheus, in bindep.txt)")
class PromtoolTest(unittest.TestCase):

    def test_rules_parse(self):
        res = promtool("check", "rules", RULES)
        self.assertEqual(0, res.returncode, res.stdout + res.stderr)

    def test_every_alert_fires_and_stays_silent_as_the_unit_tests_expect(self):
        res = promtool("test", "rules", RULES_TEST)
        self.assertEqual(0, res.returncode, res.stdout + res.stderr)
        self.assertIn("SUCCESS", res.stdout)

    def test_a_broken_expectation_fails(self):
        """The harness can fail: one expected label changed makes promtool say so."""
        text = open(RULES_TEST, encoding="utf-8").read()
        broken = text.replace("vm: vm2m\n", "vm: vm64k\n")
        self.assertNotEqual(text, broken)
        path = os.path.join(os.path.dirname(RULES_TEST), ".broken-rules-test.yml")
        with open(path, "w", encoding="utf-8") as f:
            f.write(broken)
        self.addCleanup(os.unlink, path)
        res = promtool("test", "rules", path)
        self.assertNotEqual(0, res.returncode)
        self.assertIn("ResexVMPinnedAtCapFloor", res.stdout + res.stderr)


class AlertContentTest(unittest.TestCase):

    def test_there_is_an_alert_for_each_condition_the_runbook_covers(self):
        self.assertEqual(
            {"ResexAgentDown", "ResexAgentStalled", "ResexVMOverSLA",
             "ResexHostClosedToSensitive", "ResexHypervisorUnavailable",
             "ResexJournalNotWritable", "ResexBoardPublishFailing",
             "ResexVMLatencyUnreportable", "ResexVMPinnedAtCapFloor",
             "ResexSharedLinkLimited"},
            {a["alert"] for a in alerts()})

    def test_each_alert_has_summary_description_runbook_and_severity(self):
        for a in alerts():
            ann = a["annotations"]
            self.assertEqual({"summary", "description", "runbook_url"}, set(ann), a["alert"])
            self.assertIn(a["labels"]["severity"], ("warning", "critical"), a["alert"])
            self.assertIn("$labels.instance", ann["description"], a["alert"])
            if a["alert"] != "ResexAgentDown":     # no agent series left to name it by
                self.assertIn("$labels.host", ann["description"], a["alert"])
            if a["alert"].startswith("ResexVM"):
                self.assertIn("$labels.vm", ann["description"], a["alert"])
                self.assertIn("$labels.uuid", ann["description"], a["alert"])

    def test_each_runbook_link_points_at_a_section_of_the_runbook(self):
        with open(RUNBOOK, encoding="utf-8") as f:
            labels = set(re.findall(r"^\.\. _([\w-]+):$", f.read(), re.M))
        for a in alerts():
            url = a["annotations"]["runbook_url"]
            self.assertTrue(url.startswith(RUNBOOK_URL), url)
            anchor = url[len(RUNBOOK_URL):]
            self.assertEqual("alert-" + a["alert"].lower(), anchor)
            self.assertIn(anchor, {label.lower() for label in labels}, a["alert"])

    def test_each_alert_has_a_firing_and_a_silent_case(self):
        cases = {}
        for test in load(RULES_TEST)["tests"]:
            for case in test.get("alert_rule_test", ()):
                cases.setdefault(case["alertname"], set()).add(bool(case["exp_alerts"]))
        for a in alerts():
            self.assertEqual({True, False}, cases.get(a["alert"]), a["alert"])


class RulesReadExportedSeriesTest(unittest.TestCase):
    """Every ``resex_`` series a rule reads is on a real agent's endpoint."""

    def test_rules_read_only_series_the_agent_exports(self):
        conf = conf_helpers.conf_from_text("[agent]\nmax_epochs = 1\n[sim]\nrealtime = 0\n")
        metrics = metrics_mod.PrometheusMetrics("127.0.0.1", 0)
        agent = builder.build_agent(conf, metrics=metrics)
        try:
            agent.run()
            host, port = metrics.address
            with urllib.request.urlopen("http://%s:%d/metrics" % (host, port), timeout=10) as r:
                text = r.read().decode("utf-8")
        finally:
            agent.shutdown()
        exported = set()
        for fam in parser.text_string_to_metric_families(text):
            exported.add(fam.name)
            exported.update(s.name for s in fam.samples)
            if fam.type == "counter":
                exported.add(fam.name + "_total")
        read = set()
        for group in load(RULES)["groups"]:
            for rule in group["rules"]:
                read.update(re.findall(r"(?<![:\w])resex_\w+", rule["expr"]))
        self.assertTrue(read)
        self.assertEqual(set(), read - exported)
