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

"""One configuration of the fleet study, simulated over the scenario's day.

An event loop in simulated seconds over arrivals, departures, build
completions (nova's ``num_io_ops``), one host failure and the hosts'
report publications. Between two events a host's mix is constant, so each
VM's outcome is integrated exactly from the surrogate
(:mod:`~resex_research.cluster.surrogate`): SLA violation-seconds and
latency inflation of the sensitive VMs, bytes delivered by the bulk ones.

**The board path is the product's.** When the configuration's scheduler
runs a ResEx filter or weigher, every live host publishes its
:class:`~resex_libvirt.board.report.HostReport` (built by the agent's
``from_summary`` during calibration, with the host's actual VM counts) to a
real board (SQLite or etcd) with ``Board.publish``, and the filter and
weigher read it through resex_nova's own shared reader. Timing follows the
agent and the scheduler:

* a host's report shows a change ``report_delay_s`` after it (the agent's
  epoch and the market noticing the new tenant), then the agent republishes
  it every ``keepalive_s`` (its on-change maximum interval) for as long as
  that can still move the scheduler's smoothed admission state, and once
  more just before its next change, exactly as the agent's stream would
  leave that state;
* the scheduler's reader refreshes every ``refresh_interval_s``: a request
  at time ``t`` sees the board as it stood at the last multiple of that
  interval (writes are handed to the board when a refresh needs them, in
  order, so the board holds exactly what it would have held; on SQLite the
  reader merges the rows changed since its last refresh,
  :mod:`~resex_research.cluster.board_feed`);
* report timestamps are the run's start on the wall clock plus simulated
  time, so the admission state's time constant runs in simulated seconds;
* a failed host stops publishing, and its compute service stops reporting
  (nova's ``ComputeFilter`` rejects it).

**The traits path.** A configuration with ``placement_sync`` runs
``resex-placement-sync`` (:mod:`~resex_research.cluster.trait_sync`) on the
same reports: each report reaches the service as it reaches the board, the
service's writes take their simulated time, and a completed write sets or
clears ``CUSTOM_RESEX_CLOSED`` in the simulated Placement
(:meth:`~resex_research.cluster.scheduler.Scheduler.set_trait`), which drops
the hosts a flavor forbids before ``max_placement_results``. A failed host
goes silent for the service ``max_age`` after it failed.

**A congested region** (the scenario's ``[congested_region]``): the first
hosts in provider order carry VMs placed outside the scheduler (a tenant
pinned to an aggregate) for a part of the day; they are not requests and
count in no column but the hosts' own reports.
"""

import dataclasses
import heapq
import math
import time
import uuid as uuid_mod

from resex_libvirt import board as board_mod
from resex_libvirt.board import reader as reader_mod
from resex_libvirt.board import report as report_mod
from resex_libvirt.sim import run_output
from resex_nova import conf as resex_conf
from resex_nova import traits as traits_mod
from resex_research.cluster import board_feed
from resex_research.cluster import cortex
from resex_research.cluster import demand
from resex_research.cluster import scheduler as scheduler_mod
from resex_research.cluster import spec as spec_mod
from resex_research.cluster import trait_sync

_NS_UUID = uuid_mod.UUID("0b7e8c2a-3f7d-4c8e-9a61-2b5d7c9e1f30")

ARRIVE, DEPART, IO_DONE, FAIL, PUBLISH, PIN, UNPIN, SYNC, RECONCILE, SILENT = range(10)

#: The project of the congested region's pinned VMs.
REGION_PROJECT = "congested-region"

#: Width of the violation timeline's bins, seconds.
TIMELINE_BIN_S = 900.0

#: Count fields of a report the host knows exactly (set from its real mix).
_COUNTS = ("vms", "sensitive_vms", "heavy_io_vms")


class _VM:
    __slots__ = ("req", "flavor", "kind", "uuid", "host", "alive_s", "violation_s",
                 "inflation_int", "bytes", "evacuated")

    def __init__(self, req, flavor):
        self.req, self.flavor, self.kind = req, flavor, flavor.kind
        self.uuid = str(uuid_mod.uuid5(_NS_UUID, str(req.index)))
        self.host = None
        self.alive_s = self.violation_s = self.inflation_int = self.bytes = 0.0
        self.evacuated = False


class _Host:
    __slots__ = ("name", "up", "vms", "n_s", "n_b", "last_t", "outcome", "pending",
                 "pub_t", "pub_report", "pub_gen", "epoch")

    def __init__(self, name, outcome):
        self.name, self.up, self.vms = name, True, {}
        self.n_s = self.n_b = 0
        self.last_t = 0.0
        self.outcome = outcome
        self.pending = False
        self.pub_t = None
        self.pub_report = None
        self.pub_gen = 0
        self.epoch = 0


@dataclasses.dataclass
class Result:
    """What one configuration measured (see :mod:`~resex_research.cluster.report`)."""

    configuration: str
    description: str
    host_policy: str
    filters: list
    weighers: list
    reads_board: bool
    violation_s_total: float
    violation_s_p50: float
    violation_s_p99: float
    inflation_p50: float
    inflation_p99: float
    no_valid_host: int
    requests: int
    evacuations: int
    failed_evacuations: int
    hosts_in_use_mean: float
    hosts_in_use_peak: int
    bulk_tb: float
    publishes: int
    clamped_s: float
    timeline: list
    inflations: list
    wall_s: float
    no_valid_host_sensitive: int = 0
    sensitive_placed: int = 0
    candidate_limit: int = 0
    pinned_vms: int = 0
    placement_sync: bool = False
    sync: dict | None = None

    def to_dict(self, detail=True):
        d = dataclasses.asdict(self)
        if not detail:
            d.pop("inflations")
            d.pop("timeline")
        return d


def _idle_report(template):
    """The report of a host without VMs, shaped like ``template`` (all loads zero)."""
    keep = {"host", "ts", "epoch", "link_capacity_bytes_per_s", "version", "agent_version"}
    return {k: (v if k in keep or not isinstance(v, (int, float)) or isinstance(v, bool)
                else type(v)(0)) for k, v in template.items()}


def reads_board(sched):
    mods = [type(o).__module__ for o in
            list(sched.manager.enabled_filters) + list(sched.manager.weighers)]
    return any(m.startswith("resex_nova") for m in mods)


def run(scenario, config, requests, surrogate, board_url, board_opts=None, progress=None):
    """Simulate ``config`` of ``scenario`` on ``requests``; a :class:`Result`."""
    started = time.monotonic()
    names = ["compute-%05d" % i for i in range(scenario.hosts)]
    scheduler_mod.register_objects()
    conf = scheduler_mod.NovaConfig()
    if config.placement_sync:
        # The service reads the scheduler's [resex] group, plugin loaded or not.
        resex_conf.register_opts(scheduler_mod.CONF)
    try:
        later = conf.apply(config.nova, registered_only=True)
        sched = scheduler_mod.Scheduler(names, scenario.host_vcpus, scenario.host_ram_mb,
                                        scenario.host_disk_gb, seed=scenario.seed,
                                        randomize_candidates=scenario.randomize_candidates)
        uses_board = reads_board(sched)
        if uses_board:
            # The plugin's [resex] section exists now that nova loaded its classes.
            resex = dict(config.nova.get("resex", {}))
            resex.setdefault("board_url", board_url)
            resex.setdefault("refresh_interval", 300.0)
            resex.setdefault("max_age", scenario.max_age_s)
            if "board_read_mode" in scheduler_mod.CONF.resex:
                # Refreshed by the simulation at its own times: repeatable.
                resex.setdefault("board_read_mode", "snapshot")
            later = dict(later, resex=resex)
        conf.apply(later)
        return _Run(scenario, config, requests, surrogate, sched, board_url,
                    board_opts or {}, progress, started).run()
    finally:
        conf.clear()


class _Run:
    def __init__(self, scenario, config, requests, surrogate, sched, board_url, board_opts,
                 progress, started):
        self.sc, self.config, self.requests = scenario, config, requests
        self.sur, self.sched, self.progress, self.started = surrogate, sched, progress, started
        self.policy = config.host_policy
        self.flavor_objs = [sched.flavor(f) for f in scenario.flavors]
        self.names = list(sched.states)          # provider order
        self.hosts = {n: _Host(n, surrogate.lookup(self.policy, 0, 0)) for n in self.names}
        self.reads_board = reads_board(sched)
        self.sync = None
        if config.placement_sync:
            opts = scheduler_mod.CONF.resex
            self.sync = trait_sync.TraitSync(
                scenario.placement_sync, opts.congestion_threshold, opts.admission_hysteresis,
                opts.admission_time_constant, opts.max_age, seed=scenario.seed)
        self.publishing = self.reads_board or self.sync is not None
        self.pinned = []
        self.now = 0.0
        self.board = None
        self.board_url = board_url
        self.reader = None
        self.outbox = []
        self.read_once = False
        self.last_grid = -1
        self.publishes = 0
        self.t0_wall = time.time()
        tau = 0.0
        if self.publishing and "admission_time_constant" in scheduler_mod.CONF.resex:
            tau = scheduler_mod.CONF.resex.admission_time_constant
        self.keepalives = math.ceil(4.0 * tau / scenario.keepalive_s) if tau > 0 else 0
        if self.reads_board:
            self.board = board_mod.open_board(board_url, **board_opts)
        self.down = set()
        self.heap = []
        self.seq = 0
        self.vms = []
        self.no_valid_host = self.no_valid_host_sensitive = 0
        self.evacuations = self.failed_evacuations = 0
        self.in_use = 0
        self.in_use_int = 0.0
        self.in_use_peak = 0
        self.global_t = 0.0
        self.clamped_s = 0.0
        bins = max(1, math.ceil(scenario.duration_s / TIMELINE_BIN_S))
        self.timeline = [0.0] * bins
        self.last_beat = 0.0
        #: The cortex-like weigher's features (:mod:`.cortex`), when it is enabled.
        self.features = None
        if cortex.enabled(sched):
            self.features = cortex.STORE = cortex.FeatureStore(
                cortex.kind_cpu(scenario.model), scenario.host_vcpus)

    # -- plumbing -----------------------------------------------------------------
    def push(self, t, kind, data):
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, data))

    def beat(self):
        now = time.monotonic()
        if now - self.last_beat > 5.0:
            self.sched.heartbeat(self.down)
            self.last_beat = now

    def advance_global(self, t):
        self.in_use_int += (t - self.global_t) * self.in_use
        self.global_t = t

    def touch(self, h, t):
        """Integrate ``h``'s VMs' outcomes from its last change to ``t``."""
        dt = t - h.last_t
        h.last_t = t
        if dt <= 0 or not h.up or not h.vms:
            return
        out = h.outcome
        if out.clamped:
            self.clamped_s += dt
        for vm in h.vms.values():
            vm.alive_s += dt
            if vm.kind == spec_mod.SENSITIVE:
                vm.violation_s += dt * out.violation_fraction
                vm.inflation_int += dt * out.inflation_pct
            elif vm.kind == spec_mod.BULK:
                vm.bytes += dt * out.bulk_mb_s * 1e6
        rate = h.n_s * out.violation_fraction
        if rate > 0:
            self._bin(t - dt, t, rate)

    def _bin(self, a, b, rate):
        width = TIMELINE_BIN_S
        k = int(a // width)
        while a < b and k < len(self.timeline):
            end = min(b, (k + 1) * width)
            self.timeline[k] += (end - a) * rate
            a, k = end, k + 1

    def changed(self, h, t):
        h.outcome = self.sur.lookup(self.policy, h.n_s, h.n_b)
        if self.features is not None:
            self.features.update(h.name, [(vm.kind, vm.flavor.vcpus, vm.req.project)
                                          for vm in h.vms.values()])
        if self.publishing and not h.pending:
            h.pending = True
            self.push(t + self.sc.report_delay_s, PUBLISH, (h.name, None))

    def add(self, h, vm, t):
        self.touch(h, t)
        if not h.vms:
            self.advance_global(t)
            self.in_use += 1
            self.in_use_peak = max(self.in_use_peak, self.in_use)
        h.vms[vm.req.index] = vm
        vm.host = h.name
        h.n_s += vm.kind == spec_mod.SENSITIVE
        h.n_b += vm.kind == spec_mod.BULK
        self.changed(h, t)
        if self.sc.build_s > 0:
            self.push(t + self.sc.build_s, IO_DONE, h.name)
        else:
            self.sched.io_op_done(h.name)

    def remove(self, h, vm, t):
        self.touch(h, t)
        del h.vms[vm.req.index]
        vm.host = None
        h.n_s -= vm.kind == spec_mod.SENSITIVE
        h.n_b -= vm.kind == spec_mod.BULK
        if not h.vms:
            self.advance_global(t)
            self.in_use -= 1
        self.changed(h, t)

    # -- the board -------------------------------------------------------------------
    def report_of(self, h):
        tpl = h.outcome.report
        if tpl is None:
            tpl = _idle_report(self.sur.lookup(self.policy, 1, 0).report)
        d = dict(tpl)
        counts = {"vms": len(h.vms), "sensitive_vms": h.n_s, "heavy_io_vms": h.n_b}
        for k in _COUNTS:
            if k in d:
                d[k] = counts[k]
        return d

    def emit(self, h, t, rec):
        h.epoch += 1
        d = dict(rec, host=h.name, ts=self.t0_wall + t, epoch=h.epoch)
        report = report_mod.HostReport.from_dict(d)
        if self.reads_board:
            self.seq += 1
            heapq.heappush(self.outbox, (t, self.seq, report))
        self.publishes += 1
        if self.sync is not None and self.sync.report(h.name, report, self.now):
            self.sync_wake()

    # -- resex-placement-sync -----------------------------------------------------------
    def sync_wake(self):
        """Run the service's worker when it is idle and a job is waiting."""
        s = self.sync
        ready = s.ready_at()
        if not s.busy and ready is not None:
            s.busy = True
            self.push(max(ready, self.now), SYNC, None)

    def sync_step(self, t, done):
        """The worker's job ended at ``t`` (``done``: its ``(host, closed)``); the next one."""
        s = self.sync
        s.busy = False
        if done is not None:
            host, closed = done
            self.sched.set_trait(host, traits_mod.CLOSED, closed)
            s.applied(host, closed, t)
        job = s.work(t)
        if job is not None:
            s.busy = True
            self.push(job[0], SYNC, job[1])
        else:
            self.sync_wake()

    def sync_begin(self):
        """Placement holds the traits of the day's first reports; reconciliations follow."""
        for host, closed in self.sync.begin().items():
            self.sched.set_trait(host, traits_mod.CLOSED, closed)
        self.push(self.sync.model.reconcile_interval_s, RECONCILE, None)

    def reconcile(self, t):
        self.sync.reconcile_due(t)
        self.sync_wake()
        self.push(t + self.sync.model.reconcile_interval_s, RECONCILE, None)

    # -- the congested region ------------------------------------------------------------
    def pin_region(self, t):
        """The region's VMs land on its hosts, claimed outside the scheduler."""
        reg = self.sc.region
        flavor = self.flavor_objs[reg.flavor]
        until = reg.until_s if reg.until_s is not None else self.sc.duration_s
        base = len(self.requests) + len(self.pinned)
        for name in self.names[:reg.hosts]:
            h = self.hosts[name]
            if not h.up:
                continue
            for _ in range(reg.vms_per_host):
                req = demand.Request(base, reg.flavor, t, until - t, REGION_PROJECT)
                base += 1
                vm = _VM(req, self.sc.flavors[reg.flavor])
                self.sched.claim(name, self.sched.boot_spec(flavor, vm.uuid, REGION_PROJECT))
                self.add(h, vm, t)
                self.pinned.append(vm)

    def unpin_region(self, t):
        """The region's VMs leave (wherever an evacuation took them)."""
        for vm in self.pinned:
            if vm.host is not None:
                self.sched.release(vm.host, self.flavor_objs[vm.req.flavor])
                self.remove(self.hosts[vm.host], vm, t)

    def publish(self, name, gen, t):
        h = self.hosts[name]
        if not h.up:
            return
        if gen is None:          # a new state to report
            h.pending = False
            if h.pub_t is not None and t - h.pub_t > self.sc.keepalive_s:
                # The agent's last keep-alive of the old state before this one.
                k = math.floor((t - h.pub_t) / self.sc.keepalive_s)
                last = h.pub_t + k * self.sc.keepalive_s
                if last < t:
                    self.emit(h, last, h.pub_report)
            rec = self.report_of(h)
            h.pub_gen += 1
            for k in range(1, self.keepalives + 1):
                self.push(t + k * self.sc.keepalive_s, PUBLISH, (name, h.pub_gen))
        elif gen != h.pub_gen:
            return
        else:
            rec = h.pub_report
        self.emit(h, t, rec)
        h.pub_t, h.pub_report = t, rec

    def open_reader(self):
        """Let the filter and weigher open their board reader, then hold on to it.

        The plugin opens its process-wide reader (``board.reader.shared``,
        keyed by the board URL, with nova.conf's settings) on the first
        request that concerns it: a first latency-sensitive request, as nova
        would run it, minus the claim. On a SQLite board the simulation
        makes that reader first, in ``follow`` mode over the rows changed
        between two refreshes (:mod:`~resex_research.cluster.board_feed`): a
        refresh costs the changes, not the fleet.
        """
        while self.outbox and self.outbox[0][0] <= 0.0:
            self.board.publish(heapq.heappop(self.outbox)[2])
        if self.board_url.startswith("sqlite:"):
            board_feed.follow(self.board_url, scheduler_mod.CONF.resex)
        sensitive = next(i for i, f in enumerate(self.sc.flavors)
                         if f.kind == spec_mod.SENSITIVE)
        probe = self.sched.boot_spec(self.flavor_objs[sensitive], "probe", "probe")
        hosts = self.sched.candidates(probe)
        self.sched.manager.get_weighed_hosts(
            list(self.sched.manager.get_filtered_hosts(hosts, probe)), probe)
        self.reader = reader_mod.shared(self.board_url)
        self.read_once = True
        self.last_grid = 0

    def sync_reader(self, t):
        """Make the reader hold the board as of the last refresh before ``t``."""
        if self.reader is None:
            return
        grid = math.floor(t / self.sc.refresh_interval_s)
        if grid <= self.last_grid:
            return
        self.last_grid = grid
        cut = grid * self.sc.refresh_interval_s
        if self.read_once and not (self.outbox and self.outbox[0][0] <= cut):
            return          # nothing new on the board since the last refresh
        while self.outbox and self.outbox[0][0] <= cut:
            self.board.publish(heapq.heappop(self.outbox)[2])
        self.reader.refresh()
        self.read_once = True

    # -- scheduling -------------------------------------------------------------------
    def place(self, vm, t, evacuate_from=None):
        self.sync_reader(t)
        self.beat()
        flavor = self.flavor_objs[vm.req.flavor]
        if evacuate_from is None:
            spec = self.sched.boot_spec(flavor, vm.uuid, vm.req.project)
        else:
            spec = self.sched.evacuate_spec(flavor, vm.uuid, vm.req.project, evacuate_from)
        host = self.sched.select(spec)
        if host is not None:
            self.add(self.hosts[host], vm, t)
        return host

    def fail(self, name, t):
        h = self.hosts[name]
        self.touch(h, t)
        h.up = False
        self.down.add(name)
        self.sched.heartbeat(self.down)
        self.last_beat = time.monotonic()
        victims = [h.vms[k] for k in sorted(h.vms)]
        h.vms = {}
        h.n_s = h.n_b = 0
        self.advance_global(t)
        if victims:
            self.in_use -= 1
        if self.sync is not None:
            self.push(t + self.sync.max_age, SILENT, name)
        for vm in victims:
            vm.host = None
            self.evacuations += 1
            vm.evacuated = True
            if self.place(vm, t, evacuate_from=name) is None:
                self.failed_evacuations += 1

    def pick_failure(self):
        want = self.sc.failure_host
        if want == "busiest":
            return max(sorted(self.hosts),
                       key=lambda n: (len(self.hosts[n].vms), self.hosts[n].n_s))
        if want.isdigit():
            return "compute-%05d" % (int(want) % self.sc.hosts)
        return want if want in self.hosts else sorted(self.hosts)[0]

    # -- the loop ---------------------------------------------------------------------
    def run(self):
        try:
            return self._run()
        finally:
            if self.board is not None:
                self.board.close()
            if self.features is not None:
                cortex.STORE = None

    def _start(self):
        """The day's events, the region's VMs, every agent's first report, the traits."""
        sc = self.sc
        for req in self.requests:
            self.push(req.arrive_s, ARRIVE, req)
        if sc.failure_at_s is not None:
            self.push(sc.failure_at_s, FAIL, None)
        reg = sc.region
        if reg is not None:
            if reg.from_s <= 0.0:
                self.pin_region(0.0)
            else:
                self.push(reg.from_s, PIN, None)
            if reg.until_s is not None:
                self.push(reg.until_s, UNPIN, None)
        self.sched.heartbeat()
        if self.publishing:
            # Every agent is running before the day starts: each host's first
            # report is on the board for the first request.
            for h in self.hosts.values():
                self.publish(h.name, None, 0.0)
        if self.sync is not None:
            self.sync_begin()
        if self.reads_board:
            self.open_reader()

    def _run(self):
        self._start()
        end = self.sc.duration_s
        next_note = 3600.0
        while self.heap and self.heap[0][0] < end:
            t, _, kind, data = heapq.heappop(self.heap)
            self.now = t
            if self.progress is not None and t >= next_note:
                self.progress("%s: %.0f h simulated, %.0f s" % (
                    self.config.name, t / 3600.0, time.monotonic() - self.started))
                next_note += 3600.0 * 6
            self.handle(kind, t, data)
        for h in self.hosts.values():
            self.touch(h, end)
        self.advance_global(end)
        return self.result(end)

    def handle(self, kind, t, data):
        """One event of the loop."""
        if kind == ARRIVE:
            vm = _VM(data, self.sc.flavors[data.flavor])
            self.vms.append(vm)
            if self.place(vm, t) is None:
                self.no_valid_host += 1
                self.no_valid_host_sensitive += vm.kind == spec_mod.SENSITIVE
            else:
                self.push(t + data.lifetime_s, DEPART, vm)
        elif kind == DEPART:
            if data.host is not None:
                h = self.hosts[data.host]
                self.sched.release(data.host, self.flavor_objs[data.req.flavor])
                self.remove(h, data, t)
        elif kind == IO_DONE:
            self.sched.io_op_done(data)
        elif kind == PUBLISH:
            self.publish(data[0], data[1], t)
        elif kind == SYNC:
            self.sync_step(t, data)
        elif kind == RECONCILE:
            self.reconcile(t)
        elif kind == SILENT:
            if self.sync.silent(data, t):
                self.sync_wake()
        elif kind == FAIL:
            self.fail(self.pick_failure(), t)
        elif kind == PIN:
            self.pin_region(t)
        elif kind == UNPIN:
            self.unpin_region(t)

    def result(self, end):
        sens = [vm for vm in self.vms if vm.kind == spec_mod.SENSITIVE and vm.alive_s > 0]
        viol = sorted(vm.violation_s for vm in sens)
        infl = sorted(vm.inflation_int / vm.alive_s for vm in sens)
        pct = run_output.percentile
        return Result(
            configuration=self.config.name, description=self.config.description,
            host_policy=self.policy, filters=self.sched.filters, weighers=self.sched.weighers,
            reads_board=self.reads_board,
            violation_s_total=math.fsum(viol),
            violation_s_p50=pct(viol, 50) or 0.0, violation_s_p99=pct(viol, 99) or 0.0,
            inflation_p50=pct(infl, 50) or 0.0, inflation_p99=pct(infl, 99) or 0.0,
            no_valid_host=self.no_valid_host, requests=len(self.requests),
            evacuations=self.evacuations, failed_evacuations=self.failed_evacuations,
            hosts_in_use_mean=self.in_use_int / end if end > 0 else 0.0,
            hosts_in_use_peak=self.in_use_peak,
            bulk_tb=math.fsum(vm.bytes for vm in self.vms) / 1e12,
            publishes=self.publishes, clamped_s=self.clamped_s,
            timeline=[round(v, 3) for v in self.timeline],
            inflations=[round(v, 4) for v in infl],
            wall_s=time.monotonic() - self.started,
            no_valid_host_sensitive=self.no_valid_host_sensitive, sensitive_placed=len(sens),
            candidate_limit=self.sched.limit, pinned_vms=len(self.pinned),
            placement_sync=self.sync is not None,
            sync=None if self.sync is None else self.sync.summary(end))
