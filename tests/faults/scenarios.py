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

"""The faults, one function each, returning a :class:`~tests.faults.harness.FaultResult`.

Every function takes the fault's length in seconds (short in CI, the
lengths an operator's bad day measured under ``make faults``) and cleans up
after itself. The tests in :mod:`tests.faults.test_faults` assert on the
results; ``python -m tests.faults`` prints them as a table.
"""

import dataclasses
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

from resex_agent import journal as journal_mod
from resex_agent import resex_agent
from resex_libvirt.board import reader as reader_mod
from tests.faults import harness
from tests.functional.board import etcd_cluster
from tests.functional.board import etcd_server
from tests import machine

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
AGENT = [sys.executable, "-m", "resex_agent.resex_agent"]

_LOCKER = textwrap.dedent("""
    import sqlite3, sys, time
    conn = sqlite3.connect(sys.argv[1], isolation_level=None)
    conn.execute("BEGIN EXCLUSIVE")
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
    conn.execute("COMMIT")
""")


def _board_outage(name, run, outage, start, end):
    """Run ``start()``..``end()`` for ``outage`` s on a settled agent; measure recovery."""
    try:
        run.start()
        run.settle()
        mark = run.mark()
        start()
        time.sleep(outage)
        published = run.agent.publisher.published
        end()
        recovery = machine.seconds_until(lambda: run.agent.publisher.published > published, 30.0)
        lost, held = run.since(mark)
        return harness.FaultResult(name, lost, held, run.caps_wrong(), recovery,
                                   loop_waited=run.loop_waited_on_board)
    finally:
        run.stop()
        run.close()


def sqlite_locked(outage=10.0):
    """Another process holds the SQLite board's write lock for ``outage`` seconds."""
    tmp = tempfile.mkdtemp(prefix="resex-board-")
    path = os.path.join(tmp, "board.sqlite")
    run = harness.Run(board_url="sqlite://" + path)
    locker = []

    def start():
        proc = subprocess.Popen([sys.executable, "-c", _LOCKER, path, str(outage)],
                                stdout=subprocess.PIPE, text=True)
        proc.stdout.readline()
        locker.append(proc)

    def end():
        locker[0].wait(30)

    return _board_outage("SQLite board locked by another process %.0f s" % outage,
                         run, outage, start, end)


def etcd_stopped(outage=10.0):
    """etcd stopped with SIGSTOP for ``outage`` seconds, then SIGCONT."""
    etcd = etcd_server.EtcdServer()
    etcd.setUp()
    try:
        run = harness.Run(board_url=etcd.url)
        pid = etcd.proc.pid
        return _board_outage("etcd stopped (SIGSTOP) %.0f s" % outage, run, outage,
                             lambda: os.kill(pid, signal.SIGSTOP),
                             lambda: os.kill(pid, signal.SIGCONT))
    finally:
        etcd.cleanUp()


def etcd_down_at_start(outage=5.0):
    """etcd stopped (SIGSTOP) before the agent starts; it controls, then publishes."""
    etcd = etcd_server.EtcdServer()
    etcd.setUp()
    pid = etcd.proc.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        run = harness.Run(board_url=etcd.url)
        try:
            mark = run.mark()
            run.start()
            controlled = machine.seconds_until(run.applied, 30.0)
            time.sleep(max(0.0, outage - controlled))
            os.kill(pid, signal.SIGCONT)
            recovery = machine.seconds_until(lambda: run.agent.publisher.published > 0, 60.0)
            lost, held = run.since(mark)
            return harness.FaultResult("etcd down at start (%.0f s)" % outage, lost, held,
                                       run.caps_wrong(), recovery,
                                       "capped %.1f s after start" % controlled,
                                       loop_waited=run.loop_waited_on_board)
        finally:
            run.stop()
            run.close()
    finally:
        os.kill(pid, signal.SIGCONT)
        etcd.cleanUp()


class _ClusterWatch(etcd_cluster.ReaderSampler):
    """What the agent published and what a scheduler's reader served, every 20 ms."""

    def __init__(self, reader, host, publisher, max_age):
        super().__init__(reader, host, max_age, lambda: publisher.published)

    def published_after(self, ref):
        """Seconds from ``ref`` (monotonic) until a report was published after it, or None."""
        timeline = list(self.timeline)
        before = [p for t, _w, p, _ts in timeline if t < ref]
        count = before[-1] if before else 0
        return next((t - ref for t, _w, p, _ts in timeline if t >= ref and p > count), None)

    def served_after(self, ref, wall_ref):
        """Seconds from ``ref`` until the reader served a report made after ``wall_ref``."""
        return next((t - ref for t, _w, _p, ts in list(self.timeline)
                     if t >= ref and ts is not None and ts >= wall_ref), None)


@dataclasses.dataclass
class _ClusterFault:
    """The agent on every member of a 3-member etcd cluster, a reader following it, a fault.

    ``fault(cluster, board)`` starts it (``board``: the agent's board, whose
    ``member`` is the one it talks to); after ``outage`` s ``heal(cluster)``
    ends it. Recovery is counted from the fault's start when the cluster
    absorbs it (``absorbed``: a quorum is left), from its end otherwise.
    ``first(cluster)``: the member the agent and the reader ask first.
    """

    name: str
    fault: object
    outage: float = 0.0
    heal: object = None
    absorbed: bool = True
    max_age: float = 10.0
    first: object = None

    def run(self):
        cluster = etcd_cluster.EtcdCluster()
        cluster.setUp()
        try:
            url = cluster.url if self.first is None else cluster.first(self.first(cluster))
            run = harness.Run(board_url=url)
            reader = reader_mod.BoardReader(
                url, max_age=self.max_age, refresh_interval=0.5, load_timeout=30.0,
                board_opts={"prefix": run.conf.board.etcd_prefix,
                            "timeout": run.conf.board.timeout, "watch_idle": 2.0})
            try:
                return self._measured(cluster, run, reader)
            finally:
                reader.stop()
                run.stop()
                run.close()
        finally:
            cluster.cleanUp()

    def _measured(self, cluster, run, reader):
        host = run.conf.agent.host
        run.start()
        run.settle()
        reader.start()
        machine.wait_for(lambda: reader.get(host) is not None, 60.0, what="the reader saw it")
        publisher = run.agent.publisher
        watch = _ClusterWatch(reader, host, publisher, self.max_age)
        try:
            mark = run.mark()
            lost_before = publisher.failures + publisher.skipped
            started = time.monotonic()
            self.fault(cluster, run.parts.board.open())
            time.sleep(self.outage)
            if self.heal is not None:
                self.heal(cluster)
            ref = started if self.absorbed else time.monotonic()
            wall_ref = time.time() - (time.monotonic() - ref)
            machine.wait_for(lambda: watch.published_after(ref) is not None
                             and watch.served_after(ref, wall_ref) is not None, 120.0)
            watch.stop()
            recovery = watch.published_after(ref)
            served = watch.served_after(ref, wall_ref)
            lost, held = run.since(mark)
            reports_lost = publisher.failures + publisher.skipped - lost_before
            note = ("reports lost %d, stale reads %d of %d (host unknown in %d, max_age "
                    "%.0f s); the reader served a new report %s s after; recovery from the "
                    "fault's %s" % (reports_lost, len(watch.stale), watch.samples,
                                    watch.unknown, self.max_age,
                                    "-" if served is None else "%.2f" % served,
                                    "start" if self.absorbed else "end"))
            return harness.FaultResult(
                self.name, lost, held, run.caps_wrong(),
                float("inf") if recovery is None else recovery, note,
                loop_waited=run.loop_waited_on_board,
                details={"reports_lost": reports_lost, "stale": len(watch.stale),
                         "samples": watch.samples, "reader_recovery_s": served})
        finally:
            watch.stop()


def _member_of(cluster, board):
    return cluster.index_of(board.member)


def etcd_leader_killed():
    """The etcd leader, which the agent and the reader talk to, killed with ``kill -9``.

    It stays down: the cluster goes on with 2 of 3 members.
    """
    return _ClusterFault("etcd leader killed (kill -9), 2 of 3 left",
                         lambda c, b: c.kill(c.leader()),
                         first=lambda c: c.leader()).run()


def etcd_member_partitioned(outage=10.0):
    """The member the agent talks to stopped (SIGSTOP: silent, connections open), then SIGCONT."""
    stopped = []

    def fault(cluster, board):
        stopped.append(_member_of(cluster, board))
        cluster.pause(stopped[0])
    return _ClusterFault("etcd member partitioned (SIGSTOP) %.0f s" % outage, fault, outage,
                         heal=lambda c: c.resume(stopped[0])).run()


def etcd_quorum_lost(outage=30.0):
    """Two of three members killed (the agent's among them) for ``outage`` s, then restarted."""
    down = []

    def fault(cluster, board):
        mine = _member_of(cluster, board)
        down.extend([mine, next(i for i in cluster.live() if i != mine)])
        for i in down:
            cluster.kill(i)

    def heal(cluster):
        for i in down:
            cluster.start(i)
    return _ClusterFault("etcd quorum lost (2 of 3 killed) %.0f s" % outage, fault, outage,
                         heal=heal, absorbed=False).run()


def etcd_member_replaced():
    """The agent's member loses its disk: killed, removed, wiped, added again, started."""
    return _ClusterFault("etcd member wiped and re-added",
                         lambda c, b: c.replace(_member_of(c, b))).run()


def etcd_compacted():
    """The history compacted to the current revision and every member defragmented."""
    def fault(cluster, board):
        cluster.compact()
        cluster.defragment()
    return _ClusterFault("etcd compacted and defragmented", fault).run()


def sqlite_corrupt_at_start(outage=3.0):
    """The SQLite board file is garbage at start; the operator replaces it later."""
    tmp = tempfile.mkdtemp(prefix="resex-board-")
    path = os.path.join(tmp, "board.sqlite")
    with open(path, "wb") as f:
        f.write(b"this is not a database\n" * 200)
    run = harness.Run(board_url="sqlite://" + path)
    try:
        mark = run.mark()
        run.start()
        controlled = machine.seconds_until(run.applied, 30.0)
        time.sleep(outage)
        os.unlink(path)
        sqlite3.connect(path).close()
        # The deferred board retries opening every few seconds.
        recovery = machine.seconds_until(lambda: run.agent.publisher.published > 0, 60.0)
        lost, held = run.since(mark)
        return harness.FaultResult("SQLite board corrupt at start", lost, held,
                                   run.caps_wrong(), recovery,
                                   "capped %.1f s after start" % controlled,
                                   loop_waited=run.loop_waited_on_board)
    finally:
        run.stop()
        run.close()


def libvirt_hung(outage=15.0, call_timeout_s=0.5):
    """Every hypervisor call blocks for ``outage`` seconds (a hung libvirtd)."""
    run = harness.Run(call_timeout_s=call_timeout_s)
    try:
        run.start()
        run.settle()
        mark = run.mark()
        run.host.hang()
        time.sleep(outage)
        writes = run.agent.controller.last
        run.host.release()
        # Whole again: the watchdog saw the call return and the loop ran a full interval.
        recovery = machine.seconds_until(
            lambda: run.dog.available and run.agent.controller.last is not writes, 30.0)
        run.settle(epochs=1)
        lost, held = run.since(mark)
        return harness.FaultResult(
            "libvirtd hung %.0f s (watchdog %.1f s)" % (outage, call_timeout_s), lost, held,
            run.caps_wrong(), recovery,
            "watchdog bound = %d intervals; held = ran, knobs kept"
            % round(call_timeout_s / run.agent.settings.interval_s))
    finally:
        run.host.release()
        run.stop()
        run.close()


def sigterm_while_hung(outage=15.0, call_timeout_s=0.5):
    """A real SIGTERM while libvirtd hangs: bounded exit, journal kept, next start restores.

    The agent runs in this process's main thread under the daemon's own
    signal handling (:func:`resex_agent.resex_agent.serve`); a timer hangs the host once
    the VMs are capped and sends SIGTERM to this process right after, with a
    hypervisor call in flight.
    """
    run = harness.Run(call_timeout_s=call_timeout_s)
    sent = []

    def fault():
        if machine.seconds_until(lambda: run.agent.epochs >= 2 and run.applied(), 60.0) \
                == float("inf"):
            run.agent.stop()
            return
        run.host.hang()
        time.sleep(0.05)        # a call is in flight, blocked, when SIGTERM comes
        sent.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGTERM)
    try:
        timer = threading.Thread(target=fault, daemon=True)
        timer.start()
        resex_agent.serve(run.agent)
        exit_s = time.monotonic() - sent[0]
        timer.join(10)
        kept = set(run.journal.originals())
        time.sleep(max(0.0, outage - exit_s))
        run.host.release()
        # The next start: a fresh journal object on the same file restores what is left.
        released = time.monotonic()
        journal_mod.Journal(run.journal.path).reconcile(run.sim)
        recovery = time.monotonic() - released
        return harness.FaultResult(
            "SIGTERM while libvirtd hung", 0, 0, run.not_original(), recovery,
            "exited %.1f s after SIGTERM, %d VM(s) kept in the journal" % (exit_s, len(kept)))
    finally:
        run.host.release()
        run.close()


def journal_full(outage=3.0):
    """The state directory is full (a 64 kB tmpfs) when the agent first caps the VMs."""
    tmp = tempfile.mkdtemp(prefix="resex-state-")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", tmp], check=True)
    try:
        filler = os.path.join(tmp, "filler")
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            while True:
                os.write(fd, b"\0" * 4096)
        except OSError:
            pass
        finally:
            os.close(fd)
        run = harness.Run(state_dir=tmp)
        try:
            mark = run.mark()
            run.start()
            controlled = machine.seconds_until(run.applied, 30.0)
            time.sleep(outage)
            errors = run.journal.write_errors
            unsaved = len(run.journal.unsaved)
            os.unlink(filler)
            recovery = machine.seconds_until(lambda: not run.journal.unsaved, 30.0)
            lost, held = run.since(mark)
            wrong = run.caps_wrong()
            run.stop()
            return harness.FaultResult(
                "state directory full at first cap", lost, held,
                wrong + run.not_original(), recovery,
                "capped %.1f s after start; %d write errors, %d VM(s) held in memory"
                % (controlled, errors, unsaved))
        finally:
            run.agent.stop()
            run.close()
    finally:
        subprocess.run(["umount", tmp], check=False)
        os.rmdir(tmp)


def _agent_conf(tmp, extra=""):
    path = os.path.join(tmp, "agent.conf")
    with open(path, "w") as f:
        f.write(textwrap.dedent("""
            [agent]
            host_driver = libvirt
            state_dir = %(tmp)s/state
            interval = 0.1
            epoch = 1.0
            [libvirt]
            connection_uri = test:///default
            [latency]
            probe_socket_path = %(tmp)s/run/latency.sock
            [board]
            url =
            """ % {"tmp": tmp}) + extra)
    return path


def _wait_file(path, timeout=60.0):
    return machine.seconds_until(lambda: os.path.exists(path) and os.path.getsize(path) > 0,
                                 timeout)


def two_agents(other_state_dir=False):
    """A second agent on the same state directory (or another) while the first runs."""
    tmp = tempfile.mkdtemp(prefix="resex-two-")
    conf = _agent_conf(tmp)
    second_conf = conf
    if other_state_dir:
        other = tempfile.mkdtemp(prefix="resex-two-other-")
        second_conf = _agent_conf(other)
    env = dict(os.environ, PYTHONPATH=ROOT)
    first = subprocess.Popen(AGENT + ["--config-file", conf], cwd=ROOT, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        sock = os.path.join(tmp, "run", "latency.sock")
        if _wait_file(os.path.join(tmp, "state", "agent.lock")) == float("inf") or \
                machine.seconds_until(lambda: os.path.exists(sock), 60.0) == float("inf"):
            raise RuntimeError("the first agent did not start: %s" % first.stderr.read())
        inode = os.stat(sock).st_ino
        started = time.monotonic()
        second = subprocess.run(AGENT + ["--config-file", second_conf], cwd=ROOT, env=env,
                                capture_output=True, text=True, timeout=120)
        took = time.monotonic() - started
        wrong = 0
        if first.poll() is not None:
            wrong += 1                      # the first agent died
        if not os.path.exists(sock) or os.stat(sock).st_ino != inode:
            wrong += 1                      # its probe socket was taken over
        if second.returncode == 0:
            wrong += 1                      # the second agent ran
        return harness.FaultResult(
            "second agent on %s state directory" % ("another" if other_state_dir else "the same"),
            0, 0, wrong, took,
            "second exited %d in %.1f s" % (second.returncode, took),
            details={"second": second, "first_pid": first.pid})
    finally:
        first.send_signal(signal.SIGTERM)
        try:
            first.wait(60)
        except subprocess.TimeoutExpired:
            first.kill()
        first.stderr.close()


def libvirt_hung_at_start():
    """libvirtd accepts connections and never answers (a real libvirt client against it).

    The daemon is a Unix socket that accepts and stays silent, which is what
    a stopped (SIGSTOP) or wedged libvirtd looks like to a client: the agent
    must fail its start within the watchdog bound, in one line, not hang.
    """
    tmp = tempfile.mkdtemp(prefix="resex-hungd-")
    path = os.path.join(tmp, "libvirt-sock")
    daemon = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    daemon.bind(path)
    daemon.listen(16)
    conf = _agent_conf(tmp, "[libvirt]\nconnection_uri = qemu+unix:///system?socket=%s\n"
                       % path)
    env = dict(os.environ, PYTHONPATH=ROOT)
    try:
        started = time.monotonic()
        proc = subprocess.run(AGENT + ["--config-file", conf], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=120)
        took = time.monotonic() - started
    finally:
        daemon.close()
    return harness.FaultResult("libvirtd silent at start (real client)", 0, 0, 0, took,
                               "exited %d in %.1f s" % (proc.returncode, took),
                               details={"proc": proc})


def slow_loris(idle=32, line_timeout_s=0.5):
    """``idle`` connections hold the probe socket; an honest probe must still report."""
    from resex_agent.intake import params as params_mod
    from resex_agent.intake import server as intake_server
    from resex_libvirt.hypervisor import base
    from resex_libvirt import sla as sla_mod
    tmp = tempfile.mkdtemp(prefix="resex-loris-")
    path = os.path.join(tmp, "run", "latency.sock")
    vm = "aaaaaaaa-0000-4000-8000-000000000001"
    intake = intake_server.LatencyIntake(params_mod.IntakeParams(
        probe_socket_path=path, max_probe_clients=idle, probe_line_timeout_s=line_timeout_s,
        freshness_s=600.0))
    intake.start()
    lorises = []
    try:
        intake.sync({vm: base.VMInfo(uuid=vm, name="vm", sla=sla_mod.SLA(latency_sla_us=100.0))})
        for i in range(idle):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(path)
            if i % 2:
                s.send(b'{"v": 1, "vm": "')      # a half line, never finished
            lorises.append(s)
        time.sleep(0.2)
        honest = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        honest.connect(path)
        honest.sendall(b'{"v": 1, "vm": "%s", "n": 10, "mean_us": 120.0, "std_us": 5.0, '
                       b'"p99_us": 150.0}\n' % vm.encode())
        took = machine.seconds_until(lambda: vm in intake.windows(), 10.0)
        honest.close()
        return harness.FaultResult("%d idle probe connections (slow-loris)" % idle, 0, 0,
                                   0 if took != float("inf") else 1, took,
                                   "rejections %s" % intake.stats().get(
                                       "(probe socket)", {}).get("rejected", {}))
    finally:
        for s in lorises:
            s.close()
        intake.close()


def start_failures():
    """Start failures: one line on stderr, exit 1, no traceback."""
    tmp = tempfile.mkdtemp(prefix="resex-start-")
    env = dict(os.environ, PYTHONPATH=ROOT)
    blocker = os.path.join(tmp, "not-a-dir")
    open(blocker, "w").close()
    cases = {
        "probe socket cannot be bound": ["--config-file", _agent_conf(
            tmp, "[latency]\nprobe_socket_path = %s/latency.sock\n" % blocker)],
        "config path is a directory": ["--config-file", tmp],
    }
    out = {}
    for name, args in cases.items():
        proc = subprocess.run(AGENT + args, cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=120)
        out[name] = proc
    return out


#: (name, function, CI arguments, ``make faults`` arguments)
TABLE = (
    ("two agents", two_agents, {}, {}),
    ("two agents, two state dirs", two_agents, {"other_state_dir": True},
     {"other_state_dir": True}),
    ("sqlite locked", sqlite_locked, {"outage": 3.0}, {"outage": 10.0}),
    ("etcd stopped", etcd_stopped, {"outage": 3.0}, {"outage": 10.0}),
    ("etcd down at start", etcd_down_at_start, {"outage": 3.0}, {"outage": 5.0}),
    ("etcd cluster leader killed", etcd_leader_killed, {}, {}),
    ("etcd cluster member partitioned", etcd_member_partitioned, {"outage": 3.0},
     {"outage": 10.0}),
    ("etcd cluster quorum lost", etcd_quorum_lost, {"outage": 5.0}, {"outage": 30.0}),
    ("etcd cluster member wiped", etcd_member_replaced, {}, {}),
    ("etcd cluster compacted", etcd_compacted, {}, {}),
    ("sqlite corrupt at start", sqlite_corrupt_at_start, {"outage": 1.0}, {"outage": 3.0}),
    ("libvirt hung", libvirt_hung, {"outage": 3.0}, {"outage": 15.0, "call_timeout_s": 2.0}),
    ("sigterm while hung", sigterm_while_hung, {"outage": 3.0},
     {"outage": 15.0, "call_timeout_s": 2.0}),
    ("journal full", journal_full, {"outage": 2.0}, {"outage": 5.0}),
    ("slow loris", slow_loris, {}, {}),
    ("libvirt hung at start", libvirt_hung_at_start, {}, {}),
)
