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

"""The leaf-spine fleet study: racks, shared uplinks, ensembles, three markets compared.

A fleet scenario with a ``[leaf_spine]`` table (``cluster_leaf_spine`` is
packaged) is this study rather than the single-link one: ``resex-sim
cluster`` loads it through :func:`resex_research.cluster.spec.load` and
runs every configuration of it (:mod:`~resex_research.cluster.spine_fleet`)
on the same requests (:mod:`~resex_research.cluster.demand`), then prints
one table. The design, the model's simplifications and the figures are in
``doc/source/fleet.rst``, "Across hosts: the leaf-spine study".

Scenario tables: ``[leaf_spine]`` (``racks``, ``hosts_per_rack``,
``port_bytes_per_s``, ``oversubscription``, ``vcpus``, ``ram_mb``),
``[traffic]`` (``bulk_demand``: a bulk VM's offered load as a share of its
port; ``leave_rack``: the share of it leaving the rack; ``knee``),
``[market]`` (``evidence``, ``target``, ``host_delay_s``,
``claim_delay_s``, ``claim_expiry_s``), ``[scheduler]``
(``congestion_threshold``), ``[ensembles]`` (``server_flavor``,
``clients_max``), ``[[flavors]]``, ``[arrivals]`` and ``[lifetimes]`` as
in every fleet scenario, and ``[[configurations]]`` (``name``,
``description``, ``market``: none, host, claims or fabric; ``placement``:
nova, resex_host, resex_links, resex_fabric_members or resex_fabric).
"""

import dataclasses
import time

from resex_libvirt.sim import run_output
from resex_research.cluster import demand
from resex_research.cluster import fabric_links
from resex_research.cluster import spine_fleet

TABLE = "leaf_spine"

TOP_KEYS = {"name", "description", "seed", "duration_s", "leaf_spine", "traffic", "market",
            "scheduler", "ensembles", "flavors", "arrivals", "lifetimes", "configurations"}
_FABRIC = {"racks", "hosts_per_rack", "port_bytes_per_s", "oversubscription", "vcpus",
           "ram_mb"}
_TRAFFIC = {"bulk_demand", "leave_rack", "knee"}
_MARKET = {"evidence", "target", "host_delay_s", "claim_delay_s", "claim_expiry_s"}
_SCHED = {"congestion_threshold"}
_ENSEMBLES = {"server_flavor", "clients_max"}
_ARRIVALS = {"mean_per_hour", "daily_swing", "peak_hour", "initial_vms"}
_LIFETIMES = {"alpha", "min_s", "max_s"}
_CONFIG = {"name", "description", "market", "placement"}

COLUMNS = ["config", "market", "placement", "viol-s total", "viol-s/VM p50", "p99",
           "ensemble viol-s", "bulk TB", "NoValidHost", "cross-rack %", "claims",
           "cuts by claim", "claim B/host", "wall s"]


@dataclasses.dataclass(frozen=True)
class Configuration:
    name: str
    description: str
    market: str
    placement: str


@dataclasses.dataclass(frozen=True)
class LeafSpineScenario:
    """A leaf-spine fleet scenario (fields as the module docstring names its keys)."""

    name: str
    description: str
    seed: int
    duration_s: float
    topology: fabric_links.Topology
    host_vcpus: int
    host_ram_mb: int
    flavors: tuple
    server_flavor: object
    clients_max: int
    bulk_demand: float
    leave_rack: float
    knee: float
    evidence: float
    target: float
    host_delay_s: float
    claim_delay_s: float
    claim_expiry_s: float
    congestion_threshold: float
    mean_per_hour: float
    daily_swing: float
    peak_hour: float
    initial_vms: int
    lifetime_alpha: float
    lifetime_min_s: float
    lifetime_max_s: float
    configurations: tuple
    path: str | None = None

    @property
    def hosts(self):
        return self.topology.hosts

    def configuration(self, name):
        from resex_libvirt import exceptions
        for c in self.configurations:
            if c.name == name:
                return c
        raise exceptions.ConfigError("%s: no configuration %r (have: %s)" % (
            self.name, name, ", ".join(c.name for c in self.configurations)))

    def with_seed(self, seed):
        return dataclasses.replace(self, seed=int(seed))

    def with_duration(self, duration_s):
        from resex_libvirt import exceptions
        if not duration_s > 0:
            raise exceptions.ConfigError("duration must be > 0")
        return dataclasses.replace(self, duration_s=float(duration_s))

    def with_hosts(self, hosts):
        """Whole racks: ``hosts`` rounded up to a rack, the demand scaled with them."""
        from resex_libvirt import exceptions
        if hosts < 1:
            raise exceptions.ConfigError("hosts must be >= 1")
        per = self.topology.hosts_per_rack
        racks = -(-int(hosts) // per)
        scale = racks / self.topology.racks
        return dataclasses.replace(
            self, topology=dataclasses.replace(self.topology, racks=racks),
            mean_per_hour=self.mean_per_hour * scale,
            initial_vms=round(self.initial_vms * scale))


def parse(data, top, flavors_of, source, default_name="cluster_leaf_spine"):
    """The :class:`LeafSpineScenario` of a decoded document (``top``: spec's table reader).

    ``flavors_of``: spec's ``[[flavors]]`` reader (the same kinds and SLA rules).
    """
    fab = top.sub("leaf_spine", _FABRIC)
    traffic = top.sub("traffic", _TRAFFIC, required=False)
    market = top.sub("market", _MARKET, required=False)
    sched = top.sub("scheduler", _SCHED, required=False)
    ens = top.sub("ensembles", _ENSEMBLES)
    arrivals = top.sub("arrivals", _ARRIVALS)
    life = top.sub("lifetimes", _LIFETIMES)
    flavors, _ = flavors_of(top, data.get("flavors"))
    names = [f.name for f in flavors]
    server = ens.text("server_flavor")
    if server not in names:
        raise ens.error("server_flavor", "must name one of the [[flavors]] (%s), got %r"
                        % (", ".join(names), server))
    topo = fabric_links.Topology(
        racks=fab.num("racks", integer=True, lo=1, hi=1000),
        hosts_per_rack=fab.num("hosts_per_rack", integer=True, lo=1, hi=256),
        port_bytes_per_s=fab.num("port_bytes_per_s", float(1 << 30), positive=True),
        oversubscription=fab.num("oversubscription", 1.0, lo=1.0, hi=64.0))
    evidence = market.num("evidence", 0.8, lo=0.0, hi=1.0)
    target = market.num("target", 0.7, positive=True, hi=1.0)
    if target > evidence:
        raise market.error("target", "must not exceed evidence (a cut ends below the "
                                     "load that started it)")
    return LeafSpineScenario(
        name=top.text("name", default_name), description=top.text("description", ""),
        seed=top.num("seed", 1, integer=True, lo=0),
        duration_s=top.num("duration_s", positive=True),
        topology=topo, host_vcpus=fab.num("vcpus", integer=True, lo=1),
        host_ram_mb=fab.num("ram_mb", integer=True, lo=1), flavors=flavors,
        server_flavor=flavors[names.index(server)],
        clients_max=ens.num("clients_max", 3, integer=True, lo=1, hi=64),
        bulk_demand=traffic.num("bulk_demand", 1.0, positive=True, hi=1.0),
        leave_rack=traffic.num("leave_rack", 0.5, lo=0.0, hi=1.0),
        knee=traffic.num("knee", 0.8, lo=0.0, hi=0.999),
        evidence=evidence, target=target,
        host_delay_s=market.num("host_delay_s", 1.0, lo=0.0),
        claim_delay_s=market.num("claim_delay_s", 3.0, lo=0.0),
        claim_expiry_s=market.num("claim_expiry_s", 10.0, positive=True),
        congestion_threshold=sched.num("congestion_threshold", 0.8, positive=True, hi=1.0),
        mean_per_hour=arrivals.num("mean_per_hour", positive=True),
        daily_swing=arrivals.num("daily_swing", 0.0, lo=0.0, hi=1.0),
        peak_hour=arrivals.num("peak_hour", 14.0, lo=0.0, hi=24.0),
        initial_vms=arrivals.num("initial_vms", 0, integer=True, lo=0),
        lifetime_alpha=life.num("alpha", 1.5, lo=1.01, hi=10.0),
        lifetime_min_s=life.num("min_s", positive=True),
        lifetime_max_s=life.num("max_s", positive=True),
        configurations=_configurations(top, data.get("configurations")), path=source)


def _configurations(top, raw):
    table = type(top)       # spec's table reader (not imported: spec imports this module)
    if not isinstance(raw, list) or not raw:
        raise top.error("configurations", "at least one [[configurations]] table is required")
    out, seen = [], set()
    for i, item in enumerate(raw):
        c = table(top.source, item, "configurations[%d]" % i, _CONFIG)
        name = c.text("name")
        if name in seen:
            raise c.error("name", "duplicate configuration %r" % name)
        seen.add(name)
        market = c.text("market", "none")
        if market not in spine_fleet.MARKETS:
            raise c.error("market", "must be one of %s, got %r"
                          % (", ".join(spine_fleet.MARKETS), market))
        placement = c.text("placement", "nova")
        if placement not in spine_fleet.PLACEMENTS:
            raise c.error("placement", "must be one of %s, got %r"
                          % (", ".join(spine_fleet.PLACEMENTS), placement))
        out.append(Configuration(name, c.text("description", name), market, placement))
    return tuple(out)


def run(scenario, configurations=None, progress=None):
    """Every configuration on the same requests; a dict with the results."""
    started = time.monotonic()
    configs = [scenario.configuration(n) for n in configurations] if configurations \
        else list(scenario.configurations)
    requests = demand.generate(scenario)
    results = []
    for c in configs:
        r = spine_fleet.run(scenario, c, requests)
        results.append(r)
        if progress is not None:
            progress("configuration %s done in %.1f s" % (c.name, r.wall_s))
    topo = scenario.topology
    return {"scenario": scenario.name, "seed": scenario.seed, "hosts": topo.hosts,
            "racks": topo.racks, "hosts_per_rack": topo.hosts_per_rack,
            "oversubscription": topo.oversubscription, "leave_rack": scenario.leave_rack,
            "duration_s": scenario.duration_s, "requests": len(requests),
            "results": results, "wall_s": time.monotonic() - started}


def rows(results):
    out = []
    for r in results:
        out.append([r.configuration, r.market, r.placement, "%.0f" % r.violation_s_total,
                    "%.0f" % r.violation_s_p50, "%.0f" % r.violation_s_p99,
                    "%.0f" % r.ensemble_violation_s, "%.2f" % r.bulk_tb,
                    "%d" % r.no_valid_host, "%.0f" % (100.0 * r.cross_rack_share),
                    "%.1f" % r.claims_mean, "%.1f" % r.claims_acted_mean,
                    "%.0f" % r.claim_bytes_per_host, "%.0f" % r.wall_s])
    return out


def goals(results):
    """``[(goal, measured, met)]``: configuration ``w`` (fabric-wide) against ``h`` (host-only)."""
    by = {r.configuration: r for r in results}
    host, fabric = by.get("h"), by.get("w")
    if host is None or fabric is None:
        return []
    out = []
    if host.violation_s_total > 0:
        share = fabric.violation_s_total / host.violation_s_total
        out.append(("leaf-spine fleet: sensitive SLA violation-seconds, fabric-wide vs "
                    "host-only ResEx: <= 10% of host-only's", "%.2f%%" % (100.0 * share),
                    share <= 0.10))
    else:
        out.append(("leaf-spine fleet: sensitive SLA violation-seconds, fabric-wide vs "
                    "host-only ResEx: <= 10% of host-only's", "host-only has none",
                    fabric.violation_s_total == 0))
    keep = fabric.bulk_tb / host.bulk_tb if host.bulk_tb else 1.0
    out.append(("leaf-spine fleet: bulk throughput, fabric-wide vs host-only ResEx: >= 90% "
                "of host-only's", "%.1f%%" % (100.0 * keep), keep >= 0.90))
    return out


def format_table(data):
    results = data["results"]
    lines = [run_output.table(
        "Leaf-spine fleet study %s: %d racks x %d hosts, uplinks %g:1, %.0f%% of bulk traffic "
        "leaving its rack, %.1f h simulated, %d requests, seed %d (%.0f s)" % (
            data["scenario"], data["racks"], data["hosts_per_rack"], data["oversubscription"],
            100.0 * data["leave_rack"], data["duration_s"] / 3600.0, data["requests"],
            data["seed"], data["wall_s"]), COLUMNS, rows(results))]
    lines.append("")
    for r in results:
        cut = ", ".join("%s %.0f link-h" % (k, v / 3600.0)
                        for k, v in sorted(r.cut_link_s.items()))
        at = ", ".join("%s %.0f%%" % (k, 100.0 * v / r.violation_s_total)
                       for k, v in sorted(r.violation_s_at.items()) if r.violation_s_total)
        lines.append("%s: %s; %d sensitive VMs in %d ensembles (%d refused); violations at: "
                     "%s; links cut: %s; VMs capped %.0f VM-h" % (
                         r.configuration, r.description, r.sensitive_placed,
                         r.ensembles_placed, r.ensembles_refused, at or "none", cut or "none",
                         r.capped_vm_s / 3600.0))
    lines += ["", "claims: remote claims on the board (mean); cuts by claim: links cut for "
                  "victims on other hosts only (mean); claim B/host: bytes the claims (and "
                  "the fabric market's shared-link entries) add to a host's report"]
    g = goals(results)
    if g:
        lines += ["", "Goals (printed, not asserted):"]
        for goal, measured, met in g:
            lines.append("  [%s] %s: %s" % ("met" if met else "MISSED", goal, measured))
    return "\n".join(lines)


def to_dict(data):
    out = {k: v for k, v in data.items() if k != "results"}
    out["results"] = [r.to_dict() for r in data["results"]]
    out["goals"] = [{"goal": g, "measured": m, "met": met} for g, m, met in
                    goals(data["results"])]
    return out
