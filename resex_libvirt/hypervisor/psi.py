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

"""CPU pressure (PSI) of a VM's cgroup v2, as host-side evidence next to ``vcpu.delay``.

The kernel's pressure stall information (``Documentation/accounting/psi.rst``)
gives, per cgroup v2 group, ``cpu.pressure``::

    some avg10=1.23 avg60=0.50 avg300=0.10 total=123456
    full avg10=0.00 avg60=0.00 avg300=0.00 total=0

``some``: the share of time at least one of the group's tasks was runnable
but waiting for a CPU; ``total`` is cumulative microseconds. A VM's group is
the one its QEMU process is in (``/proc/<pid>/cgroup``, the ``0::`` line).
:class:`PressureReader` finds the cgroup v2 mount (``/sys/fs/cgroup`` on a
pure v2 host, ``/sys/fs/cgroup/unified`` on a hybrid one), and says plainly
(:class:`PressureUnavailable`, with the reason) when the figure would not be
the VM's own: no cgroup v2 mount, no ``cpu.pressure`` file (a kernel without
PSI), or the VM's process in the root of the v2 hierarchy (the root's
pressure is the whole host's). On a hybrid host (the cpu controller on
cgroup v1) libvirt 9 still gives each guest a v2 group of its own, under
``machine/``, whose pressure is read.
"""

import os
import typing

from resex_libvirt import exceptions

CGROUP2 = "cgroup2"


class PressureUnavailable(exceptions.ResexError):
    """No CPU pressure of the VM's own can be read here; the message says why."""


class Pressure(typing.NamedTuple):
    """One reading of a ``cpu.pressure`` file: ``some`` and ``full`` lines."""

    some_avg10: float
    some_avg60: float
    some_avg300: float
    some_total_us: int
    full_avg10: float = 0.0
    full_total_us: int = 0


def parse(text):
    """A :class:`Pressure` from the text of a ``cpu.pressure`` file (ValueError if malformed).

    The ``full`` line is optional (kernels before 5.13 give ``some`` only
    for the cpu resource).
    """
    lines = {}
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        kind, fields = parts[0], {}
        for item in parts[1:]:
            key, sep, value = item.partition("=")
            if not sep:
                raise ValueError("not a pressure field: %r" % item)
            fields[key] = value
        lines[kind] = fields
    some = lines.get("some")
    if some is None:
        raise ValueError("no 'some' line in %r" % text[:200])
    try:
        full = lines.get("full", {})
        return Pressure(float(some["avg10"]), float(some["avg60"]), float(some["avg300"]),
                        int(some["total"]), float(full.get("avg10", 0.0)),
                        int(full.get("total", 0)))
    except (KeyError, ValueError) as exc:
        raise ValueError("malformed pressure line %r: %s" % (some, exc)) from exc


def cgroup2_mount(mounts_text):
    """The mount point of the cgroup v2 hierarchy in a ``/proc/self/mounts`` text, or None."""
    for line in mounts_text.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[2] == CGROUP2:
            return parts[1]
    return None


def cgroup2_path(cgroup_text):
    """The v2 path of a ``/proc/<pid>/cgroup`` text (its ``0::`` line), or None."""
    for line in cgroup_text.splitlines():
        if line.startswith("0::"):
            return line[3:].strip() or "/"
    return None


def stall_pct(before, after, span_s):
    """Percent of ``span_s`` the group had a task waiting for a CPU (``some``, from totals).

    0 when the counter went back (the group was made anew) or the span is
    not positive; at most 100.
    """
    if span_s <= 0 or after.some_total_us < before.some_total_us:
        return 0.0
    return min(100.0, 100.0 * (after.some_total_us - before.some_total_us) / (span_s * 1e6))


class PressureReader:
    """Reads the CPU pressure of a process's cgroup v2 group.

    ``proc`` is the proc file system's root (``/proc``); the cgroup v2
    mount is read from ``<proc>/self/mounts`` unless ``mount`` is given.
    """

    def __init__(self, proc="/proc", mount=None):
        self.proc = proc
        self._mount = mount

    def mount(self):
        """The cgroup v2 mount point (PressureUnavailable when there is none)."""
        if self._mount is None:
            try:
                with open(os.path.join(self.proc, "self", "mounts")) as f:
                    found = cgroup2_mount(f.read())
            except OSError as exc:
                raise PressureUnavailable("cannot read the mounts: %s" % exc) from exc
            if found is None:
                raise PressureUnavailable("no cgroup v2 hierarchy is mounted (cgroup v1 only): "
                                          "no per-VM CPU pressure")
            self._mount = found
        return self._mount

    def controllers(self):
        """The controllers enabled at the cgroup v2 root (``cgroup.controllers``)."""
        try:
            with open(os.path.join(self.mount(), "cgroup.controllers")) as f:
                return f.read().split()
        except OSError:
            return []

    def group_of(self, pid):
        """The cgroup v2 directory of process ``pid`` (PressureUnavailable if it is the root)."""
        try:
            with open(os.path.join(self.proc, str(int(pid)), "cgroup")) as f:
                path = cgroup2_path(f.read())
        except OSError as exc:
            raise PressureUnavailable("process %s: cannot read its cgroups: %s"
                                      % (pid, exc)) from exc
        if path is None:
            raise PressureUnavailable("process %s is in no cgroup v2 group" % pid)
        if path == "/":
            where = ("the cpu controller is on cgroup v1" if "cpu" not in self.controllers()
                     else "it has no group of its own")
            raise PressureUnavailable(
                "process %s is in the root of the cgroup v2 hierarchy (%s): its pressure "
                "would be the whole host's, not the VM's" % (pid, where))
        return os.path.join(self.mount(), path.lstrip("/"))

    def read(self, pid):
        """The :class:`Pressure` of ``pid``'s group (PressureUnavailable, with why, if none)."""
        group = self.group_of(pid)
        path = os.path.join(group, "cpu.pressure")
        try:
            with open(path) as f:
                text = f.read()
        except FileNotFoundError as exc:
            raise PressureUnavailable("%s does not exist (a kernel without PSI, or "
                                      "psi=0)" % path) from exc
        except OSError as exc:
            raise PressureUnavailable("cannot read %s: %s" % (path, exc)) from exc
        try:
            return parse(text)
        except ValueError as exc:
            raise PressureUnavailable("%s: %s" % (path, exc)) from exc


#: Where libvirt's system QEMU driver writes each running domain's pid file.
QEMU_RUN_DIR = "/run/libvirt/qemu"


def qemu_pid(name, run_dir=QEMU_RUN_DIR):
    """The pid of the QEMU process of domain ``name`` (PressureUnavailable if unknown)."""
    path = os.path.join(run_dir, "%s.pid" % name)
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError) as exc:
        raise PressureUnavailable("no QEMU pid for domain %s (%s): %s"
                                  % (name, path, exc)) from exc


class DomainPressure:
    """The CPU pressure of libvirt QEMU domains, by name (the agent's epoch evidence).

    :meth:`read` returns ``({uuid: Pressure}, {uuid: reason})``: what could
    be read and, for the others, why not, so that the caller says it once.
    """

    def __init__(self, reader=None, run_dir=QEMU_RUN_DIR):
        self.reader = reader or PressureReader()
        self.run_dir = run_dir

    def read(self, names):
        """``names``: ``{uuid: domain name}``."""
        got, why = {}, {}
        for uuid, name in names.items():
            try:
                got[uuid] = self.reader.read(qemu_pid(name, self.run_dir))
            except PressureUnavailable as exc:
                why[uuid] = str(exc)
        return got, why
