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

"""The lab: a real libvirtd with QEMU/TCG guests, set up and torn down by code.

Reusable building blocks (the ResEx experiment builds on them):

* :func:`install_packages` - the Debian packages (``tools/install-deb.sh``).
* :class:`Libvirtd` - configure and start ``libvirtd`` in the foreground as
  a child process (PID known), kill/restart it, stop it by PID.
* :func:`guest_kernel` - a Debian 6.1 kernel taken from its .deb with
  ``apt-get download`` + ``dpkg-deb -x`` (not installed), cached.
* :func:`build_initramfs` - a busybox-static initramfs whose ``/init`` runs
  the *role* named on the kernel command line (``resex.role=NAME``); roles
  are shell snippets, so an experiment adds its own (``ROLES`` has ``burn``
  and ``idle``), and kernel modules (``e1000.ko``) can be loaded first.
* :class:`Bridge` - a Linux bridge for the guests' taps.
* :class:`Guest` - define/start/destroy/undefine a TCG guest
  (``<domain type='qemu'>``, direct kernel boot, serial console to a file,
  optional bridge NIC, SLA metadata and latency channel); its QEMU PID is
  recorded so teardown can stop it even when libvirtd is dead.
* :class:`Lab` - all of the above with one ``teardown()`` that stops every
  process by PID and removes every domain and bridge, also on failure.
  It holds the machine-wide :class:`tests.machine.LabLock` from setup to
  the end of teardown: one machine, one lab at a time.

doc/source/lab.rst gives the facts this relies on: ``/dev/kvm`` here cannot boot
a stock kernel (hence TCG), libvirtd without systemd needs ``user = "root"``,
``security_driver = "none"`` and ``stdio_handler = "file"``.
"""

import glob
import logging
import os
import shutil
import subprocess
import tempfile
import xml.sax.saxutils as saxutils

import libvirt

from resex_libvirt.hypervisor import metadata as metadata_mod
from tests import machine

LOG = logging.getLogger(__name__)

# libvirt prints every error to stderr unless told otherwise; they are raised anyway.
libvirt.registerErrorHandler(lambda ctx, err: None, None)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CACHE = os.environ.get("RESEX_LAB_CACHE", "/var/tmp/resex-lab")
URI = "qemu:///system"

PACKAGES = ("libvirt-daemon", "libvirt-daemon-driver-qemu", "libvirt-clients",
            "qemu-system-x86", "busybox-static", "cpio", "iproute2")

QEMU_CONF = """# written by resex-libvirt's lab harness
user = "root"
group = "root"
stdio_handler = "file"
security_driver = "none"
"""

#: Every lab guest's kernel command line before its role. ``no_timer_check``:
#: a TCG vCPU starved by a loaded host misses the kernel's IO-APIC timer test,
#: which then panics ("IO-APIC + timer doesn't work!").
CMDLINE = "console=ttyS0 quiet panic=-1 no_timer_check"

#: Role name -> shell run by the guest's /init (busybox sh). It may loop for ever.
ROLES = {
    "burn": "echo resex: burning CPU\nwhile :; do :; done\n",
    "idle": "echo resex: idle\nwhile :; do sleep 3600; done\n",
}

INIT_TEMPLATE = """#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev 2>/dev/null
for m in /lib/modules/*.ko; do [ -e "$m" ] && insmod "$m"; done
[ -f /etc/resex.env ] && . /etc/resex.env
role=%(default_role)s
for arg in $(cat /proc/cmdline); do
    case "$arg" in resex.role=*) role="${arg#resex.role=}";; esac
done
echo "resex: role $role"
case "$role" in
%(cases)s
    *) echo "resex: unknown role $role";;
esac
poweroff -f
"""


def is_root():
    return os.geteuid() == 0


def install_packages(packages=PACKAGES):
    """Install the lab's Debian packages that are missing (idempotent)."""
    subprocess.run([os.path.join(ROOT, "tools", "install-deb.sh"), *packages], check=True)


def _run(*cmd, check=True):
    return subprocess.run(cmd, check=check, capture_output=True, text=True)


# -- libvirtd ------------------------------------------------------------------

class Libvirtd:
    """``libvirtd`` as our child process (foreground, so its PID is ours)."""

    def __init__(self, log_path=None):
        self.log_path = log_path or os.path.join(CACHE, "libvirtd.log")
        self.proc = None

    @staticmethod
    def configure():
        """The setup doc/source/lab.rst describes for a host without systemd."""
        if _run("getent", "group", "libvirt-qemu", check=False).returncode:
            _run("groupadd", "--system", "libvirt-qemu")
        if _run("getent", "passwd", "libvirt-qemu", check=False).returncode:
            _run("useradd", "--system", "-g", "libvirt-qemu", "-d", "/var/lib/libvirt",
                 "-s", "/usr/sbin/nologin", "libvirt-qemu")
        for path in ("/var/log/libvirt/qemu", "/var/lib/libvirt/qemu", "/run/libvirt",
                     "/etc/libvirt"):
            os.makedirs(path, exist_ok=True)
        with open("/etc/libvirt/qemu.conf", "w") as f:
            f.write(QEMU_CONF)

    @property
    def pid(self):
        return self.proc.pid if self.proc is not None else None

    PIDFILE = "/run/libvirtd.pid"

    @classmethod
    def running_pid(cls):
        """PID of a live libvirtd owning the pid file, or None."""
        try:
            with open(cls.PIDFILE) as f:
                pid = int(f.read().strip())
        except (OSError, ValueError):
            return None
        try:
            with open("/proc/%d/comm" % pid) as f:
                return pid if f.read().strip() == "libvirtd" and machine.alive(pid) else None
        except OSError:
            return None

    def start(self, timeout=30.0):
        """Start our own libvirtd; refuse to share one somebody else started.

        Two labs on one machine would otherwise drive each other's guests
        through one daemon (the second libvirtd exits at once, unable to take
        the pid file, while the first answers on the socket).
        """
        other = self.running_pid()
        if other is not None:
            raise RuntimeError("a libvirtd (pid %d) not started by this lab is running; the lab "
                               "needs its own: stop it (or wait for the other lab) first" % other)
        self.configure()
        os.makedirs(os.path.dirname(self.log_path), exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                ["libvirtd"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)
        if not machine.wait_for(self._answers, timeout, step=0.2):
            self.stop()
            raise RuntimeError("libvirtd did not come up within %.0f s; see %s"
                               % (timeout, self.log_path))
        return self

    def _answers(self):
        """Ours answers on the socket (and owns the pid file); raises if it exited."""
        if self.proc.poll() is not None:
            raise RuntimeError("libvirtd exited with %s; see %s"
                               % (self.proc.returncode, self.log_path))
        try:
            libvirt.open(URI).close()
        except libvirt.libvirtError:
            return False
        return self.running_pid() == self.proc.pid

    @classmethod
    def wait_gone(cls, timeout):
        """Until no libvirtd another lab started runs; False after ``timeout`` s."""
        return machine.wait_for(lambda: cls.running_pid() is None, timeout, step=1.0)

    def kill(self):
        """SIGKILL libvirtd (a crash): guests keep running."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def stop(self):
        if self.proc is not None:
            machine.stop_pid(self.proc.pid)
            self.proc = None


# -- guest image -----------------------------------------------------------------

def _latest_kernel_package():
    out = _run("apt-cache", "search", "--names-only", r"^linux-image-6\.1\.0-[0-9]+-amd64$").stdout
    names = sorted((line.split()[0] for line in out.splitlines() if line.strip()),
                   key=lambda n: int(n.split("-")[3]))
    if not names:
        raise RuntimeError("no linux-image-6.1.0-*-amd64 package known to apt")
    return names[-1]


def guest_kernel(cache=CACHE):
    """``(vmlinuz path, modules dir)`` of a Debian 6.1 kernel, extracted once."""
    tree = os.path.join(cache, "kernel")
    found = sorted(glob.glob(os.path.join(tree, "boot", "vmlinuz-*")))
    if not found:
        os.makedirs(cache, exist_ok=True)
        package = _latest_kernel_package()
        subprocess.run(["apt-get", "download", package], cwd=cache, check=True,
                       capture_output=True)
        deb = sorted(glob.glob(os.path.join(cache, package + "_*.deb")))[-1]
        os.makedirs(tree, exist_ok=True)
        subprocess.run(["dpkg-deb", "-x", deb, tree], check=True)
        found = sorted(glob.glob(os.path.join(tree, "boot", "vmlinuz-*")))
    vmlinuz = found[-1]
    version = os.path.basename(vmlinuz)[len("vmlinuz-"):]
    return vmlinuz, os.path.join(tree, "lib", "modules", version)


def kernel_module(modules_dir, name):
    """The path of module ``name`` (e.g. ``e1000``) in an extracted kernel."""
    hits = glob.glob(os.path.join(modules_dir, "kernel", "**", name + ".ko"), recursive=True)
    if not hits:
        raise FileNotFoundError("%s.ko not under %s" % (name, modules_dir))
    return hits[0]


def build_initramfs(path, roles=None, modules=(), files=None, default_role="idle"):
    """Write a busybox-static initramfs (gzip'd newc cpio) to ``path``.

    ``roles`` maps role names to shell snippets (default :data:`ROLES`);
    ``modules`` are .ko paths insmod'ed in order; ``files`` maps paths inside
    the image to bytes (extra scripts or tools; ``/etc/resex.env``, if given,
    is sourced before the role runs); ``default_role`` runs when the kernel
    command line names none.
    """
    roles = dict(ROLES if roles is None else roles)
    busybox = shutil.which("busybox")
    if busybox is None:
        raise FileNotFoundError("busybox (busybox-static) is not installed")
    with tempfile.TemporaryDirectory(prefix="resex-initramfs-") as tree:
        for sub in ("bin", "proc", "sys", "dev", "tmp", "lib/modules", "etc"):
            os.makedirs(os.path.join(tree, sub), exist_ok=True)
        shutil.copy(busybox, os.path.join(tree, "bin", "busybox"))
        for i, module in enumerate(modules):
            shutil.copy(module, os.path.join(tree, "lib", "modules",
                                             "%02d-%s" % (i, os.path.basename(module))))
        cases = "\n".join("    %s)\n%s        ;;" % (
            name, "".join("        %s\n" % line for line in body.splitlines()))
            for name, body in roles.items())
        init = os.path.join(tree, "init")
        with open(init, "w") as f:
            f.write(INIT_TEMPLATE % {"cases": cases, "default_role": default_role})
        os.chmod(init, 0o755)
        for rel, data in (files or {}).items():
            target = os.path.join(tree, rel.lstrip("/"))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "wb") as f:
                f.write(data)
            os.chmod(target, 0o755)
        listing = subprocess.run(["find", "."], cwd=tree, check=True, capture_output=True)
        cpio = subprocess.run(["cpio", "-o", "-H", "newc", "--quiet"], cwd=tree, check=True,
                              input=listing.stdout, capture_output=True)
    import gzip
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(cpio.stdout)
    return path


# -- network -------------------------------------------------------------------

class Bridge:
    """A Linux bridge created (and removed) by the lab."""

    def __init__(self, name="resexbr0"):
        self.name = name
        self.created = False

    def create(self):
        if _run("ip", "link", "show", self.name, check=False).returncode:
            _run("ip", "link", "add", self.name, "type", "bridge")
            self.created = True
        _run("ip", "link", "set", self.name, "up")
        return self

    def remove(self):
        if self.created:
            _run("ip", "link", "del", self.name, check=False)
            self.created = False


# -- guests --------------------------------------------------------------------

class Guest:
    """One TCG guest (``<domain type='qemu'>``) booting the lab's kernel and initramfs."""

    def __init__(self, name, kernel, initrd, role="burn", memory_mib=96, vcpus=1,
                 bridge=None, tap=None, sla=None, latency_socket=None, extra_cmdline="",
                 workdir=CACHE):
        self.name = name
        self.kernel = kernel
        self.initrd = initrd
        self.role = role
        self.memory_mib = memory_mib
        self.vcpus = vcpus
        self.bridge = bridge
        self.tap = tap
        self.sla = sla
        self.latency_socket = latency_socket
        self.extra_cmdline = extra_cmdline
        self.console = os.path.join(workdir, "%s.console" % name)
        self.uuid = None
        self.qemu_pid = None

    def xml(self):
        esc = saxutils.quoteattr
        parts = [
            "<domain type='qemu'>",
            "<name>%s</name>" % saxutils.escape(self.name),
            "<memory unit='MiB'>%d</memory>" % self.memory_mib,
            "<vcpu>%d</vcpu>" % self.vcpus,
        ]
        if self.sla:
            parts.append("<metadata><resex:sla xmlns:resex='%s'>%s</resex:sla></metadata>" % (
                metadata_mod.NAMESPACE, "".join(
                    "<resex:%s>%s</resex:%s>" % (k.split(":", 1)[-1], saxutils.escape(str(v)),
                                                 k.split(":", 1)[-1])
                    for k, v in self.sla.items())))
        parts += [
            "<os><type arch='x86_64' machine='pc'>hvm</type>",
            "<kernel>%s</kernel><initrd>%s</initrd>" % (
                saxutils.escape(self.kernel), saxutils.escape(self.initrd)),
            "<cmdline>%s</cmdline></os>" % saxutils.escape(
                ("%s resex.role=%s %s" % (CMDLINE, self.role, self.extra_cmdline)).strip()),
            "<on_poweroff>destroy</on_poweroff><on_reboot>destroy</on_reboot>",
            "<on_crash>destroy</on_crash>",
            "<devices>",
            "<emulator>/usr/bin/qemu-system-x86_64</emulator>",
            "<serial type='file'><source path=%s/><target port='0'/></serial>" % esc(
                self.console),
            "<console type='file'><source path=%s/><target type='serial' port='0'/></console>"
            % esc(self.console),
            "<memballoon model='none'/>",
        ]
        if self.bridge:
            parts.append("<interface type='bridge'><source bridge=%s/><model type='e1000'/>%s"
                         "</interface>" % (esc(self.bridge), "<target dev=%s/>" % esc(self.tap)
                                           if self.tap else ""))
        if self.latency_socket:
            parts.append("<controller type='virtio-serial' index='0'/>")
            parts.append("<channel type='unix'><source mode='bind' path=%s/>"
                         "<target type='virtio' name='%s'/></channel>" % (
                             esc(self.latency_socket), metadata_mod.LATENCY_CHANNEL_NAME))
        parts += ["</devices>", "</domain>"]
        return "".join(parts)

    def start(self, conn):
        """Define and start the guest; record its UUID and QEMU PID."""
        dom = conn.defineXML(self.xml())
        self.uuid = dom.UUIDString()
        dom.create()
        self.qemu_pid = self.read_pid()
        return dom

    def read_pid(self):
        """The pid in libvirt's pid file of this guest's QEMU, or None."""
        path = "/run/libvirt/qemu/%s.pid" % self.name
        try:
            with open(path) as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            return None

    def destroy(self, conn):
        """Stop and undefine the guest (ignoring one that is already gone)."""
        if conn is not None:
            try:
                dom = conn.lookupByName(self.name)
            except libvirt.libvirtError:
                dom = None
            if dom is not None:
                try:
                    if dom.isActive():
                        dom.destroy()
                except libvirt.libvirtError as exc:
                    LOG.warning("destroy %s: %s", self.name, exc)
                try:
                    dom.undefine()
                except libvirt.libvirtError as exc:
                    LOG.warning("undefine %s: %s", self.name, exc)
        machine.stop_pid(self.qemu_pid)
        self.qemu_pid = None


KNOBS = ("global_period", "global_quota", "cpu_shares")


def knobs(conn, guest):
    """The guest's CPU knobs in force, as libvirt reads them back."""
    params = conn.lookupByUUIDString(guest.uuid).schedulerParameters()
    return {k: params[k] for k in KNOBS}


def cap_pct(params):
    """The cap (percent of one pCPU) that knobs say, or None if uncapped."""
    if params["global_quota"] <= 0:
        return None
    return 100.0 * params["global_quota"] / params["global_period"]


def cgroup_cpu_quota(guest):
    """``(period_us, quota_us, path)`` of the guest's domain cgroup, read from the kernel.

    cgroup v1: ``cpu.cfs_period_us``/``cpu.cfs_quota_us``; v2: ``cpu.max``.
    ``None`` if the guest's cgroup cannot be found.
    """
    if guest.qemu_pid is None:
        return None
    try:
        with open("/proc/%d/cgroup" % guest.qemu_pid) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        _hid, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(",") or controllers == "":
            # The QEMU main thread sits in <domain>/emulator: the domain cgroup is its parent.
            domain_path = path[:-len("/emulator")] if path.endswith("/emulator") else path
            if controllers == "":
                base_dir = "/sys/fs/cgroup/unified" if os.path.isdir(
                    "/sys/fs/cgroup/unified") else "/sys/fs/cgroup"
                full = base_dir + domain_path
                try:
                    with open(os.path.join(full, "cpu.max")) as f:
                        quota, period = f.read().split()
                    return int(period), (-1 if quota == "max" else int(quota)), full
                except (OSError, ValueError):
                    continue
            for mount in ("/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"):
                full = mount + domain_path
                try:
                    with open(os.path.join(full, "cpu.cfs_period_us")) as f:
                        period = int(f.read())
                    with open(os.path.join(full, "cpu.cfs_quota_us")) as f:
                        quota = int(f.read())
                    return period, quota, full
                except (OSError, ValueError):
                    continue
    return None


class SetUpTearDown:
    """``with`` support for the lab's parts: ``setup()`` in, ``teardown()`` out.

    A setup that fails half-way is torn down before the error goes on.
    """

    def __enter__(self):
        try:
            return self.setup()
        except BaseException:
            self.teardown()
            raise

    def __exit__(self, *exc):
        self.teardown()


class Lab(SetUpTearDown):
    """A libvirtd, a bridge and guests, torn down together by PID.

    Holds the machine-wide :class:`tests.machine.LabLock` from :meth:`setup` to the end
    of :meth:`teardown`.
    """

    def __init__(self, workdir=None, install=True):
        self.workdir = workdir or tempfile.mkdtemp(prefix="resex-lab-")
        self.install = install
        self.lock = machine.LabLock()
        self._holding = False
        self.libvirtd = Libvirtd(os.path.join(self.workdir, "libvirtd.log"))
        self.bridges = []
        self.guests = []
        self.kernel = None
        self.modules_dir = None

    def setup(self, wait_s=0.0):
        """Bring the lab up; first wait up to ``wait_s`` for another lab's libvirtd to go."""
        if not self._holding:
            self.lock.acquire()
            self._holding = True
        if not self.libvirtd.wait_gone(wait_s):
            raise RuntimeError("another lab's libvirtd (pid %s) is still running after %.0f s"
                               % (Libvirtd.running_pid(), wait_s))
        if self.install:
            install_packages()
        self.kernel, self.modules_dir = guest_kernel()
        self.libvirtd.start()
        return self

    def initramfs(self, roles=None, modules=(), files=None, name="initramfs.img"):
        return build_initramfs(os.path.join(self.workdir, name), roles=roles,
                               modules=modules, files=files)

    def bridge(self, name="resexbr0"):
        br = Bridge(name).create()
        self.bridges.append(br)
        return br

    def guest(self, name, initrd, **kwargs):
        """Define and start a guest; it is destroyed by :meth:`teardown`."""
        guest = Guest(name, self.kernel, initrd, workdir=self.workdir, **kwargs)
        self.guests.append(guest)
        conn = libvirt.open(URI)
        try:
            guest.start(conn)
        finally:
            conn.close()
        return guest

    def teardown(self):
        self.lock.acquire()
        try:
            self._teardown()
        finally:
            self.lock.release()
            if self._holding:
                self._holding = False
                self.lock.release()

    def _teardown(self):
        conn = None
        if self.libvirtd.proc is None:
            try:
                self.libvirtd.start()
            except Exception as exc:
                LOG.warning("cannot restart libvirtd for teardown: %s", exc)
        try:
            conn = libvirt.open(URI)
        except libvirt.libvirtError as exc:
            LOG.warning("no libvirtd for teardown: %s", exc)
        for guest in reversed(self.guests):
            guest.destroy(conn)
        self.guests = []
        if conn is not None:
            conn.close()
        self.libvirtd.stop()
        for br in self.bridges:
            br.remove()
        self.bridges = []
