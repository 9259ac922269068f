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

"""Cost of the price board per backend: publish and snapshot, at
1,000 and 10,000 hosts on the board.

* ``publish``: one agent's ``Board.publish`` into a board already holding N
  hosts (SQLite: one upsert + the TTL sweep, committed, WAL,
  ``synchronous=NORMAL``; etcd: one ``put`` with the host's lease);
* ``snapshot``: one ``Board.snapshot()`` of N hosts (what the scheduler's
  reader thread does every ``refresh_interval``; etcd: one prefix range
  read), cold (every record parsed and validated) and warm (records whose
  raw value did not change since the last snapshot are reused).

Then **the scheduler's view** (:func:`scheduler_view`): 1 and 4 scheduler
workers (one :class:`~resex_libvirt.board.reader.BoardReader` each, as each
nova-scheduler worker process has) follow a board of N hosts while one
publisher updates random hosts at ``--rate`` reports a second for
``--window`` seconds, once with today's snapshot reader (``snapshot``: the
whole board every ``refresh_interval`` = 2 s) and once following it
(``follow``: etcd watch; SQLite rows changed since the last read, polled
every 0.5 s). Printed per row:

* ``cpu_ms/update``: CPU time of the readers' threads (all workers, after
  their first full read) over the updates published: what one board update
  costs the schedulers;
* ``stale_p50/p99``: from the publish call to the record being in a
  worker's cache (what the filter reads), milliseconds, over every
  (update, worker) pair; ``seen``: the share of those pairs that arrived
  (a host updated again before a snapshot caught it is never seen);
* ``etcd_cpu_ms/s`` and ``etcd_kB/s``: the etcd server's CPU time (from
  ``/proc``) and bytes it sent to clients (its ``/metrics``), per second of
  the window, the publisher's puts included (the same in both modes).

etcd is a real ``/usr/bin/etcd`` (Debian ``etcd-server``) on loopback in a
temporary data directory, stopped by PID at the end; skipped with a line if
it is not installed. Figures only; nothing is asserted.
"""

import argparse
import base64
import dataclasses
import os
import random
import re
import resource
import statistics
import tempfile
import time
import urllib.request

from resex_libvirt import board as board_mod
from resex_libvirt.board import backend
from resex_libvirt.board import reader as reader_mod
from resex_libvirt.board import report as report_mod
from resex_libvirt import exceptions
from tests.functional.board import etcd_cluster
from tests.functional.board import etcd_server
from tests.unit.board import reports


def timed(fn, repeat):
    costs = []
    for i in range(repeat):
        t0 = time.perf_counter()
        fn(i)
        costs.append(time.perf_counter() - t0)
    return statistics.median(costs), max(costs)


def fill_sqlite(board, hosts, now):
    for i in range(hosts):
        board.publish(reports.make("compute-%05d" % i, ts=now, link_utilisation=(i % 100) / 100))


def fill_etcd(board, hosts, now):
    """Bulk-load with etcd transactions of 100 puts (etcd's default limit is 128)."""
    lease = board._current_lease()
    ops = []
    for i in range(hosts):
        rec = reports.make("compute-%05d" % i, ts=now, link_utilisation=(i % 100) / 100)
        ops.append({"request_put": {
            "key": base64.b64encode((board.prefix + rec.host).encode()).decode(),
            "value": base64.b64encode(rec.to_json().encode()).decode(),
            "lease": lease.id}})
        if len(ops) == 100 or i == hosts - 1:
            board._client.transaction({"compare": [], "success": ops, "failure": []})
            ops = []


def measure(label, board, fill, sizes, publishes, snapshots):
    now = time.time()
    filled = 0
    for n in sizes:
        fill(board, n, now) if filled == 0 else fill_more(board, fill, filled, n, now)
        filled = n
        snap = board.snapshot()
        assert len(snap) >= n, (label, len(snap), n)

        def publish(i):
            board.publish(reports.make("compute-%05d" % (i % n), ts=time.time(),
                                       link_utilisation=0.5))

        def cold_snapshot(i):
            board._decoder = backend.RecordDecoder(label)
            board.snapshot()

        pub_med, pub_max = timed(publish, publishes)
        cold_med, _ = timed(cold_snapshot, snapshots)
        warm_med, _ = timed(lambda i: board.snapshot(), snapshots)
        print("%-8s %7d %12.3f %12.3f %14.1f %14.1f" % (
            label, n, pub_med * 1e3, pub_max * 1e3, cold_med * 1e3, warm_med * 1e3))


def fill_more(board, fill, have, want, now):
    fill(board, want, now)  # rewrites the first hosts too: simple, and idempotent


class MeasuredReader(reader_mod.BoardReader):
    """A reader that records its thread's CPU time and when each record became visible."""

    def __init__(self, *args, pending=None, **kwargs):
        super().__init__(*args, on_change=self._seen, **kwargs)
        self.pending = pending
        self.delays = []
        #: ``(published, delay)`` of each record seen (perf_counter seconds).
        self.seen = []
        self._counted = set()
        self.cpu = 0.0
        self.cpu_mark = 0.0
        self._t0 = None

    def _run(self):
        self._t0 = time.thread_time()
        try:
            super()._run()
        finally:
            self.cpu = time.thread_time() - self._t0

    def _apply(self, full, records):
        super()._apply(full, records)
        self.cpu_mark = time.thread_time() - self._t0

    def _seen(self, records):
        now = time.perf_counter()
        pending = self.pending
        for host, rec in records.items():
            if rec is None:
                continue
            key = (host, rec.ts)
            published = pending.get(key)
            if published is not None and key not in self._counted:
                self._counted.add(key)
                self.delays.append(now - published)
                self.seen.append((published, now - published))


def etcd_load(server):
    """(etcd CPU seconds so far, bytes sent to clients so far)."""
    with open("/proc/%d/stat" % server.proc.pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    url = "http://127.0.0.1:%d/metrics" % server.client_port
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    sent = sum(float(m) for m in re.findall(
        r"^etcd_network_client_grpc_sent_bytes_total(?:\{[^}]*\})? (\S+)$", text, re.M))
    return cpu, sent


def pct(values, q):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def scheduler_view(label, url, board, fill, sizes, workers_list, rate, window, server=None,
                   board_opts=None):
    """One row per (hosts, workers, mode): see the module docstring."""
    for n in sizes:
        fill(board, n, time.time())
        for workers in workers_list:
            for mode in ("snapshot", "follow"):
                pending = {}
                readers = [MeasuredReader(url, max_age=600, refresh_interval=2.0,
                                          load_timeout=120, board_opts=board_opts,
                                          mode=mode, pending=pending)
                           for _ in range(workers)]
                for r in readers:
                    r.start()
                # The first full read is not the window's: count from after it.
                base_cpu = [r.cpu_mark for r in readers]
                load0 = etcd_load(server) if server else None
                t0 = time.perf_counter()
                rng = random.Random(n * 10 + workers)
                published = 0
                next_at = t0
                while time.perf_counter() - t0 < window:
                    host = "compute-%05d" % rng.randrange(n)
                    rec = reports.make(host, ts=time.time() + published * 1e-6,
                                       link_utilisation=rng.random() * 0.5)
                    pending[(host, rec.ts)] = time.perf_counter()
                    board.publish(rec)
                    published += 1
                    next_at += 1.0 / rate
                    time.sleep(max(0.0, next_at - time.perf_counter()))
                # Let the last updates arrive (one refresh interval and a read).
                time.sleep(2.5)
                elapsed = time.perf_counter() - t0
                load1 = etcd_load(server) if server else None
                for r in readers:
                    r.stop(timeout=60)
                cpu = sum(r.cpu - b for r, b in zip(readers, base_cpu))
                delays = [d for r in readers for d in r.delays]
                seen = len(delays) / max(1, published * workers)
                etcd = ("%13.1f %10.1f" % ((load1[0] - load0[0]) / elapsed * 1e3,
                                           (load1[1] - load0[1]) / elapsed / 1e3)
                        if server else "%13s %10s" % ("-", "-"))
                print("%-7s %6d %7d %-9s %7d %13.3f %11.0f %11.0f %6.0f%% %s" % (
                    label, n, workers, mode, published, cpu / max(1, published) * 1e3,
                    pct(delays, 0.5) * 1e3, pct(delays, 0.99) * 1e3, 100 * seen, etcd),
                    flush=True)


def leader_change(hosts, rate, window, kill_at, settle_s=10.0):
    """The scheduler's view of a 3-member etcd cluster whose leader is killed (-9).

    The board is filled with ``hosts`` reports; one publisher updates random
    hosts at ``rate`` a second for ``window`` seconds and one following
    reader (the scheduler's) watches, both naming the leader first; the
    leader is killed ``kill_at`` seconds in. Prints the staleness of the
    updates published before the kill, in the ``settle_s`` after it
    (during) and after that, the publishes that failed, the reader's
    memory, and the hosts whose latest published report the reader did not
    hold at the end (a lost report read as an older one).
    """
    cluster = etcd_cluster.EtcdCluster()
    cluster.setUp()
    try:
        leader = cluster.leader()
        url = cluster.first(leader)
        with board_mod.open_board(url, timeout=5, lease_ttl=600) as board:
            fill_etcd(board, hosts, time.time())
            pending, latest = {}, {}
            reader = MeasuredReader(url, max_age=600, refresh_interval=2.0, load_timeout=120,
                                    board_opts={"timeout": 5}, mode="follow", pending=pending)
            reader.start()
            rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            rng = random.Random(hosts)
            failed, killed, t0 = 0, None, time.perf_counter()
            next_at = t0
            while time.perf_counter() - t0 < window:
                if killed is None and time.perf_counter() - t0 >= kill_at:
                    cluster.kill(leader)
                    killed = time.perf_counter()
                host = "compute-%05d" % rng.randrange(hosts)
                rec = reports.make(host, ts=time.time(), link_utilisation=rng.random() * 0.5)
                pending[(host, rec.ts)] = time.perf_counter()
                try:
                    board.publish(rec)
                    latest[host] = rec.ts
                except exceptions.BoardUnavailable:
                    failed += 1
                next_at += 1.0 / rate
                time.sleep(max(0.0, next_at - time.perf_counter()))
            time.sleep(5.0)
            reader.stop(timeout=60)
            rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            entries, _ = reader.fresh(now=time.time())
            lost = sum(1 for h, ts in latest.items()
                       if entries.get(h) is None or entries[h].report.ts < ts)
    finally:
        cluster.cleanUp()
    phases = (("before", None, killed), ("during", killed, killed + settle_s),
              ("after", killed + settle_s, None))
    print("\nthe scheduler's view across a leader change: 3 etcd members, %d hosts, %g "
          "reports/s for %gs, the leader killed (-9) %gs in" % (hosts, rate, window, kill_at))
    print("%-8s %7s %11s %11s %11s" % ("phase", "seen", "stale_p50", "stale_p99", "stale_max"))
    for name, lo, hi in phases:
        d = [delay for pub, delay in reader.seen
             if (lo is None or pub >= lo) and (hi is None or pub < hi)]
        sent = sum(1 for pub in pending.values()
                   if (lo is None or pub >= lo) and (hi is None or pub < hi))
        print("%-8s %6.0f%% %9.0fms %9.0fms %9.0fms" % (
            name, 100.0 * len(d) / max(1, sent), pct(d, 0.5) * 1e3, pct(d, 0.99) * 1e3,
            max(d, default=float("nan")) * 1e3))
    print("publishes failed: %d of %d; reader's process max RSS %.0f -> %.0f MB; hosts whose "
          "latest published report the reader did not hold at the end: %d"
          % (failed, len(pending), rss0 / 1024, rss1 / 1024, lost))


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench board")
    parser.add_argument("--publishes", type=int, default=200)
    parser.add_argument("--snapshots", type=int, default=5)
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--workers", default="1,4",
                        help="scheduler workers of the scheduler-view table")
    parser.add_argument("--rate", type=float, default=50.0,
                        help="reports published per second in the scheduler view")
    parser.add_argument("--window", type=float, default=5.0,
                        help="seconds of publishing per scheduler-view row")
    parser.add_argument("--backends", default="sqlite,etcd",
                        help="backends of the scheduler-view table")
    parser.add_argument("--skip-calls", action="store_true",
                        help="only the scheduler-view table")
    parser.add_argument("--record-sizes", action="store_true",
                        help="only the record-size table (remote claims' cost per report)")
    parser.add_argument("--leader-change", type=int, default=0, metavar="HOSTS",
                        help="only the leader-change table, with this many hosts (3 etcd "
                             "members; --rate and --window as above, the kill at a third)")
    args = parser.parse_args(argv)
    if args.record_sizes:
        record_sizes()
        return 0
    if args.leader_change:
        if not etcd_server.EtcdServer.available():
            print("etcd: skipped, /usr/bin/etcd is not installed (Debian etcd-server)")
            return 0
        leader_change(args.leader_change, args.rate, args.window, args.window / 3.0)
        return 0
    sizes = [int(s) for s in args.sizes.split(",")]
    if not args.skip_calls:
        calls(args, sizes)
    workers = [int(w) for w in args.workers.split(",")]
    print()
    print("the scheduler's view: %g reports/s published for %gs; readers refresh every 2 s"
          % (args.rate, args.window))
    print("%-7s %6s %7s %-9s %7s %13s %11s %11s %7s %13s %10s" % (
        "backend", "hosts", "workers", "reader", "updates", "cpu_ms/update", "stale_p50",
        "stale_p99", "seen", "etcd_cpu_ms/s", "etcd_kB/s"))
    backends = args.backends.split(",")
    with tempfile.TemporaryDirectory(prefix="resex-bench-board-") as tmp:
        url = "sqlite://" + os.path.join(tmp, "board.sqlite")
        with board_mod.open_board(url, ttl=3600) as board:
            if "sqlite" in backends:
                scheduler_view("sqlite", url, board, fill_sqlite, sizes, workers, args.rate,
                               args.window, board_opts={"create": False})
    if "etcd" not in backends:
        return 0
    if not etcd_server.EtcdServer.available():
        print("etcd: skipped, /usr/bin/etcd is not installed (Debian etcd-server)")
        return 0
    server = etcd_server.EtcdServer()
    server.setUp()
    try:
        with board_mod.open_board(server.url, timeout=30, lease_ttl=600) as board:
            scheduler_view("etcd", server.url, board, fill_etcd, sizes, workers, args.rate,
                           args.window, server=server, board_opts={"timeout": 30})
    finally:
        server.cleanUp()
    return 0


def record_sizes(vms=16):
    """Print a host report's bytes with 0, 1, 4 and 16 remote claims (``vms`` VMs, addresses).

    Then with 0, 1, 4 and 16 ensemble members (of two ensembles) instead,
    and with ``link_tx`` for 0, 1, 2 and :data:`~.report.MAX_LINK_TX` shared links.

    What a claim adds to the board's traffic per host per epoch: a host
    with claims publishes every epoch (the on-change rule never holds its
    report back), so in a fleet that publishes on change its traffic is
    this record once a second.
    """
    from resex_libvirt.board import ensembles
    from resex_libvirt.board import remote_claims
    addresses = {"%08x-0000-4000-8000-%012x" % (k, k):
                 ["10.%d.%d.%d" % (k, k, k), "fa:16:3e:00:00:%02x" % k] for k in range(vms)}
    print("host report bytes, %d VMs with an IPv4 address and a MAC each" % vms)
    print("%-7s %7s %8s" % ("claims", "bytes", "vs none"))
    base = None
    for n in (0, 1, 4, 16):
        claims = [remote_claims.Claim(
            vm="%08x-1111-4000-8000-%012x" % (k, k), peer="10.99.%d.%d:7788" % (k, k),
            sla_us=500.0, threshold_pct=10.0, statistic="mean", count=2400,
            mean_us=612.25, std_us=31.5, p99_us=901.75)._asdict() for k in range(n)]
        rec = report_mod.HostReport(
            host="compute-0123.rack07.example.org", ts=time.time(), epoch=123456,
            link_capacity_bytes_per_s=12.5e9, link_utilisation=0.4173, cpu_price=1.25,
            io_price=3.5, latency_inflation_pct=12.75, vms=vms, sensitive_vms=max(n, 2),
            heavy_io_vms=3, sensitive_io_share=0.1, heavy_io_share=0.6, agent_version="1.0.0",
            addresses=addresses, remote_claims=claims)
        size = len(rec.to_json())
        base = base or size
        print("%-7d %7d %7.2fx" % (n, size, size / base))
    print("%-7s %7s %8s" % ("members", "bytes", "vs none"))
    for n in (0, 1, 4, 16):
        members = [ensembles.Member(
            ensemble="%08x-2222-4000-8000-%012x" % (k % 2, k % 2),
            vm="%08x-0000-4000-8000-%012x" % (k, k), sla_us=500.0, threshold_pct=10.0,
            statistic="mean", count=2400, mean_us=612.25, std_us=31.5,
            p99_us=901.75)._asdict() for k in range(n)]
        rec = dataclasses.replace(rec, remote_claims=(), sensitive_vms=max(n, 2),
                                  ensembles=members)
        size = len(rec.to_json())
        print("%-7d %7d %7.2fx" % (n, size, size / base))
    print("%-7s %7s %8s" % ("links", "bytes", "vs none"))
    for n in (0, 1, 2, report_mod.MAX_LINK_TX):
        # link_tx (report 1.7): what the host sent beyond each shared link it is behind.
        link_tx = {"rack%02d-uplink-%d" % (7, k): 1.234567e9 / (k + 1) for k in range(n)}
        rec = dataclasses.replace(rec, ensembles=(), sensitive_vms=2, link_tx=link_tx)
        size = len(rec.to_json())
        print("%-7d %7d %7.2fx" % (n, size, size / base))


def calls(args, sizes):
    print("price board cost per call, milliseconds (medians; publish max too).")
    print("snapshot_cold validates every record; snapshot_warm reuses the records")
    print("unchanged since the previous snapshot (the publish-on-change case).")
    print("%-8s %7s %12s %12s %14s %14s" % ("backend", "hosts", "publish_med", "publish_max",
                                            "snapshot_cold", "snapshot_warm"))
    with tempfile.TemporaryDirectory(prefix="resex-bench-board-") as tmp:
        url = "sqlite://" + os.path.join(tmp, "board.sqlite")
        with board_mod.open_board(url, ttl=3600) as board:
            measure("sqlite", board, fill_sqlite, sizes, args.publishes, args.snapshots)
        wal = os.path.join(tmp, "board.sqlite-wal")
        if os.path.exists(wal):
            print("sqlite WAL after the run: %.1f MB" % (os.path.getsize(wal) / 1e6))
    if not etcd_server.EtcdServer.available():
        print("etcd: skipped, /usr/bin/etcd is not installed (Debian etcd-server)")
        return 0
    server = etcd_server.EtcdServer()
    server.setUp()
    try:
        with board_mod.open_board(server.url, timeout=30, lease_ttl=600) as board:
            measure("etcd", board, fill_etcd, sizes, args.publishes, args.snapshots)
    finally:
        server.cleanUp()
    return 0


if __name__ == "__main__":
    main()
