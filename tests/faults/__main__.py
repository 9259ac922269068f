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

"""``python -m tests.faults`` (``make faults``): every fault at full length, as a table.

Columns: the fault; control intervals lost (the loop did not run; the
hung-libvirtd rows also say how many it ran holding the knobs); VMs whose
knobs were wrong after recovery; seconds from the end of the fault until the
agent was whole again (see :mod:`tests.faults.harness`). The rows on a
3-member etcd cluster (``-k "etcd cluster"``) say in their note how many
reports were lost, how many reads of a scheduler's reader were stale (a
report older than its bound: always 0) and when it served a new report.

``--soak SECONDS`` (``make soak``) runs the soak instead ("a day in an
hour", :mod:`tests.faults.soak`): the real agent under churn, SIGHUPs and
restarts, its resources sampled and their slopes printed.
"""

import argparse
import logging
import os
import sys

from tests.faults import scenarios


def _row(r):
    lost = "%d" % r.lost + (" (%d held)" % r.held if r.held else "")
    print("  done: %s" % r.fault, file=sys.stderr, flush=True)
    return (r.fault, lost, "%d" % r.wrong, "%.2f s" % r.recovery_s, r.note)


def _print(title, rows):
    head = ("fault", "control intervals lost", "caps wrong after", "recovery time", "note")
    widths = [max(len(str(row[i])) for row in rows + [head]) for i in range(5)]
    line = " | ".join("%%-%ds" % w for w in widths)
    print(title)
    print(line % head)
    print("-+-".join("-" * w for w in widths))
    for row in rows:
        print(line % row)
    print()


def _soak(args):
    if os.geteuid() != 0:
        print("the soak needs root (the lab's libvirtd, guests and cgroups)", file=sys.stderr)
        return 2
    from tests.faults import soak
    from tests.faults import soak_schedule
    plan = soak_schedule.Plan(churn_every_s=args.churn_every, sighup_every_s=args.sighup_every,
                              libvirtd_restarts=args.libvirtd_restarts,
                              etcd_restarts=args.etcd_restarts)
    return soak.run(args.soak, args.out, plan)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tests.faults")
    parser.add_argument("--short", action="store_true", help="the CI lengths")
    parser.add_argument("-k", default="", help="only the faults whose key contains this")
    parser.add_argument("--table", choices=("both", "simulated", "real"), default="both",
                        help="the simulated host's table, the real libvirtd's, or both")
    soak = parser.add_argument_group("the soak (doc/source/operations.rst, \"Soak\")")
    soak.add_argument("--soak", type=float, metavar="SECONDS",
                      help="run the soak for SECONDS instead of the tables (needs root)")
    soak.add_argument("--out", default=os.path.join("lab-results", "soak"),
                      help="where the soak writes soak.json (default: %(default)s)")
    soak.add_argument("--churn-every", type=float, default=5.0, metavar="S",
                      help="a guest created and destroyed every S s (0: never)")
    soak.add_argument("--sighup-every", type=float, default=30.0, metavar="S",
                      help="SIGHUP to the agent every S s (0: never)")
    soak.add_argument("--libvirtd-restarts", type=int, default=2, metavar="N",
                      help="libvirtd restarts spread over the run")
    soak.add_argument("--etcd-restarts", type=int, default=2, metavar="N",
                      help="etcd member restarts spread over the run")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.CRITICAL)
    if args.soak is not None:
        return _soak(args)
    if args.table in ("both", "simulated"):
        rows = []
        for key, fn, ci_kw, full_kw in scenarios.TABLE:
            if args.k not in key:
                continue
            if key == "journal full" and os.geteuid() != 0:
                rows.append((key + " (needs root: skipped)", "-", "-", "-", ""))
                continue
            rows.append(_row(fn(**(ci_kw if args.short else full_kw))))
        _print("The agent on the simulated host:", rows)
    if args.table in ("both", "real"):
        title = "The real agent on a real libvirtd with TCG guests (caps read from libvirt " \
                "and the cgroups):"
        if os.geteuid() != 0:
            print(title + " skipped: the lab needs root\n")
        else:
            from tests.faults import real_libvirt
            _print(title, [_row(r) for r in real_libvirt.run(args.short, args.k)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
