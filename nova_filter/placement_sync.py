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

"""``resex-placement-sync``: the board's admission state as the trait CUSTOM_RESEX_CLOSED.

::

    resex-placement-sync --config-file /etc/resex/resex-placement-sync.conf [--once]

One per region, beside nova-scheduler. It follows the price board with the
scheduler's own reader (:class:`resex_libvirt.board.reader.BoardReader`:
the watch, each host's smoothed and latched congestion index) and keeps
``CUSTOM_RESEX_CLOSED`` on each compute node's resource provider where the
filter would refuse a request of the default threshold
(:mod:`resex_nova.traits`: the rule, the hysteresis, the policy for hosts
without a fresh report). A flavor with ``trait:CUSTOM_RESEX_CLOSED=forbidden``
is then kept off those nodes by Placement, before nova's
``max_placement_results`` cut, and by any scheduler that reads Placement.

**Calls, and only when needed** (:class:`TraitSync`):

* at start, and every ``[placement_sync] reconcile_interval``, a
  **reconciliation**: two listings (providers with the trait, providers
  with ``CUSTOM_RESEX_MANAGED``) compared with the board, and a write for
  each node that differs. A restarted service resumes from there: the
  board's snapshot and the traits Placement holds (the trait is the
  hysteresis' memory, so no node inside the band flips on a restart);
* between them, a write only for a node whose decision changed (board
  changes wake the loop; staleness is checked every second, locally);
* each write reads the provider's traits and generation and puts the whole
  set back with that generation, re-reading on 409
  (:meth:`resex_nova.placement.PlacementClient.set_trait`): no trait but
  its own is ever added or removed;
* a token bucket (``max_calls_per_second``) paces every call; each
  reconciliation logs the calls made so far by method and status.

**Metrics** (:mod:`resex_nova.sync_metrics`), when ``[placement_sync]
metrics_port`` is set: the calls by method and outcome, the traits set and
cleared, the 409s, the reconciliations and their duration, the time since
the last good one, the hosts without a provider and the token bucket's waits.

**A trait removed by someone else** (nova-compute's periodic update writes
a provider's whole trait set; an operator) is found at the next
reconciliation and written back; the service logs for how long it was
missing at most (since the reconciliation that last saw it).

**Placement unreachable** (or Keystone, or failing): the error is logged
once at WARNING, the traits already written stay as they are, the service
keeps following the board and retries with a backoff doubling up to
``retry_max_interval``; when Placement answers again it logs so at INFO and
reconciles every host. It never exits on a Placement error. **The board
unreachable**: no trait changes until the board is back (the service is
blind, not the hosts).
"""

import logging
import signal
import sys
import threading
import time

from keystoneauth1 import exceptions as ks_exc
from keystoneauth1 import loading as ks_loading
from oslo_config import cfg
from oslo_log import log as oslo_log

from resex_libvirt.board import links as links_mod
from resex_libvirt.board import reader as reader_mod
from resex_libvirt import exceptions
from resex_nova import conf as resex_conf
from resex_nova import placement as placement_mod
from resex_nova import sync_conf
from resex_nova import sync_metrics
from resex_nova import topology as topology_mod
from resex_nova import traits as traits_mod

LOG = logging.getLogger(__name__)

#: Seconds between two local checks of every host (staleness needs no event).
EVALUATE_INTERVAL = 1.0
#: Shortest gap, in seconds, between two passes (a busy board wakes the loop often).
MIN_PASS_INTERVAL = 0.2
#: First wait after a Placement failure, doubled up to ``retry_max_interval``.
FIRST_RETRY = 1.0


class TraitSync:
    """Keeps ``CUSTOM_RESEX_CLOSED`` in step with ``reader`` through ``client``.

    ``reader`` is a started :class:`~resex_libvirt.board.reader.BoardReader`
    (its ``on_change`` should call :meth:`changed`); ``client`` a
    :class:`~resex_nova.placement.PlacementClient`. The other arguments are
    the ``[resex]`` and ``[placement_sync]`` options of the same names;
    ``metrics`` a :class:`~resex_nova.sync_metrics.SyncMetrics` (or the
    default :class:`~resex_nova.sync_metrics.NullMetrics`).
    State (all in memory; a restart rebuilds it from Placement and the
    board): ``known`` (every host seen on the board or in Placement's
    listings), ``actual`` (host -> the trait as last read or written),
    ``seen`` (host -> when the trait was last seen or written present).
    """

    def __init__(self, reader, client, threshold=10.0, hysteresis=0.3, max_age=60.0,
                 unknown_policy=traits_mod.UNKNOWN_CLOSED, reconcile_interval=60.0,
                 retry_max_interval=60.0, provider_names=None, clock=time.time,
                 monotonic=time.monotonic, stop_event=None, metrics=None, topology_file=None):
        self.reader = reader
        self.topology_file = topology_file
        self._topologies = topology_mod.Topologies()
        self._links = {}            # host -> the Load of its most congested link, last pass
        self.metrics = metrics or sync_metrics.NullMetrics()
        self.client = client
        self.threshold = float(threshold)
        self.hysteresis = float(hysteresis)
        self.max_age = float(max_age)
        self.unknown_policy = unknown_policy
        self.reconcile_interval = float(reconcile_interval)
        self.retry_max_interval = float(retry_max_interval)
        self._names = dict(provider_names or {})
        self._hosts_of = {name: host for host, name in self._names.items()}
        self._clock = clock
        self._monotonic = monotonic
        self.stop_event = stop_event or threading.Event()
        self._wake = threading.Event()
        self.known = set()
        self.actual = {}
        self.seen = {}
        self._lost = {}
        self._uuids = {}
        self._missing = set()
        self._warned = set()
        self._trait_ready = False
        self._next_reconcile = 0.0
        self._retry_at = None
        self._backoff = 0.0
        self._failing_since = None
        self.stats = {"set": 0, "cleared": 0, "restored": 0, "conflicts": 0,
                      "reconciliations": 0, "max_missing_s": 0.0}

    # -- names ----------------------------------------------------------------------
    def provider_name(self, host):
        return self._names.get(host, host)

    def host_of(self, provider):
        return self._hosts_of.get(provider, provider)

    # -- the loop ---------------------------------------------------------------------
    def changed(self, records):
        """The reader's ``on_change``: board records arrived; wake the loop."""
        self._wake.set()

    def stop(self):
        self.stop_event.set()
        self._wake.set()

    def run(self):
        """Pass after pass until :meth:`stop`; never raises on a Placement or board error."""
        while not self.stop_event.is_set():
            delay = self.step()
            self._wake.wait(max(delay, 0.0))
            self._wake.clear()
            self.stop_event.wait(MIN_PASS_INTERVAL)

    def step(self):
        """One pass: a reconciliation when due, else the local check. Seconds to the next."""
        now = self._monotonic()
        if self._retry_at is not None and now < self._retry_at:
            return self._retry_at - now
        try:
            if now >= self._next_reconcile:
                self._timed_reconcile()
                self._next_reconcile = self._monotonic() + self.reconcile_interval
            else:
                self.evaluate()
        except placement_mod.PlacementError as exc:
            return self._placement_failed(exc)
        except (ValueError, KeyError, TypeError) as exc:
            # A body Placement should not have sent: as good as unreachable.
            return self._placement_failed(placement_mod.PlacementError(
                "unexpected answer: %r" % exc))
        self._placement_answered()
        return min(EVALUATE_INTERVAL, self._next_reconcile - self._monotonic())

    def _timed_reconcile(self):
        started = self._monotonic()
        try:
            self.reconcile()
        except Exception:
            self.metrics.reconciled(self._monotonic() - started, False)
            raise
        self.metrics.reconciled(self._monotonic() - started, True)

    def _placement_failed(self, exc):
        self.metrics.failing(True)
        self._backoff = min(self.retry_max_interval,
                            self._backoff * 2.0 if self._backoff else FIRST_RETRY)
        self._retry_at = self._monotonic() + self._backoff
        if self._failing_since is None:
            self._failing_since = self._monotonic()
            LOG.warning("Placement failed: %s; the traits stay as last written, the board is "
                        "still followed, retrying in %.0f s (backing off up to %.0f s)",
                        exc, self._backoff, self.retry_max_interval)
        else:
            LOG.debug("Placement still failing: %s; next attempt in %.0f s", exc,
                      self._backoff)
        return self._backoff

    def _placement_answered(self):
        self.metrics.failing(False)
        self._retry_at = None
        self._backoff = 0.0
        if self._failing_since is not None:
            LOG.info("Placement answers again after %.0f s; reconciling every host",
                     self._monotonic() - self._failing_since)
            self._failing_since = None
            self._next_reconcile = 0.0

    # -- decisions ---------------------------------------------------------------------
    def _board_blind(self):
        return self.reader.failing or self.reader.loaded_at is None

    def desired(self, now=None):
        """``{host: True/False/None}`` for every host known from the board or Placement."""
        now = self._clock() if now is None else now
        blind = self._board_blind()
        snapshot = self.reader.snapshot(now)
        self.known.update(snapshot)
        self._links = self._worst_links(snapshot)
        return {host: traits_mod.closed(
            self.reader.entry(host, now), self.actual.get(host), now, self.max_age,
            self.threshold, self.hysteresis, self.unknown_policy, board_failing=blind,
            link_pct=self._link_pct(host))
            for host in self.known}

    def _worst_links(self, snapshot):
        """``{host: Load}``: each host's most congested shared link (none without a topology)."""
        topo = self._topologies(self.topology_file) if self.topology_file else None
        if topo is None or not topo.links:
            return {}
        return links_mod.worst_by_host(topo, links_mod.loads(topo, snapshot))

    def _link_pct(self, host):
        load = self._links.get(host)
        return load.congestion_pct if load is not None else None

    def evaluate(self, now=None):
        """Write the trait of every host whose decision differs from Placement's state."""
        now = self._clock() if now is None else now
        writes = traits_mod.changes(self.desired(now), self.actual)
        for host in sorted(writes):
            self.write(host, writes[host], now)
        return writes

    def reconcile(self):
        """Read what Placement holds, then write every difference (a restart starts here)."""
        if not self._trait_ready:
            self.client.ensure_trait(traits_mod.CLOSED)
            self._trait_ready = True
        closed = self.client.providers(required=traits_mod.CLOSED)
        managed = self.client.providers(required=traits_mod.MANAGED)
        self._uuids.update(closed)
        self._uuids.update(managed)
        self._missing.clear()
        now = self._clock()
        closed_hosts = {self.host_of(name) for name in closed}
        self.known.update(closed_hosts, (self.host_of(name) for name in managed))
        for host in self.known:
            present = host in closed_hosts
            if present:
                self.seen[host] = now
            elif self.actual.get(host) and host in self.seen:
                self._lost[host] = self.seen[host]
            self.actual[host] = present
        writes = self.evaluate(now)
        for host in [h for h in self._lost if h not in writes]:
            del self._lost[host]
        self.stats["reconciliations"] += 1
        self.metrics.without_provider(len(self._missing))
        LOG.info("reconciled %d hosts (%d closed in Placement, %d managed): %d written; "
                 "Placement calls so far: %s", len(self.known), len(closed), len(managed),
                 len(writes), self.client.calls_summary())

    # -- writing -------------------------------------------------------------------------
    def _uuid(self, host):
        name = self.provider_name(host)
        uuid = self._uuids.get(name)
        if uuid is None:
            if host in self._missing:
                return None  # asked again at the next reconciliation
            uuid = self.client.providers(name=name).get(name)
            if uuid is None:
                self._missing.add(host)
                self.metrics.without_provider(len(self._missing))
                if host not in self._warned:
                    self._warned.add(host)
                    LOG.warning("host %s: no resource provider named %s in Placement; its "
                                "trait is not kept (set [placement_sync] provider_names if "
                                "its hypervisor_hostname is not %s)", host, name, host)
                return None
            self._uuids[name] = uuid
            self._warned.discard(host)
        return uuid

    def _why(self, host, closed, now):
        entry = self.reader.entry(host, now)
        if not traits_mod.fresh(entry, now, self.max_age):
            return "no fresh report (unknown_host_policy=%s)" % self.unknown_policy
        load = self._links.get(host)
        if load is not None and closed and load.congestion_pct > entry.admission.smoothed:
            return "shared link %s at %.1f%% (%d of %d hosts heard) > %.1f%%" % (
                load.link.name, load.congestion_pct, load.heard, load.hosts, self.threshold)
        return "admission index %.1f%% %s %.1f%%" % (
            entry.admission.smoothed, ">" if closed else "<=",
            self.threshold if closed else (1.0 - self.hysteresis) * self.threshold)

    def write(self, host, closed, now):
        """Set (``closed``) or clear the trait on ``host``'s provider; state only on success."""
        uuid = self._uuid(host)
        if uuid is None:
            return False
        try:
            written, conflicts = self.client.set_trait(uuid, traits_mod.CLOSED, closed)
        except placement_mod.ProviderGone:
            LOG.warning("host %s: its resource provider %s is gone; forgetting it", host, uuid)
            self._uuids.pop(self.provider_name(host), None)
            self.known.discard(host)
            self.actual.pop(host, None)
            self.seen.pop(host, None)
            return False
        except placement_mod.Conflict as exc:
            self.stats["conflicts"] += placement_mod.CONFLICT_ATTEMPTS
            self.metrics.conflicts(placement_mod.CONFLICT_ATTEMPTS)
            LOG.warning("host %s: %s; retried at the next pass", host, exc)
            return False
        self.stats["conflicts"] += conflicts
        self.metrics.conflicts(conflicts)
        self.actual[host] = closed
        if closed:
            self.seen[host] = self._clock()
        if written:
            self.stats["set" if closed else "cleared"] += 1
            self.metrics.trait_written(closed)
            LOG.info("host %s: %s %s (%s)%s", host, traits_mod.CLOSED,
                     "set" if closed else "cleared", self._why(host, closed, now),
                     " after %d conflict(s)" % conflicts if conflicts else "")
        self._restored(host, closed)
        return True

    def _restored(self, host, closed):
        last_seen = self._lost.pop(host, None)
        if last_seen is None or not closed:
            return
        missing = self._clock() - last_seen
        self.stats["restored"] += 1
        self.metrics.restored()
        self.stats["max_missing_s"] = max(self.stats["max_missing_s"], missing)
        LOG.warning("host %s: %s was removed by another writer (nova-compute's update or an "
                    "operator) and is back: missing for at most %.1f s (seen at the "
                    "reconciliation %.1f s before this one)", host, traits_mod.CLOSED,
                    missing, missing)


# -- the service ----------------------------------------------------------------------------

def make_conf(argv):
    """``[resex]``, ``[placement_sync]`` and oslo.log's options, read from ``argv``."""
    conf = cfg.ConfigOpts()
    resex_conf.register_opts(conf)
    sync_conf.register_opts(conf)
    oslo_log.register_options(conf)
    conf.register_cli_opt(cfg.BoolOpt(
        "once", default=False,
        help="Reconcile every host once, then exit (0 when Placement answered)."))
    conf(argv, project="resex", prog="resex-placement-sync", default_config_files=[])
    return conf


def placement_client(conf, wait=None, metrics=None):
    """A :class:`~resex_nova.placement.PlacementClient` from ``[placement_sync]``."""
    group = sync_conf.GROUP
    try:
        auth = ks_loading.load_auth_from_conf_options(conf, group)
    except ks_exc.ClientException as exc:
        raise exceptions.ConfigError("[placement_sync] credentials: %s" % exc) from exc
    if auth is None:
        raise exceptions.ConfigError(
            "[placement_sync] needs credentials: set auth_type (e.g. password) and its "
            "options (auth_url, username, password, project_name, ...)")
    session = ks_loading.load_session_from_conf_options(conf, group, auth=auth)
    adapter = ks_loading.load_adapter_from_conf_options(conf, group, session=session,
                                                        auth=auth)
    limiter = placement_mod.RateLimiter(conf.placement_sync.max_calls_per_second)
    return placement_mod.PlacementClient(adapter, limiter=limiter, wait=wait,
                                         metrics=metrics)


def build(conf):
    """The :class:`TraitSync` of ``conf`` with its (not yet started) board reader."""
    opts, sync = conf.resex, conf.placement_sync
    holder = []
    reader = reader_mod.BoardReader(
        opts.board_url, max_age=opts.max_age, refresh_interval=opts.refresh_interval,
        load_timeout=opts.first_load_timeout, mode=opts.board_read_mode,
        tau=opts.admission_time_constant, hysteresis=opts.admission_hysteresis,
        board_opts=resex_conf.board_options(opts),
        on_change=lambda records: holder and holder[0].changed(records))
    stop = threading.Event()
    metrics = sync_metrics.from_conf(conf)
    client = placement_client(conf, wait=stop.wait, metrics=metrics)
    service = TraitSync(reader, client, threshold=opts.congestion_threshold,
                        hysteresis=opts.admission_hysteresis, max_age=opts.max_age,
                        unknown_policy=sync.unknown_host_policy,
                        reconcile_interval=sync.reconcile_interval,
                        retry_max_interval=sync.retry_max_interval,
                        provider_names=sync.provider_names, stop_event=stop,
                        metrics=metrics, topology_file=opts.topology_file)
    holder.append(service)
    return service


def serve(service, once=False):
    """Start the reader, then one reconciliation (``once``) or the loop until stopped.

    The metrics endpoint (if any) serves while the loop runs; ``once``
    starts none.
    """
    if not once:
        service.metrics.start()
    service.reader.start()
    try:
        if once:
            service.step()
            return 0 if service.stats["reconciliations"] else 1
        LOG.info("resex-placement-sync: following %s, %s on nodes whose admission index "
                 "passes %.1f%% (unknown hosts: %s)", service.reader.url, traits_mod.CLOSED,
                 service.threshold, service.unknown_policy)
        service.run()
        return 0
    finally:
        service.reader.stop()
        service.metrics.close()


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        conf = make_conf(argv)
        oslo_log.setup(conf, "resex-placement-sync")
        service = build(conf)
        if not conf.once:
            service.metrics.start()  # a port it cannot bind is a configuration error
    except (cfg.Error, exceptions.ConfigError, OSError) as exc:
        print("resex-placement-sync: %s" % exc, file=sys.stderr)
        return 2
    if not conf.once:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: service.stop())
    return serve(service, once=conf.once)


if __name__ == "__main__":
    sys.exit(main())
