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

"""etc/grafana/*.json against the fields Grafana's dashboard schema requires.

The rules are those of Grafana's classic dashboard schema (the
``Dashboard`` kind, schema 0.0, ``kinds/dashboard/dashboard_kind.cue`` in
Grafana's repository): a panel has a non-empty ``type``, ``options``,
``fieldConfig`` (``defaults`` and ``overrides``) and ``transformations``;
a row has ``id``, ``collapsed`` and ``panels``; a grid position has
``h > 0``, ``0 < w <= 24``, ``0 <= x < 24`` and ``y >= 0``; a variable has
a ``type`` of the schema's list, a ``name`` and ``hide`` in 0..2; an
annotation has ``name``, ``datasource``, ``enable`` and ``iconColor``; a
link has ``title``, ``type``, ``icon``, ``tooltip``, ``url`` and ``tags``.
On top: panels do not overlap, ids and refIds are unique, every variable a
query uses is defined, every recorded series a query reads is a rule of
etc/prometheus/resex-rules.yml, and the panels the operator's guide lists
are there. That the queries return data is tests/functional/monitoring.
"""

import glob
import json
import os
import re
import unittest

import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
DASHBOARDS = sorted(glob.glob(os.path.join(ROOT, "etc", "grafana", "*.json")))
RULES = os.path.join(ROOT, "etc", "prometheus", "resex-rules.yml")

VARIABLE_TYPES = {"query", "adhoc", "constant", "datasource", "interval", "textbox", "custom",
                  "system"}
GRAFANA_VARIABLES = {"__rate_interval", "__interval", "__range", "__range_s"}
PANEL_TYPES = {"timeseries", "stat", "bargauge", "table", "state-timeline", "text", "gauge"}


def load(name):
    with open(os.path.join(ROOT, "etc", "grafana", name), encoding="utf-8") as f:
        return json.load(f)


def all_panels(dashboard):
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", ())


class DashboardSchemaTest(unittest.TestCase):

    def dashboards(self):
        self.assertEqual(["resex-fleet.json", "resex-host.json"],
                         [os.path.basename(p) for p in DASHBOARDS])
        return [(os.path.basename(p), load(os.path.basename(p))) for p in DASHBOARDS]

    def test_top_level_fields(self):
        uids = set()
        for name, d in self.dashboards():
            self.assertIsInstance(d["title"], str, name)
            self.assertTrue(d["title"], name)
            self.assertTrue(8 <= len(d["uid"]) <= 40, name)
            uids.add(d["uid"])
            self.assertIsInstance(d["schemaVersion"], int, name)
            self.assertTrue(0 < d["schemaVersion"] < 65536, name)
            self.assertIsInstance(d["editable"], bool, name)
            self.assertIn(d["graphTooltip"], (0, 1, 2), name)
            self.assertIn(d["style"], ("dark", "light"), name)
            self.assertEqual({"from", "to"}, set(d["time"]), name)
            self.assertTrue(d["refresh"] is False or isinstance(d["refresh"], str), name)
            self.assertTrue(all(isinstance(t, str) for t in d["tags"]), name)
            self.assertIsInstance(d["panels"], list, name)
            for ann in d["annotations"]["list"]:
                self.assertLessEqual({"name", "datasource", "enable", "iconColor"}, set(ann))
            for link in d["links"]:
                self.assertLessEqual({"title", "type", "icon", "tooltip", "url", "tags"},
                                     set(link))
                self.assertIn(link["type"], ("link", "dashboards"))
        self.assertEqual(2, len(uids))

    def test_panels_have_the_required_fields(self):
        for name, d in self.dashboards():
            ids = [p["id"] for p in all_panels(d)]
            self.assertEqual(len(ids), len(set(ids)), name)
            for p in all_panels(d):
                where = "%s: %s" % (name, p.get("title"))
                self.assertIsInstance(p["id"], int, where)
                self.assertGreaterEqual(p["id"], 0, where)
                g = p["gridPos"]
                self.assertTrue(g["h"] > 0 and 0 < g["w"] <= 24 and 0 <= g["x"] < 24
                                and g["y"] >= 0 and g["x"] + g["w"] <= 24, where)
                if p["type"] == "row":
                    self.assertIsInstance(p["collapsed"], bool, where)
                    self.assertIsInstance(p["panels"], list, where)
                    continue
                self.assertIn(p["type"], PANEL_TYPES, where)
                self.assertIsInstance(p["options"], dict, where)
                self.assertIsInstance(p["fieldConfig"]["defaults"], dict, where)
                for o in p["fieldConfig"]["overrides"]:
                    self.assertIsInstance(o["matcher"]["id"], str, where)
                    self.assertTrue(all("id" in prop for prop in o["properties"]), where)
                for t in p["transformations"]:
                    self.assertIsInstance(t["id"], str, where)
                    self.assertIn("options", t, where)
                self.assertEqual({"type": "prometheus", "uid": "${datasource}"},
                                 p["datasource"], where)
                refs = [t["refId"] for t in p["targets"]]
                self.assertTrue(refs, where)
                self.assertEqual(len(refs), len(set(refs)), where)
                for t in p["targets"]:
                    self.assertTrue(t["expr"].strip(), where)
                    self.assertEqual(p["datasource"], t["datasource"], where)

    def test_panels_do_not_overlap(self):
        for name, d in self.dashboards():
            cells = {}
            for p in d["panels"]:
                g = p["gridPos"]
                for x in range(g["x"], g["x"] + g["w"]):
                    for y in range(g["y"], g["y"] + g["h"]):
                        self.assertNotIn((x, y), cells, "%s: %s overlaps %s" % (
                            name, p["title"], cells.get((x, y))))
                        cells[(x, y)] = p["title"]

    def test_variables_are_well_formed_and_every_one_used_is_defined(self):
        for name, d in self.dashboards():
            defined = set()
            for v in d["templating"]["list"]:
                self.assertIn(v["type"], VARIABLE_TYPES, name)
                self.assertIsInstance(v["name"], str, name)
                self.assertIn(v["hide"], (0, 1, 2), name)
                defined.add(v["name"])
            self.assertIn("datasource", defined, name)
            text = json.dumps(d["panels"]) + json.dumps(d["templating"])
            used = set(re.findall(r"\$\{?(\w+)", text))
            self.assertEqual(set(), used - defined - GRAFANA_VARIABLES, name)

    def test_recorded_series_the_queries_read_are_rules(self):
        with open(RULES, encoding="utf-8") as f:
            rules = yaml.safe_load(f)
        recorded = {r["record"] for g in rules["groups"] for r in g["rules"] if "record" in r}
        for name, d in self.dashboards():
            for p in all_panels(d):
                for t in p.get("targets", ()):
                    for series in re.findall(r"\b[a-z_]+:[a-z_0-9:]+\b", t["expr"]):
                        self.assertIn(series, recorded, "%s: %s" % (name, p["title"]))

    def test_the_panels_an_operator_looks_for_are_there(self):
        titles = {name: {p["title"] for p in all_panels(d)} for name, d in self.dashboards()}
        self.assertLessEqual(
            {"Link utilisation", "Congestion index", "Admission of latency-sensitive VMs",
             "Prices", "CPU cap by VM, with the reason", "CPU use by VM",
             "Transmit rate by VM", "Latency against SLA", "Interference",
             "Control loop lateness"}, titles["resex-host.json"])
        self.assertLessEqual(
            {"Hosts by congestion", "Sensitive VMs over SLA", "Hosts closed to sensitive VMs",
             "Agents stale"}, titles["resex-fleet.json"])

    def test_fractions_are_shown_with_the_ratio_unit_never_scaled_to_percent(self):
        """The agent exports fractions (``_ratio``); Grafana's ``percentunit`` shows them."""
        for name, d in self.dashboards():
            for p in all_panels(d):
                if p["type"] == "row":
                    continue
                where = "%s: %s" % (name, p["title"])
                self.assertNotEqual("percent", p["fieldConfig"]["defaults"].get("unit"), where)
                for t in p["targets"]:
                    self.assertNotRegex(t["expr"], r"\b100\s*\*", where)

    def test_congestion_panels_show_the_ratio_red_above_the_rules_threshold(self):
        with open(RULES, encoding="utf-8") as f:
            rules = yaml.safe_load(f)
        closed = [r["expr"] for g in rules["groups"] for r in g["rules"]
                  if r.get("record") == "instance:resex_congestion_index:ratio" or
                  r.get("record") == "instance:resex_closed_to_sensitive:bool"]
        self.assertEqual(2, len(closed))
        threshold = float(re.search(r"> bool ([0-9.]+)", closed[1]).group(1))
        self.assertEqual(0.1, threshold)        # nova.conf's congestion_threshold 10 (%)
        panels = 0
        for name, d in self.dashboards():
            for p in all_panels(d):
                exprs = [t["expr"] for t in p.get("targets", ())]
                series = {s for e in exprs for s in re.findall(r"[\w:]*resex_congestion_index\w*"
                                                               r"(?::\w+)?", e)}
                if not series:
                    continue
                panels += 1
                where = "%s: %s" % (name, p["title"])
                self.assertLessEqual(series, {"resex_congestion_index_ratio",
                                              "instance:resex_congestion_index:ratio"}, where)
                defaults = p["fieldConfig"]["defaults"]
                self.assertEqual("percentunit", defaults["unit"], where)
                reds = [s["value"] for s in defaults.get("thresholds", {}).get("steps", ())
                        if s["color"] == "red"]
                self.assertTrue(all(v == threshold for v in reds), where)
        self.assertEqual(3, panels)
