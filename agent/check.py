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

"""``resex-agent --check``: is this host ready to run the agent?

:func:`run_check` walks what the agent needs at start, in order, and stops
at the first problem with one clear line saying which part failed and why:

1. **configuration**: every registered option is read (oslo.config parses
   and range-checks values lazily, so a bad value in the file surfaces
   here, not an hour later), then the cross-option rules the agent applies
   at start (the epoch is a whole number of intervals, the policy loads);
   **host**: the name reports go out under, and whether the agent may
   publish it (a simulated host only under a ``sim-`` name, see
   :mod:`agent.host_identity`);
2. **parts**: :func:`agent.builder.build_parts` builds the hypervisor, the
   fabric monitor, the latency intake and the board as the agent would,
   except that the latency probe socket is not bound (the running agent
   owns it: binding it here would take it over);
3. **hypervisor**: the VMs are listed (for libvirt this opens the
   connection: a ``libvirtError`` becomes ``HypervisorUnavailable``);
4. **fabric**: the shared link is described (capacity, MTU), or said to be
   off, with why, when its capacity is neither configured nor discoverable
   (the agent then runs without the fabric term: not a failure);
5. **board**: the board is read once (``count()``; a closed port, a bad
   path or etcd down become ``BoardUnavailable``) and this host's last
   report, if any, is shown with its age;
6. the VMs the agent would control, with their SLA, where it came from,
   their knob mapping and the knob values in force now;
7. latency channels: which VMs that should report latency cannot (no
   virtio-serial controller for the hot-plugged channel), so run without
   latency feedback. The channels themselves are not attached here.

It changes nothing: no knob is written, nothing is published. Returns 0
when every step passed, 1 otherwise.
"""

import logging
import os
import sys
import time

from oslo_config import cfg

from agent import builder
from agent import config_file
from agent import host_identity
from resex_libvirt import exceptions
from resex_libvirt import sla as sla_mod

LOG = logging.getLogger(__name__)

OK = 0
FAILED = 1


class _Failed(Exception):
    """One check step failed; the message is what the operator reads."""

    def __init__(self, part, message):
        super().__init__("%s: %s" % (part, message))
        self.part = part
        self.message = message


def _validate_options(conf):
    """Read every registered option so that parse and range errors surface now.

    Then refuse what the files set and the agent does not know (a
    misspelled section or option would leave the default in force).
    """
    for key in conf:
        try:
            value = conf[key]
        except (cfg.Error, ValueError) as exc:
            raise _Failed("configuration",
                          config_file.describe_error(None, key, exc)) from exc
        if not isinstance(value, cfg.ConfigOpts.GroupAttr):
            continue
        for name in value:
            try:
                value[name]
            except (cfg.Error, ValueError) as exc:
                raise _Failed("configuration",
                              config_file.describe_error(key, name, exc)) from exc
    problems = [str(u) for u in config_file.unknown(conf)]
    problems += ["[%s] %s in %s holds a comment after its value (oslo.config keeps it as "
                 "part of the value): put the comment on a line of its own"
                 % (group, key, os.path.basename(path))
                 for path, group, key in config_file.inline_comments(conf)]
    if problems:
        raise _Failed("configuration", "; ".join(problems))


def _host(conf):
    """The ``host:`` line: the published name and why it may be published."""
    a = conf.agent
    url = conf.board.url
    problem = host_identity.publish_problem(a.host_driver, a.host, url)
    if problem is not None:
        raise _Failed("host", problem)
    if a.host_driver != "simulated":
        return "%s (driver %s: reports this node's real VMs)" % (a.host, a.host_driver)
    if not url:
        return "%s (driver simulated, no board: nothing is published)" % a.host
    return ("%s (driver simulated, marked %r: the board sees a simulated host)"
            % (a.host, host_identity.SIMULATED_PREFIX))


def _part_of(exc):
    if isinstance(exc, exceptions.ConfigError):
        return "configuration"
    if isinstance(exc, exceptions.HypervisorError):
        return "hypervisor"
    if isinstance(exc, exceptions.FabricError):
        return "fabric"
    if isinstance(exc, exceptions.BoardUnavailable):
        return "board"
    return "agent"


def _build(conf):
    # The running agent owns the probe socket: binding it here would take it
    # over (and remove it on close). The intake's other parts still build.
    if conf.latency.probe_socket_path:
        conf.set_override("probe_socket_path", "", group="latency")
    try:
        parts = builder.build_parts(conf, read_only=True)
    except exceptions.ResexError as exc:
        raise _Failed(_part_of(exc), str(exc)) from exc
    except (cfg.Error, ValueError) as exc:
        raise _Failed("configuration", str(exc)) from exc
    finally:
        conf.clear_override("probe_socket_path", group="latency")
    try:
        ipe = builder.intervals_per_epoch(parts.interval_s, parts.epoch_s)
        policy = builder.build_policy(conf)
    except (exceptions.ResexError, ValueError, TypeError) as exc:
        parts.close()
        raise _Failed("configuration", str(exc)) from exc
    return parts, ipe, policy


def _vms(conf, parts):
    try:
        vms = parts.hypervisor.vms()
        pcpus = conf.market.pcpus or parts.hypervisor.pcpus()
    except exceptions.ResexError as exc:
        where = conf.libvirt.connection_uri
        message = str(exc)
        if conf.agent.host_driver == "libvirt" and where and where not in message:
            message = "%s: %s" % (where, message)
        part = "configuration" if isinstance(exc, exceptions.ConfigError) else "hypervisor"
        raise _Failed(part, message) from exc
    return vms, pcpus


def _link(parts):
    if parts.fabric is None:
        return None
    try:
        return parts.fabric.link()
    except exceptions.ResexError as exc:
        raise _Failed("fabric", str(exc)) from exc


def _writable_ancestor(path):
    """Can ``path`` be created: the nearest existing ancestor is a writable directory."""
    path = os.path.abspath(path)
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            return False
        path = parent
    return os.path.isdir(path) and os.access(path, os.W_OK | os.X_OK)


def _not_created_yet(conf):
    """The SQLite board's path when the board is SQLite and its file does not exist yet."""
    from resex_libvirt.board import sqlite as sqlite_board
    url = conf.board.url or ""
    if not url.startswith("sqlite:"):
        return None
    path = sqlite_board.path_of(url)
    if os.path.exists(path):
        return None
    if not _writable_ancestor(os.path.dirname(path)):
        raise _Failed("board", "%s does not exist and its directory cannot be created or "
                               "written" % path)
    return path


def _board(conf, parts, say):
    """The ``board:`` line: not configured, not created yet, or read once."""
    if parts.board is None:
        say("board: not configured (nothing is published for the Nova scheduler)")
        return
    fresh = _not_created_yet(conf)
    if fresh is not None:
        say("board: ok (%s does not exist yet: the agent creates it at start)", fresh)
        return
    try:
        count = parts.board.count()
        mine = parts.board.snapshot().get(conf.agent.host)
    except exceptions.ResexError as exc:
        raise _Failed("board", "%s: %s" % (parts.board.url, exc)) from exc
    say("board: ok (%s, %d host(s); this host: %s)", parts.board.url, count,
        "no report yet" if mine is None
        else "epoch %d, %.0f s old" % (mine.epoch, time.time() - mine.ts))


def _state_dir(conf, say):
    if conf.agent.host_driver != "libvirt":
        return
    path = conf.agent.state_dir
    if os.path.isdir(path):
        if not os.access(path, os.W_OK | os.X_OK):
            raise _Failed("state", "[agent] state_dir %s is not writable" % path)
        say("state: ok (%s)", path)
    elif _writable_ancestor(path):
        say("state: ok (%s does not exist yet: the agent creates it at start)", path)
    else:
        raise _Failed("state", "[agent] state_dir %s does not exist and cannot be created"
                      % path)


def format_sla(sla):
    """``key=value`` pairs of what differs from the defaults, or ``defaults``."""
    specs = sla_mod.to_specs(sla)
    if not specs:
        return "defaults"
    return " ".join("%s=%s" % (k[len(sla_mod.PREFIX):], _fmt(v)) for k, v in sorted(specs.items()))


def _fmt(value):
    if isinstance(value, float) and value.is_integer():
        return "%d" % value
    return "%s" % value


def _knobs(hypervisor, info):
    k = info.knobs
    if not k.actuated:
        return "%s (monitor-only)" % k.driver
    controls = [name for name, on in (("cap", k.cap), ("weight", k.weight)) if on]
    try:
        now = hypervisor.get_knobs(info.uuid)
    except exceptions.ResexError as exc:
        now = "unreadable: %s" % exc
    return "%s %s, now %s" % (k.driver, "+".join(controls), now)


def _channels(vms, say):
    """The latency-channel section: which VMs cannot report latency, and why."""
    blind = sorted((info.name, uuid, info.latency_problem)
                   for uuid, info in vms.items() if info.latency_problem)
    if not blind:
        say("latency channels: ok (every VM that should report latency can)")
        return
    say("latency channels: %d VM(s) cannot report latency and run without latency "
        "feedback:", len(blind))
    for name, uuid, why in blind:
        say("  %s (%s): %s", name, uuid, why)


def run_check(conf, out=sys.stdout):
    """Validate ``conf``, reach the hypervisor and the board, list the VMs.

    ``conf`` is the agent's parsed ``ConfigOpts`` (``agent.resex_agent.make_conf``).
    Writes a report to ``out``; returns 0 when the agent could start and
    control this host, 1 (after an ``ERROR`` line naming the part) when not.
    """
    def say(fmt, *args):
        out.write((fmt % args if args else fmt) + "\n")

    parts = None
    try:
        _validate_options(conf)
        say("host: %s", _host(conf))
        parts, ipe, policy = _build(conf)
        say("configuration: ok (host %s, driver %s, interval %.4g s, epoch %.4g s = %d "
            "intervals, policy %s)", conf.agent.host, conf.agent.host_driver,
            parts.interval_s, parts.epoch_s, ipe, policy.name)
        vms, pcpus = _vms(conf, parts)
        where = (conf.libvirt.connection_uri if conf.agent.host_driver == "libvirt"
                 else "simulated %s" % conf.sim.scenario)
        say("hypervisor: ok (%s, %d running VM(s), %d pCPU)", where, len(vms), pcpus)
        link = _link(parts)
        if parts.fabric_off is not None:
            say("fabric: off (%s; the market charges CPU only until the link's capacity is "
                "known)", parts.fabric_off)
        elif link is None:
            say("fabric: none (the market charges CPU only)")
        else:
            say("fabric: ok (link %s, %.3g Gb/s, MTU %d)", link.name,
                link.capacity_bytes_per_s * 8 / 1e9, link.mtu)
        _state_dir(conf, say)
        _board(conf, parts, say)
        say("VMs the agent would control:" if vms else "VMs the agent would control: none")
        for uuid, info in sorted(vms.items(), key=lambda kv: kv[1].name):
            say("  %s (%s): %d vCPU, cap %g..%g%%, SLA %s from %s, knobs %s",
                info.name, uuid, info.vcpus, info.sla.effective_reservation(info.vcpus),
                info.sla.effective_limit(info.vcpus), format_sla(info.sla),
                info.sla_source, _knobs(parts.hypervisor, info))
        _channels(vms, say)
    except _Failed as exc:
        say("ERROR: %s: %s", exc.part, exc.message)
        return FAILED
    except Exception as exc:
        LOG.debug("check failed", exc_info=True)
        say("ERROR: unexpected %s: %s", type(exc).__name__, exc)
        return FAILED
    finally:
        if parts is not None:
            parts.close()
    say("check passed")
    return OK
