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

"""``resex-sim cluster``: the fleet study from the command line.

::

    resex-sim cluster SCENARIO [--json] [--out DIR] [--config NAME ...]
                      [--hosts N] [--duration S] [--seed N] [--board URL]
                      [--calibration-dir DIR] [--recalibrate]

``SCENARIO`` is a packaged fleet scenario (``cluster_default``,
``cluster_large``, ``cluster_small``, ``cluster_traits_10k``,
``cluster_leaf_spine``) or a TOML file. The first run of a
scenario calibrates the host surrogate on the host simulator (about a
minute) and caches the table; ``--recalibrate`` measures it again. A
leaf-spine scenario (:mod:`~resex_research.cluster.leaf_spine`) needs no
calibration and no board: ``--board``, ``--calibration-dir`` and
``--recalibrate`` do not apply to it, and ``--out`` writes only
``cluster.json``.
"""

import json
import logging
import os
import sys

from resex_libvirt import exceptions


def add_parser(sub):
    p = sub.add_parser("cluster", help="the fleet study: configurations placed by nova's "
                                       "own scheduler code over many simulated hosts")
    p.add_argument("scenario", help="packaged fleet scenario name or TOML file")
    p.add_argument("--config", action="append", metavar="NAME",
                   help="run only this configuration (repeatable)")
    p.add_argument("--hosts", type=int, help="override the number of hosts (demand scales)")
    p.add_argument("--duration", type=float, help="override the simulated length (s)")
    p.add_argument("--seed", type=int, help="override the scenario's seed")
    p.add_argument("--board", metavar="URL",
                   help="board for the hosts' reports: sqlite (default: a temporary file "
                        "per configuration), sqlite:///path or etcd3+http://host:port")
    p.add_argument("--calibration-dir", metavar="DIR",
                   help="where the surrogate's table is cached (default ~/.cache/resex-sim)")
    p.add_argument("--recalibrate", action="store_true",
                   help="measure the surrogate's table again")
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")
    p.add_argument("--out", metavar="DIR",
                   help="write cluster.json and the plots violations.png, inflation_cdf.png")
    p.set_defaults(func=cmd_cluster)
    return p


def cmd_cluster(args):
    from resex_libvirt.sim import run_output
    from resex_research.cluster import leaf_spine
    from resex_research.cluster import spec
    from resex_research.cluster import study
    sc = spec.load(args.scenario)
    # nova's ComputeFilter warns on every request about the failed host.
    logging.getLogger("nova").setLevel(logging.ERROR)
    if args.hosts is not None:
        sc = sc.with_hosts(args.hosts)
    if args.duration is not None:
        sc = sc.with_duration(args.duration)
    if args.seed is not None:
        sc = sc.with_seed(args.seed)

    def progress(msg):
        print("  " + msg, file=sys.stderr, flush=True)

    if isinstance(sc, leaf_spine.LeafSpineScenario):
        return _leaf_spine(args, sc, None if args.json else progress)
    data = study.run(sc, configurations=args.config, board=args.board,
                     cache_dir=args.calibration_dir, refresh_calibration=args.recalibrate,
                     progress=None if args.json else progress)
    if args.json:
        print(json.dumps(study.to_dict(data, detail=False), indent=1, sort_keys=True))
    else:
        print(study.format_table(data))
    if args.out:
        try:
            os.makedirs(args.out, exist_ok=True)
        except OSError as exc:
            raise exceptions.ConfigError("cannot create --out %s: %s" % (args.out, exc)) from exc
        run_output.write_json(os.path.join(args.out, "cluster.json"), study.to_dict(data))
        study.write_plots(data, args.out)
        if not args.json:
            print("\nwrote cluster.json, violations.png and inflation_cdf.png to %s" % args.out)
    return 0


def _leaf_spine(args, sc, progress):
    """The leaf-spine study: its own table, ``cluster.json`` under ``--out`` (no plots)."""
    from resex_libvirt.sim import run_output
    from resex_research.cluster import leaf_spine
    data = leaf_spine.run(sc, configurations=args.config, progress=progress)
    if args.json:
        print(json.dumps(leaf_spine.to_dict(data), indent=1, sort_keys=True))
    else:
        print(leaf_spine.format_table(data))
    if args.out:
        try:
            os.makedirs(args.out, exist_ok=True)
        except OSError as exc:
            raise exceptions.ConfigError("cannot create --out %s: %s" % (args.out, exc)) from exc
        run_output.write_json(os.path.join(args.out, "cluster.json"), leaf_spine.to_dict(data))
        if not args.json:
            print("\nwrote cluster.json to %s" % args.out)
    return 0
