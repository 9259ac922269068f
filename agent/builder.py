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

"""Builds the agent and its parts from the configuration (ceilometer's prepare_service).

Only this module knows which concrete adapter a configuration means; the
loop sees interfaces. Building binds nothing and starts nothing: the
:class:`resex_agent.loop.Agent` starts its parts (doc/source/architecture.rst,
"The agent's lifecycle").
"""

import contextlib
import dataclasses
import functools
import logging
import os

from resex_agent import clock as clock_mod
from resex_agent import host_identity
from resex_agent import loop
from resex_agent import metrics as metrics_mod
from resex_agent import peers as peers_mod
from resex_agent import publisher as publisher_mod
from resex_agent import remote
from resex_agent import watchdog
from resex_libvirt import exceptions
from resex_libvirt.fabric import peers as fabric_peers
from resex_libvirt import market as market_mod
from resex_libvirt.market import policy as policy_mod
from resex_libvirt import sla as sla_mod

LOG = logging.getLogger(__name__)

#: Interval and epoch on libvirt when unset (100 ms, 1 s: doc/source/architecture.rst).
LIBVIRT_INTERVAL_S = 0.1
LIBVIRT_EPOCH_S = 1.0


def intervals_per_epoch(interval_s, epoch_s):
    """Whole intervals per epoch, or ConfigError."""
    n = round(epoch_s / interval_s)
    if n < 1 or abs(n * interval_s - epoch_s) > 1e-6 * max(1.0, epoch_s):
        raise exceptions.ConfigError(
            "[agent] epoch (%g s) must be a whole number of intervals (%g s)"
            % (epoch_s, interval_s))
    return n


def build_policy(conf):
    """The ``[market] policy``, from the ``resex.policies`` plugins installed.

    A name that is not installed is a :class:`ConfigError` listing those that
    are. The policy is made with its own option group's values
    (``[market_<policy>]``, :mod:`resex_agent.conf.policies`): a third-party
    policy is configured exactly as a built-in one; one that declares no
    options is made with none.
    """
    from resex_agent.conf import policies as policies_conf
    name = conf.market.policy
    try:
        factory = policy_mod.factory(name)
    except (policy_mod.UnknownPolicy, policy_mod.PolicyLoadError) as exc:
        raise exceptions.ConfigError("[market] policy: %s" % exc) from exc
    try:
        return factory(**policies_conf.policy_options(conf, name, factory))
    except ValueError as exc:
        raise exceptions.ConfigError("[%s] %s" % (policies_conf.group_of(name), exc)) from exc


#: The hypervisor calls that walk every domain: awaited as sweeps (resex_agent.watchdog).
SWEEPS = ("vms", "cpu_times")

#: How long a sweep is awaited, in intervals, before the interval is skipped as late.
SWEEP_WAIT_INTERVALS = 0.5


class _Owned:
    """A part of :class:`Parts`: the value assigned is handed to the parts' exit stack."""

    def __set_name__(self, owner, name):
        self.slot = "_" + name

    def __get__(self, parts, owner=None):
        return self if parts is None else parts.__dict__.get(self.slot)

    def __set__(self, parts, value):
        setattr(parts, self.slot, parts.own(value))


class Parts:
    """The concrete parts of one agent, and the one exit stack that closes them.

    A part is handed to :attr:`closing` (a :class:`contextlib.ExitStack`)
    when it is opened, as it is assigned (``hypervisor``, ``fabric``,
    ``latency_sources``, ``intake``, ``board``, ``metrics``) or with
    :meth:`own`: each is closed once (by identity: the simulated host plays
    three parts), in the reverse order of opening, by :meth:`close`, whether
    the build failed halfway, ``--check`` is done, or the agent that was
    handed the stack shuts down (:meth:`resex_agent.loop.Agent.shutdown`).
    """

    hypervisor = _Owned()
    fabric = _Owned()
    #: The latency source with work of its own (the intake's sockets).
    intake = _Owned()
    board = _Owned()
    metrics = _Owned()
    #: The remote claims on this host's VMs (:mod:`resex_agent.remote`), or None.
    remote = _Owned()
    #: The VMs' bytes per peer (:mod:`resex_agent.peers`), or None.
    peers = _Owned()

    def __init__(self):
        self.closing = contextlib.ExitStack()
        self._owned = set()
        self._latency_sources = []
        self.clock = None
        self.interval_s = None
        self.epoch_s = None
        self.journal = None
        self.publish_policy = None
        self.sim = None
        #: Why the fabric term is off although a source is configured, or ``None``.
        self.fabric_off = None
        #: The libvirt calls' watchdog (its sweep wait follows the interval).
        self.watchdog = None
        #: The VMs' cgroup CPU pressure (PSI), read each epoch as evidence.
        self.pressure = None
        #: Publish from a thread of the publisher's own (the driver runs in
        #: real time) or inline (the simulated host offers every epoch in order).
        self.background_publish = False

    @property
    def latency_sources(self):
        """The latency sources (``windows()``, ``sync(vms)``); assigning owns each."""
        return self._latency_sources

    @latency_sources.setter
    def latency_sources(self, sources):
        self._latency_sources = [self.own(source) for source in sources]

    def own(self, part):
        """Hand ``part`` (its ``close()``) to :attr:`closing`, once; returns it."""
        if part is not None and id(part) not in self._owned:
            self._owned.add(id(part))
            self.closing.callback(_close, part)
        return part

    def close(self):
        """Close every part opened, each once, the last opened first."""
        self.closing.close()


def _close(part):
    try:
        part.close()
    except Exception:
        LOG.exception("error while closing %r", part)


def _simulated(conf, parts):
    from resex_libvirt.sim import host as sim_host
    from resex_libvirt.sim import scenario as scenario_mod
    scenario = scenario_mod.load(conf.sim.scenario)
    if conf.sim.realtime is not None:
        scenario = scenario.with_realtime(conf.sim.realtime)
    sim = sim_host.SimHost(scenario)
    parts.sim = sim
    parts.hypervisor = sim
    parts.fabric = sim
    parts.latency_sources = [sim]
    parts.clock = sim.clock()
    parts.interval_s = scenario.interval_s
    parts.epoch_s = scenario.epoch_s
    # Faster than real time, every epoch's report is offered to the board in order.
    parts.background_publish = False


def _libvirt(conf, parts, read_only=False):
    from resex_agent import fabric as fabric_mod
    from resex_agent import hypervisor as hypervisor_mod
    from resex_agent.intake import server as intake_server
    from resex_agent import journal as journal_mod
    # Every call the loop makes to libvirt (the hypervisor's and the fabric
    # monitor's, which reads interface counters through the same connection)
    # has a bounded wait: a hung libvirtd holds the knobs, never the loop.
    dog = watchdog.Watchdog(conf.agent.hypervisor_call_timeout, name="libvirt")
    parts.watchdog = dog
    hypervisor = hypervisor_mod.build(conf, read_only=read_only)
    # The VM list and the statistics are sweeps: awaited a fraction of an
    # interval, since a domain being created or destroyed holds them 1-2 s.
    # The guarded hypervisor closes the connection, then the watchdog.
    parts.hypervisor = watchdog.Guarded(hypervisor, dog, sweeps=SWEEPS)
    # The interface monitor reads the net.* counters of the hypervisor's own
    # statistics sweep: one getAllDomainStats(INTERFACE) per interval for both.
    monitor = fabric_mod.build(conf, connection=hypervisor.connection.get,
                               bulk_stats=hypervisor.domain_stats)
    # A link whose capacity is unknown turns the fabric term off (read once,
    # here: sysfs only, no libvirt call).
    fabric_monitor, parts.fabric_off = fabric_mod.without_unknown_link(
        monitor, conf.fabric.source)
    parts.fabric = (watchdog.Guarded(fabric_monitor, dog, owns=False)
                    if fabric_monitor is not None else None)
    # Started by the agent (Agent.start), so that building the parts (as
    # --check does) never binds the probe socket of a running agent.
    parts.intake = intake_server.LatencyIntake(conf)
    parts.latency_sources = [parts.intake]
    from resex_libvirt.hypervisor import psi
    parts.pressure = psi.DomainPressure()
    parts.clock = clock_mod.RealClock()
    # In real time the board is written off the loop.
    parts.background_publish = True
    parts.interval_s = LIBVIRT_INTERVAL_S
    parts.epoch_s = LIBVIRT_EPOCH_S
    state_dir = conf.agent.state_dir
    if not read_only:
        try:
            os.makedirs(state_dir, exist_ok=True)
        except OSError as exc:
            raise exceptions.ConfigError("[agent] state_dir %s: %s" % (state_dir, exc)) from exc
    parts.journal = journal_mod.Journal(os.path.join(state_dir, "journal.json"))


def _board(conf, parts, read_only=False):
    """The board, opened now if it can be; else opened when it comes back.

    A board that cannot be opened at start (etcd down, a corrupt SQLite
    file, a read-only directory) does not stop the agent: it controls the
    host locally and publishes once the board opens. A URL that can never
    work (unknown scheme, malformed) is a configuration error.
    """
    from resex_agent.conf import board as board_conf
    from resex_libvirt import board as board_mod
    url = conf.board.url
    options = board_conf.board_options(conf)
    if read_only:
        options["create"] = False     # --check: an absent SQLite board stays absent
    deferred = parts.board = publisher_mod.DeferredBoard(
        lambda: board_mod.open_board(url, **options), url=board_mod.redact(url))
    try:
        deferred.open()
    except exceptions.ConfigError:
        raise
    except exceptions.BoardUnavailable as exc:
        if read_only:
            LOG.debug("price board not available: %s", exc)   # --check says it itself
        else:
            LOG.warning("price board not available at start, controlling locally and "
                        "publishing when it is back: %s", exc)
    parts.publish_policy = board_conf.publish_policy(conf)


def read_topology(path):
    """The shared links of the topology file at ``path`` (None if empty); ConfigError naming it."""
    if not path:
        return None
    from resex_libvirt.board import links as links_mod
    import yaml
    try:
        with open(path, encoding="utf-8") as f:
            return links_mod.parse(yaml.safe_load(f) or {})
    except (OSError, UnicodeDecodeError, yaml.YAMLError, ValueError) as exc:
        raise exceptions.ConfigError(
            "[remote_claims] topology_file %s: %s" % (path, exc)) from exc


def _remote(conf, parts):
    """The remote claims' source: a reader of the board of its own (started with the agent)."""
    from resex_agent.conf import board as board_conf
    if not conf.board.url:
        raise exceptions.ConfigError(
            "[remote_claims] enabled needs [board] url: the claims are read from the board")
    parts.remote = remote.build(conf.agent.host, conf.board.url,
                                board_conf.board_options(conf), conf.remote_claims.max_age,
                                topology=read_topology(conf.remote_claims.topology_file),
                                link_delay_s=conf.remote_claims.link_delay)


def build_parts(conf, read_only=False):
    """The agent's parts from ``conf``; ``read_only`` (``--check``) creates no file.

    A build that fails halfway closes what it had opened, and raises.
    """
    host_identity.refuse_unmarked_simulation(conf.agent.host_driver, conf.agent.host,
                                             conf.board.url)
    parts = Parts()
    try:
        if conf.agent.host_driver == "simulated":
            _simulated(conf, parts)
        else:
            _libvirt(conf, parts, read_only)
        if conf.agent.interval is not None:
            parts.interval_s = conf.agent.interval
        if conf.agent.epoch is not None:
            parts.epoch_s = conf.agent.epoch
        if parts.watchdog is not None:
            parts.watchdog.sweep_wait_s = SWEEP_WAIT_INTERVALS * parts.interval_s
        if conf.board.url:
            _board(conf, parts, read_only)
        if conf.remote_claims.enabled:
            _remote(conf, parts)
        if conf.fabric.count_peers and not read_only:
            parts.peers = peers_mod.PeerRates(
                fabric_peers.PeerCounter(), max(parts.epoch_s, peers_mod.PERIOD_S))
            if parts.remote is not None:
                # With a topology: what the host sends beyond each link, counted.
                parts.remote.peer_rates = parts.peers.rates
    except BaseException:
        parts.close()
        raise
    return parts


def build_agent(conf, parts=None, metrics=None):
    """The :class:`resex_agent.loop.Agent` the configuration describes, with every part it needs.

    ``parts`` (default: :func:`build_parts`) and ``metrics`` (default: the
    ``[metrics]`` endpoint, not bound yet) are handed to the agent, which
    owns them from then on: it starts them (:meth:`~resex_agent.loop.Agent.start`)
    and closes them through the parts' exit stack
    (:meth:`~resex_agent.loop.Agent.shutdown`). When the agent cannot be built,
    the parts are closed here, and the error raised. SIGHUP reloads
    ``conf`` (:func:`reload_market`).
    """
    if parts is None:
        parts = build_parts(conf)
    try:
        return _assemble(conf, parts, metrics)
    except BaseException:
        parts.close()
        raise


def _assemble(conf, parts, metrics):
    parts.metrics = metrics if metrics is not None else metrics_mod.PrometheusMetrics.from_conf(
        conf)
    ipe = intervals_per_epoch(parts.interval_s, parts.epoch_s)
    link = parts.fabric.link() if parts.fabric is not None else None
    pcpus = conf.market.pcpus or parts.hypervisor.pcpus()
    params = market_mod.MarketParams(
        interval_s=parts.interval_s, intervals_per_epoch=ipe, pcpus=pcpus,
        # No fabric term: no I/O supply, the allowance is CPU only.
        link_bytes_per_s=link.capacity_bytes_per_s if link else 0.0,
        mtu=link.mtu if link else 1024,
        cpu_price=conf.market.cpu_price, io_price=conf.market.io_price,
        min_cap_pct=conf.market.min_cap_pct)
    market = market_mod.Market(params, build_policy(conf))
    settings = loop.LoopSettings(
        host=conf.agent.host, interval_s=parts.interval_s, intervals_per_epoch=ipe,
        max_epochs=conf.agent.max_epochs, background_publish=parts.background_publish,
        observe_only=conf.agent.observe_only)
    publisher = None
    if parts.board is not None:
        # Its close sends what is pending; the board itself is closed after it.
        publisher = parts.own(publisher_mod.Publisher(
            parts.board, parts.publish_policy, background=parts.background_publish))
    return loop.Agent(settings, market, parts.hypervisor, parts.fabric,
                      latency_sources=parts.latency_sources, intake=parts.intake,
                      journal=parts.journal, clock=parts.clock, metrics=parts.metrics,
                      publisher=publisher, closing=parts.closing, watchdog=parts.watchdog,
                      reloader=functools.partial(reload_market, conf),
                      shutdown_timeout_s=conf.agent.shutdown_timeout,
                      pressure=parts.pressure, deadband_pct=conf.agent.deadband_pct,
                      consent=consent_of(conf),
                      status_interval_s=conf.latency.status_interval_s, remote=parts.remote,
                      peers=parts.peers)


def consent_of(conf):
    """The operator's consent rule (:class:`resex_libvirt.sla.Consent`) from ``[agent]``.

    ``cap_consent`` with the opt-in lists ``consent_projects`` and ``consent_flavors``.
    """
    return sla_mod.Consent(conf.agent.cap_consent, frozenset(conf.agent.consent_projects),
                           frozenset(conf.agent.consent_flavors))


def reload_market(conf, agent):
    """SIGHUP: re-read the mutable options and apply them to the running agent.

    The policy is rebuilt from ``[market]`` (a policy's state, such as
    IOShares' taxes, starts afresh), prices, the minimum cap and the CPU
    supply are applied to the market from the next interval, the deadband
    to the controller and ``[latency] status_interval_s`` to the loop.
    """
    conf.mutate_config_files()
    # First the policy: a name that is not installed fails the reload before
    # anything else changed.
    policy = build_policy(conf)
    agent.controller.deadband_pct = conf.agent.deadband_pct
    agent.set_status_interval(conf.latency.status_interval_s)
    market = agent.market
    market.set_params(dataclasses.replace(
        market.params, cpu_price=conf.market.cpu_price, io_price=conf.market.io_price,
        min_cap_pct=conf.market.min_cap_pct,
        pcpus=conf.market.pcpus or agent.hypervisor.pcpus()))
    if policy.name != market.policy.name:
        LOG.info("policy changed from %s to %s", market.policy.name, policy.name)
    market.set_policy(policy)
    LOG.info("configuration reloaded")
