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

"""The agent's Prometheus endpoint: what the market does, per VM and per host.

:class:`PrometheusMetrics` is the metrics sink of :class:`resex_agent.loop.Agent`
(``observe_interval`` every control interval, ``observe_epoch`` every
epoch). It owns its own ``CollectorRegistry`` (never the process-global
one, so two agents in one process, or a test, do not collide) and serves it
over HTTP on a daemon thread (``prometheus_client.start_http_server``).

Names follow the Prometheus conventions (https://prometheus.io/docs/practices/naming/):
``resex_`` prefix, base units (seconds, bytes), ``_ratio`` for fractions
(so a CPU cap of 50 % of one pCPU is ``0.5``, and 1.5 for a 2-vCPU VM allowed
150 %), ``_total`` for counters, labels ``vm`` (the domain's name), ``uuid`` (the
domain's UUID: the Nova instance UUID on OpenStack) and ``project`` (the
Keystone project that owns the instance, from Nova's ``<nova:owner>``; empty
for a VM Nova did not define). A VM's project never changes while it lives,
so the label adds no series: it only lets a query select or sum by tenant.

Per VM, from the last control interval (the balance as the ledger holds it at scrape time):

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
    Counters of what the VM sent since the agent started, as the fabric
    monitor counts it: with ``libvirt_iface`` the bytes offered at the tap
    (RoCE retransmissions included, not goodput); with ``ib_sysfs`` and
    ``vf_netlink`` what the port or VF transmitted (doc/source/fabric.rst).
``resex_vm_peer_transmit_bytes_per_second``
    Per ``peer`` (a destination address, or ``other``), what the VM sent to
    it over the last sampling period (5 s, or the epoch when longer), IP
    headers included: its 8 busiest destinations
    (``[fabric] count_peers``; only VMs with a tap).
``resex_vm_latency_mean_seconds`` / ``resex_vm_latency_p99_seconds``
    The VM's latency window (only VMs that report latency).
``resex_vm_interference_ratio``
    The window's interference over the VM's base (Algorithm 2 line 6), as a
    fraction (0.1 = 10 %); only latency-sensitive VMs with a window.
``resex_vm_latency_sla_seconds`` / ``resex_vm_interference_threshold_ratio``
    The VM's SLA (``resex:latency_sla_us`` and
    ``resex:interference_threshold_pct``); only latency-sensitive VMs. The
    VM is over its SLA while its interference ratio is above its threshold.
``resex_vm_cpu_cap_floor_ratio``
    The lowest cap the policy may set, in pCPUs: the VM's reservation, or
    ``[market] min_cap_pct`` within its limit; its limit for a VM that did
    not opt in (``[agent] cap_consent = opted_in``).
``resex_vm_info``
    Always 1; labels ``sla_source``, ``knobs``, ``io_class``, ``monitor_only``.
``resex_vm_cap_reason``
    Always 1; label ``reason``: why the policy set the cap (``uncapped``,
    ``credit``, ``tax``, ``decay``, ``protected``, ``target``), the same
    word the epoch's log line gives after each VM.
``resex_vm_latency_unreportable``
    Always 1; label ``problem``: a VM that should report latency but cannot
    (no virtio-serial controller for the ``org.resex.latency.0`` channel,
    doc/source/latency.rst), so it runs without latency feedback.

Per host, updated every epoch: ``resex_cpu_price`` and ``resex_io_price``
(Resos actually charged per CPU percent and per MTU, averaged over the
epoch), ``resex_link_utilisation_ratio``, ``resex_latency_inflation_ratio``,
``resex_congestion_index_ratio`` (the board's index as a fraction: 0.1 is
nova.conf's ``[resex] congestion_threshold`` of 10 percent; computed by
:func:`resex_libvirt.board.report.congestion_index`), ``resex_vms``,
``resex_epochs_total``, ``resex_intervals_total``, ``resex_loop_late_total``,
``resex_last_epoch_timestamp_seconds``, ``resex_epoch_length_seconds`` and
``resex_agent_info{host}`` (always 1: the name the host publishes under on
the board, which ``resex-board`` shows).

What went wrong, from the :class:`resex_agent.loop.Health` of the last epoch:
``resex_intake_rejected_total{reason}``, ``resex_loop_skipped_intervals_total``,
``resex_loop_lateness_seconds``, ``resex_loop_held_intervals_total``,
``resex_board_publish_attempts_total``, ``resex_board_publish_failures_total``,
``resex_board_reports_superseded_total``, ``resex_journal_write_errors_total``,
``resex_journal_unsaved_vms``, ``resex_hypervisor_call_timeouts_total``,
``resex_hypervisor_available``, and ``resex_latency_status_sent_total`` /
``resex_latency_status_dropped_total``: the status lines written back down
the VMs' latency channels, and those dropped because the channel was full
(a guest that does not read its port; doc/source/latency.rst).

The sink never reaches into the agent: the loop hands it one
:class:`resex_agent.loop.IntervalRecord` per interval and one
:class:`resex_agent.loop.EpochRecord` per epoch (the epoch's report, built once,
and its congestion index included). ``observe_interval`` runs every 1 to
100 ms, so it does almost nothing: it keeps the record (its dicts are fresh
every interval, never mutated afterwards) and adds the interval's MTUs and
bytes to per-VM totals. The per-VM series are built only when the endpoint
is scraped, by a custom collector (``prometheus_client``'s "custom
collectors"), from that record; the balance is read through the record's
``balance`` at that moment. A VM that left the host is in no new decision,
so its series disappear with it.
"""

import socket
import threading

import prometheus_client
from prometheus_client import core

from resex_libvirt import metrics_http

_VM_LABELS = ("vm", "uuid", "project")
_INFO_LABELS = _VM_LABELS + ("sla_source", "knobs", "io_class", "monitor_only")

#: Per-VM gauges: (name, help).
_VM_GAUGES = (
    ("resex_vm_cpu_cap_ratio", "CPU cap decided by the market, in pCPUs (Xen cap / 100)"),
    ("resex_vm_weight", "Credit-scheduler weight (Xen scale, 256 default)"),
    ("resex_vm_reso_balance", "Resos left this epoch"),
    ("resex_vm_charge_rate", "Charging-rate multiplier (1 = base prices)"),
    ("resex_vm_cpu_usage_ratio", "CPU used in the last interval, in pCPUs"),
    ("resex_vm_transmit_mtus_per_second", "MTUs sent in the last interval, per second"),
    ("resex_vm_latency_mean_seconds", "Mean of the VM's latency window"),
    ("resex_vm_latency_p99_seconds", "99th percentile of the VM's latency window"),
    ("resex_vm_interference_ratio", "Latency interference over the VM's base (0.1 = 10 %)"),
    ("resex_vm_latency_sla_seconds", "The VM's latency SLA (resex:latency_sla_us)"),
    ("resex_vm_interference_threshold_ratio",
     "Interference the VM's SLA allows (resex:interference_threshold_pct, 0.1 = 10 %)"),
    ("resex_vm_cpu_cap_floor_ratio", "Lowest cap the policy may set, in pCPUs"),
)


def cap_floor_pct(info, min_cap_pct, consent=None):
    """The lowest cap the market gives ``info``'s VM (as :meth:`Market._bounds_of`).

    ``consent`` (a :class:`resex_libvirt.sla.Consent`): the SLA is the copy
    the market is given, a VM that did not opt in held at its limit.
    """
    sla = (info.sla if consent is None else
           consent(info.sla, project=info.project, flavor=info.flavor))
    return max(sla.effective_reservation(info.vcpus),
               min(min_cap_pct, sla.effective_limit(info.vcpus)))


class _Collector:
    """A collector of the sink's last records, built at scrape time (describes nothing)."""

    def __init__(self, sink):
        self._sink = sink

    def describe(self):
        return []


class _VMCollector(_Collector):
    """Builds the per-VM series at scrape time from the last interval's records."""

    def collect(self):
        sink = self._sink
        with sink._lock:
            last, sent = sink._last, sink._sent
        totals = {}
        if sent is not None:
            uuids, mtus, sent_bytes = sent
            totals = dict(zip(uuids, zip(mtus.tolist(), sent_bytes.tolist())))
        gauges = {name: core.GaugeMetricFamily(name, doc, labels=_VM_LABELS)
                  for name, doc in _VM_GAUGES}
        mtus = core.CounterMetricFamily("resex_vm_transmit_mtus",
                                        "MTUs sent since the agent started", labels=_VM_LABELS)
        sent = core.CounterMetricFamily(
            "resex_vm_transmit_bytes", "Bytes sent since the agent started (libvirt_iface: "
            "offered at the tap, retransmits included)", labels=_VM_LABELS)
        info = core.GaugeMetricFamily("resex_vm_info", "A VM the agent controls (always 1)",
                                      labels=_INFO_LABELS)
        why = core.GaugeMetricFamily("resex_vm_cap_reason",
                                     "Why the policy set the VM's cap (always 1)",
                                     labels=_VM_LABELS + ("reason",))
        blind = core.GaugeMetricFamily(
            "resex_vm_latency_unreportable",
            "A VM that should report latency but cannot (always 1)",
            labels=_VM_LABELS + ("problem",))
        if last is not None:
            for uuid, rec in list(last.vms.items()):
                problem = rec.info.latency_problem
                if problem:
                    blind.add_metric([rec.info.name, uuid, rec.info.project or "", problem], 1.0)
            samples, decisions, windows = last.samples, last.decisions, last.windows
            interference, interval_s = last.interference, last.interval_s
            balance, vms = last.balance, last.vms
            for uuid, d in list(decisions.items()):
                rec = vms.get(uuid)
                key = ([rec.info.name, uuid, rec.info.project or ""] if rec is not None
                       else [uuid, uuid, ""])
                gauges["resex_vm_cpu_cap_ratio"].add_metric(key, d.cap_pct / 100.0)
                gauges["resex_vm_weight"].add_metric(key, d.weight)
                gauges["resex_vm_charge_rate"].add_metric(key, d.rate)
                if last.reason is not None:
                    why.add_metric(key + [last.reason(uuid)], 1.0)
                try:
                    gauges["resex_vm_reso_balance"].add_metric(key, balance(uuid))
                except KeyError:
                    pass
                smp = samples.get(uuid)
                if smp is not None:
                    gauges["resex_vm_cpu_usage_ratio"].add_metric(key, smp.cpu_pct / 100.0)
                    gauges["resex_vm_transmit_mtus_per_second"].add_metric(
                        key, smp.tx_mtus / interval_s)
                win = windows.get(uuid)
                if win is not None and win.count:
                    gauges["resex_vm_latency_mean_seconds"].add_metric(key, win.mean_us / 1e6)
                    gauges["resex_vm_latency_p99_seconds"].add_metric(key, win.p99_us / 1e6)
                intf = interference.get(uuid)
                if intf is not None:
                    gauges["resex_vm_interference_ratio"].add_metric(key, intf / 100.0)
                total = totals.get(uuid)
                if total is not None:
                    mtus.add_metric(key, total[0])
                    sent.add_metric(key, total[1])
                if rec is not None:
                    i = rec.info
                    gauges["resex_vm_cpu_cap_floor_ratio"].add_metric(
                        key, cap_floor_pct(i, last.min_cap_pct, last.consent) / 100.0)
                    if i.sla.sensitive:
                        gauges["resex_vm_latency_sla_seconds"].add_metric(
                            key, i.sla.latency_sla_us / 1e6)
                        gauges["resex_vm_interference_threshold_ratio"].add_metric(
                            key, i.sla.interference_threshold_pct / 100.0)
                    info.add_metric(key + [i.sla_source, i.knobs.driver, i.sla.io_class,
                                           "true" if rec.monitor_only else "false"], 1)
        yield from gauges.values()
        yield mtus
        yield sent
        yield info
        yield why
        yield blind


class _PeerCollector(_Collector):
    """Each VM's send rate by destination (``[fabric] count_peers``), the last period's."""

    def collect(self):
        sink = self._sink
        with sink._lock:
            rates, last = sink._peer_rates, sink._last
        family = core.GaugeMetricFamily(
            "resex_vm_peer_transmit_bytes_per_second",
            "Bytes a second the VM sent to each destination address over the last sampling "
            "period (5 s, or the epoch when longer), "
            "IP headers included (its 8 busiest; peer=\"other\": the rest); [fabric] "
            "count_peers", labels=_VM_LABELS + ("peer",))
        vms = last.vms if last is not None else {}
        for uuid, peers in sorted(rates.items()):
            rec = vms.get(uuid)
            key = ([rec.info.name, uuid, rec.info.project or ""] if rec is not None
                   else [uuid, uuid, ""])
            for peer, rate in sorted(peers.items()):
                family.add_metric(key + [peer], rate)
        yield family


class _HealthCollector(_Collector):
    """The agent's fault counters, from the last epoch's :class:`resex_agent.loop.Health`."""

    def collect(self):
        with self._sink._lock:
            h = self._sink._health
        C, G = core.CounterMetricFamily, core.GaugeMetricFamily
        rejected = C("resex_intake_rejected",
                     "Latency reports (or probe connections) rejected, by reason",
                     labels=("reason",))
        if h is not None:
            for reason, n in sorted(h.intake_rejected.items()):
                rejected.add_metric([reason], n)
        yield rejected
        if h is None:
            return
        yield C("resex_loop_skipped_intervals",
                "Control intervals skipped because the loop was late", value=h.skipped_intervals)
        yield C("resex_loop_held_intervals",
                "Control intervals that held every knob (hypervisor unavailable)",
                value=h.held_intervals)
        yield G("resex_loop_lateness_seconds",
                "How late the loop was the last time it missed a deadline", value=h.lateness_s)
        yield C("resex_board_publish_attempts", "Host reports sent to the board",
                value=h.publish_attempts)
        yield C("resex_board_publish_failures", "Host reports the board did not take",
                value=h.publish_failures)
        yield C("resex_board_reports_superseded",
                "Host reports replaced by a newer one before the board took them",
                value=h.reports_superseded)
        yield C("resex_journal_write_errors", "Failed writes of the knob journal",
                value=h.journal_write_errors)
        yield G("resex_journal_unsaved_vms",
                "VMs whose original knobs are held in memory only (journal not writable)",
                value=h.journal_unsaved)
        yield C("resex_hypervisor_call_timeouts",
                "Hypervisor calls that overran the watchdog's bound", value=h.hypervisor_timeouts)
        yield C("resex_latency_status_sent",
                "Status lines written down the VMs' latency channels", value=h.status_sent)
        yield C("resex_latency_status_dropped",
                "Status lines dropped because the VM's channel was full (the guest does not "
                "read)", value=h.status_dropped)
        yield G("resex_remote_victims",
                "VMs of this host judged by a remote victim's SLA (the peers of victims on "
                "other hosts) or by their ensemble's worst member on another host",
                value=h.remote_victims)
        ignored = C("resex_remote_claims_ignored",
                    "Remote claims on this host's VMs that moved no cap, by reason "
                    "(contradicted by this port's load, expired)", labels=("reason",))
        for reason, n in sorted(h.remote_claims_ignored.items()):
            ignored.add_metric([reason], n)
        yield ignored
        factors = G("resex_shared_link_limit_factor",
                    "The factor this host's heavy senders' CPU limit is scaled by, per shared "
                    "link it limits them on (below 1 only; [remote_claims] topology_file)",
                    labels=("link",))
        for link, factor in sorted(h.link_factors.items()):
            factors.add_metric([link], factor)
        yield factors
        yield G("resex_hypervisor_available",
                "1 when hypervisor calls return within the watchdog's bound",
                value=1 if h.hypervisor_available else 0)


class PrometheusMetrics:
    """The agent's metrics sink, served on ``bind_address``:``port``.

    Build it (:meth:`from_conf`) and pass it as ``metrics=`` to
    :class:`resex_agent.loop.Agent`: the agent starts it (:meth:`start` binds the
    port) when it starts and closes it (:meth:`close`) when it shuts down.
    """

    def __init__(self, bind_address="127.0.0.1", port=9779, registry=None):
        self.bind_address = bind_address
        self.port = port
        self.registry = registry if registry is not None else prometheus_client.CollectorRegistry()
        self._endpoint = metrics_http.Endpoint(bind_address, port, self.registry, "[metrics]")
        self._lock = threading.Lock()
        self._last = None
        self._health = None
        self._peer_rates = {}
        self._sent = None
        self._last_late = 0
        self._host = None
        r = self.registry
        r.register(_VMCollector(self))
        r.register(_HealthCollector(self))
        r.register(_PeerCollector(self))
        G, C = prometheus_client.Gauge, prometheus_client.Counter
        self.cpu_price = G("resex_cpu_price",
                           "Resos charged per CPU percent, mean of the last epoch", registry=r)
        self.io_price = G("resex_io_price", "Resos charged per MTU, mean of the last epoch",
                          registry=r)
        self.link_util = G("resex_link_utilisation_ratio",
                           "Fraction of the link's capacity sent in the last epoch", registry=r)
        self.inflation = G("resex_latency_inflation_ratio",
                           "Worst latency inflation of a sensitive VM in the last epoch",
                           registry=r)
        self.congestion = G("resex_congestion_index_ratio",
                            "Expected latency inflation of a new sensitive VM, as a fraction "
                            "(the board's index / 100: [resex] congestion_threshold 10 is 0.1)",
                            registry=r)
        self.vms = G("resex_vms", "VMs the market holds", registry=r)
        self.blind = G("resex_report_blind",
                       "1 when the last host report was published blind (the hypervisor "
                       "unavailable for the epoch: the scheduler treats the host as unknown)",
                       registry=r)
        self.last_epoch = G("resex_last_epoch_timestamp_seconds",
                            "Unix time the last epoch closed", registry=r)
        self.epoch_length = G("resex_epoch_length_seconds",
                              "Length of the agent's epoch (its report interval)", registry=r)
        self.agent_info = prometheus_client.Info(
            "resex_agent", "The host name the agent publishes under on the board",
            registry=r)
        self.epochs = C("resex_epochs", "Epochs closed", registry=r)
        self.intervals = C("resex_intervals", "Control intervals run", registry=r)
        self.late = C("resex_loop_late", "Times the control loop missed its deadline",
                      registry=r)

    @classmethod
    def from_conf(cls, conf):
        """The endpoint ``[metrics]`` describes, not started yet, or ``None`` when disabled.

        :meth:`start` binds the address (a
        :class:`~resex_libvirt.exceptions.ConfigError` when it cannot).
        """
        group = conf.metrics
        if not group.enabled:
            return None
        return cls(group.bind_address, group.port)

    # -- serving -----------------------------------------------------------------
    def start(self):
        """Listen and serve on a daemon thread; returns the bound ``(address, port)``."""
        return self._endpoint.start()

    def check_address(self):
        """Raise the ``ConfigError`` :meth:`start` would, without listening (``--check``).

        Binds a socket to the address as the server does (``SO_REUSEADDR``)
        and closes it at once: a port another process listens on, an
        address not on this host or a port the agent may not bind fail here.
        """
        try:
            family, kind, proto, _name, where = socket.getaddrinfo(
                self.bind_address, self.port, type=socket.SOCK_STREAM,
                flags=socket.AI_PASSIVE)[0]
            with socket.socket(family, kind, proto) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind(where)
        except OSError as exc:
            raise self._endpoint.error(exc) from exc

    @property
    def address(self):
        """``(host, port)`` the endpoint is bound to (``None`` before :meth:`start`)."""
        return self._endpoint.address

    def close(self):
        """Stop serving and join the server thread."""
        self._endpoint.close()

    # -- the loop's sink ---------------------------------------------------------
    def observe_interval(self, record):
        """Keep the :class:`resex_agent.loop.IntervalRecord` (the series are made at scrape time).

        What each VM sent is the controller's run tally, copied into the
        record (``sent``): nothing is added up here, once per interval.
        """
        with self._lock:
            self._last = record
            if record.sent is not None:
                self._sent = record.sent
        self.intervals.inc()

    def observe_epoch(self, record):
        """Set the host's gauges from a closed epoch (:class:`resex_agent.loop.EpochRecord`)."""
        summary = record.summary
        self.epochs.inc()
        self.last_epoch.set(record.ts)
        if record.epoch_s:
            self.epoch_length.set(record.epoch_s)
        if record.host and record.host != self._host:
            self._host = record.host
            self.agent_info.info({"host": record.host})
        self.cpu_price.set(summary.cpu_price)
        self.io_price.set(summary.io_price)
        self.link_util.set(summary.link_utilisation)
        self.inflation.set(max(0.0, summary.latency_inflation_pct) / 100.0)
        self.vms.set(len(summary))
        self.congestion.set(record.congestion_index_pct / 100.0)
        self.blind.set(1 if record.report is not None and record.report.blind else 0)
        health = record.health
        if health.late != self._last_late:
            self.late.inc(max(0, health.late - self._last_late))
            self._last_late = health.late
        with self._lock:
            self._health = health
            self._peer_rates = record.peer_rates
