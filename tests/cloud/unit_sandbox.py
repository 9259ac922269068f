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

"""A command under a systemd unit's restrictions, without systemd.

``python -m tests.cloud.unit_sandbox --unit etc/resex/resex-agent.service
[--drop-in FILE]... [-- ARGV...]`` reads the unit's ``[Service]`` section
(and drop-ins, with systemd's rules: a later assignment wins, an empty one
resets a list) and runs ``ARGV`` (default: the unit's ``ExecStart``) under
what it says. The cloud starts every agent through it
(:mod:`tests.cloud.cloud`), so the agent it tests runs under the shipped
unit, not under a copy of it. It needs root and changes nothing outside
its own mount namespace (but the directories ``StateDirectory=`` and
``RuntimeDirectory=`` name, created if missing, as systemd does). The
process keeps its PID from here to ``ARGV`` (every step ``exec``\\ s).

Emulated, as systemd does them:

* ``CapabilityBoundingSet=`` (empty: no capability; ``~`` inverts),
  ``AmbientCapabilities=`` (none: inheritable and ambient sets cleared),
  ``SupplementaryGroups=`` and ``NoNewPrivileges=``: ``setpriv`` right
  before ``ARGV``. Root
  ``exec``\\ s with the bounding set as its permitted set, so an empty set
  leaves uid 0 and nothing else.
* A mount namespace of its own (every mount a slave of the host's, as
  systemd makes it) and, with ``ProtectHostname=``, a UTS namespace.
* ``ProtectSystem=`` (``yes``: ``/usr``, ``/boot``, ``/efi``; ``full``:
  and ``/etc``; ``strict``: every mount but ``/dev``, ``/proc`` and
  ``/sys``) remounted read-only, mount by mount, except the writable paths:
  ``ReadWritePaths=``, ``StateDirectory=`` (``/var/lib/NAME``) and
  ``RuntimeDirectory=`` (``/run/NAME``), made with their ``*Mode=``,
  ``BindPaths=`` and the private ``/tmp``. A ``-`` prefix ignores a
  missing path, as systemd does; else a missing path is an error.
* ``ReadOnlyPaths=``, ``InaccessiblePaths=`` (an empty mode-000 directory
  or file over it), ``BindPaths=`` and ``BindReadOnlyPaths=``
  (``SOURCE[:TARGET]``, the source as it was before any of these mounts,
  so a bind into the private ``/tmp`` or a ``ProtectHome=tmpfs`` shows the
  host's directory).
* ``ProtectHome=`` over ``/home``, ``/root`` and ``/run/user``: ``yes``
  inaccessible (an empty mode-000 tmpfs), ``read-only``, ``tmpfs`` (an
  empty read-only tmpfs that ``BindPaths=`` may open holes in).
* ``PrivateTmp=``: a fresh tmpfs on ``/tmp`` and ``/var/tmp``.
* ``PrivateDevices=``: a tmpfs ``/dev`` with ``null``, ``zero``, ``full``,
  ``random``, ``urandom``, ``tty``, ``pts``, ``ptmx``, ``shm``,
  ``mqueue``, ``hugepages`` of the host's and the ``fd``, ``std*`` and
  ``log`` links.
* ``ProtectKernelTunables=`` (``/proc/sys`` and its kin, ``/sys``),
  ``ProtectControlGroups=`` (``/sys/fs/cgroup``), ``ProtectKernelModules=``
  (``/usr/lib/modules``, ``/lib/modules`` inaccessible) and
  ``ProtectKernelLogs=`` (``/dev/null`` over ``/proc/kmsg``): their mounts.
* ``UMask=``.
* ``SystemCallArchitectures=native`` and ``RestrictAddressFamilies=``, on
  x86-64: a seccomp filter (:func:`seccomp_program`).

Not emulated (``unemulated`` lists those a unit sets): everything else
systemd does with seccomp (``RestrictNamespaces=``,
``RestrictRealtime=``, ``RestrictSUIDSGID=``, ``LockPersonality=``,
``MemoryDenyWriteExecute=``, ``SystemCallFilter=``, and the system-call
halves of ``ProtectClock=``, ``ProtectHostname=``, ``ProtectKernel*=``,
``PrivateDevices=``) and the device cgroup of ``ProtectClock=`` and
``PrivateDevices=``. What those forbid the capability bounding set mostly
forbids already (``CAP_SYS_TIME``, ``CAP_SYS_MODULE``, ``CAP_SYSLOG``,
``CAP_SYS_NICE`` for real-time, ``CAP_SYS_ADMIN`` for most namespaces);
a root process's user namespaces are not held.
Nor are ``Environment=`` (the command keeps the caller's environment) and
resource limits, which the resex units do not set; a unit with another
``User=``, ``PrivateUsers=`` or ``PrivateNetwork=`` is refused.
"""

import argparse
import ctypes
import ctypes.util
import errno
import os
import re
import shlex
import socket
import stat
import sys

#: Directives whose values are lists: each assignment adds, an empty one resets.
LISTS = ("ReadWritePaths", "ReadOnlyPaths", "InaccessiblePaths", "BindPaths",
         "BindReadOnlyPaths", "StateDirectory", "RuntimeDirectory", "ConfigurationDirectory",
         "CapabilityBoundingSet", "AmbientCapabilities", "RestrictAddressFamilies",
         "SystemCallFilter", "SupplementaryGroups", "ExecStart")

#: Directives :func:`plan` and :func:`setpriv_argv` carry out.
EMULATED = ("CapabilityBoundingSet", "AmbientCapabilities", "NoNewPrivileges",
            "SupplementaryGroups",
            "ProtectSystem", "ReadWritePaths", "ReadOnlyPaths", "InaccessiblePaths",
            "BindPaths", "BindReadOnlyPaths", "StateDirectory", "StateDirectoryMode",
            "RuntimeDirectory", "RuntimeDirectoryMode", "ProtectHome", "PrivateTmp",
            "PrivateDevices", "ProtectKernelTunables", "ProtectControlGroups",
            "ProtectKernelModules", "ProtectKernelLogs", "ProtectHostname", "UMask",
            "SystemCallArchitectures", "RestrictAddressFamilies")

#: Hardening directives this module does not carry out (seccomp, device cgroup).
NOT_EMULATED = ("RestrictNamespaces", "RestrictRealtime", "RestrictSUIDSGID",
                "LockPersonality", "MemoryDenyWriteExecute", "SystemCallFilter", "ProtectClock",
                "ProtectProc", "ProcSubset", "PrivateIPC", "KeyringMode")

#: Every capability this kernel knows of, by number (capability.h).
CAPABILITIES = (
    "chown", "dac_override", "dac_read_search", "fowner", "fsetid", "kill", "setgid",
    "setuid", "setpcap", "linux_immutable", "net_bind_service", "net_broadcast",
    "net_admin", "net_raw", "ipc_lock", "ipc_owner", "sys_module", "sys_rawio",
    "sys_chroot", "sys_ptrace", "sys_pacct", "sys_admin", "sys_boot", "sys_nice",
    "sys_resource", "sys_time", "sys_tty_config", "mknod", "lease", "audit_write",
    "audit_control", "setfcap", "mac_override", "mac_admin", "syslog", "wake_alarm",
    "block_suspend", "audit_read", "perfmon", "bpf", "checkpoint_restore")

HOME_PATHS = ("/home", "/root", "/run/user")
TMP_PATHS = ("/tmp", "/var/tmp")
#: ProtectSystem=strict leaves these writable (other directives protect them).
API_PATHS = ("/dev", "/proc", "/sys")
#: ProtectKernelTunables= makes these read-only (systemd's list, where they exist).
KERNEL_TUNABLES = ("/proc/acpi", "/proc/apm", "/proc/asound", "/proc/bus", "/proc/fs",
                   "/proc/irq", "/proc/latency_stats", "/proc/mtrr", "/proc/scsi",
                   "/proc/sys", "/proc/sysrq-trigger", "/proc/timer_list",
                   "/proc/timer_stats", "/sys")
KERNEL_MODULES = ("/usr/lib/modules", "/lib/modules")
#: PrivateDevices='s /dev: the host's nodes and directories bound in, and links.
DEVICES = ("null", "zero", "full", "random", "urandom", "tty", "ptmx")
DEVICE_DIRS = ("pts", "shm", "mqueue", "hugepages")
DEVICE_LINKS = {"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0",
                "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2",
                "log": "/run/systemd/journal/dev-log"}

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_SLAVE = 32, 4096, 16384, 1 << 19
CLONE_NEWNS, CLONE_NEWUTS = 0x00020000, 0x04000000
#: Per-mount flags a read-only remount keeps (mountinfo's option names).
_KEPT = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC}


class UnitError(ValueError):
    """The unit says something this module cannot do (the message says what)."""


# -- the unit -----------------------------------------------------------------------------

def parse(text, directives=None):
    """``[Service]`` assignments of a unit file's ``text``: ``{name: [value, ...]}``.

    Every assignment is kept, in order (``directives`` is added to: a drop-in
    follows its unit); :class:`Unit` applies systemd's rules to them.
    Comments (``#``, ``;``) and line continuations (``\\``) as systemd reads
    them.
    """
    directives = {} if directives is None else directives
    section = None
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line[0] in "#;"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        if section != "Service" or "=" not in line:
            continue
        key, value = line.split("=", 1)
        directives.setdefault(key.strip(), []).append(value.strip())
    return directives


class Unit:
    """A unit's ``[Service]`` section after its drop-ins, as systemd reads it."""

    def __init__(self, directives):
        self.directives = directives

    @classmethod
    def load(cls, path, drop_ins=()):
        directives = {}
        for p in (path,) + tuple(drop_ins):
            with open(p) as f:
                parse(f.read(), directives)
        return cls(directives)

    def value(self, name, default=None):
        """The last assignment of ``name`` (a later one overrides), or ``default``."""
        values = self.directives.get(name)
        return values[-1] if values else default

    def flag(self, name):
        return (self.value(name, "no") or "no").lower() in ("yes", "true", "on", "1")

    def items(self, name):
        """The words of a list directive, from its last empty assignment on."""
        out = []
        for value in self.directives.get(name, ()):
            if not value:
                out = []
            else:
                out += shlex.split(value)
        return out

    def capabilities(self, name="CapabilityBoundingSet"):
        """Capabilities of ``name`` (lowercase, without ``cap_``); None if never assigned.

        Assignments add up; ``~`` before one takes its capabilities out of
        the full set instead; an empty assignment resets to the empty set.
        """
        if name not in self.directives:
            return None
        caps = set()
        for value in self.directives[name]:
            if not value:
                caps = set()
                continue
            invert = value.startswith("~")
            names = {_cap(word) for word in value.lstrip("~").split()}
            caps = (set(CAPABILITIES) - names) if invert else caps | names
        return caps

    def exec_start(self):
        """The last ``ExecStart=`` command line, split (its ``-``/``@`` prefixes dropped)."""
        commands = [v for v in self.directives.get("ExecStart", ()) if v] or [None]
        if commands[-1] is None:
            raise UnitError("the unit has no ExecStart")
        argv = shlex.split(commands[-1])
        argv[0] = argv[0].lstrip("-@:+!")
        return argv

    def unemulated(self):
        """Directives of the unit (set to something) this module does not carry out."""
        return [name for name in NOT_EMULATED
                if self.value(name) not in (None, "", "no", "false")]


def capability_mask(caps):
    """``caps`` as ``/proc/PID/status``'s ``CapBnd`` bits (an int)."""
    return sum(1 << CAPABILITIES.index(c) for c in caps)


def _cap(word):
    name = word.lower()
    name = name[4:] if name.startswith("cap_") else name
    if name not in CAPABILITIES:
        raise UnitError("unknown capability %r" % word)
    return name


def _optional(path):
    """``(path, missing_ok)`` of a path directive's word (systemd's ``-`` prefix)."""
    return (path[1:], True) if path.startswith("-") else (path, False)


def _under(path, roots):
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


# -- what to run ---------------------------------------------------------------------------

def setpriv_argv(unit, argv):
    """``setpriv`` with the unit's capabilities, groups and ``NoNewPrivileges``, then ``argv``."""
    out = ["setpriv"]
    if unit.flag("NoNewPrivileges"):
        out.append("--no-new-privs")
    groups = unit.items("SupplementaryGroups")
    if groups:
        out += ["--groups", ",".join(groups)]
    bounding = unit.capabilities()
    if bounding is not None:
        out += ["--bounding-set", ",".join(["-all"] + ["+" + c for c in sorted(bounding)])]
    ambient = unit.capabilities("AmbientCapabilities") or set()
    caps = ",".join(["-all"] + ["+" + c for c in sorted(ambient)])
    # Ambient capabilities must be inheritable first.
    out += ["--inh-caps", caps, "--ambient-caps", caps]
    return out + ["--"] + list(argv)


def plan(unit, exists=os.path.exists):
    """The mount namespace's steps, in order: a list of tuples (see :func:`_run_step`).

    ``("mkdir", path, mode)``, ``("tmpfs", target, mode, read_only)``,
    ``("bind", source, target, read_only)`` (recursive; ``source`` as it was
    before the first step), ``("inaccessible", target)``, ``("link", target,
    to)``, ``("readonly", roots, writable)``: every mount at or under one of
    ``roots`` and not at or under one of ``writable`` remounted read-only.
    ``exists`` is :func:`os.path.exists` (a test's stand-in).
    """
    for name in ("User", "Group", "DynamicUser", "PrivateUsers", "PrivateNetwork"):
        if unit.value(name) not in (None, "", "root", "no", "false"):
            raise UnitError("%s=%s is not emulated" % (name, unit.value(name)))
    steps = []
    writable = []
    for name, base in (("StateDirectory", "/var/lib/"), ("RuntimeDirectory", "/run/")):
        mode = int(unit.value(name + "Mode", "0755"), 8)
        for word in unit.items(name):
            steps += [("mkdir", base + word, mode), ("bind", base + word, base + word, False)]
            writable.append(base + word)
    if unit.flag("PrivateTmp"):
        for target in TMP_PATHS:
            steps.append(("tmpfs", target, 0o1777, False))
            writable.append(target)
    steps += _home(unit, exists)
    if unit.flag("PrivateDevices"):
        steps.append(("tmpfs", "/dev", 0o755, False))
        steps += [("bind", "/dev/" + d, "/dev/" + d, False) for d in DEVICES + DEVICE_DIRS
                  if exists("/dev/" + d)]
        steps += [("link", "/dev/" + name, to) for name, to in sorted(DEVICE_LINKS.items())]
    steps += _binds(unit, exists, writable)
    steps += _system(unit, writable)
    steps += _kernel(unit, exists)
    return steps


def _paths(unit, name, exists):
    """The existing paths of a path list directive (``-``: a missing one is skipped)."""
    out = []
    for word in unit.items(name):
        path, missing_ok = _optional(word)
        if not exists(path):
            if missing_ok:
                continue
            raise UnitError("%s=%s: no such path" % (name, path))
        out.append(path)
    return out


def _home(unit, exists):
    home = (unit.value("ProtectHome", "no") or "no").lower()
    kinds = {"yes": "inaccessible", "true": "inaccessible", "read-only": "bind",
             "tmpfs": "tmpfs", "no": None, "false": None}
    if home not in kinds:
        raise UnitError("ProtectHome=%s" % home)
    steps = []
    for target in [p for p in HOME_PATHS if exists(p)] if kinds[home] else ():
        steps.append({"inaccessible": ("inaccessible", target),
                      "bind": ("bind", target, target, True),
                      "tmpfs": ("tmpfs", target, 0o755, True)}[kinds[home]])
    return steps


def _binds(unit, exists, writable):
    """BindPaths, BindReadOnlyPaths, ReadWritePaths, ReadOnlyPaths, InaccessiblePaths."""
    steps = []
    for name, read_only in (("BindPaths", False), ("BindReadOnlyPaths", True)):
        for word in unit.items(name):
            word, missing_ok = _optional(word)
            source, _, target = word.partition(":")
            target = target.split(":")[0] or source
            if not exists(source):
                if missing_ok:
                    continue
                raise UnitError("%s=%s: no such path" % (name, source))
            steps.append(("bind", source, target, read_only))
            if not read_only:
                writable.append(target)
    for path in _paths(unit, "ReadWritePaths", exists):
        steps.append(("bind", path, path, False))
        writable.append(path)
    steps += [("bind", p, p, True) for p in _paths(unit, "ReadOnlyPaths", exists)]
    steps += [("inaccessible", p) for p in _paths(unit, "InaccessiblePaths", exists)]
    return steps


def _system(unit, writable):
    system = (unit.value("ProtectSystem", "no") or "no").lower()
    base = ("/usr", "/boot", "/efi")
    roots = {"no": (), "false": (), "yes": base, "true": base, "full": base + ("/etc",),
             "strict": ("/",)}.get(system)
    if roots is None:
        raise UnitError("ProtectSystem=%s" % system)
    if not roots:
        return []
    return [("readonly", roots, tuple(writable) + (API_PATHS if system == "strict" else ()))]


def _kernel(unit, exists):
    steps = []
    if unit.flag("ProtectKernelTunables"):
        steps += [("bind", p, p, True) for p in KERNEL_TUNABLES if p != "/sys" and exists(p)]
        steps.append(("readonly", ("/sys",), ()))
    if unit.flag("ProtectControlGroups"):
        steps.append(("readonly", ("/sys/fs/cgroup",), ()))
    if unit.flag("ProtectKernelModules"):
        # /lib/modules is /usr/lib/modules on a merged /usr (Debian 12).
        steps += [("inaccessible", p) for p in KERNEL_MODULES if exists(p)
                  and not (p == "/lib/modules" and os.path.realpath(p) == KERNEL_MODULES[0])]
    if unit.flag("ProtectKernelLogs") and exists("/proc/kmsg"):
        steps.append(("inaccessible", "/proc/kmsg"))
    return steps


def readonly_targets(mounts, roots, writable):
    """Mount points of ``mounts`` to remount read-only: under ``roots``, not ``writable``.

    ``mounts``: ``[(mount point, options)]`` from :func:`mountinfo`.
    """
    return [(point, opts) for point, opts in mounts
            if _under(point, roots) and not _under(point, writable)]


def mountinfo(text):
    """``[(mount point, per-mount options)]`` of ``/proc/self/mountinfo``'s text."""
    out = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) > 5:
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
            out.append((point, set(fields[5].split(","))))
    return out


# -- seccomp -------------------------------------------------------------------------------

#: x86-64's audit architecture, ``socket(2)``'s number and the x32 ABI's bit.
AUDIT_ARCH_X86_64 = 0xC000003E
NR_SOCKET = 41
X32_SYSCALL_BIT = 0x40000000
BPF_LD_W_ABS, BPF_JEQ_K, BPF_JSET_K, BPF_RET_K = 0x20, 0x15, 0x45, 0x06
RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000


def seccomp_program(unit, machine=None):
    """``SystemCallArchitectures=native`` and ``RestrictAddressFamilies=`` as seccomp's BPF.

    ``[(code, jt, jf, k)]``, or None if neither applies. Only for x86-64
    (``machine``: :func:`os.uname`'s). A system call of another ABI (i386,
    x32) fails with ``EPERM``; ``socket(2)`` of a family the unit does not
    allow fails with ``EAFNOSUPPORT``, as systemd makes it (``socketpair(2)``
    and sockets passed in are not filtered, as there).
    """
    machine = machine or os.uname().machine
    native = (unit.value("SystemCallArchitectures") or "") == "native"
    families = unit.items("RestrictAddressFamilies")
    if machine != "x86_64" or not (native or families):
        return None
    deny = families[:1] and families[0].startswith("~")
    numbers = [_family(f.lstrip("~")) for f in families]
    foreign = RET_ERRNO | errno.EPERM if native else RET_ALLOW
    prog = [(BPF_LD_W_ABS, 0, 0, 4),                          # arch
            (BPF_JEQ_K, 1, 0, AUDIT_ARCH_X86_64),
            (BPF_RET_K, 0, 0, foreign),
            (BPF_LD_W_ABS, 0, 0, 0),                          # nr
            (BPF_JSET_K, 0, 1, X32_SYSCALL_BIT),
            (BPF_RET_K, 0, 0, foreign)]
    if not families:
        return prog + [(BPF_RET_K, 0, 0, RET_ALLOW)]
    n = len(numbers)
    # socket: its first argument (the family's low 32 bits) against the list.
    prog.append((BPF_JEQ_K, 0, n + 3, NR_SOCKET))
    prog.append((BPF_LD_W_ABS, 0, 0, 16))
    for i, number in enumerate(numbers):
        # Matched: to the listed families' verdict, n - i instructions on.
        prog.append((BPF_JEQ_K, n - i, 0, number))
    refused = RET_ERRNO | errno.EAFNOSUPPORT
    listed, other = (refused, RET_ALLOW) if deny else (RET_ALLOW, refused)
    return prog + [(BPF_RET_K, 0, 0, other), (BPF_RET_K, 0, 0, listed),
                   (BPF_RET_K, 0, 0, RET_ALLOW)]


def _family(name):
    number = getattr(socket, name, None)
    if not name.startswith("AF_") or number is None:
        raise UnitError("unknown address family %r" % name)
    return int(number)


def _install_seccomp(prog):
    class Filter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte),
                    ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Filter))]
    filters = (Filter * len(prog))(*[Filter(*ins) for ins in prog])
    program = Program(len(prog), filters)
    # PR_SET_SECCOMP, SECCOMP_MODE_FILTER (root: no no_new_privs needed here).
    _sys("prctl", ctypes.c_int(22), ctypes.c_ulong(2), ctypes.byref(program),
         ctypes.c_ulong(0), ctypes.c_ulong(0))


# -- carrying it out (root) -------------------------------------------------------------

_libc = None


def _sys(name, *args):
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    if getattr(_libc, name)(*args) != 0:
        err = ctypes.get_errno()
        raise OSError(err, "%s%r: %s" % (name, args, os.strerror(err)))


def _mount(source, target, fstype, flags, data=None):
    enc = (lambda s: None if s is None else os.fsencode(s))
    _sys("mount", enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data))


def _make_target(target, like_dir):
    if os.path.lexists(target):
        return
    if like_dir:
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "a").close()


def _remount_ro(point, opts):
    flags = MS_REMOUNT | MS_BIND | MS_RDONLY
    for name, bit in _KEPT.items():
        if name in opts:
            flags |= bit
    try:
        _mount(None, point, None, flags)
    except OSError as exc:
        # A mount point hidden since (a tmpfs over its parent) is not ours to protect.
        if exc.errno not in (errno.ENOENT, errno.EINVAL) or os.path.exists(point):
            raise


def _run_step(step, sources, scratch):
    kind = step[0]
    if kind == "mkdir":
        os.makedirs(step[1], mode=step[2], exist_ok=True)
    elif kind == "tmpfs":
        _, target, mode, read_only = step
        # systemd's /dev is nosuid and noexec; the other tmpfs nodev too.
        flags = MS_NOSUID | (MS_NOEXEC if target == "/dev" else MS_NODEV)
        _mount("tmpfs", target, "tmpfs", flags, "mode=%o" % mode)
        if read_only:
            scratch.append(target)          # read-only once the binds into it are made
    elif kind == "bind":
        _, source, target, read_only = step
        fd = sources[source]
        _make_target(target, stat.S_ISDIR(os.fstat(fd).st_mode))
        _mount("/proc/self/fd/%d" % fd, target, None, MS_BIND | MS_REC)
        if read_only:
            _readonly((target,), ())
    elif kind == "inaccessible":
        target = step[1]
        if os.path.isdir(target):
            _mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY,
                   "mode=000")
        else:
            _mount("/dev/null", target, None, MS_BIND)
            _mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY)
    elif kind == "link":
        if not os.path.lexists(step[1]):
            os.symlink(step[2], step[1])
    elif kind == "readonly":
        _readonly(step[1], step[2])


def _readonly(roots, writable):
    with open("/proc/self/mountinfo") as f:
        mounts = mountinfo(f.read())
    for point, opts in readonly_targets(mounts, roots, writable):
        _remount_ro(point, opts)


def enter(unit):
    """Carry out :func:`plan` in a new mount (and UTS) namespace of this process.

    Nothing may be imported from here on: ``ProtectHome=`` may hide this
    interpreter's own library.
    """
    steps = plan(unit)
    flags = CLONE_NEWNS | (CLONE_NEWUTS if unit.flag("ProtectHostname") else 0)
    _sys("unshare", ctypes.c_int(flags))
    # As systemd: the host's later mounts show inside, none of these outside.
    _mount(None, "/", None, MS_REC | MS_SLAVE)
    scratch = []
    for step in [s for s in steps if s[0] == "mkdir"]:
        _run_step(step, {}, scratch)
    # Every bind's source as it is now, before a tmpfs hides it.
    sources = {}
    for step in steps:
        if step[0] == "bind" and step[1] not in sources:
            sources[step[1]] = os.open(step[1], os.O_PATH | os.O_CLOEXEC)
    for step in [s for s in steps if s[0] != "mkdir"]:
        _run_step(step, sources, scratch)
    for target in scratch:
        _readonly((target,), ())
    for fd in sources.values():
        os.close(fd)
    umask = unit.value("UMask")
    if umask is not None:
        os.umask(int(umask, 8))
    prog = seccomp_program(unit)
    if prog is not None:
        _install_seccomp(prog)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tests.cloud.unit_sandbox",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--unit", required=True, help="the unit file")
    parser.add_argument("--drop-in", action="append", default=[],
                        help="a drop-in (systemd syntax), after the unit; repeatable")
    parser.add_argument("command", nargs="*", help="what to run (default: ExecStart)")
    args = parser.parse_args(argv)
    unit = Unit.load(args.unit, args.drop_in)
    command = args.command or unit.exec_start()
    # Said where the command's own output goes (the cloud's agent log), once per start.
    print("unit_sandbox: %s under %s%s; not emulated: %s"
          % (command[0], args.unit, "".join(" + " + d for d in args.drop_in),
             ", ".join(unit.unemulated()) or "-"), file=sys.stderr, flush=True)
    enter(unit)
    final = setpriv_argv(unit, command)
    os.execvp(final[0], final)


if __name__ == "__main__":
    sys.exit(main())
