"""The agent's Prometheus endpoint: what the market does, per VM and per host.

:class:`PrometheusMetrics` is the metrics sink of :class:`agent.loop.Agent`
(``observe_interval`` every control interval, ``observe_epoch`` every
epoch). It owns its own ``CollectorRegistry`` (never the process-global
one, so two agents in one process, or a test, do not collide) and serves it
over HTTP on a daemon thread (``prometheus_client.start_http_server``).

Names follow the Prometheus conventions (https://prometheus.io/docs/practices/naming/):
``resex_`` prefix, base units (seconds, bytes), ``_ratio`` for fractions
(so a CPU cap of 50 % of one pCPU is ``0.5``, and 1.5 for a 2-vCPU VM allowed
150 %), ``_total`` for counters, labels ``vm`` (the domain's name) and
``uuid`` (the domain's UUID: the Nova instance UUID on OpenStack).

Per VM, updated every interval:

``resex_vm_cpu_cap_ratio``
    The cap the market decided, in pCPUs (paper: the Xen credit cap / 100).
``resex_vm_weight``
    The credit-scheduler weight (Xen scale, 256 by default).
``resex_vm_reso_balance``
    Resos left this epoch (paper VI-A).
``resex_vm_charge_rate``
    The charging-rate multiplier (1 = base prices; IOShares raises the
    interferer's, paper Algorithm 2 ``r'``).
``resex_vm_cpu_usage_ratio``
    CPU used in the last interval, in pCPUs.
``resex_vm_transmit_mtus_per_second``
    MTUs sent in the last interval, per second (the market's I/O unit).
``resex_vm_transmit_mtus_total`` / ``resex_vm_transmit_bytes_total``
    Counters of what the VM sent since the agent started.
``resex_vm_latency_mean_seconds`` / ``resex_vm_latency_p99_seconds``
    The VM's latency window (only VMs that report latency).
``resex_vm_interference_ratio``
    The window's interference over the VM's base (Algorithm 2 line 6), as a
    fraction (0.1 = 10 %); only latency-sensitive VMs with a window.
``resex_vm_info``
    Always 1; labels ``sla_source``, ``knobs``, ``io_class``, ``monitor_only``.

Per host, updated every epoch: ``resex_cpu_price`` and ``resex_io_price``
(Resos actually charged per CPU percent and per MTU, averaged over the
epoch), ``resex_link_utilisation_ratio``, ``resex_latency_inflation_ratio``,
``resex_congestion_index`` (the board's index, in percent like nova.conf's
``[resex] congestion_threshold``, computed by
:func:`resex_libvirt.board.report.congestion_index`), ``resex_vms``,
``resex_epochs_total``, ``resex_intervals_total``, ``resex_loop_late_total``.

``observe_interval`` runs every 1 to 100 ms: it only sets gauges through
label children cached per VM (no label lookup, no dict built per call).
"""

import logging
import time

import prometheus_client

from resex_libvirt import exceptions

LOG = logging.getLogger(__name__)

_VM_LABELS = ("vm", "uuid")
_INFO_LABELS = _VM_LABELS + ("sla_source", "knobs", "io_class", "monitor_only")


class _VMChildren:
    """The label children of one VM's metrics, looked up once."""

    __slots__ = ("key", "info_key", "cap", "weight", "balance", "rate", "cpu", "mtu_rate",
                 "mtus", "bytes", "lat_mean", "lat_p99", "intf", "has_latency", "has_intf")

    def __init__(self, metrics, key):
        self.key = key
        self.info_key = None
        self.cap = metrics.vm_cap.labels(*key)
        self.weight = metrics.vm_weight.labels(*key)
        self.balance = metrics.vm_balance.labels(*key)
        self.rate = metrics.vm_charge_rate.labels(*key)
        self.cpu = metrics.vm_cpu.labels(*key)
        self.mtu_rate = metrics.vm_mtu_rate.labels(*key)
        self.mtus = metrics.vm_mtus.labels(*key)
        self.bytes = metrics.vm_bytes.labels(*key)
        self.lat_mean = None
        self.lat_p99 = None
        self.intf = None
        self.has_latency = False
        self.has_intf = False


class PrometheusMetrics:
    """The agent's metrics sink, served on ``bind_address``:``port``.

    Build it, :meth:`start` it (the agent's CLI does both through
    :meth:`from_conf`), pass it as ``metrics=`` to :class:`agent.loop.Agent`,
    and :meth:`close` it at exit.
    """

    def __init__(self, bind_address="127.0.0.1", port=9779, registry=None):
        self.bind_address = bind_address
        self.port = port
        self.registry = registry if registry is not None else prometheus_client.CollectorRegistry()
        self._server = None
        self._thread = None
        self._vms = {}
        self._last_late = 0
        r = self.registry
        G, C = prometheus_client.Gauge, prometheus_client.Counter
        self.vm_cap = G("resex_vm_cpu_cap_ratio",
                        "CPU cap decided by the market, in pCPUs (Xen cap / 100)",
                        _VM_LABELS, registry=r)
        self.vm_weight = G("resex_vm_weight", "Credit-scheduler weight (Xen scale, 256 default)",
                           _VM_LABELS, registry=r)
        self.vm_balance = G("resex_vm_reso_balance", "Resos left this epoch",
                            _VM_LABELS, registry=r)
        self.vm_charge_rate = G("resex_vm_charge_rate",
                                "Charging-rate multiplier (1 = base prices)",
                                _VM_LABELS, registry=r)
        self.vm_cpu = G("resex_vm_cpu_usage_ratio", "CPU used in the last interval, in pCPUs",
                        _VM_LABELS, registry=r)
        self.vm_mtu_rate = G("resex_vm_transmit_mtus_per_second",
                             "MTUs sent in the last interval, per second",
                             _VM_LABELS, registry=r)
        self.vm_mtus = C("resex_vm_transmit_mtus", "MTUs sent since the agent started",
                         _VM_LABELS, registry=r)
        self.vm_bytes = C("resex_vm_transmit_bytes", "Bytes sent since the agent started",
                          _VM_LABELS, registry=r)
        self.vm_lat_mean = G("resex_vm_latency_mean_seconds",
                             "Mean of the VM's latency window", _VM_LABELS, registry=r)
        self.vm_lat_p99 = G("resex_vm_latency_p99_seconds",
                            "99th percentile of the VM's latency window", _VM_LABELS,
                            registry=r)
        self.vm_intf = G("resex_vm_interference_ratio",
                         "Latency interference over the VM's base (0.1 = 10 %)",
                         _VM_LABELS, registry=r)
        self.vm_info = G("resex_vm_info", "A VM the agent controls (always 1)",
                         _INFO_LABELS, registry=r)
        self.cpu_price = G("resex_cpu_price",
                           "Resos charged per CPU percent, mean of the last epoch", registry=r)
        self.io_price = G("resex_io_price", "Resos charged per MTU, mean of the last epoch",
                          registry=r)
        self.link_util = G("resex_link_utilisation_ratio",
                           "Fraction of the link's capacity sent in the last epoch", registry=r)
        self.inflation = G("resex_latency_inflation_ratio",
                           "Worst latency inflation of a sensitive VM in the last epoch",
                           registry=r)
        self.congestion = G("resex_congestion_index",
                            "Expected latency inflation of a new sensitive VM, percent "
                            "(the board's index, as [resex] congestion_threshold)", registry=r)
        self.vms = G("resex_vms", "VMs the market holds", registry=r)
        self.last_epoch = G("resex_last_epoch_timestamp_seconds",
                            "Unix time the last epoch closed", registry=r)
        self.epochs = C("resex_epochs", "Epochs closed", registry=r)
        self.intervals = C("resex_intervals", "Control intervals run", registry=r)
        self.late = C("resex_loop_late", "Times the control loop missed its deadline",
                      registry=r)

    @classmethod
    def from_conf(cls, conf):
        """A started endpoint as ``[metrics]`` says, or ``None`` when disabled.

        Raises :class:`~resex_libvirt.exceptions.ConfigError` when the
        address cannot be bound.
        """
        group = conf.metrics
        if not group.enabled:
            return None
        metrics = cls(group.bind_address, group.port)
        metrics.start()
        return metrics

    # -- serving -----------------------------------------------------------------
    def start(self):
        """Listen and serve on a daemon thread; returns the bound ``(address, port)``."""
        if self._server is not None:
            return self.address
        try:
            self._server, self._thread = prometheus_client.start_http_server(
                self.port, addr=self.bind_address, registry=self.registry)
        except OSError as exc:
            raise exceptions.ConfigError(
                "[metrics] cannot listen on %s port %d: %s"
                % (self.bind_address, self.port, exc)) from exc
        LOG.info("Prometheus metrics on http://%s:%d/metrics", *self.address[:2])
        return self.address

    @property
    def address(self):
        """``(host, port)`` the endpoint is bound to (``None`` before :meth:`start`)."""
        if self._server is None:
            return None
        return self._server.server_address[:2]

    def close(self):
        """Stop serving and join the server thread."""
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)

    # -- the loop's sink ---------------------------------------------------------
    def _children(self, agent, uuid):
        ch = self._vms.get(uuid)
        if ch is None:
            rec = agent.vms.get(uuid)
            name = rec.info.name if rec is not None else uuid
            ch = self._vms[uuid] = _VMChildren(self, (name, uuid))
            self._update_info(agent, uuid, ch)
        return ch

    def _forget(self, uuid):
        ch = self._vms.pop(uuid)
        for metric in (self.vm_cap, self.vm_weight, self.vm_balance, self.vm_charge_rate,
                       self.vm_cpu, self.vm_mtu_rate, self.vm_mtus, self.vm_bytes):
            metric.remove(*ch.key)
        if ch.has_latency:
            self.vm_lat_mean.remove(*ch.key)
            self.vm_lat_p99.remove(*ch.key)
        if ch.has_intf:
            self.vm_intf.remove(*ch.key)
        if ch.info_key is not None:
            self.vm_info.remove(*ch.info_key)

    def _update_info(self, agent, uuid, ch):
        rec = agent.vms.get(uuid)
        if rec is None:
            return
        info = rec.info
        key = ch.key + (info.sla_source, info.knobs.driver, info.sla.io_class,
                        "true" if rec.monitor_only else "false")
        if key != ch.info_key:
            if ch.info_key is not None:
                self.vm_info.remove(*ch.info_key)
            self.vm_info.labels(*key).set(1)
            ch.info_key = key

    def observe_interval(self, agent, samples, decisions, windows):
        """Set every VM's gauges from one interval (cheap: runs every interval)."""
        self.intervals.inc()
        interval_s = agent.settings.interval_s
        balance = agent.market.ledger.balance
        interference = agent.market.last_interference
        vms = self._vms
        for uuid, d in decisions.items():
            ch = vms.get(uuid) or self._children(agent, uuid)
            ch.cap.set(d.cap_pct / 100.0)
            ch.weight.set(d.weight)
            ch.rate.set(d.rate)
            try:
                ch.balance.set(balance(uuid))
            except KeyError:
                pass
            s = samples.get(uuid)
            if s is not None:
                ch.cpu.set(s.cpu_pct / 100.0)
                ch.mtu_rate.set(s.tx_mtus / interval_s)
                if s.tx_mtus > 0:
                    ch.mtus.inc(s.tx_mtus)
                if s.tx_bytes > 0:
                    ch.bytes.inc(s.tx_bytes)
            w = windows.get(uuid)
            if w is not None and w.count:
                if not ch.has_latency:
                    ch.lat_mean = self.vm_lat_mean.labels(*ch.key)
                    ch.lat_p99 = self.vm_lat_p99.labels(*ch.key)
                    ch.has_latency = True
                ch.lat_mean.set(w.mean_us / 1e6)
                ch.lat_p99.set(w.p99_us / 1e6)
            intf = interference.get(uuid)
            if intf is not None:
                if not ch.has_intf:
                    ch.intf = self.vm_intf.labels(*ch.key)
                    ch.has_intf = True
                ch.intf.set(intf / 100.0)
        if len(vms) != len(decisions):
            for uuid in [u for u in vms if u not in decisions]:
                self._forget(uuid)
        late = agent.late
        if late != self._last_late:
            self.late.inc(max(0, late - self._last_late))
            self._last_late = late

    def observe_epoch(self, agent, summary):
        """Set the host's gauges from a closed epoch (``EpochSummary``)."""
        from resex_libvirt.board import report as report_mod

        self.epochs.inc()
        now = time.time()
        self.last_epoch.set(now)
        self.cpu_price.set(summary.cpu_price)
        self.io_price.set(summary.io_price)
        self.link_util.set(summary.link_utilisation)
        self.inflation.set(max(0.0, summary.latency_inflation_pct) / 100.0)
        self.vms.set(len(summary.vms))
        link = agent.link()
        report = report_mod.HostReport.from_summary(
            agent.settings.host, now, summary, link.capacity_bytes_per_s,
            getattr(agent, "version", ""))
        self.congestion.set(report_mod.congestion_index(report))
        for uuid, ch in self._vms.items():
            self._update_info(agent, uuid, ch)
