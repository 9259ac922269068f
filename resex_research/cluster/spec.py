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

"""Fleet scenarios as data: TOML files for ``resex-sim cluster``.

The format is documented key by key in ``doc/source/fleet.rst``; the
packaged scenarios live in the ``scenarios`` directory next to this module
(``cluster_default``, ``cluster_large``, ``cluster_small``,
``cluster_traits_10k``, and the leaf-spine study's ``cluster_leaf_spine``,
:mod:`~resex_research.cluster.leaf_spine`). Every error is a
:class:`~resex_libvirt.exceptions.ConfigError` naming the file and the key;
unknown keys are rejected.

The ``[nova.<group>]`` tables are nova.conf sections: each key is set on
nova's ``CONF`` with oslo.config's ``set_override`` for the run of each
configuration, and a configuration's own ``[configurations.nova.<group>]``
tables override the shared ones, so a configuration enables exactly the
filters, weighers and multipliers it names.
"""

import dataclasses
import importlib.resources
import math
import os
import tomllib

from resex_libvirt import exceptions
from resex_libvirt.sim import scenario as host_scenario
from resex_libvirt import sla as sla_mod
from resex_nova import traits as traits_mod
from resex_research.cluster import surrogate as surrogate_mod
from resex_research.cluster import trait_sync
from resex_research import policy_catalog

SUFFIX = ".toml"

_TOP = {"name", "description", "seed", "duration_s", "hosts", "host_sim", "flavors",
        "arrivals", "lifetimes", "failure", "timing", "nova", "configurations",
        "congested_region", "placement_sync"}
_HOSTS = {"count", "vcpus", "ram_mb", "disk_gb", "randomize_candidates"}
_HOST_SIM = {"link_bytes_per_s", "mtu", "sensitive_workload", "bulk_workload",
             "sensitive_points", "max_bulk", "run_s", "warmup_s", "seed"}
_WORKLOAD = {"buffer", "compute_us", "clients", "think_us"}
_FLAVOR = {"name", "vcpus", "ram_mb", "disk_gb", "share", "day_swing", "extra_specs"}
_ARRIVALS = {"mean_per_hour", "daily_swing", "peak_hour", "initial_vms"}
_LIFETIMES = {"alpha", "min_s", "max_s"}
_FAILURE = {"at_s", "host"}
_TIMING = {"report_delay_s", "keepalive_s", "refresh_interval_s", "build_s", "max_age_s"}
_CONFIG = {"name", "description", "host_policy", "nova", "placement_sync"}
_REGION = {"hosts", "vms_per_host", "flavor", "from_s", "until_s"}
_SYNC = {f.name for f in dataclasses.fields(trait_sync.SyncModel)}

SENSITIVE, BULK, NEUTRAL = "sensitive", "bulk", "neutral"


@dataclasses.dataclass(frozen=True)
class Flavor:
    name: str
    vcpus: int
    ram_mb: int
    disk_gb: int
    share: float
    day_swing: float
    extra_specs: dict
    kind: str


@dataclasses.dataclass(frozen=True)
class Configuration:
    name: str
    description: str
    host_policy: str
    nova: dict     # {group: {option: value}}, shared sections merged in
    placement_sync: bool = False   # resex-placement-sync keeps the traits


@dataclasses.dataclass(frozen=True)
class CongestedRegion:
    """The first ``hosts`` hosts in provider order, each with ``vms_per_host`` pinned VMs.

    The VMs (of flavor index ``flavor``) are placed outside the scheduler
    (a tenant pinned to an aggregate) from ``from_s`` to ``until_s``.
    """

    hosts: int
    vms_per_host: int
    flavor: int
    from_s: float
    until_s: float | None


@dataclasses.dataclass(frozen=True)
class FleetScenario:
    name: str
    description: str
    seed: int
    duration_s: float
    hosts: int
    host_vcpus: int
    host_ram_mb: int
    host_disk_gb: int
    randomize_candidates: bool
    model: surrogate_mod.HostModel
    flavors: tuple
    mean_per_hour: float
    daily_swing: float
    peak_hour: float
    initial_vms: int
    lifetime_alpha: float
    lifetime_min_s: float
    lifetime_max_s: float
    failure_at_s: float | None
    failure_host: str
    report_delay_s: float
    keepalive_s: float
    refresh_interval_s: float
    build_s: float
    max_age_s: float
    configurations: tuple
    path: str | None = None
    region: CongestedRegion | None = None
    placement_sync: trait_sync.SyncModel = trait_sync.SyncModel()

    def configuration(self, name):
        for c in self.configurations:
            if c.name == name:
                return c
        raise exceptions.ConfigError("%s: no configuration %r (have: %s)" % (
            self.name, name, ", ".join(c.name for c in self.configurations)))

    def with_seed(self, seed):
        return dataclasses.replace(self, seed=int(seed))

    def with_duration(self, duration_s):
        if not duration_s > 0:
            raise exceptions.ConfigError("duration must be > 0")
        fail = self.failure_at_s
        return dataclasses.replace(self, duration_s=float(duration_s),
                                   failure_at_s=fail if fail is not None and fail < duration_s
                                   else None)

    def with_hosts(self, hosts):
        if hosts < 1:
            raise exceptions.ConfigError("hosts must be >= 1")
        scale = hosts / self.hosts
        region = self.region
        if region is not None:
            region = dataclasses.replace(region, hosts=min(int(hosts),
                                                           round(region.hosts * scale)))
        return dataclasses.replace(self, hosts=int(hosts),
                                   mean_per_hour=self.mean_per_hour * scale,
                                   initial_vms=round(self.initial_vms * scale), region=region)


def scenarios_dir():
    return importlib.resources.files("resex_research.cluster") / "scenarios"


def names():
    return sorted(p.name[:-len(SUFFIX)] for p in scenarios_dir().iterdir()
                  if p.name.endswith(SUFFIX))


def load(path_or_name):
    text = os.fspath(path_or_name)
    if not (os.sep in text or text.endswith(SUFFIX) or os.path.exists(text)):
        candidate = scenarios_dir() / (text + SUFFIX)
        if not candidate.is_file():
            raise exceptions.ConfigError(
                "no fleet scenario %r: not a file, and not one of the packaged ones (%s)"
                % (text, ", ".join(names())))
        text = str(candidate)
    try:
        with open(text, "rb") as f:
            data = tomllib.load(f)
    except OSError as exc:
        raise exceptions.ConfigError("%s: cannot read scenario: %s" % (text, exc)) from exc
    except tomllib.TOMLDecodeError as exc:
        raise exceptions.ConfigError("%s: not valid TOML: %s" % (text, exc)) from exc
    base = os.path.basename(text)
    return parse(data, source=text, default_name=base[:-len(SUFFIX)]
                 if base.endswith(SUFFIX) else base)


def loads(text, source="<string>"):
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise exceptions.ConfigError("%s: not valid TOML: %s" % (source, exc)) from exc
    return parse(data, source=source)


class _Table:
    """Reads one TOML table, naming ``source`` and the key path in every error."""

    def __init__(self, source, data, path, allowed):
        self.source, self.path = source, path
        if not isinstance(data, dict):
            raise self.error(None, "must be a table")
        unknown = sorted(set(data) - allowed)
        if unknown:
            raise self.error(unknown[0], "unknown key; known: %s" % ", ".join(sorted(allowed)))
        self.data = data

    def error(self, key, reason):
        where = ".".join(p for p in (self.path, key) if p)
        return exceptions.ConfigError("%s: %s: %s" % (self.source, where or "scenario", reason))

    def num(self, key, default=dataclasses.MISSING, lo=None, hi=None, integer=False,
            positive=False):
        if key not in self.data:
            if default is dataclasses.MISSING:
                raise self.error(key, "is required")
            return default
        v = self.data[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise self.error(key, "must be a finite number, got %r" % (v,))
        if integer and not float(v).is_integer():
            raise self.error(key, "must be an integer, got %r" % (v,))
        if positive and not v > 0:
            raise self.error(key, "must be > 0, got %r" % (v,))
        if lo is not None and v < lo:
            raise self.error(key, "must be >= %s, got %r" % (lo, v))
        if hi is not None and v > hi:
            raise self.error(key, "must be <= %s, got %r" % (hi, v))
        return int(v) if integer else float(v)

    def text(self, key, default=dataclasses.MISSING):
        if key not in self.data:
            if default is dataclasses.MISSING:
                raise self.error(key, "is required")
            return default
        v = self.data[key]
        if not isinstance(v, str) or not v.strip():
            raise self.error(key, "must be a non-empty string, got %r" % (v,))
        return v

    def sub(self, key, allowed, required=True):
        if key not in self.data:
            if required:
                raise self.error(key, "is required")
            return _Table(self.source, {}, ".".join(p for p in (self.path, key) if p), allowed)
        return _Table(self.source, self.data[key], ".".join(p for p in (self.path, key) if p),
                      allowed)


def _flag(table, key, default):
    value = table.data.get(key, default)
    if not isinstance(value, bool):
        raise table.error(key, "must be true or false, got %r" % (value,))
    return value


def _workload(table, key):
    t = table.sub(key, _WORKLOAD)
    out = dict(t.data)
    # Validated the way a host scenario validates a VM.
    host_scenario.parse({"duration_s": 1.0, "vms": [dict(out, name="probe")]},
                        source="%s: %s.%s" % (t.source, t.path.rsplit(".", 1)[0], key))
    return out


def _nova_sections(table, path):
    out = {}
    if not isinstance(table, dict):
        raise exceptions.ConfigError("%s: %s: must be a table of nova.conf sections"
                                     % (path[0], path[1]))
    for group, opts in table.items():
        if not isinstance(opts, dict):
            raise exceptions.ConfigError("%s: %s.%s: must be a table (a nova.conf section)"
                                         % (path[0], path[1], group))
        out[group] = dict(opts)
    return out


def parse(data, source="<fleet scenario>", default_name="cluster"):
    """The :class:`FleetScenario` of a decoded TOML document (errors name the key).

    A document with a ``[leaf_spine]`` table is the leaf-spine study's: a
    :class:`~resex_research.cluster.leaf_spine.LeafSpineScenario`.
    """
    if isinstance(data, dict) and "leaf_spine" in data:
        from resex_research.cluster import leaf_spine
        return leaf_spine.parse(data, _Table(source, data, "", leaf_spine.TOP_KEYS),
                                _flavors, source, default_name)
    top = _Table(source, data, "", _TOP)
    name = top.text("name", default_name)
    duration = top.num("duration_s", positive=True)
    hosts = top.sub("hosts", _HOSTS)
    sim = top.sub("host_sim", _HOST_SIM)
    arrivals = top.sub("arrivals", _ARRIVALS)
    life = top.sub("lifetimes", _LIFETIMES)
    failure = top.sub("failure", _FAILURE, required=False)
    timing = top.sub("timing", _TIMING, required=False)
    flavors, sensitive_sla = _flavors(top, data.get("flavors"))
    host_vcpus = hosts.num("vcpus", integer=True, lo=1)
    model = _host_model(sim, host_vcpus, flavors, sensitive_sla)
    fail_at = failure.num("at_s", None, lo=0.0)
    fail_host = failure.text("host", "busiest")
    configs = _configurations(top, data.get("nova", {}), data.get("configurations"))
    host_count = hosts.num("count", integer=True, lo=1, hi=100000)
    region = _region(top, flavors, host_count, duration)
    return FleetScenario(
        name=name, description=top.text("description", ""),
        seed=top.num("seed", 1, integer=True, lo=0), duration_s=duration,
        hosts=host_count, host_vcpus=host_vcpus,
        host_ram_mb=hosts.num("ram_mb", integer=True, lo=1),
        host_disk_gb=hosts.num("disk_gb", 10000, integer=True, lo=1),
        randomize_candidates=_flag(hosts, "randomize_candidates", False),
        model=model, flavors=flavors,
        mean_per_hour=arrivals.num("mean_per_hour", positive=True),
        daily_swing=arrivals.num("daily_swing", 0.0, lo=0.0, hi=1.0),
        peak_hour=arrivals.num("peak_hour", 14.0, lo=0.0, hi=24.0),
        initial_vms=arrivals.num("initial_vms", 0, integer=True, lo=0),
        lifetime_alpha=life.num("alpha", 1.5, lo=1.01, hi=10.0),
        lifetime_min_s=life.num("min_s", positive=True),
        lifetime_max_s=life.num("max_s", positive=True),
        failure_at_s=fail_at if fail_at is not None and fail_at < duration else None,
        failure_host=fail_host,
        report_delay_s=timing.num("report_delay_s", 5.0, lo=0.0),
        keepalive_s=timing.num("keepalive_s", 20.0, positive=True),
        refresh_interval_s=timing.num("refresh_interval_s", 2.0, positive=True),
        build_s=timing.num("build_s", 120.0, lo=0.0),
        max_age_s=timing.num("max_age_s", 60.0, positive=True),
        configurations=configs, path=source, region=region,
        placement_sync=_sync_model(top.sub("placement_sync", _SYNC, required=False)))


def _region(top, flavors, host_count, duration):
    """The ``[congested_region]`` table, or None."""
    if "congested_region" not in top.data:
        return None
    t = top.sub("congested_region", _REGION)
    names = [f.name for f in flavors]
    default = next((f.name for f in flavors if f.kind == BULK), None)
    flavor = t.text("flavor", default) if default is not None else t.text("flavor")
    if flavor not in names:
        raise t.error("flavor", "must name one of the [[flavors]] (%s), got %r"
                      % (", ".join(names), flavor))
    start = t.num("from_s", 0.0, lo=0.0)
    until = t.num("until_s", None, lo=0.0)
    if until is not None and until <= start:
        raise t.error("until_s", "must be after from_s")
    return CongestedRegion(
        hosts=t.num("hosts", integer=True, lo=1, hi=host_count),
        vms_per_host=t.num("vms_per_host", 1, integer=True, lo=1),
        flavor=names.index(flavor), from_s=start,
        until_s=until if until is not None and until < duration else None)


def _sync_model(t):
    """The ``[placement_sync]`` table: the service's timing (defaults: :class:`SyncModel`)."""
    d = trait_sync.SyncModel()
    policy = t.text("unknown_host_policy", d.unknown_host_policy)
    if policy not in traits_mod.UNKNOWN_POLICIES:
        raise t.error("unknown_host_policy", "must be one of %s, got %r"
                      % (", ".join(traits_mod.UNKNOWN_POLICIES), policy))
    return trait_sync.SyncModel(
        watch_latency_s=t.num("watch_latency_s", d.watch_latency_s, lo=0.0),
        call_s=t.num("call_s", d.call_s, lo=0.0),
        max_calls_per_second=t.num("max_calls_per_second", d.max_calls_per_second, lo=0.0),
        conflict_probability=t.num("conflict_probability", d.conflict_probability,
                                   lo=0.0, hi=0.99),
        reconcile_interval_s=t.num("reconcile_interval_s", d.reconcile_interval_s,
                                   positive=True),
        unknown_host_policy=policy)


def _flavors(top, raw_flavors):
    """The ``[[flavors]]`` tables, and the one SLA every sensitive flavor carries."""
    if not isinstance(raw_flavors, list) or not raw_flavors:
        raise top.error("flavors", "at least one [[flavors]] table is required")
    flavors = []
    sensitive_sla = None
    for i, raw in enumerate(raw_flavors):
        f = _Table(top.source, raw, "flavors[%d]" % i, _FLAVOR)
        specs = f.data.get("extra_specs", {})
        if not isinstance(specs, dict):
            raise f.error("extra_specs", "must be a table")
        specs = {str(k): str(v) for k, v in specs.items()}
        try:
            sla = sla_mod.parse(specs)
        except exceptions.SLAError as exc:
            raise f.error("extra_specs", str(exc)) from exc
        kind = SENSITIVE if sla.sensitive else BULK if sla.io_class == "bulk" else NEUTRAL
        if kind == SENSITIVE:
            this = {"latency_sla_us": sla.latency_sla_us,
                    "interference_threshold_pct": sla.interference_threshold_pct}
            if sensitive_sla is not None and this != sensitive_sla:
                raise f.error("extra_specs", "every sensitive flavor must carry the same SLA "
                                             "(the host surrogate is calibrated for one)")
            sensitive_sla = this
        flavors.append(Flavor(
            name=f.text("name"), vcpus=f.num("vcpus", integer=True, lo=1),
            ram_mb=f.num("ram_mb", integer=True, lo=1),
            disk_gb=f.num("disk_gb", 0, integer=True, lo=0),
            share=f.num("share", positive=True), day_swing=f.num("day_swing", 0.0, lo=-1, hi=1),
            extra_specs=specs, kind=kind))
    if sensitive_sla is None:
        raise top.error("flavors", "at least one flavor must be latency-sensitive "
                                   "(extra spec resex:latency_sla_us)")
    return tuple(flavors), sensitive_sla


def _host_model(sim, host_vcpus, flavors, sensitive_sla):
    """The ``[host_sim]`` table: the host surrogate's model."""
    sens_vcpus = min(f.vcpus for f in flavors if f.kind == SENSITIVE)
    bulk_flavors = [f for f in flavors if f.kind == BULK]
    points = sim.data.get("sensitive_points")
    if points is None:
        points = sorted({0, 1, 2, 3, 4, host_vcpus // sens_vcpus})
    if not (isinstance(points, list) and points and all(
            isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in points)
            and points == sorted(set(points)) and points[0] == 0):
        raise sim.error("sensitive_points", "must be increasing integers starting at 0")
    default_bulk = host_vcpus // min(f.vcpus for f in bulk_flavors) if bulk_flavors else 0
    model = surrogate_mod.HostModel(
        link_bytes_per_s=sim.num("link_bytes_per_s", float(1 << 30), positive=True),
        mtu=sim.num("mtu", 1024, integer=True, lo=1),
        sensitive_workload=_workload(sim, "sensitive_workload"),
        bulk_workload=_workload(sim, "bulk_workload"),
        sla=sensitive_sla, sensitive_points=tuple(points),
        max_bulk=sim.num("max_bulk", default_bulk, integer=True, lo=0, hi=64),
        run_s=sim.num("run_s", 5.0, positive=True, hi=600),
        warmup_s=sim.num("warmup_s", 1.0, lo=0.0),
        seed=sim.num("seed", 1, integer=True, lo=0))
    if model.warmup_s >= model.run_s:
        raise sim.error("warmup_s", "must be shorter than run_s")
    return model


def _configurations(top, raw_nova, raw_configs):
    """The ``[[configurations]]`` tables, each over the shared ``[nova]`` sections."""
    source = top.source
    shared_nova = _nova_sections(raw_nova, (source, "nova"))
    if not isinstance(raw_configs, list) or not raw_configs:
        raise top.error("configurations", "at least one [[configurations]] table is required")
    configs, seen = [], set()
    for i, raw in enumerate(raw_configs):
        c = _Table(source, raw, "configurations[%d]" % i, _CONFIG)
        cname = c.text("name")
        if cname in seen:
            raise c.error("name", "duplicate configuration %r" % cname)
        seen.add(cname)
        policy = c.text("host_policy", "none")
        if policy not in policy_catalog.names():
            raise c.error("host_policy", "must be one of %s, got %r"
                          % (", ".join(policy_catalog.names()), policy))
        nova = {g: dict(o) for g, o in shared_nova.items()}
        for group, opts in _nova_sections(c.data.get("nova", {}),
                                          (source, c.path + ".nova")).items():
            nova.setdefault(group, {}).update(opts)
        configs.append(Configuration(cname, c.text("description", cname), policy, nova,
                                     placement_sync=_flag(c, "placement_sync", False)))
    return tuple(configs)
