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
                [--threshold PCT] [--sort host|congestion]
                [--watch SECONDS [--count N]] [--host NAME]

One line per host: the report's age, link utilisation (and its part the
host's market cannot tax away), CPU and I/O prices,
observed latency inflation, congestion index, whether the host admits
latency-sensitive VMs (``ADMIT``: ``closed`` when its index is above
``--threshold``, the scheduler's ``[resex] congestion_threshold``), the
sensitive and heavy I/O VM counts; hosts whose report is older than
``--max-age`` (the scheduler's ``[resex] max_age``) are marked ``STALE``:
the scheduler treats them as unknown. Records the read dropped (invalid, or
naming another host than their key) are counted below the table, by reason
(``--json``: ``rejected``).

``--watch SECONDS`` redraws the table in place every SECONDS, hosts sorted
by congestion, until interrupted (or ``--count`` frames); the admission
state follows each host's reports as the scheduler's does (smoothed over
``--time-constant`` seconds, with ``--hysteresis``), and a board that
cannot be read is said on the frame while the last table stays. ``--host
NAME`` shows one host's report in full, with its VMs counted by the project
that owns them (report 1.3; an older agent's report has none). Exit status: 0, or 1 when the board
cannot be read (or ``--host`` names a host with no report).
"""

import argparse
import json
import signal
import sys
import time

from resex_libvirt import board as board_mod
from resex_libvirt.board import admission as admission_mod
from resex_libvirt.board import ensembles as ensembles_mod
from resex_libvirt.board import remote_claims as remote_mod
from resex_libvirt import exceptions

DEFAULT_URL = "sqlite:///var/lib/resex/board.sqlite"

COLUMNS = (("HOST", "<"), ("AGE_S", ">"), ("UTIL_%", ">"), ("UNTAX_%", ">"), ("CPU_PRICE", ">"),
           ("IO_PRICE", ">"), ("INFL_%", ">"), ("CI_%", ">"), ("ADMIT", "<"), ("SENS", ">"),
           ("HEAVY", ">"), ("VMS", ">"), ("STATE", "<"))

#: ANSI: cursor home; erase to the end of the line; erase below the cursor.
HOME, EOL, EOS = "\x1b[H", "\x1b[K", "\x1b[J"


def _parser():
    p = argparse.ArgumentParser(prog="resex-board", description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default=DEFAULT_URL,
                   help="board URL: sqlite:///path or etcd3+http(s)://host:port[,host:port...] "
                        "(default %(default)s)")
    p.add_argument("--max-age", type=float, default=60.0,
                   help="seconds after which a report is stale (default %(default)s)")
    p.add_argument("--prefix", default=None, help="etcd key prefix (default /resex/board/)")
    p.add_argument("--timeout", type=float, default=5.0,
                   help="timeout of the board read, seconds (default %(default)s)")
    p.add_argument("--ca-cert", default=None, metavar="PATH",
                   help="CA bundle that verifies an etcd3+https board (default: the system's)")
    p.add_argument("--cert-file", default=None, metavar="PATH",
                   help="client certificate for an etcd that requires one (with --key-file)")
    p.add_argument("--key-file", default=None, metavar="PATH",
                   help="private key of --cert-file")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--threshold", type=float, default=10.0,
                   help="congestion index (percent) above which a host refuses "
                        "latency-sensitive VMs, as nova.conf's [resex] congestion_threshold "
                        "(default %(default)s)")
    p.add_argument("--time-constant", type=float, default=20.0,
                   help="--watch: smoothing of the index, seconds, as [resex] "
                        "admission_time_constant (default %(default)s)")
    p.add_argument("--hysteresis", type=float, default=0.3,
                   help="--watch: relative hysteresis of the admission state, as [resex] "
                        "admission_hysteresis (default %(default)s)")
    p.add_argument("--sort", choices=("host", "congestion"), default=None,
                   help="order of the hosts (default: host; congestion with --watch)")
    p.add_argument("--watch", type=float, default=None, metavar="SECONDS",
                   help="redraw every SECONDS until interrupted")
    p.add_argument("--count", type=int, default=0, metavar="N",
                   help="--watch: stop after N frames (default: never)")
    p.add_argument("--host", default=None, metavar="NAME",
                   help="show this host's report in full")
    return p


def rows(reports, now, max_age, threshold=10.0, states=None, sort="host"):
    """One dict per host: the report, its age, index, admission and staleness.

    ``states`` maps hosts to their :class:`~resex_libvirt.board.admission.Admission`
    (``--watch`` keeps them from frame to frame); without it each host's
    state starts at its own index. Sorted by host, or by congestion index
    (highest first) with ``sort="congestion"``.
    """
    out = []
    claimed = remote_mod.targets(reports, now, max_age)
    judged = ensembles_mod.judge(reports, now, max_age)
    for host in sorted(reports):
        rec = reports[host]
        row = rec.to_dict()
        age = rec.age(now)
        row["age_s"] = round(age, 3)
        row["congestion_index_pct"] = round(rec.congestion_index, 3)
        row["stale"] = age > max_age
        state = states.get(host) if states is not None else None
        if state is None or state.ts != rec.ts:
            state = admission_mod.start(rec)
        row["admission_index_pct"] = round(state.latched, 3)
        row["admits_sensitive"] = None if row["stale"] else not state.refuses(threshold)
        row["claims_on_host"] = [
            {"from_host": t.host, "victim": t.claim.vm, "peer_vm": t.vm, "peer": t.claim.peer}
            for t in claimed.get(host, ())]
        row["ensembles_judged"] = [
            {"ensemble": g, "worst_member": j.member.vm, "on_host": j.host,
             "over_pct": round(remote_mod.claimed_pct(j.member), 3), "over": j.over}
            for g, j in sorted(judged.items()) if g in {m.ensemble for m in rec.ensembles}]
        out.append(row)
    if sort == "congestion":
        out.sort(key=lambda r: (-r["congestion_index_pct"], r["host"]))
    return out


def _admit(row):
    if row["admits_sensitive"] is None:
        return "-"
    return "open" if row["admits_sensitive"] else "closed"


def table(data):
    """The rows as an aligned text table."""
    lines = [[name for name, _ in COLUMNS]]
    for r in data:
        lines.append([
            r["host"], "%.1f" % r["age_s"], "%.1f" % (100.0 * r["link_utilisation"]),
            "%.1f" % (100.0 * r["untaxable_utilisation"]),
            "%.3g" % r["cpu_price"], "%.3g" % r["io_price"],
            "%.1f" % r["latency_inflation_pct"], "%.1f" % r["congestion_index_pct"],
            _admit(r), str(r["sensitive_vms"]), str(r["heavy_io_vms"]), str(r["vms"]),
            "STALE" if r["stale"] else "ok"])
    widths = [max(len(line[i]) for line in lines) for i in range(len(COLUMNS))]
    return "\n".join(
        "  ".join("%*s" % (-w if align == "<" else w, cell)
                  for cell, w, (_, align) in zip(line, widths, COLUMNS)).rstrip()
        for line in lines)


#: ``--host``: the report's fields in this order, with their meaning.
DETAIL = (
    ("host", "host", "%s"), ("epoch", "epoch", "%s"), ("ts", "published at (unix)", "%.3f"),
    ("age_s", "age, s", "%.1f"), ("stale", "stale", "%s"),
    ("congestion_index_pct", "congestion index, %", "%.2f"),
    ("admits_sensitive", "admits latency-sensitive VMs", "%s"),
    ("link_capacity_bytes_per_s", "link capacity, bytes/s", "%.0f"),
    ("link_utilisation", "link utilisation", "%.4f"),
    ("untaxable_utilisation", "untaxable utilisation", "%.4f"),
    ("cpu_price", "CPU price, Resos per CPU %", "%.4g"),
    ("io_price", "I/O price, Resos per MTU", "%.4g"),
    ("latency_inflation_pct", "latency inflation seen, %", "%.2f"),
    ("inflation_reporters", "sensitive VMs reporting inflation", "%s"),
    ("vms", "VMs", "%s"), ("sensitive_vms", "latency-sensitive VMs", "%s"),
    ("heavy_io_vms", "heavy I/O VMs", "%s"),
    ("sensitive_io_share", "I/O share of sensitive VMs", "%.4f"),
    ("heavy_io_share", "I/O share of heavy I/O VMs", "%.4f"),
    ("agent_version", "agent version", "%s"), ("version", "report version", "%s"),
)


def _project_lines(row):
    """``(label, text)`` of the report's VMs by project (``projects``, report 1.3)."""
    projects = row.get("projects") or []
    if not projects:
        return [("projects", "none known (VMs without a Nova project, or an agent older "
                             "than report 1.3)")]
    lines = [("project %s" % p["project"], "%d VMs, %d latency-sensitive, %d heavy I/O" % (
        p["vms"], p["sensitive_vms"], p["heavy_io_vms"])) for p in projects]
    rest = row["vms"] - sum(p["vms"] for p in projects)
    if rest:
        lines.append(("no listed project", "%d VMs" % rest))
    return lines


def _claim_lines(row):
    """``(label, text)`` of the remote claims the host makes and those made on its VMs."""
    lines = []
    for c in row.get("remote_claims") or []:
        lines.append(("remote claim %s" % c["vm"], "peer %s: %s %.0f us over %d requests, SLA "
                      "%.0f us + %g%%" % (c["peer"], c["statistic"], c["mean_us"]
                                          if c["statistic"] == "mean" else c["p99_us"],
                                          c["count"], c["sla_us"], c["threshold_pct"])))
    for c in row.get("claims_on_host") or []:
        lines.append(("claimed on %s" % c["peer_vm"], "by victim %s on %s (peer %s)"
                      % (c["victim"], c["from_host"], c["peer"])))
    for m in row.get("ensembles") or []:
        lines.append(("ensemble member %s" % m["vm"], "%s: %s %.0f us over %d requests, SLA "
                      "%.0f us + %g%%" % (m["ensemble"], m["statistic"], m["mean_us"]
                                          if m["statistic"] == "mean" else m["p99_us"],
                                          m["count"], m["sla_us"], m["threshold_pct"])))
    for j in row.get("ensembles_judged") or []:
        lines.append(("ensemble %s" % j["ensemble"], "worst member %s on %s %+.0f%%: %s"
                      % (j["worst_member"], j["on_host"], j["over_pct"],
                         "over its bound" if j["over"] else "within its bound")))
    for link, rate in sorted((row.get("link_tx") or {}).items()):
        lines.append(("sent beyond %s" % link, "%.4g Gb/s (counted by destination)"
                      % (rate * 8e-9)))
    return lines


def detail(row, threshold, max_age):
    """One host's report in full, one ``name: value`` line per field, then its projects."""
    lines = []
    for key, label, fmt in DETAIL:
        value = row.get(key)
        if key == "stale":
            text = "yes (older than %gs)" % max_age if value else "no"
        elif key == "admits_sensitive":
            text = ("unknown (stale)" if value is None else
                    "%s (threshold %g%%)" % ("yes" if value else "no, closed", threshold))
        elif value is None:
            text = "-"
        else:
            text = fmt % value
        lines.append((label, text))
    lines.extend(_project_lines(row))
    lines.extend(_claim_lines(row))
    width = max(len(label) for label, _ in lines)
    return "\n".join("%-*s  %s" % (width + 1, label + ":", text) for label, text in lines)


def _read(args, opts):
    """``(reports, rejected)``: the board's valid records and the count of those dropped."""
    with board_mod.open_board(args.url, **opts) as board:
        return board.snapshot(), board.rejected


def _dropped(rejected):
    """The line saying which records were dropped and why, or None when none were."""
    total = sum(rejected.values())
    if not total:
        return None
    return ("%d record(s) dropped (%s): their hosts have no report here nor for the scheduler"
            % (total, ", ".join("%s %d" % (r, n) for r, n in sorted(rejected.items()) if n)))


def _frame(args, reports, states, now, rejected=None):
    """The text of one output (table or one host) from a snapshot; None if host unknown.

    ``rejected``: the records the read dropped, by reason (shown when any).
    """
    rejected = rejected or {}
    sort = args.sort or ("congestion" if args.watch else "host")
    data = rows(reports, now, args.max_age, args.threshold, states, sort)
    url = board_mod.redact(args.url)
    if args.host is not None:
        found = [r for r in data if r["host"] == args.host]
        if not found:
            return None
        if args.json:
            return json.dumps(found[0], indent=2, sort_keys=True)
        return detail(found[0], args.threshold, args.max_age)
    if args.json:
        return json.dumps({"url": url, "max_age_s": args.max_age,
                           "threshold_pct": args.threshold, "hosts": data,
                           "rejected": rejected}, indent=2, sort_keys=True)
    stale = sum(1 for r in data if r["stale"])
    closed = sum(1 for r in data if r["admits_sensitive"] is False)
    dropped = _dropped(rejected)
    return (table(data) + "\n%d hosts, %d stale (older than %gs), %d closed to "
            "latency-sensitive VMs (index above %g%%) on %s"
            % (len(data), stale, args.max_age, closed, args.threshold, url)
            + ("\n" + dropped if dropped else ""))


def _not_found(args, reports):
    return ("resex-board: no report from host %s on %s (hosts: %s)"
            % (args.host, board_mod.redact(args.url), ", ".join(sorted(reports)) or "none"))


def _advance(states, reports, now, args):
    """Follow each host's admission state from frame to frame, as the scheduler does."""
    for host, rec in reports.items():
        state = states.get(host)
        if state is not None and rec.age(now) > args.max_age:
            state = None
        if state is None or rec.ts > state.ts:
            states[host] = admission_mod.advance(state, rec, args.time_constant,
                                                 args.hysteresis)
    for host in set(states) - set(reports):
        del states[host]


def watch(args, opts, out, clock=time.time, sleep=time.sleep):
    """``--watch``: a frame every ``args.watch`` seconds, redrawn in place on a terminal."""
    tty = out.isatty() if hasattr(out, "isatty") else False
    states, reports, rejected, frames = {}, {}, {}, 0
    while True:
        now = clock()
        problem = None
        try:
            reports, rejected = _read(args, opts)
            _advance(states, reports, now, args)
        except exceptions.BoardUnavailable as exc:
            problem = "board unavailable (showing the last read): %s" % exc
        body = _frame(args, reports, states, now, rejected)
        if body is None:
            body = _not_found(args, reports)[len("resex-board: "):]
        head = "resex-board every %gs on %s at %s (Ctrl-C to quit)" % (
            args.watch, board_mod.redact(args.url),
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)))
        lines = [head] + ([problem] if problem else []) + [""] + body.split("\n")
        if tty:
            out.write(HOME + "".join(line + EOL + "\n" for line in lines) + EOS)
        else:
            out.write("\n".join(lines) + "\n\n")
        out.flush()
        frames += 1
        if args.count and frames >= args.count:
            return 0
        # Keep the cadence: the next frame is due one period after this one began.
        sleep(max(0.0, now + args.watch - clock()))


def main(argv=None, out=None):
    out = out or sys.stdout
    parser = _parser()
    args = parser.parse_args(argv)
    if args.watch is not None and args.watch <= 0:
        parser.error("--watch needs a positive number of seconds")
    if args.count < 0:
        parser.error("--count must be >= 0")
    if (args.cert_file is None) != (args.key_file is None):
        parser.error("--cert-file and --key-file go together")
    opts = {"timeout": args.timeout, "create": False}
    for name, value in (("ca_cert", args.ca_cert), ("cert_cert", args.cert_file),
                        ("cert_key", args.key_file)):
        if value is not None:
            opts[name] = value
    if args.prefix:
        opts["prefix"] = args.prefix
    if args.watch is not None:
        # SIGTERM ends the watch as Ctrl-C does: quietly, status 0.
        previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
        try:
            return watch(args, opts, out)
        except KeyboardInterrupt:
            out.write("\n")
            return 0
        except exceptions.ConfigError as exc:
            print("resex-board: %s" % exc, file=sys.stderr)
            return 1
        finally:
            signal.signal(signal.SIGTERM, previous)
    try:
        reports, rejected = _read(args, opts)
    except (exceptions.BoardUnavailable, exceptions.ConfigError) as exc:
        print("resex-board: %s" % exc, file=sys.stderr)
        return 1
    text = _frame(args, reports, None, time.time(), rejected)
    if text is None:
        dropped = _dropped(rejected)
        print(_not_found(args, reports) + ("; " + dropped if dropped else ""),
              file=sys.stderr)
        return 1
    out.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
