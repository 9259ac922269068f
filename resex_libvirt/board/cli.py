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

"""``resex-board``: show the price board as the scheduler sees it.

::

    resex-board [--url URL] [--max-age S] [--json] [--prefix P] [--timeout S]

One line per host: the report's age, link utilisation (and its part the
host's market cannot tax away), CPU and I/O prices,
observed latency inflation, congestion index, the sensitive and heavy I/O
VM counts; hosts whose report is older than ``--max-age`` (the scheduler's
``[resex] max_age``) are marked ``STALE``: the scheduler treats them as
unknown. Exit status: 0, or 1 when the board cannot be read.
"""

import argparse
import json
import sys
import time

from resex_libvirt import board as board_mod
from resex_libvirt import exceptions

DEFAULT_URL = "sqlite:///var/lib/resex/board.sqlite"

COLUMNS = (("HOST", "<"), ("AGE_S", ">"), ("UTIL_%", ">"), ("UNTAX_%", ">"), ("CPU_PRICE", ">"),
           ("IO_PRICE", ">"), ("INFL_%", ">"), ("CI_%", ">"), ("SENS", ">"),
           ("HEAVY", ">"), ("VMS", ">"), ("STATE", "<"))


def _parser():
    p = argparse.ArgumentParser(prog="resex-board", description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default=DEFAULT_URL,
                   help="board URL: sqlite:///path or etcd3+http(s)://host:port "
                        "(default %(default)s)")
    p.add_argument("--max-age", type=float, default=60.0,
                   help="seconds after which a report is stale (default %(default)s)")
    p.add_argument("--prefix", default=None, help="etcd key prefix (default /resex/board/)")
    p.add_argument("--timeout", type=float, default=5.0,
                   help="timeout of the board read, seconds (default %(default)s)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return p


def rows(reports, now, max_age):
    """One dict per host, sorted by host: the report, its age, index and staleness."""
    out = []
    for host in sorted(reports):
        rec = reports[host]
        row = rec.to_dict()
        row["age_s"] = round(rec.age(now), 3)
        row["congestion_index_pct"] = round(rec.congestion_index, 3)
        row["stale"] = rec.age(now) > max_age
        out.append(row)
    return out


def table(data):
    """The rows as an aligned text table."""
    lines = [[name for name, _ in COLUMNS]]
    for r in data:
        lines.append([
            r["host"], "%.1f" % r["age_s"], "%.1f" % (100.0 * r["link_utilisation"]),
            "%.1f" % (100.0 * r["untaxable_utilisation"]),
            "%.3g" % r["cpu_price"], "%.3g" % r["io_price"],
            "%.1f" % r["latency_inflation_pct"], "%.1f" % r["congestion_index_pct"],
            str(r["sensitive_vms"]), str(r["heavy_io_vms"]), str(r["vms"]),
            "STALE" if r["stale"] else "ok"])
    widths = [max(len(line[i]) for line in lines) for i in range(len(COLUMNS))]
    return "\n".join(
        "  ".join("%*s" % (-w if align == "<" else w, cell)
                  for cell, w, (_, align) in zip(line, widths, COLUMNS)).rstrip()
        for line in lines)


def main(argv=None, out=None):
    out = out or sys.stdout
    args = _parser().parse_args(argv)
    opts = {"timeout": args.timeout, "create": False}
    if args.prefix:
        opts["prefix"] = args.prefix
    try:
        with board_mod.open_board(args.url, **opts) as board:
            reports = board.snapshot()
    except (exceptions.BoardUnavailable, exceptions.ConfigError) as exc:
        print("resex-board: %s" % exc, file=sys.stderr)
        return 1
    data = rows(reports, time.time(), args.max_age)
    if args.json:
        json.dump({"url": board_mod.redact(args.url), "max_age_s": args.max_age,
                   "hosts": data}, out, indent=2, sort_keys=True)
        out.write("\n")
    else:
        out.write(table(data) + "\n")
        stale = sum(1 for r in data if r["stale"])
        out.write("%d hosts, %d stale (older than %gs) on %s\n"
                  % (len(data), stale, args.max_age, board_mod.redact(args.url)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
