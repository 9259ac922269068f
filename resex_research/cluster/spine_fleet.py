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

"""One configuration of the leaf-spine fleet study, simulated over the scenario's hours.

An event loop in simulated seconds over arrivals, departures and the
market's cuts coming into force, over a fabric of racks
(:mod:`~resex_research.cluster.fabric_links`). Between two events every
rate is constant, so each VM's outcome is integrated exactly: SLA
violation-seconds of the latency-sensitive VMs and of their ensembles,
bytes delivered by the bulk VMs.

**Ensembles.** A request of a latency-sensitive flavor is an ensemble: one
server (the scenario's ``server_flavor``, not itself latency-sensitive:
nova and host-only ResEx see a plain VM) and 1 to ``clients_max`` clients of
the sensitive flavor, each measuring its requests to the server: its window
names the server as its peer. A client's path is
:meth:`~resex_research.cluster.fabric_links.Topology.path` to the server:
its own port, the server's port (which carries the responses) and, across
racks, both racks' uplinks. The ensemble's one end-to-end SLA is violated
when any of its clients' is. Members land on distinct hosts (a server
group with anti-affinity, in every configuration).

**The markets** (``market`` of a configuration):

``none``
    no host taxes anyone;
``host``
    host-only ResEx: each host runs IOShares for its own latency-sensitive
    VMs: a client's own port is cut, nothing else;
``claims``
    what the agents do with ``[remote_claims] enabled``: the client's own
    port as above, and the server's port through the client's **remote
    claim** (the server's host treats it as a victim of its own port);
``fabric``
    fabric-wide ResEx: ``claims``, and each uplink on the path as a
    **shared link** declared by the operator, cut over every host's senders
    into it, hosts weighted PARDA-style.

Under ``claims`` and ``fabric`` a server whose clients claim counts as a
sensitive VM of its host (the agent reports a peer judged by a remote
victim so), which the bulk weigher reads.

Every cut obeys the evidence rule (the link's untaxed load at least
``evidence`` of its capacity) and brings the link to ``target``. A cut on
the victim's own port starts ``host_delay_s`` after it is needed (the
host's epoch); one that needs the board (a claim, a shared link) after
``claim_delay_s`` (the victim host's report, the board's refresh, the
serving host's epoch). A cut ends when it is no longer needed; no host
fails in this study, so the claims' expiry (``claim_expiry_s``) never
comes into play.

**Placement** (``placement``) is nova 34's own ``HostManager``
(:class:`~resex_research.cluster.scheduler.Scheduler`: Placement's
candidates, ``ComputeFilter``, ``RAMWeigher`` and ``CPUWeigher`` with
multipliers 1, the best host), as in the single-link study. An ensemble's
members are kept on distinct hosts by ``ignore_hosts`` (the hosts of the
members already placed), which stands for a server group's anti-affinity.
``resex_host`` and the ``resex_fabric`` pair add :class:`LeafSpineFilter`
and :class:`LeafSpineWeigher`, a filter and a weigher of the simulation (the
fabric rule has no resex_nova plugin yet) with resex_nova's rules and
bands: ``resex_host`` judges a sensitive request by its host's port load
(at least ``congestion_threshold``: refused; else the weigher's ``1 - 0.4
q / T``) and weighs a bulk request away from the hosts of sensitive VMs,
then of bulk ones (``0.6 + 0.4 / s``, ``s = (1 + n)(1 + 0.5 b / (1 + b))``
with ``n`` sensitive and ``b`` bulk VMs on the host). ``resex_links`` is
the scheduler's shared-link rule as built: a sensitive request also judged
by its rack's declared uplink, whose load resex_nova estimates as the
rack's port loads summed over the uplink's capacity.
``resex_fabric_members`` judges every member of an ensemble (its server
too) by the worst load of the links it adds to its path (its port; its
rack's uplink for a server; for a client in another rack than its server,
both uplinks), so that a congested uplink keeps a client in its server's
rack, and weighs a bulk request as ``resex_host`` does. ``resex_fabric``
is that and, for a bulk request, its rack's uplink: ``s`` is multiplied by
``1 + u``, ``u`` the uplink's load (the ensembles gathered in their servers'
racks would otherwise push the bulk VMs into fewer racks, whose uplinks
then cap them). The load the filter reads is the one the links' senders offer
untaxed (the board's view of a link's demand), current: the board's few
seconds of lag are left out.
"""

import collections
import dataclasses
import heapq
import json
import math
import random
import time
import uuid as uuid_mod

from nova.scheduler import filters as nova_filters
from nova.scheduler import weights as nova_weights

from resex_libvirt.board import remote_claims as remote_mod
from resex_research.cluster import fabric_links as links_mod
from resex_research.cluster import scheduler as scheduler_mod

_NS_UUID = uuid_mod.UUID("5d0c7a4e-2b1f-4e8a-9c3d-6f7e8a9b0c1d")

ARRIVE, DEPART, ACT = range(3)

MARKETS = ("none", "host", "claims", "fabric")
PLACEMENTS = ("nova", "resex_host", "resex_links", "resex_fabric", "resex_fabric_members")

SERVER, CLIENT, BULK, NEUTRAL = "server", "client", "bulk", "neutral"
#: A flavor's kinds, as the cluster spec names them (``spec.SENSITIVE``,
#: ``spec.BULK``; not imported: spec loads this study's scenarios).
FLAVOR_SENSITIVE, FLAVOR_BULK = "sensitive", "bulk"

#: Where a client's violations happen, in the order of its path's links.
_WHERE = ("own port", "server port", "uplink", "uplink")

#: A claim as a host report carries it (what the board stores, per claim).
SAMPLE_CLAIM = remote_mod.Claim(
    vm="8f14e45f-ceea-467f-a0e6-7a1c2b3d4e5f", peer="10.0.3.17", sla_us=209.0,
    threshold_pct=20.0, statistic="mean", count=1812, mean_us=231.4, std_us=41.9,
    p99_us=402.7, new=1812)
CLAIM_BYTES = len(json.dumps(SAMPLE_CLAIM.to_dict(), sort_keys=True, separators=(",", ":")))
#: A host's entry for a shared link it sends into (its load and weight): not built yet,
#: so a stated guess at its shape.
LINK_ENTRY_BYTES = len(json.dumps({"link": "rack-03-uplink", "bytes_per_s": 536870912.0,
                                   "weight": 12.0}, sort_keys=True, separators=(",", ":")))


@dataclasses.dataclass
class Result:
    """What one configuration of the leaf-spine study measured."""

    configuration: str
    description: str
    market: str
    placement: str
    violation_s_total: float
    violation_s_p50: float
    violation_s_p99: float
    ensemble_violation_s: float
    sensitive_placed: int
    ensembles_placed: int
    bulk_tb: float
    no_valid_host: int
    ensembles_refused: int
    cross_rack_share: float
    claims_mean: float
    claims_acted_mean: float
    cut_link_s: dict
    violation_s_at: dict
    capped_vm_s: float
    claim_bytes_per_host: float
    wall_s: float

    def to_dict(self):
        return dataclasses.asdict(self)


class _VM:
    __slots__ = ("key", "role", "flavor", "host", "ensemble", "violation_s", "bytes")

    def __init__(self, key, role, flavor, ensemble=None):
        self.key, self.role, self.flavor, self.ensemble = key, role, flavor, ensemble
        self.host = None
        self.violation_s = self.bytes = 0.0


class _Ensemble:
    __slots__ = ("server", "clients", "violation_s")

    def __init__(self):
        self.server = None
        self.clients = []
        self.violation_s = 0.0

    def hosts(self):
        out = set()
        if self.server is not None and self.server.host is not None:
            out.add(self.server.host)
        out.update(c.host for c in self.clients if c.host is not None)
        return out


#: The run whose fabric :class:`LeafSpineFilter` and :class:`LeafSpineWeigher` read.
STORE = None

_WEIGHERS = ["nova.scheduler.weights.ram.RAMWeigher", "nova.scheduler.weights.cpu.CPUWeigher"]


def nova_sections(placement):
    """The nova.conf sections of a placement: nova's defaults, plus the simulation's pair."""
    fs = {"enabled_filters": ["ComputeFilter"], "weight_classes": list(_WEIGHERS),
          "ram_weight_multiplier": 1.0, "cpu_weight_multiplier": 1.0, "host_subset_size": 1}
    if placement != "nova":
        fs["available_filters"] = ["nova.scheduler.filters.all_filters",
                                   __name__ + ".LeafSpineFilter"]
        fs["enabled_filters"].append("LeafSpineFilter")
        fs["weight_classes"].append(__name__ + ".LeafSpineWeigher")
    return {"filter_scheduler": fs}


class LeafSpineFilter(nova_filters.BaseHostFilter):
    """The ResEx filter's rule over the leaf-spine fabric (host or fabric rule, the run's)."""

    def host_passes(self, host_state, spec_obj):
        if STORE is None or STORE.requesting is None:
            return True
        return STORE.resex_weight(STORE.requesting, STORE.index[host_state.host]) is not None


class LeafSpineWeigher(nova_weights.BaseHostWeigher):
    """The ResEx weigher's bands over the leaf-spine fabric (fixed range: not stretched)."""

    minval = 0.0
    maxval = 1.0

    def weight_multiplier(self, host_state):
        return 1.0

    def _weigh_object(self, host_state, weight_properties):
        if STORE is None or STORE.requesting is None:
            return 0.0
        return STORE.resex_weight(STORE.requesting, STORE.index[host_state.host]) or 0.0


def run(scenario, config, requests):
    """Simulate ``config`` of ``scenario`` on ``requests``; a :class:`Result`."""
    global STORE
    started = time.monotonic()
    names = ["compute-%05d" % i for i in range(scenario.topology.hosts)]
    scheduler_mod.register_objects()
    conf = scheduler_mod.NovaConfig()
    try:
        conf.apply(nova_sections(config.placement))
        sched = scheduler_mod.Scheduler(names, scenario.host_vcpus, scenario.host_ram_mb,
                                        10000, seed=scenario.seed)
        STORE = _Run(scenario, config, requests, sched, started)
        return STORE.run()
    finally:
        STORE = None
        conf.clear()


def ensemble_clients(scenario, request):
    """How many clients the ensemble of ``request`` has (the same in every configuration)."""
    rng = random.Random("ensemble:%d:%d" % (scenario.seed, request.index))
    return rng.randint(1, scenario.clients_max)


class _Run:
    def __init__(self, scenario, config, requests, sched, started):
        self.sc, self.config, self.requests = scenario, config, requests
        self.topo = scenario.topology
        self.sched = sched
        self.names = list(sched.states)
        self.index = {name: i for i, name in enumerate(self.names)}
        self.flavor_objs = {f.name: sched.flavor(f) for f in scenario.flavors}
        self.requesting = None
        self.last_beat = 0.0
        self.on_host = [dict() for _ in range(self.topo.hosts)]   # key -> _VM
        self.senders = [dict() for _ in range(self.topo.racks)]   # rack -> key -> Sender
        self.clients = {}
        self.ensembles = {}
        self.bulk = {}
        self.heap, self.seq = [], 0
        self.dirty = set(range(self.topo.racks))
        self.offered = {}            # link -> load fraction, untaxed
        self.final = {}              # link -> load fraction, after the cuts
        self.rate = {}               # bulk key -> bytes/s
        self.capped = {}             # rack -> set of capped keys
        self.cut = {}                # rack -> set of links in force
        self.need = {}               # link -> (since, delay)
        self.acts = set()            # (rack, time) of the cuts' pending starts
        self.victims = {}            # link -> (local, remote)
        self.client_f, self.ensemble_f = {}, {}
        self.last_t = 0.0
        self.vm_seq = 0
        self.no_valid_host = self.ensembles_refused = 0
        self.cross = self.members = 0
        self.claims_int = self.acted_int = self.capped_int = self.claim_bytes_int = 0.0
        self.cut_int = collections.Counter()
        self.parts, self.parts_rate = collections.Counter(), collections.Counter()
        self.done_bulk, self.done_clients, self.done_ensembles = [], [], []
        self.started = started

    def push(self, t, kind, data):
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, data))

    # -- the loop ---------------------------------------------------------------------
    def run(self):
        for req in self.requests:
            self.push(req.arrive_s, ARRIVE, req)
        end = self.sc.duration_s
        self.recompute(0.0)
        while self.heap and self.heap[0][0] < end:
            t, _, kind, data = heapq.heappop(self.heap)
            self.integrate(t)
            self.handle(kind, t, data)
            self.recompute(t)
        self.integrate(end)
        return self.result(end)

    def handle(self, kind, t, data):
        """One event: an arrival, a departure, or a rack whose cut comes into force."""
        if kind == ARRIVE:
            self.arrive(data, t)
        elif kind == DEPART:
            self.depart(data)
        elif kind == ACT:
            self.dirty.add(data)

    def integrate(self, t):
        """Every VM's outcome from the last event to ``t`` (rates constant in between)."""
        dt = t - self.last_t
        self.last_t = t
        if dt <= 0:
            return
        for vm in self.clients.values():
            vm.violation_s += dt * self.client_f.get(vm.key, 0.0)
        for where, rate in self.parts_rate.items():
            self.parts[where] += dt * rate
        for ens in self.ensembles.values():
            ens.violation_s += dt * self.ensemble_f.get(id(ens), 0.0)
        for vm in self.bulk.values():
            vm.bytes += dt * self.rate.get(vm.key, 0.0)
        claims = self.claims_now()
        self.claims_int += dt * claims
        self.claim_bytes_int += dt * (claims * CLAIM_BYTES + (
            self.link_entries() * LINK_ENTRY_BYTES if self.config.market == "fabric" else 0))
        for rack_links in self.cut.values():
            for link in rack_links:
                self.cut_int[link[0]] += dt
                if self.victims.get(link, (0, 0))[0] == 0:
                    self.acted_int += dt
        self.capped_int += dt * sum(len(c) for c in self.capped.values())

    def claims_now(self):
        """Claims on the board: clients whose server is on another host (every agent's)."""
        if self.config.market == "none":
            return 0
        return sum(1 for c in self.clients.values()
                   if c.ensemble.server.host != c.host)

    def link_entries(self):
        """Hosts' entries for the shared links they send into (one uplink each)."""
        return sum(1 for r in self.senders for s in r.values() if s.leave > 0)

    # -- arrivals and departures --------------------------------------------------------
    def new_vm(self, role, flavor, ensemble=None):
        self.vm_seq += 1
        return _VM(self.vm_seq, role, flavor, ensemble)

    def arrive(self, req, t):
        flavor = self.sc.flavors[req.flavor]
        if flavor.kind != FLAVOR_SENSITIVE:
            vm = self.new_vm(BULK if flavor.kind == FLAVOR_BULK else NEUTRAL, flavor)
            host = self.select(vm)
            if host is None:
                self.no_valid_host += 1
                return
            self.land(vm, host)
            self.push(t + req.lifetime_s, DEPART, [vm])
            return
        ens = _Ensemble()
        ens.server = self.new_vm(SERVER, self.sc.server_flavor, ens)
        members = [ens.server] + [self.new_vm(CLIENT, flavor, ens)
                                  for _ in range(ensemble_clients(self.sc, req))]
        for vm in members:
            if vm.role == CLIENT:
                ens.clients.append(vm)
            host = self.select(vm)
            if host is None:
                self.no_valid_host += 1
                self.ensembles_refused += 1
                for placed in members:
                    if placed.host is not None:
                        self.leave(placed, record=False)
                return
            self.land(vm, host)
        self.ensembles[id(ens)] = ens
        for c in ens.clients:
            self.members += 1
            self.cross += self.topo.rack_of(c.host) != self.topo.rack_of(ens.server.host)
        self.index_victims()
        self.push(t + req.lifetime_s, DEPART, members)

    def depart(self, members):
        ens = members[0].ensemble
        for vm in members:
            if vm.host is not None:
                self.leave(vm)
        if ens is not None and id(ens) in self.ensembles:
            del self.ensembles[id(ens)]
            self.done_ensembles.append(ens)
            self.index_victims()

    def land(self, vm, host):
        vm.host = host
        self.on_host[host][vm.key] = vm
        rack = self.topo.rack_of(host)
        if vm.role == BULK:
            self.bulk[vm.key] = vm
            self.senders[rack][vm.key] = links_mod.Sender(
                vm.key, host, self.sc.bulk_demand * self.topo.port_bytes_per_s,
                self.sc.leave_rack, float(vm.flavor.vcpus))
        elif vm.role == CLIENT:
            self.clients[vm.key] = vm
        self.dirty.add(rack)

    def leave(self, vm, record=True):
        host = vm.host
        self.sched.release(self.names[host], self.flavor_objs[vm.flavor.name])
        del self.on_host[host][vm.key]
        rack = self.topo.rack_of(host)
        if vm.role == BULK:
            self.done_bulk.append(self.bulk.pop(vm.key))
            del self.senders[rack][vm.key]
        elif vm.role == CLIENT:
            vm = self.clients.pop(vm.key)
            if record:
                self.done_clients.append(vm)
        vm.host = None
        self.dirty.add(rack)

    # -- the market -------------------------------------------------------------------
    def index_victims(self):
        """Per link, the victims the configuration's market acts for: ``(local, remote)``.

        ``local``: clients on the link's host (the victim's own port);
        ``remote``: clients elsewhere whose path crosses it (a claim on a
        server's port, a shared uplink), under the fabric-wide market only.
        """
        market = self.config.market
        new = collections.defaultdict(lambda: [0, 0])
        if market != "none":
            for ens in self.ensembles.values():
                for c in ens.clients:
                    new[(links_mod.PORT, c.host)][0] += 1
                    for link in self.topo.path(c.host, ens.server.host)[1:]:
                        if market == "fabric" or (market == "claims"
                                                  and link[0] == links_mod.PORT):
                            new[link][1] += 1
        new = {link: tuple(v) for link, v in new.items()}
        for link in set(new) | set(self.victims):
            if new.get(link) != self.victims.get(link):
                self.dirty.add(self.topo.rack_of_link(link))
        self.victims = new

    def recompute(self, t):
        for rack in sorted(self.dirty):
            self.recompute_rack(rack, t)
        self.dirty.clear()
        self.refresh()

    def recompute_rack(self, rack, t):
        """The rack's rates: untaxed, then with every cut in force (links couple per rack)."""
        topo, sc = self.topo, self.sc
        senders = list(self.senders[rack].values())
        rate = links_mod.allocate(topo, senders)
        offered = links_mod.loads(topo, senders, rate)
        taxed = set()
        mine = topo.links_of_rack(rack)
        evident = links_mod.evidence_links(
            topo, offered, [link for link in mine if link in self.victims], sc.evidence)
        for link in mine:
            self.offered[link] = offered.get(link, 0.0) / topo.capacity(link)
            local = self.victims.get(link, (0, 0))[0]
            if link in evident:
                delay = sc.host_delay_s if local else sc.claim_delay_s
                since = self.need.get(link, (t, delay))[0]
                self.need[link] = (since, delay)
                if t >= since + delay - 1e-9:
                    taxed.add(link)
                elif (rack, since + delay) not in self.acts:
                    self.acts.add((rack, since + delay))
                    self.push(since + delay, ACT, rack)
            else:
                self.need.pop(link, None)
        caps = {}
        if taxed:
            rate, caps = links_mod.market(topo, senders, taxed, sc.target)
        final = links_mod.loads(topo, senders, rate)
        for link in topo.links_of_rack(rack):
            self.final[link] = final.get(link, 0.0) / topo.capacity(link)
        for s in senders:
            self.rate[s.vm] = rate[s.vm]
        self.cut[rack] = taxed
        self.capped[rack] = set(caps)

    def refresh(self):
        """Each client's and ensemble's share of violated seconds at the current loads."""
        knee = self.sc.knee
        self.client_f, self.ensemble_f = {}, {}
        self.parts_rate = collections.Counter()
        for eid, ens in self.ensembles.items():
            union = set()
            for c in ens.clients:
                path = self.topo.path(c.host, ens.server.host)
                union.update(path)
                shares = [links_mod.violation_share(self.final.get(link, 0.0), knee)
                          for link in path]
                f = links_mod.path_violation_share(
                    [self.final.get(link, 0.0) for link in path], knee)
                self.client_f[c.key] = f
                if f > 0:
                    total = math.fsum(shares)
                    for where, v in zip(_WHERE, shares):
                        if v > 0:
                            self.parts_rate[where] += f * v / total
            self.ensemble_f[eid] = links_mod.path_violation_share(
                [self.final.get(link, 0.0) for link in union], knee)

    # -- placement --------------------------------------------------------------------
    def judged_load(self, vm, host):
        """The load the placement's ResEx filter judges ``vm`` by on ``host``, or None."""
        rule, topo = self.config.placement, self.topo
        port = self.offered.get((links_mod.PORT, host), 0.0)
        if rule == "resex_host":
            return port if vm.role == CLIENT else None
        if rule == "resex_links":
            return max(port, self.declared_load(topo.rack_of(host))) \
                if vm.role == CLIENT else None
        if not rule.startswith("resex_fabric") or vm.role not in (CLIENT, SERVER):
            return None
        rack = topo.rack_of(host)
        if vm.role == SERVER:
            return max(port, self.offered.get((links_mod.UPLINK, rack), 0.0))
        peer = topo.rack_of(vm.ensemble.server.host)
        if peer == rack:
            return port
        return max(port, self.offered.get((links_mod.UPLINK, rack), 0.0),
                   self.offered.get((links_mod.UPLINK, peer), 0.0))

    def declared_load(self, rack):
        """resex_nova's load of a declared uplink: its hosts' port loads summed, over it.

        An upper bound (a host's traffic to its rack neighbours is counted
        too), as the scheduler's shared-link rule estimates it.
        """
        topo = self.topo
        total = math.fsum(self.offered.get((links_mod.PORT, h), 0.0) for h in topo.hosts_of(rack))
        return total * topo.port_bytes_per_s / topo.uplink_bytes_per_s

    def bulk_weight(self, host):
        """resex_nova's bulk band: avoid the hosts of sensitive VMs, then of bulk ones.

        A server judged by its clients' remote claims counts as a sensitive
        VM of its host's report (an agent acting on claims says so).
        """
        claims = self.config.market in ("claims", "fabric")
        n = b = 0
        for vm in self.on_host[host].values():
            n += vm.role == CLIENT or (claims and vm.role == SERVER and bool(vm.ensemble.clients))
            b += vm.role == BULK
        s = (1 + n) * (1.0 + 0.5 * b / (1.0 + b))
        if self.config.placement == "resex_fabric":
            s *= 1.0 + self.offered.get((links_mod.UPLINK, self.topo.rack_of(host)), 0.0)
        return 0.6 + 0.4 / s

    def resex_weight(self, vm, host):
        """The simulation's ResEx weigher band of ``vm`` on ``host``; None: the filter refuses."""
        if self.config.placement == "nova":
            return 0.0
        q = self.judged_load(vm, host)
        if q is not None:
            threshold = self.sc.congestion_threshold
            return 1.0 - 0.4 * q / threshold if q < threshold else None
        return self.bulk_weight(host) if vm.role == BULK else 0.0

    def select(self, vm):
        """The host nova's scheduler picks for ``vm`` (claimed), or None (NoValidHost)."""
        now = time.monotonic()
        if now - self.last_beat > 5.0:
            self.sched.heartbeat()
            self.last_beat = now
        spec = self.sched.boot_spec(self.flavor_objs[vm.flavor.name],
                                    str(uuid_mod.uuid5(_NS_UUID, str(vm.key))), "project")
        if vm.ensemble is not None:
            taken = vm.ensemble.hosts()
            if taken:
                spec.ignore_hosts = [self.names[h] for h in sorted(taken)]
        self.requesting = vm
        try:
            name = self.sched.select(spec)
        finally:
            self.requesting = None
        return None if name is None else self.index[name]

    # -- the result -------------------------------------------------------------------
    def result(self, end):
        from resex_libvirt.sim import run_output
        clients = self.done_clients + list(self.clients.values())
        viol = sorted(c.violation_s for c in clients)
        ensembles = self.done_ensembles + list(self.ensembles.values())
        bulk = self.done_bulk + list(self.bulk.values())
        pct = run_output.percentile
        span = end if end > 0 else 1.0
        return Result(
            configuration=self.config.name, description=self.config.description,
            market=self.config.market, placement=self.config.placement,
            violation_s_total=math.fsum(viol), violation_s_p50=pct(viol, 50) or 0.0,
            violation_s_p99=pct(viol, 99) or 0.0,
            ensemble_violation_s=math.fsum(e.violation_s for e in ensembles),
            sensitive_placed=len(clients), ensembles_placed=len(ensembles),
            bulk_tb=math.fsum(vm.bytes for vm in bulk) / 1e12,
            no_valid_host=self.no_valid_host, ensembles_refused=self.ensembles_refused,
            cross_rack_share=self.cross / self.members if self.members else 0.0,
            claims_mean=self.claims_int / span, claims_acted_mean=self.acted_int / span,
            cut_link_s=dict(self.cut_int), violation_s_at=dict(self.parts),
            capped_vm_s=self.capped_int,
            claim_bytes_per_host=self.claim_bytes_int / span / self.topo.hosts,
            wall_s=time.monotonic() - self.started)
