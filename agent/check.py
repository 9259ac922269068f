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
   :mod:`resex_agent.host_identity`); **consent**: who may be capped
   below the limit (``[agent] cap_consent``, ``consent_projects``,
   ``consent_flavors``);
2. **parts**: :func:`resex_agent.builder.build_parts` builds the hypervisor, the
   fabric monitor, the latency intake and the board as the agent would,
   except that the latency probe socket is not bound (the running agent
   owns it: binding it here would take it over);
3. **hypervisor**: the VMs are listed (for libvirt this opens the
   connection: a ``libvirtError`` becomes ``HypervisorUnavailable``);
4. **fabric**: the shared link is described (capacity, MTU), or said to be
   off, with why, when its capacity is neither configured nor discoverable
   (the agent then runs without the fabric term: not a failure);
5. **state, lock, probe socket, metrics**: what the agent would refuse
   at start: a state directory it cannot create or write (a kernel
   filesystem such as ``/proc`` included, where root's ``access(2)`` says
   yes), the host lock held by another agent with another state
   directory, a probe socket directory others could write
   (:func:`resex_agent.intake.server.check_probe_socket_path`), a metrics port
   that cannot be bound. The locks are read from the kernel's table
   (:func:`resex_agent.lock.holder`), never taken: beside the running agent of
   this state directory, its socket and port are its own, not a conflict;
6. **board**: the board is read once (``count()``; a closed port, a bad
   path or etcd down become ``BoardUnavailable``) and this host's last
   report, if any, is shown with its age;
7. the VMs the agent would control, with the caps the market may give
   them under the consent rule (``(did not opt in)``: never below the
   limit), their SLA, where it came from, their knob mapping and the knob
   values in force now;
8. latency channels: which VMs that should report latency cannot (no
   virtio-serial controller for the hot-plugged channel), so run without
   latency feedback. The channels themselves are not attached here.

It changes nothing: no knob is written, nothing is published. Returns 0
when every step passed, 1 otherwise.
"""

import errno
import logging
import os
import re
import shutil
import sys
import time

from oslo_config import cfg

from resex_agent import builder
from resex_agent import config_file
from resex_agent import host_identity
from resex_agent.intake import server as intake_server
from resex_agent import lock as agent_lock
from resex_agent import metrics as metrics_mod
from resex_libvirt.board import ensembles
from resex_libvirt.board import links
from resex_libvirt.board import remote_claims
from resex_libvirt import exceptions
from resex_libvirt.fabric import peers as fabric_peers
from resex_libvirt import sla as sla_mod

LOG = logging.getLogger(__name__)

OK = 0
FAILED = 1


_Failed = exceptions.CheckFailed


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


#: Seconds the check waits for a sweep of the VMs that libvirt holds (a domain
#: being created or destroyed holds every walk of the domain list for 1-2 s).
SWEEP_WAIT_S = 30.0


def _sweep(hypervisor, clock=time.monotonic, sleep=time.sleep):
    """The VMs, waiting out late sweeps (the loop skips an interval; the check waits)."""
    deadline = clock() + SWEEP_WAIT_S
    while True:
        try:
            return hypervisor.vms()
        except exceptions.SampleLate:
            if clock() >= deadline:
                raise
            sleep(0.05)


def _vms(conf, parts):
    try:
        vms = _sweep(parts.hypervisor)
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


def _not_created_yet(conf):
    """The SQLite board's path when the board is SQLite and its file does not exist yet."""
    from resex_libvirt.board import sqlite as sqlite_board
    url = conf.board.url or ""
    if not url.startswith("sqlite:"):
        return None
    path = sqlite_board.path_of(url)
    if os.path.exists(path):
        return None
    problem = _unusable_directory(os.path.dirname(path))
    if problem is not None:
        raise _Failed("board", "%s does not exist and its directory cannot be created or "
                               "written: %s" % (path, problem))
    return path


def _board(conf, parts, say):
    """The ``board:`` line: not configured, not created yet, or read once."""
    if parts.board is None:
        say("board: not configured (nothing is published for the Nova scheduler)")
        return {}
    fresh = _not_created_yet(conf)
    if fresh is not None:
        say("board: ok (%s does not exist yet: the agent creates it at start)", fresh)
        return {}
    try:
        count = parts.board.count()
        snapshot = parts.board.snapshot()
    except exceptions.ResexError as exc:
        raise _Failed("board", "%s: %s" % (parts.board.url, exc)) from exc
    mine = snapshot.get(conf.agent.host)
    say("board: ok (%s, %d host(s); this host: %s)", parts.board.url, count,
        "no report yet" if mine is None
        else "epoch %d, %.0f s old" % (mine.epoch, time.time() - mine.ts))
    return snapshot


def _remote_claims(conf, snapshot, say):
    """The ``remote claims:`` line: off, or on with the claims the board makes on this host."""
    if not conf.remote_claims.enabled:
        say("remote claims: off (this host acts on no other host's victims)")
        return
    found = remote_claims.on_host(conf.agent.host, snapshot, time.time(),
                                  conf.remote_claims.max_age)
    say("remote claims: on (expiry %g s; %d claim(s) on this host's VMs now%s)",
        conf.remote_claims.max_age, len(found),
        "".join(", %s of %s on %s" % (t.claim.vm, t.host, t.vm) for t in found[:3]))
    mine = (snapshot or {}).get(conf.agent.host)
    groups = sorted({m.ensemble for m in mine.ensembles}) if mine is not None else []
    judged = ensembles.judge(snapshot or {}, time.time(), conf.remote_claims.max_age)
    over = [(g, judged[g]) for g in groups
            if g in judged and judged[g].over and judged[g].host != conf.agent.host]
    say("ensembles: this host publishes members of %d; %d over their bound elsewhere%s",
        len(groups), len(over), "".join(
            ", %s (worst member %s on %s %+.0f%%)" % (g, j.member.vm, j.host,
                                                      remote_claims.claimed_pct(j.member))
            for g, j in over[:3]))


def _count_peers(conf, say):
    """The ``bytes per peer:`` line: off, or on with the ``nft`` the agent will run."""
    if not conf.fabric.count_peers:
        say("bytes per peer: off")
        return
    nft = shutil.which("nft")
    if nft is None:
        raise _Failed("bytes per peer", "[fabric] count_peers needs nft (Debian package "
                      "nftables) on the PATH")
    say("bytes per peer: on (%s; the agent needs CAP_NET_ADMIN for its table netdev %s)",
        nft, fabric_peers.TABLE)


def _shared_links(conf, parts, snapshot, say):
    """The ``shared links:`` line: none, unused, or each link this host is behind and its load."""
    path = conf.remote_claims.topology_file
    if not path:
        say("shared links: none ([remote_claims] topology_file unset)")
        return
    if not conf.remote_claims.enabled:
        say("shared links: %s is not used ([remote_claims] enabled is off)", path)
        return
    topo = parts.remote.topology if parts.remote is not None else None
    if topo is None:
        say("shared links: %s declares none this host sends into", path)
        return
    now = time.time()
    fresh = {h: r for h, r in (snapshot or {}).items()
             if not r.blind and r.age(now) <= conf.remote_claims.max_age}
    say("shared links: %s", "; ".join(
        "%s (%.3g Gb/s, %d host(s), %d heard, %.0f%% loaded)" % (
            ld.link.name, ld.link.capacity_bytes_per_s * 8e-9, ld.hosts, ld.heard,
            100.0 * ld.utilisation)
        for ld in (links.load(k, fresh) for k in topo.links_of(conf.agent.host))))


#: Kernel filesystems: a directory there cannot hold the agent's files
#: (root's ``access(2)`` says "writable" all the same).
KERNEL_FILESYSTEMS = frozenset((
    "proc", "sysfs", "cgroup", "cgroup2", "devpts", "securityfs", "debugfs", "tracefs",
    "bpf", "pstore", "mqueue", "configfs", "efivarfs", "fusectl", "binfmt_misc", "nsfs",
    "autofs", "rpc_pipefs"))

MOUNTINFO = "/proc/self/mountinfo"


def _filesystem_of(path, mountinfo=MOUNTINFO):
    """The type of the filesystem ``path`` (which exists) is on, or ``None`` if unknown."""
    real = os.path.realpath(path)
    best, kind = "", None
    try:
        with open(mountinfo) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        left, _sep, right = line.partition(" - ")
        fields = left.split()
        if len(fields) < 5 or not right:
            continue
        mount = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
        inside = real == mount or real.startswith(mount.rstrip("/") + "/")
        # The last of equal mount points is the one on top.
        if inside and len(mount) >= len(best):
            best, kind = mount, right.split()[0]
    return kind


def _unusable_directory(path):
    """Why the agent could not write in or create the directory ``path``, or ``None``."""
    path = os.path.abspath(path)
    existing = path
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    kind = _filesystem_of(existing)
    if kind in KERNEL_FILESYSTEMS:
        return "%s is on %s, a kernel filesystem" % (existing, kind)
    if not os.path.isdir(existing):
        return "%s is not a directory" % existing
    if not os.access(existing, os.W_OK | os.X_OK):
        return "%s is not writable" % existing
    return None


def _state_dir(conf, say):
    path = conf.agent.state_dir
    problem = _unusable_directory(path)
    if problem is not None:
        raise _Failed("state", "[agent] state_dir %s cannot hold the journal and the lock: %s"
                      % (path, problem))
    if os.path.isdir(path):
        say("state: ok (%s)", path)
    else:
        say("state: ok (%s does not exist yet: the agent creates it at start)", path)


def _locks(conf, say):
    """The ``lock:`` line: a running agent, or the host lock another agent holds.

    Returns the PID of the agent running on this state directory, or ``None``.
    """
    mine = os.path.join(os.path.abspath(conf.agent.state_dir), agent_lock.LOCK_NAME)
    host = conf.agent.host_lock_path or agent_lock.host_lock_path(conf.libvirt.connection_uri)
    problem = _unusable_directory(os.path.dirname(host))
    if problem is not None:
        raise _Failed("lock", "the host lock %s cannot be created: %s (see [agent] "
                              "host_lock_path)" % (host, problem))
    running, other = agent_lock.holder(mine), agent_lock.holder(host)
    if other is not None and other != running:
        raise _Failed("lock", "another resex-agent (pid %d) holds the host lock %s with "
                              "another state directory: this one would refuse to start"
                      % (other, host))
    if running is None:
        say("lock: ok (no agent runs on this host)")
    else:
        say("lock: ok (the agent runs, pid %d: what it holds is not checked again)", running)
    return running


def _probe_socket(conf, say):
    path = conf.latency.probe_socket_path
    if not path:
        say("probe socket: off (per-VM channels only)")
        return
    problem = _unusable_directory(os.path.dirname(path))
    try:
        if problem is not None:
            raise exceptions.ConfigError("probe socket directory %s cannot be created: %s"
                                         % (os.path.dirname(path), problem))
        intake_server.check_probe_socket_path(path)
    except exceptions.ConfigError as exc:
        raise _Failed("probe socket", "[latency] probe_socket_path: %s" % exc) from exc
    say("probe socket: ok (%s)", path)


def _metrics(conf, running, say):
    endpoint = metrics_mod.PrometheusMetrics.from_conf(conf)
    if endpoint is None:
        say("metrics: off")
        return
    where = "%s port %d" % (endpoint.bind_address, endpoint.port)
    try:
        endpoint.check_address()
    except exceptions.ConfigError as exc:
        cause = exc.__cause__
        in_use = isinstance(cause, OSError) and cause.errno == errno.EADDRINUSE
        if running is None or not in_use:
            raise _Failed("metrics", str(exc)) from exc
        say("metrics: ok (%s, served by the running agent)", where)
        return
    say("metrics: ok (%s is free)", where)


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

    ``conf`` is the agent's parsed ``ConfigOpts`` (``resex_agent.resex_agent.make_conf``).
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
        consent = builder.consent_of(conf)
        say("consent: %s", consent.describe())
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
        _count_peers(conf, say)
        running = None
        if conf.agent.host_driver == "libvirt":
            _state_dir(conf, say)
            running = _locks(conf, say)
            _probe_socket(conf, say)
        _metrics(conf, running, say)
        snapshot = _board(conf, parts, say)
        _remote_claims(conf, snapshot, say)
        _shared_links(conf, parts, snapshot, say)
        say("VMs the agent would control:" if vms else "VMs the agent would control: none")
        for uuid, info in sorted(vms.items(), key=lambda kv: kv[1].name):
            applied = consent(info.sla, project=info.project, flavor=info.flavor)
            say("  %s (%s): %d vCPU, cap %g..%g%%%s, SLA %s from %s, knobs %s%s",
                info.name, uuid, info.vcpus, applied.effective_reservation(info.vcpus),
                applied.effective_limit(info.vcpus),
                "" if applied is info.sla else " (did not opt in)", format_sla(info.sla),
                info.sla_source, _knobs(parts.hypervisor, info),
                ", ensemble %s" % info.ensemble if info.ensemble else "")
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
