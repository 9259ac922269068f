"""Cost of the price board per backend (issue 6): publish and snapshot, at
1,000 and 10,000 hosts on the board.

* ``publish``: one agent's ``Board.publish`` into a board already holding N
  hosts (SQLite: one upsert + the TTL sweep, committed, WAL,
  ``synchronous=NORMAL``; etcd: one ``put`` with the host's lease);
* ``snapshot``: one ``Board.snapshot()`` of N hosts (what the scheduler's
  reader thread does every ``refresh_interval``; etcd: one prefix range
  read), cold (every record parsed and validated) and warm (records whose
  raw value did not change since the last snapshot are reused).

etcd is a real ``/usr/bin/etcd`` (Debian ``etcd-server``) on loopback in a
temporary data directory, stopped by PID at the end; skipped with a line if
it is not installed. Figures only; nothing is asserted.
"""

import argparse
import base64
import os
import statistics
import tempfile
import time

from resex_libvirt import board as board_mod
from resex_libvirt.board import backend
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


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench board")
    parser.add_argument("--publishes", type=int, default=200)
    parser.add_argument("--snapshots", type=int, default=5)
    parser.add_argument("--sizes", default="1000,10000")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
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
