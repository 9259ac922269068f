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

"""Scenarios as data: TOML files describing a testbed run.

A scenario names the link, the VMs (each with a BenchEx-like workload, a
lifetime and its ``resex:`` SLA) and the run (length, control interval and
epoch, seed, pacing). The format is documented field by field in
``doc/source/scenarios.rst``; the paper's experiments ship in the
``scenarios`` directory next to this module. Files are parsed with
:mod:`tomllib`; every error is a :class:`~resex_libvirt.exceptions.ConfigError`
naming the file, the VM and the key, and unknown keys are rejected (a typo
must not silently fall back to a default).

Beyond each key's own range, the keys are checked against each other: an SLA
below the latency the VM has alone on the link (compute plus the transfer of
its buffer), or a buffer the link cannot move within an epoch, is an error
naming the key; a run that still makes sense but probably not the one meant
(a VM stopping after the run's end, an epoch longer than the run, open-loop
arrivals beyond what the VM can serve alone, a VM living only inside the
warm-up) loads with :attr:`Scenario.warnings`, which ``resex-sim run`` prints.

The SLA sub-table takes the product's own ``resex:`` keys without their
prefix and is parsed by :func:`resex_libvirt.sla.parse`, so a scenario
accepts exactly what a flavor extra spec or a domain's metadata accepts.
"""

import dataclasses
import importlib.resources
import math
import os
import re
import tomllib
import uuid as uuid_mod

from resex_libvirt import exceptions
from resex_libvirt.sim import workload as workload_mod
from resex_libvirt import sla as sla_mod

#: Namespace of the VMs' UUIDs: uuid5(NAMESPACE, "<scenario>/<vm>").
NAMESPACE = uuid_mod.UUID("6f1c1b52-7d1e-4b8e-9a57-52e5c0a7e2d1")

SUFFIX = ".toml"

_TOP_KEYS = {"name", "description", "duration_s", "interval_s", "epoch_s", "seed",
             "realtime", "warmup_s", "link", "vms", "pcpus"}
_LINK_KEYS = {"bytes_per_s", "mtu"}
_VM_KEYS = {"name", "buffer", "compute_us", "clients", "think_us", "arrival_rate_per_s",
            "arrival_process", "start_s", "stop_s", "vcpus", "sla"}
_SLA_KEYS = {k[len(sla_mod.PREFIX):] for k in sla_mod.KEYS}

_UNITS = {"": 1, "b": 1, "k": 1024, "kb": 1024, "kib": 1024,
          "m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30,
          "gib": 1 << 30}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


@dataclasses.dataclass(frozen=True)
class VMDef:
    """One VM of a scenario."""

    name: str
    uuid: str
    workload: workload_mod.Workload
    vcpus: int = 1
    sla: sla_mod.SLA = dataclasses.field(default_factory=sla_mod.SLA)
    start_s: float = 0.0
    stop_s: float | None = None


@dataclasses.dataclass(frozen=True)
class Scenario:
    """A validated scenario (see ``doc/source/scenarios.rst``)."""

    name: str
    vms: tuple
    duration_s: float
    interval_s: float = 0.001
    epoch_s: float = 1.0
    seed: int = 1
    realtime: float = 0.0
    warmup_s: float = 0.0
    link_bytes_per_s: float = float(1 << 30)
    mtu: int = 1024
    pcpus: int | None = None
    description: str = ""
    path: str | None = None
    warnings: tuple = ()

    @property
    def intervals_per_epoch(self):
        return round(self.epoch_s / self.interval_s)

    @property
    def intervals(self):
        """Control intervals in the run."""
        return round(self.duration_s / self.interval_s)

    def vm(self, name):
        for v in self.vms:
            if v.name == name:
                return v
        raise KeyError(name)

    def with_realtime(self, realtime):
        """The same scenario paced at ``realtime`` (0: as fast as possible)."""
        if realtime is None or not math.isfinite(realtime) or realtime < 0:
            raise exceptions.ConfigError("realtime must be a finite number >= 0")
        return dataclasses.replace(self, realtime=float(realtime))

    def with_seed(self, seed):
        return dataclasses.replace(self, seed=int(seed))

    def with_duration(self, duration_s):
        """The same scenario, run for ``duration_s`` (the warm-up shrinks to fit)."""
        if not duration_s > 0 or round(duration_s / self.interval_s) < 1:
            raise exceptions.ConfigError("duration must be at least one interval")
        return dataclasses.replace(self, duration_s=float(duration_s),
                                   warmup_s=min(self.warmup_s, duration_s / 2.0))


def vm_uuid(scenario_name, vm_name):
    """The stable UUID of a scenario's VM."""
    return str(uuid_mod.uuid5(NAMESPACE, "%s/%s" % (scenario_name, vm_name)))


def scenarios_dir():
    """The packaged scenarios directory."""
    return importlib.resources.files("resex_libvirt.sim") / "scenarios"


def names():
    """Names of the packaged scenarios."""
    return sorted(p.name[:-len(SUFFIX)] for p in scenarios_dir().iterdir()
                  if p.name.endswith(SUFFIX))


def resolve(path_or_name):
    """The file a scenario argument means: a path, or a packaged scenario's name."""
    text = os.fspath(path_or_name)
    if os.sep in text or text.endswith(SUFFIX) or os.path.exists(text):
        return text
    candidate = scenarios_dir() / (text + SUFFIX)
    if not candidate.is_file():
        raise exceptions.ConfigError(
            "no scenario %r: not a file, and not one of the packaged scenarios (%s)"
            % (text, ", ".join(names())))
    return str(candidate)


def load(path_or_name):
    """Load and validate a scenario file (a path, or a packaged scenario's name)."""
    path = resolve(path_or_name)
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as exc:
        raise exceptions.ConfigError("%s: cannot read scenario: %s" % (path, exc)) from exc
    except tomllib.TOMLDecodeError as exc:
        raise exceptions.ConfigError("%s: not valid TOML: %s" % (path, exc)) from exc
    default_name = os.path.basename(path)
    if default_name.endswith(SUFFIX):
        default_name = default_name[:-len(SUFFIX)]
    return parse(data, source=path, default_name=default_name)


def loads(text, source="<string>", default_name="scenario"):
    """Parse a scenario from TOML text."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise exceptions.ConfigError("%s: not valid TOML: %s" % (source, exc)) from exc
    return parse(data, source=source, default_name=default_name)


# -- validation -------------------------------------------------------------------

class _Where:
    """Builds error messages that name the file, the VM and the key."""

    def __init__(self, source, vm=None):
        self.source = source
        self.vm = vm

    def error(self, key, reason):
        where = self.source
        if self.vm is not None:
            where += ": VM %r" % self.vm
        if key:
            where += ": %s" % key
        return exceptions.ConfigError("%s: %s" % (where, reason))

    def reject_unknown(self, table, allowed, prefix=""):
        unknown = sorted(set(table) - allowed)
        if unknown:
            raise self.error(prefix + unknown[0], "unknown key; known: %s"
                             % ", ".join(sorted(allowed)))

    def number(self, table, key, default=None, minimum=None, maximum=None, positive=False,
               integer=False, prefix=""):
        if key not in table:
            if default is dataclasses.MISSING:
                raise self.error(prefix + key, "is required")
            return default
        value = table[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.error(prefix + key, "must be a number, got %r" % (value,))
        if integer and not (isinstance(value, int) or float(value).is_integer()):
            raise self.error(prefix + key, "must be an integer, got %r" % (value,))
        if not math.isfinite(value):
            raise self.error(prefix + key, "must be finite")
        if positive and not value > 0:
            raise self.error(prefix + key, "must be > 0, got %r" % (value,))
        if minimum is not None and value < minimum:
            raise self.error(prefix + key, "must be >= %s, got %r" % (minimum, value))
        if maximum is not None and value > maximum:
            raise self.error(prefix + key, "must be <= %s, got %r" % (maximum, value))
        return int(value) if integer else float(value)

    def string(self, table, key, default=None):
        if key not in table:
            if default is dataclasses.MISSING:
                raise self.error(key, "is required")
            return default
        value = table[key]
        if not isinstance(value, str):
            raise self.error(key, "must be a string, got %r" % (value,))
        return value


def parse_size(raw):
    """Bytes of ``raw``: an integer, or a string such as ``"64K"``, ``"2MiB"``.

    Units are binary (the paper's "64KB" buffer is 64 KiB): K, KB, KiB are
    1024 bytes, M/MB/MiB 2^20, G/GB/GiB 2^30.
    """
    if isinstance(raw, bool):
        raise ValueError("not a size: %r" % (raw,))
    if isinstance(raw, int):
        value = raw
    elif isinstance(raw, str):
        m = _SIZE.match(raw)
        if not m or m.group(2).lower() not in _UNITS:
            raise ValueError("not a size: %r (use bytes, or e.g. \"64K\", \"2MiB\")" % raw)
        value = float(m.group(1)) * _UNITS[m.group(2).lower()]
        if not value.is_integer():
            raise ValueError("not a whole number of bytes: %r" % raw)
        value = int(value)
    else:
        raise ValueError("not a size: %r" % (raw,))
    if value < 1:
        raise ValueError("size must be >= 1 byte, got %r" % (raw,))
    return value


def parse(data, source="<scenario>", default_name="scenario"):
    """Validate a decoded TOML document into a :class:`Scenario`."""
    top = _Where(source)
    if not isinstance(data, dict):
        raise top.error(None, "a scenario is a TOML table")
    top.reject_unknown(data, _TOP_KEYS)
    name = top.string(data, "name", default_name)
    if not name.strip():
        raise top.error("name", "must not be empty")
    duration = top.number(data, "duration_s", dataclasses.MISSING, positive=True)
    interval = top.number(data, "interval_s", 0.001, positive=True, maximum=60.0)
    epoch = top.number(data, "epoch_s", 1.0, positive=True)
    ipe = round(epoch / interval)
    if ipe < 1 or abs(ipe * interval - epoch) > 1e-9 * max(1.0, epoch):
        raise top.error("epoch_s", "must be a whole number of intervals (interval_s = %g)"
                        % interval)
    if round(duration / interval) < 1:
        raise top.error("duration_s", "must be at least one interval")
    seed = top.number(data, "seed", 1, integer=True, minimum=0)
    realtime = top.number(data, "realtime", 0.0, minimum=0.0, maximum=1000.0)
    warmup = top.number(data, "warmup_s", 0.0, minimum=0.0)
    pcpus = top.number(data, "pcpus", None, integer=True, minimum=1, maximum=4096)
    if warmup >= duration:
        raise top.error("warmup_s", "must be shorter than duration_s")

    link = data.get("link", {})
    if not isinstance(link, dict):
        raise top.error("link", "must be a table")
    top.reject_unknown(link, _LINK_KEYS, prefix="link.")
    bytes_per_s = top.number(link, "bytes_per_s", float(1 << 30), positive=True,
                             prefix="link.")
    mtu = top.number(link, "mtu", 1024, integer=True, minimum=1, maximum=1 << 20,
                     prefix="link.")

    raw_vms = data.get("vms")
    if not isinstance(raw_vms, list) or not raw_vms:
        raise top.error("vms", "at least one [[vms]] table is required")
    vms = []
    seen = set()
    warnings = []
    if epoch > duration:
        warnings.append("%s: epoch_s: %g is longer than the run (duration_s = %g): no epoch "
                        "ends, so no Resos are replenished" % (source, epoch, duration))
    for i, raw in enumerate(raw_vms):
        vm = _parse_vm(raw, i, source, name, duration)
        if vm.name in seen:
            raise _Where(source, vm.name).error("name", "duplicate VM name")
        seen.add(vm.name)
        warnings.extend(_check_vm(vm, _Where(source, vm.name), duration, epoch, warmup,
                                  bytes_per_s))
        vms.append(vm)
    return Scenario(name=name, description=top.string(data, "description", ""),
                    vms=tuple(vms), duration_s=duration, interval_s=interval, epoch_s=epoch,
                    seed=seed, realtime=realtime, warmup_s=warmup, link_bytes_per_s=bytes_per_s,
                    mtu=mtu, pcpus=pcpus, path=source, warnings=tuple(warnings))


#: An SLA may sit this far below the VM's computed base latency (rounding: the
#: paper's 64 KB server is "around 209 us" for a computed 209.03 us).
SLA_SLACK = 0.02


def base_latency_us(workload, link_bytes_per_s):
    """A request's latency alone on the link: compute plus the transfer of the buffer."""
    return workload.compute_us + 1e6 * workload.buffer_bytes / link_bytes_per_s


def _check_vm(vm, where, duration, epoch, warmup, link_bytes_per_s):
    """The cross-key checks of one VM: raise on errors, return the warnings."""
    w = vm.workload
    if w.buffer_bytes > link_bytes_per_s * epoch:
        raise where.error("buffer", "%d bytes is more than the link moves in an epoch "
                                    "(%.0f bytes: link.bytes_per_s x epoch_s)"
                          % (w.buffer_bytes, link_bytes_per_s * epoch))
    base = base_latency_us(w, link_bytes_per_s)
    if vm.sla.sensitive and vm.sla.latency_sla_us < (1.0 - SLA_SLACK) * base:
        raise where.error("sla.latency_sla_us",
                          "%g us is below the VM's latency alone on this link (%.1f us: "
                          "compute_us + buffer / link.bytes_per_s): it can never be met"
                          % (vm.sla.latency_sla_us, base))
    warnings = []
    prefix = "%s: VM %r: " % (where.source, vm.name)
    if vm.stop_s is not None and vm.stop_s > duration:
        warnings.append(prefix + "stop_s: %g is after the end of the run (duration_s = %g); "
                        "the VM runs to the end" % (vm.stop_s, duration))
    end = duration if vm.stop_s is None else min(vm.stop_s, duration)
    if warmup and end <= warmup:
        warnings.append(prefix + "lives only inside the warm-up (warmup_s = %g): none of "
                        "its latencies are reported" % warmup)
    if w.arrival_rate_per_s:
        capacity = 1e6 * vm.vcpus / max(base, 1e-9)
        if w.arrival_rate_per_s > capacity:
            warnings.append(prefix + "arrival_rate_per_s: %g is more than the VM serves alone "
                            "(about %.0f/s); its queue grows until arrivals are dropped"
                            % (w.arrival_rate_per_s, capacity))
    return warnings


def _parse_vm(raw, index, source, scenario_name, duration):
    anon = _Where(source, "#%d" % (index + 1))
    if not isinstance(raw, dict):
        raise anon.error(None, "each [[vms]] entry must be a table")
    vm_name = raw.get("name")
    if not isinstance(vm_name, str) or not vm_name.strip():
        raise anon.error("name", "is required and must be a non-empty string")
    where = _Where(source, vm_name)
    where.reject_unknown(raw, _VM_KEYS)
    if "buffer" not in raw:
        raise where.error("buffer", "is required (bytes, or e.g. \"64K\", \"2M\")")
    try:
        buffer_bytes = parse_size(raw["buffer"])
    except ValueError as exc:
        raise where.error("buffer", str(exc)) from exc
    compute = where.number(raw, "compute_us", dataclasses.MISSING, minimum=0.0)
    clients = where.number(raw, "clients", 0, integer=True, minimum=0, maximum=100000)
    rate = where.number(raw, "arrival_rate_per_s", 0.0, minimum=0.0, maximum=1e9)
    if bool(clients) == bool(rate):
        raise where.error("clients", "give exactly one of clients (closed loop, >= 1) or "
                                     "arrival_rate_per_s (open loop, > 0)")
    think = where.number(raw, "think_us", 0.0, minimum=0.0)
    if think and not clients:
        raise where.error("think_us", "only applies to closed-loop clients")
    process = where.string(raw, "arrival_process", "poisson")
    if process not in workload_mod.ARRIVAL_PROCESSES:
        raise where.error("arrival_process", "must be one of %s, got %r"
                          % (", ".join(workload_mod.ARRIVAL_PROCESSES), process))
    if "arrival_process" in raw and not rate:
        raise where.error("arrival_process", "only applies to arrival_rate_per_s")
    start = where.number(raw, "start_s", 0.0, minimum=0.0)
    stop = where.number(raw, "stop_s", None, positive=True)
    if start >= duration:
        raise where.error("start_s", "must be before the end of the run (duration_s = %g)"
                          % duration)
    if stop is not None and stop <= start:
        raise where.error("stop_s", "must be after start_s (%g)" % start)
    vcpus = where.number(raw, "vcpus", 1, integer=True, minimum=1, maximum=256)
    sla_table = raw.get("sla", {})
    if not isinstance(sla_table, dict):
        raise where.error("sla", "must be a table")
    where.reject_unknown(sla_table, _SLA_KEYS, prefix="sla.")
    try:
        vm_sla = sla_mod.parse({sla_mod.PREFIX + k: v for k, v in sla_table.items()})
    except exceptions.SLAError as exc:
        key = "sla." + exc.key[len(sla_mod.PREFIX):]
        raise where.error(key, "%r: %s" % (exc.value, exc.reason)) from exc
    workload = workload_mod.Workload(buffer_bytes=buffer_bytes, compute_us=compute,
                                     clients=clients, think_us=think, arrival_rate_per_s=rate,
                                     arrival_process=process)
    return VMDef(name=vm_name, uuid=vm_uuid(scenario_name, vm_name), workload=workload,
                 vcpus=vcpus, sla=vm_sla, start_s=start, stop_s=stop)
