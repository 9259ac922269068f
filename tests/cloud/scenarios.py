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

"""The end-to-end scenarios on the cloud, through the compute API (openstacksdk).

Each scenario is a method of :class:`Scenarios` that raises
``AssertionError`` saying what went wrong; they run in order on one cloud
(the later ones use the servers of the earlier ones):

* ``bad_extra_specs``: nova-api refuses bad ``resex:`` extra specs (400);
* ``congested_node_refused``: a bulk server sends through node1's link,
  node1's agent publishes the congestion on etcd, and the real
  nova-scheduler, reading that board through the plugin's filter, places a
  new sensitive server on node2 (its log names the reason for node1);
* ``agent_controls_nova_guest``: a sensitive server booted on node1 is
  adopted by node1's agent, which reads its SLA from the extra specs Nova
  wrote into the domain, hot-plugs the latency channel and hears the
  guest's BenchEx; the agent caps the bulk server while the sensitive one
  is over its SLA; SIGTERM restores Nova's values.

``python -m tests.cloud test`` (``make cloud-test``) brings the cloud up,
runs them all, tears it down, and prints ``scenario | result | time``.
"""

import os
import re
import sys
import time
import traceback

import libvirt
import openstack

from resex_libvirt import board as board_mod
from tests.cloud import cloud as cloud_mod
from tests.cloud import guests

libvirt.registerErrorHandler(lambda ctx, err: None, None)

#: nova.conf's [resex] congestion_threshold (the filter's default).
THRESHOLD_PCT = 10.0


class Scenarios:

    def __init__(self, cloud):
        self.cloud = cloud
        self.conn = cloud.connect()
        self.servers = {}
        self.figures = {}

    def close(self):
        self.conn.close()

    # -- helpers -------------------------------------------------------------------

    def flavor(self, name):
        return self.conn.compute.find_flavor(name, ignore_missing=False)

    def image(self, name):
        return self.conn.image.find_image(name, ignore_missing=False)

    def boot(self, name, flavor, image, node=None, nic=False, timeout=240):
        """Create a server (on ``node`` if given: an admin's ``nova:NODE`` zone); wait ACTIVE."""
        kwargs = {"name": name, "flavor_id": self.flavor(flavor).id,
                  "image_id": self.image(image).id,
                  "networks": [{"uuid": cloud_mod.NETWORK_ID}] if nic else "none"}
        if node is not None:
            kwargs["availability_zone"] = "nova:%s" % node
        t0 = time.monotonic()
        server = self.conn.compute.create_server(**kwargs)
        try:
            server = self.conn.compute.wait_for_server(server, wait=timeout, interval=1)
        except openstack.exceptions.ResourceFailure:
            server = self.conn.compute.get_server(server.id)
            raise AssertionError("server %s went to %s: %s"
                                 % (name, server.status, server.fault))
        self.servers[name] = server
        self.figures["%s_active_s" % name] = time.monotonic() - t0
        return server

    def hypervisor(self, node):
        sock = os.path.join(self.cloud.node_dir(node), "run-libvirt", "libvirt-sock")
        return libvirt.open("qemu+unix:///system?socket=%s" % sock)

    def knobs(self, node, server, flags=libvirt.VIR_DOMAIN_AFFECT_LIVE):
        conn = self.hypervisor(node)
        try:
            dom = conn.lookupByUUIDString(server.id)
            return dom.schedulerParametersFlags(flags)
        finally:
            conn.close()

    def board(self):
        board = board_mod.open_board(self.cloud.board_url, timeout=5.0, create=False)
        try:
            return board.snapshot()
        finally:
            board.close()

    def log_lines(self, name, since_bytes=0):
        with open(self.cloud.log(name), errors="replace") as f:
            f.seek(since_bytes)
            return f.read()

    def log_size(self, name):
        return os.path.getsize(self.cloud.log(name))

    def wait_for(self, what, predicate, timeout, interval=0.5):
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError("%s: not within %.0f s" % (what, timeout))
            time.sleep(interval)

    # -- (a) ----------------------------------------------------------------------------

    def bad_extra_specs(self):
        """nova-api's resex: validators refuse a bad value and an unknown key with 400."""
        flavor = self.flavor("resex.plain")
        for specs in ({"resex:latency_sla_us": "abc"}, {"resex:latency_sla_us": "-5"},
                      {"resex:no_such_key": "1"}):
            try:
                self.conn.compute.create_flavor_extra_specs(flavor, specs)
            except openstack.exceptions.BadRequestException as exc:
                assert exc.status_code == 400, exc
            else:
                raise AssertionError("nova-api accepted %s" % specs)
        stored = self.conn.compute.fetch_flavor_extra_specs(flavor).extra_specs or {}
        assert not any(k.startswith("resex:") for k in stored), stored
        # A valid one passes the same validators.
        self.conn.compute.create_flavor_extra_specs(flavor, {"resex:shares": "2048"})
        self.conn.compute.delete_flavor_extra_specs_property(flavor, "resex:shares")

    # -- (b) ----------------------------------------------------------------------------

    def congested_node_refused(self):
        """node1 congested by real traffic -> the scheduler places a sensitive server on node2."""
        bulk = self.boot("bulk1", "resex.bulk", "resex-bulk", node="node1", nic=True)
        t_active = time.monotonic()

        def congested():
            rec = self.board().get("node1")
            return rec if rec is not None and rec.congestion_index > THRESHOLD_PCT else None

        rec = self.wait_for("node1's published congestion index over %.0f%%" % THRESHOLD_PCT,
                            congested, timeout=180)
        t_board = time.monotonic()
        wall_board = time.time()
        self.figures["bulk_active_to_board_congested_s"] = t_board - t_active
        self.figures["node1_link_utilisation_pct"] = 100.0 * rec.link_utilisation
        self.figures["node1_congestion_index_pct"] = rec.congestion_index
        mark = self.log_size("nova-scheduler")
        sensitive = self.boot("sensitive-b", "resex.sensitive", "resex-report")
        self.figures["board_congested_to_placed_s"] = time.monotonic() - t_board
        placed = sensitive.compute_host
        assert placed == "node2", "the sensitive server went to %s (bulk on %s)" % (
            placed, bulk.compute_host)
        log = self.log_lines("nova-scheduler", mark)
        match = re.search(r"ResEx: host node1 fails: [^\n]*", log)
        assert match, "nova-scheduler's log names no ResEx refusal of node1"
        self.figures["refusal"] = match.group(0).split(" _log ")[0]
        self.figures["board_congested_to_refusal_s"] = _log_time(log, match) - wall_board

    def every_node_congested(self):
        """Both nodes congested: a sensitive server fails with NoValidHost; a bulk one boots."""
        # node1's bulk server sends at full speed again once no sensitive
        # neighbour over its SLA makes the agent cap it.
        for name in ("sensitive-c",):
            if name in self.servers:
                self.conn.compute.delete_server(self.servers.pop(name))
        self.boot("bulk2", "resex.bulk", "resex-bulk", node="node2", nic=True)
        streak = []

        def both_congested():
            board = self.board()
            streak.append(all(h in board and board[h].congestion_index > THRESHOLD_PCT
                              for h in ("node1", "node2")))
            return streak[-3:] == [True] * 3

        self.wait_for("both nodes' published congestion index over %.0f%% three times "
                      "in a row" % THRESHOLD_PCT, both_congested, timeout=180, interval=1.0)
        mark = self.log_size("nova-scheduler")
        try:
            self.boot("sensitive-d", "resex.sensitive", "resex-report", timeout=120)
        except AssertionError as exc:
            assert "ERROR" in str(exc) and "No valid host" in str(exc), exc
        else:
            raise AssertionError("a sensitive server booted with every node congested")
        log = self.log_lines("nova-scheduler", mark)
        for node in ("node1", "node2"):
            assert re.search(r"ResEx: host %s fails: admission index" % node, log), (
                "nova-scheduler's log names no ResEx refusal of %s" % node)
        assert "ResExCongestionFilter: (start: 2, end: 0)" in log, (
            "nova-scheduler's log does not name the filter that removed every host")
        # A bulk tenant is not a sensitive one: it still gets a node.
        self.boot("bulk3", "resex.bulk", "resex-idle")

    # -- (c) ----------------------------------------------------------------------------

    def agent_controls_nova_guest(self):
        """node1's agent adopts a Nova guest, hears it, caps the bulk server; SIGTERM restores."""
        bulk = self.servers.get("bulk1") or self.boot("bulk1", "resex.bulk", "resex-bulk",
                                                      node="node1", nic=True)
        nova_values = self.knobs("node1", bulk, libvirt.VIR_DOMAIN_AFFECT_CONFIG)
        agent_log = "node1-resex-agent"
        mark = self.log_size(agent_log)
        server = self.boot("sensitive-c", "resex.sensitive", "resex-report", node="node1")
        name = server.instance_name
        t_active = time.monotonic()
        sla = self.wait_for(
            "the agent's adoption of %s" % name,
            lambda: re.search(r"adopted VM %s \(%s\): [^\n]*SLA from (\w+)"
                              % (name, server.id), self.log_lines(agent_log, mark)),
            timeout=60)
        assert sla.group(1) == "flavor", sla.group(0)
        self.wait_for("the latency channel hot-plugged into %s" % name,
                      lambda: re.search(r"VM %s \(%s\): latency channel hot-plugged"
                                        % (name, server.id), self.log_lines(agent_log, mark)),
                      timeout=60)
        heard = self.wait_for(
            "latency reports from %s in the agent's epoch lines" % name,
            lambda: re.search(r"(?:%s|%s)[^|;]*? cap [^|;]* lat (\d+)us"
                              % (name, server.id), self.log_lines(agent_log, mark)),
            timeout=120)
        self.figures["sensitive_latency_us"] = int(heard.group(1))
        assert int(heard.group(1)) > guests.SLA_US, (
            "the guest reports %s us, within its %d us SLA: nothing to control"
            % (heard.group(1), guests.SLA_US))

        def capped():
            params = self.knobs("node1", bulk)
            cap = _cap_pct(params)
            return cap if cap is not None and cap < 50.0 else None

        cap = self.wait_for("the bulk server capped below 50%", capped, timeout=60,
                            interval=0.2)
        self.figures["sensitive_active_to_bulk_capped_s"] = time.monotonic() - t_active
        self.figures["bulk_cap_pct"] = cap
        self.cloud.stop_agent("node1")
        live = self.knobs("node1", bulk)
        # The flavor has no quota:cpu_*: Nova wrote no <cputune>, so no
        # quota is set and the cgroup's default shares (1024; the persistent
        # definition says 0, "unset") are in force.
        assert _cap_pct(live) is None, "after SIGTERM the bulk server is still capped: %s" % live
        expected_shares = nova_values.get("cpu_shares") or 1024
        assert live.get("cpu_shares") == expected_shares, (
            "after SIGTERM cpu_shares is %s, Nova's %s"
            % (live.get("cpu_shares"), expected_shares))
        self.cloud.start_agent("node1")


ORDER = ("bad_extra_specs", "congested_node_refused", "agent_controls_nova_guest",
         "every_node_congested")


def _log_time(text, match):
    """Wall time (s since the epoch) of the oslo.log line holding ``match``."""
    start = text.rfind("\n", 0, match.start()) + 1
    stamp = text[start:start + 23]
    return time.mktime(time.strptime(stamp[:19], "%Y-%m-%d %H:%M:%S")) + float(
        "0." + stamp[20:23])


def _cap_pct(params):
    """Percent of one pCPU the live parameters allow, or None (no cap)."""
    caps = []
    if params.get("global_quota", -1) > 0:
        caps.append(100.0 * params["global_quota"] / params.get("global_period", 100000))
    if params.get("vcpu_quota", -1) > 0:
        caps.append(100.0 * params["vcpu_quota"] / params.get("vcpu_period", 100000))
    return min(caps) if caps else None


def run(cloud, names=ORDER, out=sys.stdout):
    """Run the scenarios in order; ``[(name, "pass"|"FAIL: why", seconds)]``."""
    rows = []
    scenarios = Scenarios(cloud)
    try:
        for name in names:
            t0 = time.monotonic()
            try:
                getattr(scenarios, name)()
                result = "pass"
            except Exception as exc:
                traceback.print_exc(file=out)
                result = "FAIL: %s" % (str(exc).splitlines() or [type(exc).__name__])[0]
            rows.append((name, result, time.monotonic() - t0))
    finally:
        scenarios.close()
    return rows, scenarios.figures


def format_table(rows):
    width = max(len("scenario"), *(len(r[0]) for r in rows))
    lines = ["%-*s | %s | %s" % (width, "scenario", "result", "time")]
    for name, result, seconds in rows:
        lines.append("%-*s | %s | %.1f s" % (width, name, result, seconds))
    return "\n".join(lines)


def main(cloud):
    """``make cloud-test``: bring-up, every scenario, teardown; the table."""
    rows = []
    figures = {}
    t0 = time.monotonic()
    try:
        cloud.up()
        guests.publish(cloud)
        rows.append(("bring-up", "pass", time.monotonic() - t0))
        figures["rss_mib"] = cloud.rss_mib()
        scenario_rows, figures_ = run(cloud)
        rows += scenario_rows
        figures.update(figures_)
    except Exception as exc:
        traceback.print_exc()
        rows.append(("bring-up", "FAIL: %s" % exc, time.monotonic() - t0))
    finally:
        t1 = time.monotonic()
        cloud.down()
        rows.append(("teardown", "pass", time.monotonic() - t1))
    print(format_table(rows))
    for key, value in sorted(figures.items()):
        print("%s: %s" % (key, "%.1f" % value if isinstance(value, float) else value))
    return 0 if all(r[1] == "pass" for r in rows) else 1
