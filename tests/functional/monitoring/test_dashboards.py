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

"""The Grafana dashboards' queries against a real Prometheus scraping a real agent.

Grafana does not install here; what a dashboard needs from Prometheus does.
A real ``resex-agent`` process runs the demo's configuration
(etc/resex/resex-agent-demo.conf: the simulated paper testbed with its own
SQLite board) lengthened to an hour, with its metrics endpoint on a free
loopback port. A real Prometheus (Debian's ``prometheus``) on another free
loopback port, with a temporary storage directory, scrapes it every second
and evaluates etc/prometheus/resex-rules.yml every second. Both are started
and stopped by their PIDs.

Then every query of every panel of etc/grafana/*.json, with the dashboard's
variables as Grafana would fill them (``$job``, ``$instance`` = All), is
sent to Prometheus's HTTP API as Grafana sends it (a range query for a
time series, an instant query for a stat, bar gauge or table), and must
parse and return data. Each variable's ``label_values()`` must list values.
Everything is polled with generous deadlines: nothing here is timed.
"""

import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

from resex_libvirt.sim import scenario as scenario_mod

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
PROMETHEUS = "/usr/bin/prometheus"
DASHBOARDS = sorted(glob.glob(os.path.join(ROOT, "etc", "grafana", "*.json")))
RULES = os.path.join(ROOT, "etc", "prometheus", "resex-rules.yml")
DEMO_CONF = os.path.join(ROOT, "etc", "resex", "resex-agent-demo.conf")
JOB = "resex-agent"

#: Guards against a hung part, never a timing assertion.
START_S = 120
DATA_S = 240

OVERRIDE = """[agent]
state_dir = %(tmp)s/state
print_table = false

[board]
url = sqlite:///%(tmp)s/state/board.sqlite

[sim]
scenario = %(scenario)s

[metrics]
enabled = true
bind_address = 127.0.0.1
port = %(port)d
"""

PROMETHEUS_YML = """global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - %(rules)s
scrape_configs:
  - job_name: %(job)s
    static_configs:
      - targets: ['127.0.0.1:%(agent_port)d']
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def substitute(expr, instance=".+"):
    """The query Grafana sends: its variables and ``$__rate_interval`` filled in."""
    return (expr.replace("$__rate_interval", "1m").replace("$job", JOB)
            .replace("$instance", instance))


def targets(dashboard):
    """``(panel title, panel type, target)`` of every query of a dashboard."""
    for panel in dashboard["panels"]:
        for sub in [panel] + panel.get("panels", []):
            for target in sub.get("targets", ()):
                yield sub["title"], sub["type"], target


def stop(proc, timeout=30):
    """Stop a process we started, by its PID: SIGTERM, then SIGKILL."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout)


@unittest.skipUnless(os.access(PROMETHEUS, os.X_OK),
                     "needs /usr/bin/prometheus (Debian package prometheus, in bindep.txt)")
class DashboardQueriesTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="resex-prometheus-")
        cls.procs = []
        try:
            cls._start()
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def _start(cls):
        tmp = cls.tmp
        packaged = os.path.join(os.path.dirname(scenario_mod.__file__), "scenarios",
                                "paper_64k_vs_2m.toml")
        with open(packaged) as f:
            text = re.sub(r"(?m)^duration_s\s*=.*$", "duration_s = 3600.0", f.read())
        scenario = os.path.join(tmp, "long.toml")
        with open(scenario, "w") as f:
            f.write(text)
        agent_port = free_port()
        override = os.path.join(tmp, "override.conf")
        with open(override, "w") as f:
            f.write(OVERRIDE % {"tmp": tmp, "scenario": scenario, "port": agent_port})
        cls.agent_log = os.path.join(tmp, "agent.log")
        with open(cls.agent_log, "wb") as log:
            cls.agent = subprocess.Popen(
                [sys.executable, "-m", "resex_agent.resex_agent", "--config-file", DEMO_CONF,
                 "--config-file", override],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=ROOT)
        cls.procs.append(cls.agent)

        config = os.path.join(tmp, "prometheus.yml")
        with open(config, "w") as f:
            f.write(PROMETHEUS_YML % {"rules": RULES, "job": JOB, "agent_port": agent_port})
        cls.prom_port = free_port()
        cls.prom_log = os.path.join(tmp, "prometheus.log")
        with open(cls.prom_log, "wb") as log:
            cls.prometheus = subprocess.Popen(
                [PROMETHEUS, "--config.file=" + config,
                 "--storage.tsdb.path=" + os.path.join(tmp, "data"),
                 "--web.listen-address=127.0.0.1:%d" % cls.prom_port],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=tmp)
        cls.procs.append(cls.prometheus)
        cls.base = "http://127.0.0.1:%d" % cls.prom_port
        deadline = time.monotonic() + START_S
        while not cls._ready():
            for proc, log in ((cls.agent, cls.agent_log), (cls.prometheus, cls.prom_log)):
                if proc.poll() is not None:
                    raise RuntimeError("%s exited with %s:\n%s" % (
                        proc.args[0], proc.returncode, cls._tail(log)))
            if time.monotonic() > deadline:
                raise RuntimeError("Prometheus did not scrape the agent in %d s:\n%s\n%s" % (
                    START_S, cls._tail(cls.prom_log), cls._tail(cls.agent_log)))
            time.sleep(0.5)

    @classmethod
    def tearDownClass(cls):
        for proc in reversed(cls.procs):
            stop(proc)
        shutil.rmtree(cls.tmp, True)

    @staticmethod
    def _tail(path, n=30):
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])

    @classmethod
    def _ready(cls):
        try:
            body = cls.api("query", query='up{job="%s"} == 1' % JOB)
        except (OSError, ValueError):
            return False
        return bool(body["data"]["result"])

    @classmethod
    def api(cls, path, **params):
        url = "%s/api/v1/%s?%s" % (cls.base, path, urllib.parse.urlencode(params, doseq=True))
        try:
            with urllib.request.urlopen(url, timeout=30) as resp:
                return json.load(resp)
        except urllib.error.HTTPError as exc:     # a query that does not parse: 400
            return json.load(exc)

    def query(self, ptype, target):
        """Send a panel's query as Grafana would; returns Prometheus's answer."""
        expr = substitute(target["expr"])
        if target.get("instant") or (ptype in ("stat", "bargauge", "table")
                                     and not target.get("range")):
            return self.api("query", query=expr)
        end = time.time()
        return self.api("query_range", query=expr, start=end - 60, end=end, step=1)

    def poll(self, check, what):
        """Poll ``check()`` (returns a failure string or None) until it passes."""
        deadline = time.monotonic() + DATA_S
        while True:
            failure = check()
            if failure is None:
                return
            if time.monotonic() > deadline:
                self.fail("%s: %s\nagent log:\n%s" % (what, failure, self._tail(self.agent_log)))
            time.sleep(1.0)

    def test_there_are_two_dashboards_with_queries(self):
        self.assertEqual(["resex-fleet.json", "resex-host.json"],
                         [os.path.basename(p) for p in DASHBOARDS])

    def test_every_panel_query_parses_and_returns_data(self):
        checked = 0
        for path in DASHBOARDS:
            with open(path) as f:
                dashboard = json.load(f)
            for title, ptype, target in targets(dashboard):
                what = "%s / %s / %s: %s" % (os.path.basename(path), title, target["refId"],
                                             target["expr"])

                def check(ptype=ptype, target=target):
                    body = self.query(ptype, target)
                    if body.get("status") != "success":
                        return "error %s: %s" % (body.get("errorType"), body.get("error"))
                    if not body["data"]["result"]:
                        return "no data"
                    return None

                body = self.query(ptype, target)
                # A query that does not parse never will: fail at once.
                self.assertNotEqual("bad_data", body.get("errorType"), what + ": " +
                                    str(body.get("error")))
                self.poll(check, what)
                checked += 1
        self.assertGreaterEqual(checked, 25)

    def test_every_variable_lists_values(self):
        for path in DASHBOARDS:
            with open(path) as f:
                dashboard = json.load(f)
            for var in dashboard["templating"]["list"]:
                if var["type"] != "query":
                    continue
                m = re.fullmatch(r"label_values\((.+), (\w+)\)", var["definition"])
                self.assertIsNotNone(m, var["definition"])
                selector, label = substitute(m.group(1)), m.group(2)

                def check(selector=selector, label=label):
                    body = self.api("label/%s/values" % label, **{"match[]": selector})
                    if body.get("status") != "success":
                        return "error %s" % body.get("error")
                    return None if body["data"] else "no values"

                self.poll(check, "%s: variable %s" % (os.path.basename(path), var["name"]))

    def test_the_host_is_named_as_on_the_board(self):
        def check():
            body = self.api("query", query="instance:resex_congestion_index:ratio")
            hosts = {r["metric"].get("host") for r in body["data"]["result"]}
            return None if hosts == {"sim-demo"} else "hosts %r" % hosts

        self.poll(check, "the recorded congestion index carries the board's host name")
