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

"""``python -m resex_nova.check``: is this scheduler ready to read the board?

::

    python -m resex_nova.check --config-file /etc/nova/nova.conf \\
        [--host NAME[,NAME...]]...

Reads nova.conf as nova-scheduler does (``[filter_scheduler]`` and
``[resex]``) and stops at the first problem with one line ``ERROR: <part>:
<reason>``, exit status 1:

1. **filter**: ``ResExCongestionFilter`` is among the classes
   ``available_filters`` loads (nova's own loader; an enabled filter that
   is not available stops nova-scheduler at start) and in
   ``enabled_filters`` (otherwise it never runs);
2. **weigher**: ``ResExCongestionWeigher`` is among the classes
   ``weight_classes`` loads;
3. **board**: ``[resex] board_url`` is read once, as the filter reads it
   (never created), with how many reports are fresh (``max_age``);
4. **hosts**: given the names of Nova's compute services (``--host``, e.g.
   from ``openstack compute service list --service nova-compute -f value
   -c Host``), every host on the board must be one of them: a report under
   another name (an agent's ``[agent] host`` that is not Nova's ``host``)
   is never found by the filter. Compute services with no fresh report are
   listed: the filter treats them as unknown (``unknown_host_policy``).

It changes nothing. Returns 0 when every step passed.
"""

import argparse
import sys
import time

from oslo_config import cfg
import yaml

from resex_libvirt import board as board_mod
from resex_libvirt.board import links as links_mod
from resex_libvirt import exceptions
from resex_nova import conf as conf_mod

FILTER = "ResExCongestionFilter"
WEIGHER = "ResExCongestionWeigher"

OK = 0
FAILED = 1


_Failed = exceptions.CheckFailed


def make_conf(config_files):
    """nova.conf's ``[filter_scheduler]`` and ``[resex]`` groups, read from ``config_files``."""
    from nova.conf import scheduler as nova_scheduler_conf
    conf = cfg.ConfigOpts()
    conf.register_opts(nova_scheduler_conf.filter_scheduler_opts, group="filter_scheduler")
    conf_mod.register_opts(conf)
    args = []
    for path in config_files:
        args += ["--config-file", path]
    conf(args, project="nova", default_config_files=[])
    return conf


def _loaded(handler, paths):
    """The names of the classes nova's loader finds in ``paths``, as nova-scheduler loads them."""
    from nova import exception
    try:
        return {cls.__name__ for cls in handler.get_matching_classes(paths)}
    except (exception.ClassNotFound, ImportError, ValueError) as exc:
        raise _Failed("configuration", "cannot load %s: %s" % (", ".join(paths), exc)) from exc


def _filter(conf, say):
    from nova.scheduler import filters
    fs = conf.filter_scheduler
    available = _loaded(filters.HostFilterHandler(), fs.available_filters)
    enabled = FILTER in fs.enabled_filters
    if FILTER not in available:
        raise _Failed("filter", "%s is not in [filter_scheduler] available_filters (add "
                                "resex_nova.filter.%s)%s" % (
                                    FILTER, FILTER, ": nova-scheduler refuses to start with "
                                    "it enabled" if enabled else ""))
    if not enabled:
        raise _Failed("filter", "%s is available but not in [filter_scheduler] "
                                "enabled_filters: it never runs" % FILTER)
    say("filter: ok (%s available and enabled)", FILTER)


def _weigher(conf, say):
    from nova.scheduler import weights
    if WEIGHER not in _loaded(weights.HostWeightHandler(), conf.filter_scheduler.weight_classes):
        raise _Failed("weigher", "%s is not in [filter_scheduler] weight_classes (add "
                                 "resex_nova.weigher.%s): hosts are not ranked by congestion"
                      % (WEIGHER, WEIGHER))
    say("weigher: ok (%s enabled, multiplier %g)", WEIGHER, conf.resex.weight_multiplier)


def _board(conf, say):
    opts = conf.resex
    url = opts.board_url
    try:
        board = board_mod.open_board(url, **conf_mod.board_options(opts))
        try:
            reports = board.snapshot()
        finally:
            board.close()
    except exceptions.ResexError as exc:
        raise _Failed("board", "[resex] board_url %s: %s" % (board_mod.redact(url), exc)) \
            from exc
    now = time.time()
    fresh = {host for host, r in reports.items() if now - r.ts <= opts.max_age}
    say("board: ok (%s, %d host(s), %d fresh within %g s)", board_mod.redact(url),
        len(reports), len(fresh), opts.max_age)
    return reports, fresh


def _hosts(computes, reports, fresh, say):
    if not computes:
        say("hosts: not compared (give --host with the names of Nova's compute services)")
        return
    strangers = sorted(set(reports) - computes)
    if strangers:
        raise _Failed("hosts", "%d host(s) on the board are not Nova compute services: %s "
                               "(the agent's [agent] host must be nova-compute's host name)"
                      % (len(strangers), ", ".join(strangers)))
    silent = sorted(computes - fresh)
    if silent:
        say("hosts: ok, but %d of %d compute service(s) have no fresh report (treated as "
            "unknown): %s", len(silent), len(computes), ", ".join(silent))
    else:
        say("hosts: ok (every one of %d compute service(s) reports)", len(computes))


def _topology(conf, computes, say):
    """The shared links' file: read and parsed, its hosts compared with Nova's."""
    path = conf.resex.topology_file
    if not path:
        say("links: none declared ([resex] topology_file unset)")
        return
    try:
        with open(path, encoding="utf-8") as f:
            topo = links_mod.parse(yaml.safe_load(f) or {})
    except (OSError, UnicodeDecodeError, yaml.YAMLError, ValueError) as exc:
        raise _Failed("links", "[resex] topology_file %s: %s" % (path, exc)) from exc
    strangers = sorted(set(topo.of_host) - computes) if computes else []
    if strangers:
        raise _Failed("links", "%d host(s) of %s are not Nova compute services: %s"
                      % (len(strangers), path, ", ".join(strangers)))
    say("links: ok (%d shared link(s) over %d host(s) in %s)", len(topo.links),
        len(topo.of_host), path)


def run_check(conf, computes=(), out=None):
    """Check ``conf`` (:func:`make_conf`) and the board against ``computes``; 0 or 1."""
    out = out or sys.stdout

    def say(fmt, *args):
        out.write((fmt % args if args else fmt) + "\n")

    try:
        _filter(conf, say)
        _weigher(conf, say)
        reports, fresh = _board(conf, say)
        _hosts(set(computes), reports, fresh, say)
        _topology(conf, set(computes), say)
    except _Failed as exc:
        say("ERROR: %s: %s", exc.part, exc.message)
        return FAILED
    except (cfg.Error, ValueError) as exc:
        say("ERROR: configuration: %s", exc)
        return FAILED
    say("check passed")
    return OK


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m resex_nova.check",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--config-file", action="append", required=True,
                        help="nova.conf (repeat for more files, as nova-scheduler reads them)")
    parser.add_argument("--host", action="append", default=[],
                        help="a Nova compute service's host name (repeat, or NAME,NAME,...)")
    args = parser.parse_args(argv)
    computes = {name.strip() for value in args.host for name in value.split(",")
                if name.strip()}
    try:
        conf = make_conf(args.config_file)
    except (cfg.Error, OSError) as exc:
        print("python -m resex_nova.check: %s" % exc, file=sys.stderr)
        return 2
    return run_check(conf, computes)


if __name__ == "__main__":
    sys.exit(main())
