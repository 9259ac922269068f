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

"""resex-board: the board as a table or JSON, stale hosts marked."""

import contextlib
import io
import json
import os
import signal
import sqlite3
import tempfile
import time
import unittest

from resex_libvirt.board import open_board
from resex_libvirt.board import resex_board
from tests.unit.board import reports


class BoardCLITest(unittest.TestCase):

    def setUp(self):
        tmp = tempfile.TemporaryDirectory(prefix="resex-cli-")
        self.addCleanup(tmp.cleanup)
        self.dir = tmp.name
        self.url = "sqlite://" + os.path.join(tmp.name, "board.sqlite")
        with open_board(self.url) as board:
            board.publish(reports.make("c1", link_utilisation=0.5, sensitive_vms=2,
                                       io_price=2.5))
            board.publish(reports.make("c2", ts=time.time() - 120, heavy_io_vms=1))

    def run_cli(self, *argv):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stderr(err):
            code = resex_board.main(list(argv), out=out)
        return code, out.getvalue(), err.getvalue()

    def test_the_table_shows_every_host_with_its_index_and_marks_stale_ones(self):
        code, out, _ = self.run_cli("--url", self.url, "--max-age", "60")
        self.assertEqual(0, code)
        header, c1, c2, summary = out.splitlines()
        self.assertEqual(["HOST", "AGE_S", "UTIL_%", "UNTAX_%", "CPU_PRICE", "IO_PRICE",
                          "INFL_%", "CI_%", "ADMIT", "SENS", "HEAVY", "VMS", "STATE"],
                         header.split())
        self.assertEqual(["c1", "50.0", "50.0", "1", "2.5", "0.0", "100.0", "closed", "2", "0",
                          "4", "ok"],
                         c1.split()[:1] + c1.split()[2:])
        self.assertEqual("STALE", c2.split()[-1])
        self.assertEqual("-", c2.split()[8])
        self.assertIn("2 hosts, 1 stale (older than 60s), 1 closed to latency-sensitive VMs",
                      summary)

    def test_json_carries_the_report_fields_age_index_and_staleness(self):
        code, out, _ = self.run_cli("--url", self.url, "--json", "--max-age", "300")
        self.assertEqual(0, code)
        doc = json.loads(out)
        self.assertEqual(["c1", "c2"], [h["host"] for h in doc["hosts"]])
        self.assertEqual(100.0, doc["hosts"][0]["congestion_index_pct"])
        self.assertEqual([False, False], [h["stale"] for h in doc["hosts"]])
        self.assertGreaterEqual(doc["hosts"][1]["age_s"], 120)

    def drop_records(self):
        """Two rows every reader drops: one invalid, one naming another host."""
        path = self.url[len("sqlite://"):]
        with sqlite3.connect(path) as conn:
            conn.execute("INSERT INTO host_report (host, ts, record) VALUES ('bad', 1, '[]')")
            conn.execute("INSERT INTO host_report (host, ts, record) VALUES ('forged', 1, ?)",
                         (reports.make("c1").to_json(),))

    def test_the_table_says_how_many_records_were_dropped_and_why(self):
        self.drop_records()
        code, out, _ = self.run_cli("--url", self.url, "--max-age", "60")
        self.assertEqual(0, code)
        self.assertEqual("2 record(s) dropped (invalid 1, misplaced 1): their hosts have no "
                         "report here nor for the scheduler", out.splitlines()[-1])
        self.assertNotIn("forged", out.split("hosts,")[0])

    def test_a_clean_board_says_nothing_of_dropped_records(self):
        _, out, _ = self.run_cli("--url", self.url)
        self.assertNotIn("dropped", out)

    def test_json_counts_the_dropped_records_by_reason(self):
        _, out, _ = self.run_cli("--url", self.url, "--json")
        self.assertEqual({"invalid": 0, "misplaced": 0}, json.loads(out)["rejected"])
        self.drop_records()
        _, out, _ = self.run_cli("--url", self.url, "--json")
        self.assertEqual({"invalid": 1, "misplaced": 1}, json.loads(out)["rejected"])

    def test_a_host_whose_record_was_dropped_is_not_found_and_the_drop_is_said(self):
        self.drop_records()
        code, _, err = self.run_cli("--url", self.url, "--host", "bad")
        self.assertEqual(1, code)
        self.assertIn("no report from host bad", err)
        self.assertIn("2 record(s) dropped (invalid 1, misplaced 1)", err)

    def test_a_missing_board_is_an_error_and_is_not_created(self):
        missing = os.path.join(self.dir, "nope", "board.sqlite")
        code, out, err = self.run_cli("--url", "sqlite://" + missing)
        self.assertEqual(1, code)
        self.assertIn("resex-board: cannot open the SQLite board", err)
        self.assertFalse(os.path.exists(missing))

    def test_a_bad_url_is_an_error(self):
        code, _, err = self.run_cli("--url", "mysql://db")
        self.assertEqual(1, code)
        self.assertIn("unknown board URL scheme", err)


class FakeTTY(io.StringIO):
    def isatty(self):
        return True


class BoardCLIViewsTest(unittest.TestCase):
    """--sort, --host and --watch on a SQLite board."""

    def setUp(self):
        tmp = tempfile.TemporaryDirectory(prefix="resex-cli-")
        self.addCleanup(tmp.cleanup)
        self.dir = tmp.name
        self.path = os.path.join(tmp.name, "board.sqlite")
        self.url = "sqlite://" + self.path
        self.publish(reports.make("a-quiet", latency_inflation_pct=2.0, sensitive_vms=3),
                     reports.make("b-busy", latency_inflation_pct=40.0, heavy_io_vms=2),
                     reports.make("c-mid", latency_inflation_pct=12.0, vms=9))

    def publish(self, *recs):
        with open_board(self.url) as board:
            for rec in recs:
                board.publish(rec)

    def run_cli(self, *argv):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stderr(err):
            code = resex_board.main(list(argv), out=out)
        return code, out.getvalue(), err.getvalue()

    def hosts_in(self, text):
        return [line.split()[0] for line in text.splitlines()
                if line.split() and line.split()[0] in ("a-quiet", "b-busy", "c-mid")]

    def test_sort_by_congestion_puts_the_most_congested_host_first(self):
        code, out, _ = self.run_cli("--url", self.url, "--sort", "congestion")
        self.assertEqual(0, code)
        self.assertEqual(["b-busy", "c-mid", "a-quiet"], self.hosts_in(out))
        code, out, _ = self.run_cli("--url", self.url)
        self.assertEqual(["a-quiet", "b-busy", "c-mid"], self.hosts_in(out))

    def test_admission_follows_the_threshold(self):
        _, out, _ = self.run_cli("--url", self.url, "--threshold", "20")
        admit = {line.split()[0]: line.split()[8] for line in out.splitlines()[1:-1]}
        self.assertEqual({"a-quiet": "open", "b-busy": "closed", "c-mid": "open"}, admit)
        self.assertIn("1 closed to latency-sensitive VMs (index above 20%)", out)

    def test_host_shows_every_field_of_one_report(self):
        code, out, _ = self.run_cli("--url", self.url, "--host", "c-mid")
        self.assertEqual(0, code)
        fields = dict(line.split(":  ", 1) for line in out.splitlines())
        fields = {k.strip(): v.strip() for k, v in fields.items()}
        self.assertEqual(len(resex_board.DETAIL) + 1, len(fields))
        self.assertIn("none known", fields["projects"])
        self.assertEqual("c-mid", fields["host"])
        self.assertEqual("12.00", fields["congestion index, %"])
        self.assertEqual("no, closed (threshold 10%)", fields["admits latency-sensitive VMs"])
        self.assertEqual("9", fields["VMs"])
        self.assertEqual("7", fields["epoch"])
        self.assertEqual("test", fields["agent version"])

    def test_host_shows_the_vms_of_each_project(self):
        projects = [{"project": "8d6f2c0b", "vms": 3, "sensitive_vms": 1, "heavy_io_vms": 0},
                    {"project": "a1b2c3d4", "vms": 1, "sensitive_vms": 0, "heavy_io_vms": 1}]
        self.publish(reports.make("d-owned", vms=6, projects=projects))
        code, out, _ = self.run_cli("--url", self.url, "--host", "d-owned")
        self.assertEqual(0, code)
        fields = {k.strip(): v.strip() for k, v in
                  (line.split(":  ", 1) for line in out.splitlines())}
        self.assertEqual("3 VMs, 1 latency-sensitive, 0 heavy I/O", fields["project 8d6f2c0b"])
        self.assertEqual("1 VMs, 0 latency-sensitive, 1 heavy I/O", fields["project a1b2c3d4"])
        self.assertEqual("2 VMs", fields["no listed project"])
        code, out, _ = self.run_cli("--url", self.url, "--host", "d-owned", "--json")
        self.assertEqual(projects, json.loads(out)["projects"])

    def test_host_shows_the_remote_claims_it_makes_and_those_on_its_vms(self):
        claim = {"vm": "victim-1", "peer": "10.0.2.7:7788", "sla_us": 200.0,
                 "threshold_pct": 10.0, "statistic": "mean", "count": 40, "mean_us": 260.0,
                 "std_us": 9.0, "p99_us": 390.0}
        self.publish(reports.make("e-client", vms=1, sensitive_vms=1,
                                  addresses={"victim-1": ["10.0.1.4"]}, remote_claims=[claim]))
        self.publish(reports.make("f-server", vms=1, addresses={"server-1": ["10.0.2.7"]}))

        def fields(host):
            code, out, _ = self.run_cli("--url", self.url, "--host", host)
            self.assertEqual(0, code)
            return {k.strip(): v.strip() for k, v in
                    (line.split(":  ", 1) for line in out.splitlines())}
        self.assertEqual("peer 10.0.2.7:7788: mean 260 us over 40 requests, SLA 200 us + 10%",
                         fields("e-client")["remote claim victim-1"])
        self.assertEqual("by victim victim-1 on e-client (peer 10.0.2.7:7788)",
                         fields("f-server")["claimed on server-1"])
        code, out, _ = self.run_cli("--url", self.url, "--host", "f-server", "--json")
        self.assertEqual([{"from_host": "e-client", "victim": "victim-1", "peer_vm": "server-1",
                           "peer": "10.0.2.7:7788"}], json.loads(out)["claims_on_host"])

    def test_host_shows_what_it_sends_beyond_its_shared_links(self):
        self.publish(reports.make("i-rack", link_tx={"rack1-up": 1.25e8}))
        code, out, _ = self.run_cli("--url", self.url, "--host", "i-rack")
        self.assertEqual(0, code)
        got = {k.strip(): v.strip() for k, v in (line.split(":  ", 1)
                                                 for line in out.splitlines())}
        self.assertEqual("1 Gb/s (counted by destination)", got["sent beyond rack1-up"])
        self.assertEqual("1.7", got["report version"])

    def test_host_shows_its_ensemble_members_and_each_groups_worst(self):
        group = "3f1c2b9e-5d7a-4c11-9b0e-8a2f6c4d1e77"
        member = {"ensemble": group, "vm": "m-1", "sla_us": 200.0, "threshold_pct": 10.0,
                  "statistic": "mean", "count": 40, "std_us": 9.0, "p99_us": 390.0}
        self.publish(reports.make("g-one", vms=1, sensitive_vms=1,
                                  ensembles=[dict(member, mean_us=260.0)]))
        self.publish(reports.make("h-two", vms=1, sensitive_vms=1,
                                  ensembles=[dict(member, vm="m-2", mean_us=205.0)]))
        code, out, _ = self.run_cli("--url", self.url, "--host", "h-two")
        self.assertEqual(0, code)
        pairs = (line.split(":  ", 1) for line in out.splitlines())
        got = {k.strip(): v.strip() for k, v in pairs}
        self.assertEqual("%s: mean 205 us over 40 requests, SLA 200 us + 10%%" % group,
                         got["ensemble member m-2"])
        self.assertEqual("worst member m-1 on g-one +30%: over its bound",
                         got["ensemble %s" % group])
        code, out, _ = self.run_cli("--url", self.url, "--host", "h-two", "--json")
        self.assertEqual([{"ensemble": group, "worst_member": "m-1", "on_host": "g-one",
                           "over_pct": 30.0, "over": True}],
                         json.loads(out)["ensembles_judged"])

    def test_host_as_json_is_the_report_with_its_age_and_admission(self):
        code, out, _ = self.run_cli("--url", self.url, "--host", "a-quiet", "--json")
        self.assertEqual(0, code)
        doc = json.loads(out)
        self.assertEqual("a-quiet", doc["host"])
        self.assertEqual(3, doc["sensitive_vms"])
        self.assertIs(True, doc["admits_sensitive"])

    def test_an_unknown_host_is_an_error_naming_the_hosts_there(self):
        code, out, err = self.run_cli("--url", self.url, "--host", "nope")
        self.assertEqual(1, code)
        self.assertEqual("", out)
        self.assertIn("no report from host nope", err)
        self.assertIn("(hosts: a-quiet, b-busy, c-mid)", err)

    def watch(self, *argv, out=None, between=None):
        """Run --watch with a fake sleep that calls ``between(frame)`` instead of sleeping."""
        args = resex_board._parser().parse_args(["--url", self.url] + list(argv))
        out = out if out is not None else io.StringIO()
        frames = []

        def sleep(seconds):
            self.assertLessEqual(seconds, args.watch)
            frames.append(seconds)
            if between is not None:
                between(len(frames))

        code = resex_board.watch(args, {"timeout": 5, "create": False}, out, sleep=sleep)
        return code, out.getvalue()

    def test_watch_draws_frames_sorted_by_congestion_until_count(self):
        code, out = self.watch("--watch", "2", "--count", "3")
        self.assertEqual(0, code)
        frames = out.split("resex-board every 2s on ")[1:]
        self.assertEqual(3, len(frames))
        for frame in frames:
            self.assertEqual(["b-busy", "c-mid", "a-quiet"], self.hosts_in(frame))
            self.assertIn("\nHOST ", frame)

    def test_watch_shows_new_reports_and_admission_with_hysteresis(self):
        # No smoothing: the latched index follows each report, down only
        # once it fell 30 % below it (the scheduler's hysteresis).
        steps = {1: 8.0, 2: 6.0}

        def between(frame):
            if frame in steps:
                self.publish(reports.make("c-mid", ts=time.time() + frame,
                                          latency_inflation_pct=steps[frame], vms=9))

        _, out = self.watch("--watch", "1", "--count", "3", "--time-constant", "0",
                            between=between)
        admit = [[line.split()[8] for line in frame.splitlines() if line.startswith("c-mid")]
                 for frame in out.split("resex-board every")[1:]]
        # 12 % closed; 8 % still closed (above 0.7 x 12); 6 % open again.
        self.assertEqual([["closed"], ["closed"], ["open"]], admit)
        # A single read of the 8 % report would have said "open".
        code, once, _ = self.run_cli("--url", self.url, "--host", "c-mid")
        self.assertIn("yes (threshold 10%)", once)

    def test_watch_redraws_in_place_on_a_terminal(self):
        _, out = self.watch("--watch", "1", "--count", "2", out=FakeTTY())
        frames = out.split(resex_board.HOME)
        parts = out.split(resex_board.HOME)
        self.assertEqual(["", parts[1], parts[2]], frames)
        for frame in frames[1:]:
            self.assertTrue(frame.endswith(resex_board.EOS))
            body = frame[:-len(resex_board.EOS)]
            self.assertTrue(all(line.endswith(resex_board.EOL) for line in body.splitlines()))

    def test_watch_keeps_the_last_table_when_the_board_goes_away(self):
        def between(frame):
            os.rename(self.path, self.path + ".away")

        _, out = self.watch("--watch", "1", "--count", "2", between=between)
        first, second = out.split("resex-board every")[1:]
        self.assertNotIn("board unavailable", first)
        self.assertIn("board unavailable (showing the last read)", second)
        self.assertEqual(["b-busy", "c-mid", "a-quiet"], self.hosts_in(second))

    def test_watch_of_one_host(self):
        _, out = self.watch("--watch", "1", "--count", "1", "--host", "b-busy")
        self.assertIn("congestion index, %", out)
        self.assertIn("40.00", out)

    def test_main_watch_stops_after_count_and_restores_sigterm(self):
        before = signal.getsignal(signal.SIGTERM)
        code, out, _ = self.run_cli("--url", self.url, "--watch", "0.01", "--count", "2")
        self.assertEqual(0, code)
        self.assertEqual(2, out.count("resex-board every 0.01s"))
        self.assertIs(before, signal.getsignal(signal.SIGTERM))

    def test_watch_needs_a_positive_period(self):
        with contextlib.redirect_stderr(io.StringIO()):
            with self.assertRaises(SystemExit) as ctx:
                resex_board.main(["--url", self.url, "--watch", "0"])
        self.assertEqual(2, ctx.exception.code)
