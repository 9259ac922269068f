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
  is over its SLA; SIGTERM restores Nova's values;
* ``agent_restricted``: every agent runs under the shipped systemd unit's
  restrictions (:mod:`tests.cloud.unit_sandbox`) and still hears its
  guest's channel, journals, publishes and serves its metrics;
* ``every_node_congested``, ``install_rst_config`` (the rest of the smoke);
* (d) moves of a capped server from node1 to node2 (:data:`MOVES`): it
  must arrive with Nova's values and node1's agent forget it;
* (e) faults during control (:data:`FAULTS`): kill -9 of an agent,
  restarts of nova-compute, libvirtd and etcd; control resumes, nothing
  stays capped;
* ``rdma_guests``: Soft-RoCE guests booted through Nova, heard and
  controlled by node1's agent;
* ``remote_victim`` (:data:`FABRIC`): a victim on node1 whose server is on
  node2, where a bulk tenant floods node2's port: node2's agent acts on
  node1's remote claim and caps it; the board down 30 s (the claim
  expires, the cap goes), node2's agent killed and restarted, the victim
  deleted (the cap goes);
* (f) Placement traits (:data:`PLACEMENT`): resex-placement-sync keeps
  ``CUSTOM_RESEX_CLOSED`` on congested node1 (measured from the board record
  that closed it to the trait and to Placement's candidates without node1,
  on a cloud cleared of the earlier rows' servers); with the filter disabled a
  flavor forbidding the trait is kept off node1 by Placement itself;
  nova-compute's own trait updates against it (how long it is missing);
  the service killed and restarted; Placement down for a while;
* ``shared_link`` (:data:`SHARED`, last: node3 joins the cloud): node1 and
  node3 behind one shaped uplink; a victim on node2 measuring a server on
  node1, a bulk tenant on node3 filling the uplink: node3's agent limits it
  (the shared link's rule); node3's agent killed and restarted, the victim
  deleted (the limit goes).

``python -m tests.cloud test`` (``make cloud-test``) brings the cloud up,
runs them all, tears it down, and prints ``scenario | result | time``.
"""

import contextlib
import os
import pwd
import re
import signal
import stat
import sys
import threading
import time
import traceback
import urllib.request

import libvirt
import openstack

from resex_libvirt import board as board_mod
from resex_libvirt.board import admission
from tests.cloud import cloud as cloud_mod
from tests.cloud import guests
from tests.cloud import unit_sandbox
from tests import machine

libvirt.registerErrorHandler(lambda ctx, err: None, None)

#: nova.conf's [resex] congestion_threshold (the filter's default).
THRESHOLD_PCT = 10.0
#: The filter's admission smoothing and hysteresis (``[resex]
#: admission_time_constant`` and ``admission_hysteresis`` at their defaults: the
#: cloud sets neither), and the margin over the threshold a row waits for (the
#: scheduler may have read a report fewer or more than the row).
ADMIT_TAU_S, ADMIT_HYSTERESIS, ADMIT_MARGIN = 20.0, 0.3, 1.1

#: The traits (resex_nova.traits), spelled out: the rows check the names
#: operators write into flavors.
CLOSED = "CUSTOM_RESEX_CLOSED"
MANAGED = "CUSTOM_RESEX_MANAGED"
#: A latency-sensitive flavor that leaves the choice to Placement.
TRAITS_FLAVOR = "resex.sensitive.traits"
#: resex-placement-sync's reconciliation interval in the rows (Cloud.start_placement_sync).
RECONCILE_S = 10.0
#: [resex] max_age: a stopped agent's node is unknown (closed) after it.
MAX_AGE_S = 60.0


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

    def boot(self, name, flavor, image, node=None, nic=False, timeout=240, port=None):
        """Create a server (on ``node`` if given: an admin's ``nova:NODE`` zone); wait ACTIVE.

        ``nic``: a port on the cloud's network; ``port``: that port (an id).
        """
        networks = "none"
        if port is not None:
            networks = [{"port": port}]
        elif nic:
            networks = [{"uuid": cloud_mod.NETWORK_ID}]
        kwargs = {"name": name, "flavor_id": self.flavor(flavor).id,
                  "image_id": self.image(image).id, "networks": networks}
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

    def _follow_admission(self, states):
        """``states`` ({host: Admission}) advanced by the board's newer reports, as the filter."""
        for host, rec in self.board().items():
            states[host] = admission.advance(states.get(host), rec, ADMIT_TAU_S,
                                             ADMIT_HYSTERESIS)

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
        """:func:`tests.machine.wait_for` at the cloud's pace; AssertionError naming ``what``."""
        return machine.wait_for(predicate, timeout, step=interval, what=what)

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
        # The scheduler judges each host by its admission index (smoothed over
        # 20 s, latched): follow both as it does, from before bulk2 sends, and
        # boot once both would refuse (a fresh index over the threshold for 3 s
        # is not yet a smoothed one: the boot then raced the smoothing).
        states = {}
        self._follow_admission(states)
        self.boot("bulk2", "resex.bulk", "resex-bulk", node="node2", nic=True)
        streak = []

        def both_refuse():
            self._follow_admission(states)
            streak.append(all(h in states and states[h].refuses(THRESHOLD_PCT * ADMIT_MARGIN)
                              for h in ("node1", "node2")))
            return streak[-3:] == [True] * 3

        self.wait_for("both nodes' admission index over %.0f%% three times in a row"
                      % (THRESHOLD_PCT * ADMIT_MARGIN), both_refuse, timeout=240, interval=1.0)
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
    # -- the unit's restrictions -------------------------------------------------------------

    def agent_restricted(self):
        """Every agent runs under the shipped unit's restrictions, and still does its work.

        The agent's process (nsenter, :mod:`tests.cloud.unit_sandbox` and
        ``setpriv`` exec into it) holds the unit's capability bounding set
        and nothing more, ``NoNewPrivs``, and a mount namespace of its own
        whose root is read-only. QEMU runs as :data:`cloud.QEMU_USER`, so the
        sensitive guest's channel directory is that user's, mode 0750, as in
        production; node1's agent hears the guest through it (a latency
        window in its metrics, no "Permission denied" in its log), and every
        agent publishes on the board, serves its metrics and writes its
        journal without a failure.
        """
        unit = unit_sandbox.Unit.load(cloud_mod.AGENT_UNIT)
        want = unit_sandbox.capability_mask(unit.capabilities())
        stamp = time.time()
        for node in self.cloud.nodes:
            entry = self.cloud.table.get("%s-resex-agent" % node)
            status = _proc_status(entry["pid"])
            for field in ("CapBnd", "CapPrm", "CapEff"):
                assert int(status[field], 16) == want, (
                    "%s's agent: %s %s, the unit's %x" % (node, field, status[field], want))
            assert status["NoNewPrivs"] == "1", "%s's agent may gain privileges" % node
            ns = [os.readlink("/proc/%d/ns/mnt" % pid)
                  for pid in (entry["pid"], self.cloud.libvirtd_pid(node))]
            assert ns[0] != ns[1], "%s's agent shares its node's mount namespace" % node
            with open("/proc/%d/mountinfo" % entry["pid"]) as f:
                root = [opts for point, opts in unit_sandbox.mountinfo(f.read())
                        if point == "/"]
            assert "ro" in root[-1], "%s's agent has / writable: %s" % (node, root)
            self.wait_for("a board record of %s's agent" % node, lambda: (
                self.board().get(node) is not None and self.board()[node].ts > stamp),
                timeout=60, interval=1.0)
            metrics = self.metrics(node)
            for failures in ("resex_journal_write_errors_total",
                             "resex_board_publish_failures_total"):
                found = re.search(r"^%s ([0-9.e+]+)$" % failures, metrics, re.M)
                assert found and float(found.group(1)) == 0.0, (
                    "%s's agent: %s" % (node, found.group(0) if found else "no " + failures))
        server = self.servers.get("sensitive-c") or self.boot(
            "sensitive-c", "resex.sensitive", "resex-report", node="node1")
        self.wait_for("a latency window of %s in node1's metrics" % server.name, lambda: (
            re.search(r'^resex_vm_latency_mean_seconds\{[^}]*uuid="%s"' % server.id,
                      self.metrics("node1"), re.M)), timeout=120, interval=1.0)
        channel_dir = os.path.join(self.cloud.node_dir("node1"), "lib-libvirt", "qemu",
                                   "channel", "target")
        dirs = [d for d in os.listdir(channel_dir) if d.endswith("-" + server.instance_name)]
        assert dirs, "no channel directory of %s in %s" % (server.instance_name, channel_dir)
        st = os.stat(os.path.join(channel_dir, dirs[0]))
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (
            pwd.getpwnam(cloud_mod.QEMU_USER).pw_uid, 0o750), (
            "%s: owner %d mode %o" % (dirs[0], st.st_uid, stat.S_IMODE(st.st_mode)))
        log = self.log_lines("node1-resex-agent")
        # From the running agent's start (the sandbox's line) on.
        log = log[log.rfind("unit_sandbox: "):]
        assert "Permission denied" not in log, [
            line for line in log.splitlines() if "Permission denied" in line][:3]
        assert os.path.exists(os.path.join(self.cloud.node_dir("node1"), "resex-state",
                                           "journal.json")), "node1's agent wrote no journal"
        self.figures["agent_capabilities"] = "%x" % want

    def metrics(self, node):
        """``node``'s agent's Prometheus text."""
        url = "http://%s:%d/metrics" % (cloud_mod.HOST, cloud_mod.PORTS["metrics-" + node])
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.read().decode()

    # -- Soft-RoCE guests ------------------------------------------------------------------

    def rdma_guests(self):
        """Soft-RoCE guests through Nova: node1's agent hears the verbs client, caps the writer.

        node2 runs perftest's servers; node1 a sensitive guest running
        ``ib_send_lat`` against them (each run's mean and p99 a report on
        the latency channel the agent hot-plugs) and a bulk guest running
        ``ib_write_bw`` against them, both through node1's shaped link. The
        servers are deleted at the end.
        """
        guests.publish_rdma(self.cloud)
        names = ("rdma-lat", "rdma-bulk", "rdma-server")
        # The server's project's port (nova: "Port ... not usable" otherwise).
        port = self.conn.network.create_port(
            network_id=cloud_mod.NETWORK_ID, project_id=self.conn.current_project_id,
            fixed_ips=[{"ip_address": guests.RDMA_SERVER_IP}])
        agent_log = "node1-resex-agent"
        try:
            self.boot("rdma-server", "resex.rdma.plain", "resex-rdma-server", node="node2",
                      port=port.id)
            bulk = self.boot("rdma-bulk", "resex.rdma.bulk", "resex-rdma-bulk", node="node1",
                             nic=True)
            mark = self.log_size(agent_log)
            server = self.boot("rdma-lat", "resex.rdma.sensitive", "resex-rdma-lat",
                               node="node1", nic=True)
            t_active = time.monotonic()
            name = server.instance_name
            self.wait_for("the latency channel hot-plugged into %s" % name,
                          lambda: re.search(r"VM %s \(%s\): latency channel hot-plugged"
                                            % (name, server.id),
                                            self.log_lines(agent_log, mark)), timeout=60)
            # rxe0 waits for the e1000 link (minutes on a loaded TCG host).
            heard = self.wait_for(
                "ib_send_lat reports from %s in the agent's epoch lines" % name,
                lambda: re.search(r"(?:%s|%s)[^|;]*? cap [^|;]* lat (\d+)us"
                                  % (name, server.id), self.log_lines(agent_log, mark)),
                timeout=360)
            self.figures["rdma_active_to_first_report_s"] = time.monotonic() - t_active
            self.figures["rdma_latency_us"] = int(heard.group(1))
            assert re.search(r"VM %s claims latency mean [0-9.]+ us [^\n]* via channel"
                             % server.id, self.log_lines(agent_log, mark)), (
                "no report of %s came through the channel" % name)
            cap = self.wait_for(
                "the RDMA writer capped below 50%",
                lambda: _below(_cap_pct(self.knobs("node1", bulk)), 50.0), timeout=120,
                interval=0.2)
            self.figures["rdma_bulk_cap_pct"] = cap
            self.figures["rdma_active_to_bulk_capped_s"] = time.monotonic() - t_active
        finally:
            self._delete_all(names, port)

    # -- across hosts ---------------------------------------------------------------------

    def remote_victim(self):
        """A victim on node1 whose server is on node2, a bulk tenant flooding node2's port.

        ``rdma-lat`` (node1) measures perftest's server ``rdma-server``
        (node2) and names it as its peer; ``bulk-n2`` (node2) sends TCP out
        of node2's shaped link as fast as it can. Only node2's agent can
        help: it finds node1's remote claim on its server and caps bulk-n2.
        Then the faults: the board (etcd) down 30 s (node2's claim expires,
        the cap is released; back, it is capped again), node2's agent killed
        and restarted (capped again), the victim deleted (released).
        """
        guests.publish_rdma(self.cloud)
        names = ("rdma-lat", "bulk-n2", "rdma-server")
        port = self.conn.network.create_port(
            network_id=cloud_mod.NETWORK_ID, project_id=self.conn.current_project_id,
            fixed_ips=[{"ip_address": guests.RDMA_SERVER_IP}])
        try:
            self.boot("rdma-server", "resex.rdma.plain", "resex-rdma-server-short",
                      node="node2", port=port.id)
            bulk = self.boot("bulk-n2", "resex.bulk", "resex-bulk", node="node2", nic=True)
            victim, t_heard = self._remote_victim_heard("node1", "remote")
            mark = self.log_size("node1-resex-agent")
            self._remote_capped("remote", bulk, victim, t_heard)
            self._remote_held("remote", ("node2", bulk), ("node1", victim), mark)
            self._remote_board_down(bulk, victim)
            self._remote_agent_killed(bulk, victim)
            self._released_after_deletion("remote", ("node2", bulk))
        finally:
            self._delete_all(names, port)

    def _released_after_deletion(self, what, bulk_on):
        """The victim deleted: until the bulk server (``(node, server)``) is at 50 % or more."""
        self.conn.compute.delete_server(self.servers.pop("rdma-lat"))
        t0 = time.monotonic()
        self.wait_for("%s released after the victim's deletion" % bulk_on[1].name,
                      lambda: _cap_pct(self.knobs(*bulk_on)) is None
                      or _cap_pct(self.knobs(*bulk_on)) >= 50.0,
                      timeout=180, interval=0.5)
        self.figures["%s_victim_deleted_to_released_s" % what] = time.monotonic() - t0

    def _delete_all(self, names, port):
        """Delete the servers ``names`` a row left and ``port``; wait until they are gone."""
        for n in names:
            if n in self.servers:
                self.conn.compute.delete_server(self.servers.pop(n))
        for n in names:
            with contextlib.suppress(Exception):
                self._wait_deleted(n)
        with contextlib.suppress(Exception):
            self.conn.network.delete_port(port)

    def _remote_victim_heard(self, node, what):
        """Boot the victim on ``node``; ``(server, when)`` once ``node`` hears it name its peer."""
        log = "%s-resex-agent" % node
        mark = self.log_size(log)
        victim = self.boot("rdma-lat", "resex.rdma.sensitive", "resex-rdma-lat-short",
                           node=node, nic=True)
        t_active = time.monotonic()
        heard = self.wait_for(
            "%s hearing %s name its peer" % (node, victim.name),
            lambda: re.search(r"VM %s claims latency mean ([0-9.]+) us[^\n]* peer %s"
                              % (victim.id, re.escape(guests.RDMA_SERVER_IP)),
                              self.log_lines(log, mark)), timeout=420)
        t_heard = time.monotonic()
        self.figures["%s_active_to_first_report_s" % what] = t_heard - t_active
        self.figures["%s_victim_first_mean_us" % what] = float(heard.group(1))
        return victim, t_heard

    def _remote_held(self, what, bulk_on, victim_on, mark, hold_s=20.0):
        """For ``hold_s`` after the cap: the bulk's cap (lowest, highest), the victim's latency.

        ``bulk_on``, ``victim_on``: ``(node, server)``; ``mark``: where the
        victim's node's log stood at the cap.
        """
        caps = []
        t_end = time.monotonic() + hold_s
        while time.monotonic() < t_end:
            caps.append(_cap_pct(self.knobs(*bulk_on)))
            time.sleep(0.5)
        held = [100.0 if c is None else c for c in caps]
        self.figures["%s_held_cap_min_pct" % what] = min(held)
        self.figures["%s_held_cap_max_pct" % what] = max(held)
        # The victim's node's epoch lines: "<name or uuid> cap ... lat NNNus ...".
        node, victim = victim_on
        lats = re.findall(r"(?:%s|%s)[^|;]*? cap [^|;]* lat (\d+)us" % (victim.name, victim.id),
                          self.log_lines("%s-resex-agent" % node, mark))
        self.figures["%s_victim_mean_after_cap_us" % what] = int(lats[-1]) if lats else None

    def _remote_capped(self, what, bulk, victim, t0, timeout=180):
        """Until node2's agent caps ``bulk`` for ``victim`` (its line names node1 as its host)."""
        log2 = "node2-resex-agent"
        mark = self.log_size(log2)
        cap = self.wait_for("%s: bulk-n2 capped below 50%% by node2's agent" % what,
                            lambda: _below(_cap_pct(self.knobs("node2", bulk)), 50.0),
                            timeout=timeout, interval=0.5)
        self.figures["%s_to_capped_s" % what] = time.monotonic() - t0
        self.figures["%s_bulk_cap_pct" % what] = cap
        self.wait_for("node2's line naming the remote victim", lambda: re.search(
            r"remote victim %s on node1 " % victim.id, self.log_lines(log2, mark)), timeout=30)
        return cap

    def _remote_board_down(self, bulk, victim):
        """etcd stopped 30 s: node2's claim expires and bulk-n2 is released; back, recapped.

        The expiry is read from node2's log (the controller's line when the
        server's remote SLA goes), so that a release the policy made for
        another reason does not pass for it.
        """
        log2 = "node2-resex-agent"
        mark = self.log_size(log2)
        t0 = time.monotonic()
        self.cloud.table.stop("etcd", timeout=20)
        try:
            self.wait_for("node2's claim expired while the board is down", lambda: re.search(
                r"no remote victim's SLA any more", self.log_lines(log2, mark)),
                timeout=60, interval=0.5)
            self.figures["remote_board_down_to_expired_s"] = time.monotonic() - t0
            self.wait_for("bulk-n2 released after the claim expired",
                          lambda: _cap_pct(self.knobs("node2", bulk)) is None
                          or _cap_pct(self.knobs("node2", bulk)) >= 50.0,
                          timeout=120, interval=0.5)
            self.figures["remote_board_down_to_released_s"] = time.monotonic() - t0
            time.sleep(max(0.0, 30.0 - (time.monotonic() - t0)))
        finally:
            self.cloud.start_etcd()
        self._remote_capped("remote_board_back", bulk, victim, time.monotonic())

    def _remote_agent_killed(self, bulk, victim):
        """kill -9 of node2's agent: the restarted agent restores, then caps bulk-n2 again."""
        entry = self.cloud.table.get("node2-resex-agent")
        os.kill(entry["pid"], signal.SIGKILL)
        self.wait_for("node2's agent dead",
                      lambda: not machine.alive(entry["pid"], entry["started"]), timeout=10)
        self.cloud.table.remove("node2-resex-agent")
        t0 = time.monotonic()
        self.cloud.start_agent("node2")
        self._remote_capped("remote_agent_restarted", bulk, victim, t0)

    def shared_link(self):
        """A victim on node2 whose server is on node1; node3's bulk tenant fills their uplink.

        The rack (:meth:`~tests.cloud.cloud.Cloud.start_rack`): node3 joins,
        behind one shaped uplink with node1 (``rack1-uplink`` in node3's
        topology file). ``rdma-lat`` (node2) measures ``rdma-server``
        (node1), whose replies cross the uplink; ``bulk-n3`` (node3) sends
        to the host's sink, beyond the uplink, as fast as it can. No agent
        sees the trouble on its own port: node2's port carries the victim's
        requests, node1's the server's replies; the uplink is full. Only
        node3's agent can help: the victim's claim crosses the uplink, the
        link's load (node1's and node3's reports) supports it, and node3's
        heavy sender's CPU limit is scaled down (doc/source/fabric.rst,
        "Shared links in the market"). Then node3's agent killed and
        restarted (limited again), the victim deleted (released).
        """
        self.cloud.start_rack()
        guests.publish_rdma(self.cloud)
        names = ("rdma-lat", "bulk-n3", "rdma-server")
        port = self.conn.network.create_port(
            network_id=cloud_mod.NETWORK_ID, project_id=self.conn.current_project_id,
            fixed_ips=[{"ip_address": guests.RDMA_SERVER_IP}])
        try:
            self.boot("rdma-server", "resex.rdma.plain", "resex-rdma-server-short",
                      node="node1", port=port.id)
            bulk = self.boot("bulk-n3", "resex.bulk", "resex-bulk", node=cloud_mod.RACK_NODE,
                             nic=True)
            victim, t_heard = self._remote_victim_heard("node2", "shared")
            mark = self.log_size("node2-resex-agent")
            self._link_limited("shared", bulk, victim, t_heard)
            self._remote_held("shared", (cloud_mod.RACK_NODE, bulk), ("node2", victim), mark)
            self._link_agent_killed(bulk, victim)
            self._released_after_deletion("shared", (cloud_mod.RACK_NODE, bulk))
        finally:
            self._delete_all(names, port)

    def _link_limited(self, what, bulk, victim, t0, timeout=180):
        """Until node3's agent limits ``bulk`` for ``victim`` on the uplink (line, factor)."""
        node = cloud_mod.RACK_NODE
        log = "%s-resex-agent" % node
        mark = self.log_size(log)
        cap = self.wait_for("%s: bulk-n3 capped below 50%% by %s's agent" % (what, node),
                            lambda: _below(_cap_pct(self.knobs(node, bulk)), 50.0),
                            timeout=timeout, interval=0.5)
        self.figures["%s_to_capped_s" % what] = time.monotonic() - t0
        self.figures["%s_bulk_cap_pct" % what] = cap
        said = (r"shared link %s: this host's heavy senders' limit x[0-9.]+ -> x([0-9.]+) "
                r"\(cut: victim %s on node2 " % (cloud_mod.UPLINK, victim.id))
        line = self.wait_for("%s's line naming the uplink and the victim" % node,
                             lambda: re.search(said, self.log_lines(log, mark)), timeout=30)
        self.figures["%s_first_factor" % what] = float(line.group(1))
        gauge = r'resex_shared_link_limit_factor\{link="%s"\} ([0-9.e+-]+)' % cloud_mod.UPLINK
        factor = self.wait_for("%s's metrics showing the limit on %s" % (node, cloud_mod.UPLINK),
                               lambda: re.search(gauge, self.metrics(node)), timeout=60)
        self.figures["%s_factor_metric" % what] = float(factor.group(1))
        return cap

    def _link_agent_killed(self, bulk, victim):
        """kill -9 of node3's agent: the restarted agent restores, then limits bulk-n3 again."""
        name = "%s-resex-agent" % cloud_mod.RACK_NODE
        entry = self.cloud.table.get(name)
        os.kill(entry["pid"], signal.SIGKILL)
        self.wait_for("%s dead" % name,
                      lambda: not machine.alive(entry["pid"], entry["started"]), timeout=10)
        self.cloud.table.remove(name)
        t0 = time.monotonic()
        self.cloud.start_agent(cloud_mod.RACK_NODE)
        self._link_limited("shared_agent_restarted", bulk, victim, t0)

    # -- install.rst ----------------------------------------------------------------------

    def install_rst_config(self):
        """install.rst's agent and scheduler snippets are what the cloud runs, option by option.

        The cloud's files are written by the devstack plugin; every option of
        the two snippets must have the snippet's value there, but for the
        site's own values (:data:`SITE_VALUES`).
        """
        snippets = install_snippets()
        checked = []
        for section_wanted, path in (("agent", self.cloud.agent_conf("node1")),
                                     ("filter_scheduler", self.cloud.nova_conf())):
            snippet = next(s for s in snippets if section_wanted in s)
            with open(path) as f:
                running = parse_ini(f.read())
            for section, options in snippet.items():
                for option, values in options.items():
                    want = [SITE_VALUES.get((section, option), {}).get(v, v) for v in values]
                    have = running.get(section, {}).get(option)
                    assert _normal(have) == _normal(want), (
                        "%s: [%s] %s is %s, install.rst says %s"
                        % (path, section, option, have, want))
                    checked.append("%s.%s" % (section, option))
        self.figures["install_rst_options_checked"] = len(checked)

    # -- (d) moves -------------------------------------------------------------------

    def _moves_setup(self):
        """node1: a sensitive server over its SLA; node2: a bulk server sending, no sensitive one.

        node2's agent then has no reason to cap what arrives: a cap found on
        an arriving server is one that came with it.
        """
        for name in ("sensitive-b", "sensitive-c", "sensitive-d", "bulk1", "bulk3"):
            if name in self.servers:
                self.conn.compute.delete_server(self.servers.pop(name))
        for name in ("sensitive-b", "sensitive-d", "bulk3"):
            found = self.conn.compute.find_server(name)
            if found is not None:
                self.conn.compute.delete_server(found)
        if "bulk2" not in self.servers:
            self.boot("bulk2", "resex.bulk", "resex-bulk", node="node2", nic=True)
        if "sensitive-m" not in self.servers:
            self.boot("sensitive-m", "resex.sensitive", "resex-report", node="node1")

    def _capped_on_node1(self, name):
        """``name``, a bulk server with a NIC on node1 (booted if need be), once capped there.

        A fresh server for each move: a guest live-migrated there and back
        was seen to stop sending (its QEMU at 2% of a CPU), and a server that
        sends nothing is not capped.
        """
        self._moves_setup()
        if name not in self.servers:
            self.boot(name, "resex.bulk", "resex-bulk", node="node1", nic=True)
        server = self.conn.compute.get_server(self.servers[name].id)
        assert server.compute_host == "node1", "%s is on %s" % (name, server.compute_host)
        cap = self.wait_for(
            "%s capped below 50%% on node1" % name,
            lambda: _below(_cap_pct(self.knobs("node1", server)), 50.0), timeout=120,
            interval=0.5)
        return server, cap

    def _live_migrate(self, server, host):
        self.conn.compute.live_migrate_server(server, host=host, block_migration=True)
        self._wait_moved(server, host, ("ACTIVE",), timeout=300)

    def _wait_moved(self, server, host, statuses, timeout=300):
        """Until ``server`` is in one of ``statuses`` on ``host``, its task done."""
        def arrived():
            now = self.conn.compute.get_server(server.id)
            if now.status == "ERROR":
                raise AssertionError("%s went to ERROR: %s" % (now.name, now.fault))
            if (now.status in statuses and now.compute_host == host
                    and not now.task_state):
                return now
            return None
        return self.wait_for("%s %s on %s" % (server.name, "/".join(statuses), host),
                             arrived, timeout=timeout, interval=1.0)

    def _move(self, name, how, target="node2"):
        """Move ``name``, capped on node1, with ``how(server, target)``; no cap may leak.

        On the target the server must run with Nova's values (no quota, the
        default shares), three times over 6 s of the target agent's epochs;
        node1's agent must forget it ("is gone"). The server is deleted
        afterwards.
        """
        server, cap = self._capped_on_node1(name)
        self.figures["%s_cap_before_pct" % how.__name__] = cap
        mark = self.log_size("node1-resex-agent")
        try:
            t0 = time.monotonic()
            moved = how(server, target)
            self.figures["%s_s" % how.__name__] = time.monotonic() - t0
            for _ in range(3):
                live = self.knobs(target, moved)
                assert _cap_pct(live) is None, (
                    "%s arrived on %s capped: %s" % (name, target, live))
                nova = self.knobs(target, moved, libvirt.VIR_DOMAIN_AFFECT_CONFIG)
                assert live.get("cpu_shares") == (nova.get("cpu_shares") or 1024), (
                    "%s on %s: cpu_shares %s, Nova's %s"
                    % (name, target, live.get("cpu_shares"), nova.get("cpu_shares")))
                time.sleep(2.0)
            self.wait_for(
                "node1's agent forgetting %s" % name,
                lambda: re.search(r"VM %s \(%s\) is gone" % (server.instance_name, server.id),
                                  self.log_lines("node1-resex-agent", mark)),
                timeout=60)
        finally:
            self.conn.compute.delete_server(self.servers.pop(name))

    def _confirm(self, server, target):
        now = self._wait_moved(server, target, ("VERIFY_RESIZE",))
        self.conn.compute.confirm_server_resize(now)
        return self._wait_moved(server, target, ("ACTIVE",))

    def cold_migrate(self):
        """A capped server cold-migrated off node1 arrives on node2 with Nova's values."""
        def cold_migration(server, target):
            self.conn.compute.migrate_server(server, host=target)
            return self._confirm(server, target)
        self._move("bulk-cold", cold_migration)

    def resize(self):
        """A capped server resized (to node2) runs there with Nova's values."""
        def resize(server, target):
            self.conn.compute.resize_server(server, self.flavor("resex.bulk.large"))
            moved = self._confirm(server, target)
            assert moved.flavor.ram == guests.FLAVOR_MEMORY_MIB["resex.bulk.large"], (
                moved.flavor)
            return moved
        self._move("bulk-resize", resize)

    def live_migrate(self):
        """A capped server with a NIC, live block-migrated to node2: Nova's values there."""
        def live_migration(server, target):
            self._live_migrate(server, target)
            return self.conn.compute.get_server(server.id)
        self._move("bulk-live", live_migration)

    def shelve_unshelve(self):
        """A capped server shelved (offloaded) and unshelved on node2: Nova's values."""
        def shelve_and_unshelve(server, target):
            self.conn.compute.shelve_server(server)
            self.wait_for("%s SHELVED_OFFLOADED" % server.name,
                          lambda: self.conn.compute.get_server(server.id).status
                          == "SHELVED_OFFLOADED", timeout=300, interval=1.0)
            # A target host for unshelve is microversion 2.91.
            self.conn.compute.post("/servers/%s/action" % server.id,
                                   json={"unshelve": {"host": target}}, microversion="2.91")
            return self._wait_moved(server, target, ("ACTIVE",))
        self._move("bulk-shelve", shelve_and_unshelve)

    def evacuate(self):
        """node1 fails (nova-compute stopped, the guest destroyed), forced down: rebuilt on node2.

        When node1's nova-compute comes back it destroys the evacuated
        server's old domain, and node1's agent forgets it.
        """
        def evacuation(server, target):
            service = next(self.conn.compute.services(host="node1", binary="nova-compute"))
            self.cloud.stop_compute("node1")
            # node1 "failed": its guest died with it (evacuating a guest that
            # still runs would make two copies; here both nodes' QEMUs would
            # also share the machine's cgroup tree).
            conn = self.hypervisor("node1")
            try:
                conn.lookupByUUIDString(server.id).destroy()
            finally:
                conn.close()
            self.conn.compute.put("/os-services/%s" % service.id,
                                  json={"forced_down": True}, microversion="2.53")
            try:
                self.conn.compute.evacuate_server(server, host=target)
                moved = self._wait_moved(server, target, ("ACTIVE",))
            finally:
                self.cloud.start_compute("node1")
                # Nova refuses (400) while the evacuation's migration record
                # is "done": the restarted compute destroys the old domain and
                # completes it first.
                self.wait_for("node1 forced up again", lambda: self.conn.compute.put(
                    "/os-services/%s" % service.id, json={"forced_down": False},
                    microversion="2.53").status_code == 200, timeout=180, interval=2.0)
            self._wait_compute_up("node1")
            return moved
        self._move("bulk-evacuation", evacuation)
    # -- (f) Placement traits ----------------------------------------------------------------

    def _placement_get(self, url):
        resp = self.conn.placement.get(url, microversion="1.22", raise_exc=False)
        assert resp.status_code == 200, "GET %s: %d %s" % (url, resp.status_code, resp.text)
        return resp.json()

    def provider_uuid(self, node):
        found = self._placement_get("/resource_providers?name=%s" % node)["resource_providers"]
        assert found, "no resource provider named %s" % node
        return found[0]["uuid"]

    def provider_traits(self, node):
        return set(self._placement_get("/resource_providers/%s/traits"
                                       % self.provider_uuid(node))["traits"])

    def _sync_running(self):
        entry = self.cloud.table.get("resex-placement-sync")
        return bool(entry) and machine.alive(entry["pid"], entry["started"])

    def _placement_setup(self):
        """resex-placement-sync running, node1 congested on the board and closed in Placement."""
        for node in self.cloud.nodes:
            assert MANAGED in self.provider_traits(node), (
                "%s's provider lacks %s (the plugin's provider config file)" % (node, MANAGED))
        if not self._sync_running():
            self.cloud.start_placement_sync(reconcile_interval=RECONCILE_S)
        mark = self.log_size("resex-placement-sync")
        if "bulk-p" not in self.servers:
            self._placement_clean_slate()
            mark = self.log_size("resex-placement-sync")
            self.boot("bulk-p", "resex.bulk", "resex-bulk", node="node1", nic=True)
        t0 = time.monotonic()
        if "placement_board_to_trait_s" in self.figures:
            self.wait_for("node1 closed in Placement (%s)" % CLOSED,
                          lambda: CLOSED in self.provider_traits("node1"), timeout=240,
                          interval=1.0)
        else:
            self._measure_closing(mark)
        self.figures.setdefault("placement_node1_closed_s", time.monotonic() - t0)
        if TRAITS_FLAVOR not in (f.name for f in self.conn.compute.flavors()):
            base = self.flavor("resex.sensitive")
            flavor = self.conn.compute.create_flavor(name=TRAITS_FLAVOR, ram=base.ram,
                                                     vcpus=base.vcpus, disk=base.disk)
            specs = dict(self.conn.compute.fetch_flavor_extra_specs(base).extra_specs or {})
            specs.update({"trait:%s" % CLOSED: "forbidden", "trait:%s" % MANAGED: "required"})
            self.conn.compute.create_flavor_extra_specs(flavor, specs)

    def _placement_clean_slate(self):
        """No server of the earlier rows left; both nodes open in Placement.

        The rows before (f) leave bulk servers sending on both nodes (the
        moves' and the faults') and a server in ERROR: node1's closing is
        measured from a quiet node1, and node2 must be open for the rows
        that place there.
        """
        for server in list(self.conn.compute.servers()):
            self.conn.compute.delete_server(server)
        self.servers.clear()
        self.wait_for("the earlier rows' servers deleted",
                      lambda: not list(self.conn.compute.servers()), timeout=180,
                      interval=1.0)
        self.wait_for("node1 and node2 open in Placement", lambda: not any(
            CLOSED in self.provider_traits(n) for n in self.cloud.nodes), timeout=240,
            interval=1.0)

    def _nova_trait_writes(self, node, mark):
        """nova-compute's trait writes on ``node``'s provider in Placement's log since ``mark``.

        Told from resex-placement-sync's by the global request id that
        nova-compute sends (``[req-... req-...``; the service sends none).
        """
        return nova_trait_writes(self.log_lines("placement", mark), self.provider_uuid(node))

    def _candidates(self, node):
        """Is ``node`` among Placement's candidates for a flavor forbidding the trait?

        None while Placement refuses the query (the trait not created yet).
        """
        resp = self.conn.placement.get(
            "/allocation_candidates?resources=VCPU:1,MEMORY_MB:64&required=!%s" % CLOSED,
            microversion="1.22", raise_exc=False)
        if resp.status_code != 200:
            return None
        return self.provider_uuid(node) in resp.json()["provider_summaries"]

    def _measure_closing(self, mark):
        """node1 closing on the board to the trait on its provider, and to Placement's answer.

        The board's records of node1 are sampled every 0.2 s, with node1's
        traits and Placement's allocation candidates for a flavor forbidding
        the trait. The closing record is the last one node1's agent published
        before resex-placement-sync logged the trait set (the one that took
        the smoothed admission index over the threshold); its ``ts`` is the
        agent's clock at publication, on this machine's clock.
        """
        board = board_mod.open_board(self.cloud.board_url, timeout=5.0, create=False)
        records, seen = {}, {}

        def excluded():
            rec = board.snapshot().get("node1")
            if rec is not None:
                records[rec.ts] = rec.congestion_index
            if "trait" not in seen and CLOSED in self.provider_traits("node1"):
                seen["trait"] = time.time()
            if "trait" in seen and self._candidates("node1") is False:
                seen["candidates"] = time.time()
            return "candidates" in seen
        try:
            self.wait_for("node1 closed in Placement (%s) and no candidate" % CLOSED,
                          excluded, timeout=240, interval=0.2)
        finally:
            board.close()
        log = self.log_lines("resex-placement-sync", mark)
        match = re.search(r"host node1: %s set \([^\n]*" % CLOSED, log)
        assert match, "resex-placement-sync logged no trait set for node1"
        t_set = _log_time(log, match)
        t_pub, first = closing_records(records, t_set, THRESHOLD_PCT)
        assert t_pub is not None, "no board record of node1 before the trait was set"
        self.figures["placement_closing_record_index_pct"] = records[t_pub]
        if first is not None:
            self.figures["placement_first_congested_record_to_trait_s"] = seen["trait"] - first
        self.figures["placement_set_logged"] = match.group(0).split(" _log ")[0]
        self.figures["placement_board_to_sync_set_s"] = t_set - t_pub
        self.figures["placement_board_to_trait_s"] = seen["trait"] - t_pub
        self.figures["placement_board_to_candidates_excluded_s"] = seen["candidates"] - t_pub

    @contextlib.contextmanager
    def _filter_disabled(self):
        """nova-scheduler without ResExCongestionFilter (the weigher stays), then with it again."""
        conf = self.cloud.nova_conf()
        with open(conf) as f:
            before = parse_ini(f.read())["filter_scheduler"]["enabled_filters"][0]
        without = ",".join(n for n in before.split(",") if n.strip() != "ResExCongestionFilter")
        try:
            self.cloud.iniset(conf, "filter_scheduler", "enabled_filters", without)
            self._restart_scheduler()
            yield
        finally:
            self.cloud.iniset(conf, "filter_scheduler", "enabled_filters", before)
            self._restart_scheduler()

    def _restart_scheduler(self):
        mark = time.time()
        self.cloud.restart_scheduler()
        self.wait_for("nova-scheduler up again", lambda: any(
            s.state == "up" and s.updated_at and _iso(s.updated_at) > mark
            for s in self.conn.compute.services(binary="nova-scheduler")),
            timeout=120, interval=1.0)

    def placement_filter_off(self):
        """Filter disabled, flavor forbidding CUSTOM_RESEX_CLOSED: Placement keeps it off node1."""
        self._placement_setup()
        with self._filter_disabled():
            # Placement's own answer, before any filter: node1 is no candidate.
            found = self._placement_get(
                "/allocation_candidates?resources=VCPU:1,MEMORY_MB:64"
                "&required=!%s,%s" % (CLOSED, MANAGED))["provider_summaries"]
            names = {n for n in self.cloud.nodes if self.provider_uuid(n) in found}
            assert names == {"node2"}, "Placement's candidates: %s" % sorted(names)
            mark = self.log_size("nova-scheduler")
            server = self.boot("sensitive-p", TRAITS_FLAVOR, "resex-report")
            assert server.compute_host == "node2", "went to %s" % server.compute_host
            log = self.log_lines("nova-scheduler", mark)
            assert "ResEx: host node1 fails" not in log, "the filter ran: it was to be off"
        self.conn.compute.delete_server(self.servers.pop("sensitive-p"))
        self._wait_deleted("sensitive-p")

    def _watch_trait(self, node, stop):
        """``[(monotonic time, CLOSED present)]`` sampled every 0.5 s until ``stop`` is set."""
        samples = []

        def sample():
            while not stop.is_set():
                with contextlib.suppress(Exception):
                    samples.append((time.monotonic(), CLOSED in self.provider_traits(node)))
                stop.wait(0.5)
        thread = threading.Thread(target=sample, daemon=True)
        thread.start()
        return samples, thread

    def placement_compute_update(self):
        """nova-compute's own trait writes (service disabled, enabled, restarted) vs the trait.

        The trait may be dropped by nova-compute (it writes a provider's
        whole trait set); resex-placement-sync must have it back within a
        reconciliation. Figure: the longest time it was seen missing. Then
        another writer removes it: back within a reconciliation, the gap
        logged.
        """
        self._placement_setup()
        mark = self.log_size("resex-placement-sync")
        placement_mark = self.log_size("placement")
        stop = threading.Event()
        samples, thread = self._watch_trait("node1", stop)
        try:
            service = next(iter(self.conn.compute.services(
                host="node1", binary="nova-compute")))
            self.conn.compute.disable_service(service, "node1", "nova-compute")
            self.wait_for("COMPUTE_STATUS_DISABLED on node1", lambda: (
                "COMPUTE_STATUS_DISABLED" in self.provider_traits("node1")), timeout=120)
            self.conn.compute.enable_service(service, "node1", "nova-compute")
            self.cloud.stop_compute("node1")
            self.cloud.start_compute("node1")
            self._wait_compute_up("node1")
            time.sleep(2 * RECONCILE_S + 65.0)   # a periodic update and two reconciliations
        finally:
            stop.set()
            thread.join(10)
        gaps = _gaps(samples)
        self.figures["placement_trait_missing_max_s"] = max(gaps, default=0.0)
        self.figures["placement_trait_missing_times"] = len(gaps)
        said = re.findall(r"missing for at most ([\d.]+) s",
                          self.log_lines("resex-placement-sync", mark))
        self.figures["placement_sync_said_missing_s"] = ",".join(said) or "-"
        writes = self._nova_trait_writes("node1", placement_mark)
        self.figures["placement_nova_compute_trait_writes"] = writes
        assert writes, "nova-compute wrote no trait set of node1: the row tested nothing"
        assert samples and samples[-1][1], "node1's %s is not back" % CLOSED
        assert all(g <= RECONCILE_S + 15.0 for g in gaps), "missing for %s s" % gaps
        self._trait_removed_by_another_writer(mark)

    def _trait_removed_by_another_writer(self, mark):
        """node1's trait set written without the trait, as an operator (or a stale cache) would.

        The service must put it back within a reconciliation and log how
        long it was missing at most.
        """
        url = "/resource_providers/%s/traits" % self.provider_uuid("node1")
        held = self._placement_get(url)
        resp = self.conn.placement.put(url, json={
            "traits": sorted(set(held["traits"]) - {CLOSED}),
            "resource_provider_generation": held["resource_provider_generation"]},
            microversion="1.22", raise_exc=False)
        assert resp.status_code == 200, "PUT %s: %d %s" % (url, resp.status_code, resp.text)
        t0 = time.monotonic()
        self.wait_for("node1's %s put back" % CLOSED,
                      lambda: CLOSED in self.provider_traits("node1"),
                      timeout=RECONCILE_S + 30.0, interval=0.2)
        restored = time.monotonic() - t0
        self.figures["placement_removed_to_restored_s"] = restored
        said = self.wait_for("the service saying how long the trait was missing",
                             lambda: re.findall(r"missing for at most ([\d.]+) s",
                                                self.log_lines("resex-placement-sync", mark)),
                             timeout=10)
        self.figures["placement_sync_said_missing_s"] = ",".join(said)
        assert restored <= RECONCILE_S + 15.0, "put back after %.1f s" % restored

    def placement_sync_restarted(self):
        """kill -9 of resex-placement-sync, started again: no flip; later changes still land."""
        self._placement_setup()
        stop = threading.Event()
        samples, thread = self._watch_trait("node1", stop)
        try:
            entry = self.cloud.table.get("resex-placement-sync")
            os.kill(entry["pid"], signal.SIGKILL)
            self.wait_for("resex-placement-sync dead",
                          lambda: not machine.alive(entry["pid"], entry["started"]), timeout=10)
            self.cloud.table.remove("resex-placement-sync")
            mark = self.log_size("resex-placement-sync")
            self.cloud.start_placement_sync(reconcile_interval=RECONCILE_S)
            self.wait_for("the restarted service's first reconciliation", lambda: re.search(
                r"reconciled \d+ hosts", self.log_lines("resex-placement-sync", mark)),
                timeout=60)
            time.sleep(2 * RECONCILE_S)
        finally:
            stop.set()
            thread.join(10)
        assert samples and all(present for _, present in samples), (
            "node1's %s flipped across the restart" % CLOSED)
        self._node2_unknown_then_back("placement_sync_restarted")

    def _node2_unknown_then_back(self, what, while_stopped=None):
        """node2's agent stopped: node2 closed (unknown_host_policy closed), then open again.

        node2 must be open first: a sensitive server over its SLA there (as
        ``placement_filter_off``'s was) closes it by its own reports, and the
        smoothed index takes a while to fall back under the band. Returns
        when (monotonic) node2 was seen closed.
        """
        self.wait_for("node2 open before its agent stops",
                      lambda: CLOSED not in self.provider_traits("node2"), timeout=180,
                      interval=1.0)
        t0 = time.monotonic()
        self.cloud.stop_agent("node2")
        try:
            if while_stopped is not None:
                while_stopped()
            self.wait_for("node2 closed once its report is stale", lambda: (
                CLOSED in self.provider_traits("node2")), timeout=MAX_AGE_S + 180, interval=1.0)
            closed_at = time.monotonic()
            self.figures["%s_node2_closed_s" % what] = closed_at - t0
        finally:
            self.cloud.start_agent("node2")
        t1 = time.monotonic()
        self.wait_for("node2 open again", lambda: CLOSED not in self.provider_traits("node2"),
                      timeout=180, interval=1.0)
        self.figures["%s_node2_open_s" % what] = time.monotonic() - t1
        return closed_at

    def placement_down(self):
        """Placement down 90 s while node2 goes silent: one WARNING, no exit, the trait lands."""
        self._placement_setup()
        mark = self.log_size("resex-placement-sync")

        def outage():
            self.cloud.table.stop("placement", timeout=20)
            time.sleep(MAX_AGE_S + 30.0)   # node2's report goes stale meanwhile
            assert self._sync_running(), "resex-placement-sync exited while Placement was down"
            self.cloud.start_placement()
            back.append(time.monotonic())

        back = []
        closed_at = self._node2_unknown_then_back("placement_down", while_stopped=outage)
        # The service's next attempt comes after its backoff (up to
        # [placement_sync] retry_max_interval, 60 s), not at once.
        self.figures["placement_back_to_node2_closed_s"] = closed_at - back[0]
        log = self.log_lines("resex-placement-sync", mark)
        warned = re.findall(r"WARNING resex_nova\.placement_sync .*Placement failed", log)
        assert len(warned) == 1, log[-3000:]
        assert "Placement answers again" in log, log[-3000:]
        self.conn.compute.delete_server(self.servers.pop("bulk-p"))
        self._wait_deleted("bulk-p")

    # -- (e) faults during control ----------------------------------------------------------

    def _wait_deleted(self, name):
        self.wait_for("%s deleted" % name,
                      lambda: self.conn.compute.find_server(name) is None,
                      timeout=120, interval=1.0)

    def _wait_compute_up(self, node):
        self.wait_for("%s's nova-compute up" % node, lambda: any(
            s.state == "up" for s in self.conn.compute.services(
                host=node, binary="nova-compute")), timeout=180, interval=1.0)

    def _agent_log_grows(self, node, mark, timeout=60):
        """Until the node's agent logs an epoch that saw its VMs after ``mark`` (not blind)."""
        return self.wait_for(
            "an epoch line of %s's agent with its VMs" % node,
            lambda: re.search(r"epoch \d+: [1-9]\d* VMs",
                              self.log_lines("%s-resex-agent" % node, mark)),
            timeout=timeout)

    def _recapped(self, what, server, t_fault):
        cap = self.wait_for("%s: %s capped below 50%% again" % (what, server.name),
                            lambda: _below(_cap_pct(self.knobs("node1", server)), 50.0),
                            timeout=120, interval=0.5)
        self.figures["%s_recapped_s" % what] = time.monotonic() - t_fault
        return cap

    def agent_killed(self):
        """kill -9 of node1's agent; its cap is wrong once the sensitive server is gone.

        The restarted agent restores the knobs its journal kept (the unclean
        stop) and does not cap again without a reason; with a sensitive
        server over its SLA it caps again.
        """
        server, _cap = self._capped_on_node1("bulk-f")
        entry = self.cloud.table.get("node1-resex-agent")
        os.kill(entry["pid"], signal.SIGKILL)
        self.wait_for("node1's agent dead",
                      lambda: not machine.alive(entry["pid"], entry["started"]), timeout=10)
        self.cloud.table.remove("node1-resex-agent")
        assert _cap_pct(self.knobs("node1", server)) is not None, "killed, yet uncapped"
        # The reason for the cap goes while the agent is dead.
        self.conn.compute.delete_server(self.servers.pop("sensitive-m"))
        self._wait_deleted("sensitive-m")
        mark = self.log_size("node1-resex-agent")
        t0 = time.monotonic()
        self.cloud.start_agent("node1")
        self.wait_for("the agent restoring the journal's knobs", lambda: re.search(
            r"unclean stop; restoring", self.log_lines("node1-resex-agent", mark)),
            timeout=60)
        self._agent_log_grows("node1", mark)
        self.wait_for("bulk1 uncapped", lambda: _cap_pct(self.knobs("node1", server)) is None,
                      timeout=60, interval=0.5)
        self.figures["agent_killed_uncapped_s"] = time.monotonic() - t0
        for _ in range(5):
            assert _cap_pct(self.knobs("node1", server)) is None, "capped again without reason"
            time.sleep(1.0)
        # With a sensitive neighbour over its SLA again, control resumes.
        self.boot("sensitive-m", "resex.sensitive", "resex-report", node="node1")
        self._recapped("agent_killed", server, t0)

    def nova_compute_restarted(self):
        """node1's nova-compute restarted during control: the agent keeps its cap."""
        server, _cap = self._capped_on_node1("bulk-f")
        t0 = time.monotonic()
        self.cloud.stop_compute("node1")
        self.cloud.start_compute("node1")
        self._wait_compute_up("node1")
        mark = self.log_size("node1-resex-agent")
        self._agent_log_grows("node1", mark)
        self._recapped("nova_compute_restarted", server, t0)

    def libvirtd_restarted(self):
        """node1's libvirtd restarted during control: the agent reconnects and caps."""
        server, _cap = self._capped_on_node1("bulk-f")
        t0 = time.monotonic()
        self.cloud.restart_libvirtd("node1")
        mark = self.log_size("node1-resex-agent")
        self._agent_log_grows("node1", mark, timeout=120)
        self._recapped("libvirtd_restarted", server, t0)

    def etcd_restarted(self):
        """etcd (the board) restarted: control goes on, the agents publish again."""
        server, _cap = self._capped_on_node1("bulk-f")
        t0 = time.monotonic()
        self.cloud.table.stop("etcd", timeout=20)
        time.sleep(5.0)
        assert _cap_pct(self.knobs("node1", server)) is not None, (
            "the board down, node1's agent uncapped bulk1")
        self.cloud.start_etcd()
        stamp = time.time()
        self.wait_for("node1 and node2 publishing again", lambda: all(
            rec is not None and rec.ts > stamp for rec in (
                self.board().get(n) for n in ("node1", "node2"))), timeout=120, interval=1.0)
        self.figures["etcd_restarted_published_s"] = time.monotonic() - t0
        self._recapped("etcd_restarted", server, t0)

    def nothing_capped_after(self):
        """The sensitive server gone: no server on either node stays capped."""
        for name in [n for n in self.servers if n.startswith("sensitive")]:
            self.conn.compute.delete_server(self.servers.pop(name))
        t0 = time.monotonic()

        def uncapped():
            for node in ("node1", "node2"):
                conn = self.hypervisor(node)
                try:
                    for dom in conn.listAllDomains(libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE):
                        try:
                            params = dom.schedulerParametersFlags(
                                libvirt.VIR_DOMAIN_AFFECT_LIVE)
                        except libvirt.libvirtError as exc:
                            # A deleted server's domain, stopped since the list.
                            if exc.get_error_code() in (libvirt.VIR_ERR_OPERATION_INVALID,
                                                        libvirt.VIR_ERR_NO_DOMAIN):
                                continue
                            raise
                        if _cap_pct(params) is not None:
                            return False
                finally:
                    conn.close()
            return True
        self.wait_for("every server uncapped", uncapped, timeout=120, interval=1.0)
        self.figures["sensitive_gone_to_uncapped_s"] = time.monotonic() - t0


#: install.rst's values that are the site's own, and the cloud's for them.
SITE_VALUES = {
    # The controller's etcd; the cloud's listens on the loopback.
    ("board", "url"): {"etcd3+http://controller:2379": "etcd3+http://%s:%d" % (
        cloud_mod.HOST, cloud_mod.PORTS["etcd"])},
    ("resex", "board_url"): {"etcd3+http://controller:2379": "etcd3+http://%s:%d" % (
        cloud_mod.HOST, cloud_mod.PORTS["etcd"])},
    # The snippet's fabric is InfiniBand; the cloud's guests have Ethernet taps.
    ("fabric", "source"): {"ib_sysfs": "libvirt_iface"},
}


def _normal(values):
    """Values as oslo.config reads them: booleans in any case."""
    if values is None:
        return None
    return [v.lower() if v.lower() in ("true", "false") else v for v in values]


def parse_ini(text):
    """``{section: {option: [value, ...]}}``: multi-valued options keep every line."""
    out, section = {}, None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = out.setdefault(line[1:-1], {})
            continue
        key, _, value = line.partition("=")
        section.setdefault(key.strip(), []).append(value.strip())
    return out


def install_snippets(path=os.path.join(cloud_mod.ROOT, "doc", "source", "install.rst")):
    """The ``.. code-block:: ini`` snippets of install.rst, each parsed."""
    with open(path) as f:
        lines = f.read().splitlines()
    out = []
    for i, line in enumerate(lines):
        if line.strip() != ".. code-block:: ini":
            continue
        indent = len(line) - len(line.lstrip())
        body = []
        for following in lines[i + 1:]:
            if following.strip() and len(following) - len(following.lstrip()) <= indent:
                break
            body.append(following)
        out.append(parse_ini("\n".join(body)))
    return out


#: The smoke (in ``make test``): install.rst's configuration, (a), (b), (c).
SMOKE = ("install_rst_config", "bad_extra_specs", "congested_node_refused",
         "agent_controls_nova_guest", "agent_restricted", "every_node_congested")
#: (d): moves with hosts congested.
MOVES = ("live_migrate", "cold_migrate", "resize", "shelve_unshelve", "evacuate")
#: (e): faults during control.
FAULTS = ("agent_killed", "nova_compute_restarted", "libvirtd_restarted", "etcd_restarted",
          "nothing_capped_after")
#: Soft-RoCE guests through Nova.
RDMA = ("rdma_guests",)
#: Across hosts (doc/source/fabric.rst): node2's agent acting on node1's remote claim.
FABRIC = ("remote_victim",)
#: Last: it adds node3 to the cloud (the rack), which no earlier row expects.
SHARED = ("shared_link",)
#: (f): the board's verdict as Placement traits (resex-placement-sync).
PLACEMENT = ("placement_filter_off", "placement_compute_update", "placement_sync_restarted",
             "placement_down")
ORDER = SMOKE + MOVES + FAULTS + RDMA + FABRIC + PLACEMENT + SHARED


def _proc_status(pid):
    """``/proc/PID/status`` as ``{field: value}``."""
    with open("/proc/%d/status" % pid) as f:
        return {k: v.strip() for k, v in (line.split(":", 1) for line in f.read().splitlines()
                                          if ":" in line)}


def _log_time(text, match):
    """Wall time (s since the epoch) of the oslo.log line holding ``match``."""
    start = text.rfind("\n", 0, match.start()) + 1
    stamp = text[start:start + 23]
    return time.mktime(time.strptime(stamp[:19], "%Y-%m-%d %H:%M:%S")) + float(
        "0." + stamp[20:23])


def _iso(stamp):
    """Seconds since the epoch of an API timestamp (``2025-01-02T03:04:05.000000``, UTC)."""
    import calendar
    return calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S"))


def _gaps(samples):
    """Durations (s) of each run of samples in which the trait was missing."""
    gaps, since = [], None
    for t, present in samples:
        if not present and since is None:
            since = t
        elif present and since is not None:
            gaps.append(t - since)
            since = None
    if since is not None:
        gaps.append(samples[-1][0] - since)
    return gaps


def closing_records(records, t_set, threshold):
    """``(closing, first)`` publication times among ``records`` (``{ts: congestion index}``).

    ``closing``: the last record published at or before ``t_set`` (the
    service's trait set: the record that took the smoothed index over);
    ``first``: the first record whose raw index passed ``threshold`` (the
    smoothing, ``admission_time_constant``, follows later). None if none.
    """
    closing = max((ts for ts in records if ts <= t_set), default=None)
    first = min((ts for ts, index in records.items() if index > threshold), default=None)
    return closing, first


def nova_trait_writes(placement_log, provider_uuid):
    """nova-compute's successful ``PUT /resource_providers/{uuid}/traits`` in Placement's log.

    nova-compute sends a global request id (``[req-... req-...``);
    resex-placement-sync sends none (``[None req-...``).
    """
    return len(re.findall(r"\[req-\S+ req-[^\n]*\"PUT /resource_providers/%s/traits\" "
                          r"status: 200" % re.escape(provider_uuid), placement_log))


def _below(value, limit):
    return value if value is not None and value < limit else None


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


def main(cloud, names=ORDER):
    """``make cloud-test``: bring-up, every scenario (or ``names``), teardown; the table."""
    if cloud.running():
        # Somebody's cloud (make cloud) in this state directory: not ours to
        # bring up again, nor to tear down.
        print("a cloud runs under %s: make cloud-down first (or another "
              "RESEX_CLOUD_DIR)" % cloud.dir, file=sys.stderr)
        return 2
    rows = []
    figures = {}
    t0 = time.monotonic()
    try:
        cloud.up()
        guests.publish(cloud)
        rows.append(("bring-up", "pass", time.monotonic() - t0))
        figures["rss_mib"] = cloud.rss_mib()
        scenario_rows, figures_ = run(cloud, names)
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
