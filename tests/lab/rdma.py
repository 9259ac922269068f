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

"""The RDMA guest image: Soft-RoCE (``rdma_rxe``), rdma-core and perftest in a busybox initramfs.

:func:`guest_image` is the whole API for a user of the image (the lab, a
cloud's Nova guests): ``guest_image(role)`` returns ``(kernel, initrd)``
paths, built once and cached; the guest runs ``role`` unless its kernel
command line names another (``resex.role=NAME``). Every role first brings
up ``eth0`` (``resex.ip=A.B.C.D``, or ``mac:A.B.C`` for the MAC's last byte,
else DHCP) and the RoCEv2 port ``rxe0`` on it (``rdma link add rxe0 type rxe
netdev eth0``).

What goes in, all of it from Debian's packages (installed on the host with
``tools/install-deb.sh``, then copied with their ``ldd`` closure):

* kernel modules of the lab's Debian 6.1 guest kernel, dependencies first
  (resolved from each module's ``depends=``; the .deb ships no
  ``modules.dep`` and busybox has no real modprobe): ``e1000``, the
  virtio console (the latency channel) and the RDMA stack, ``ib_core`` to
  ``rdma_ucm`` with ``rdma_rxe`` and ``crc32_generic`` (rxe's ICRC; a
  module here, never autoloaded without modprobe);
* perftest's ``ib_send_lat``, ``ib_write_lat``, ``ib_write_bw``,
  ``ib_send_bw``; rdma-core's ``rping`` and ``ibv_devinfo``; iproute2's
  ``rdma``; the rxe provider (``librxe-rdmav*.so`` and
  ``/etc/libibverbs.d/rxe.driver``);
* the verbs BenchEx (``benchex/build.sh``) when its build succeeds.

Roles (parameters on the kernel command line as ``resex.NAME=VALUE``):

``rxe``
    the port up, then idle (a Nova guest that tenants use).
``rdma-server``
    the peer of the others: an ``ib_send_lat`` server (port
    :data:`LAT_PORT`), an ``ib_write_bw`` server (:data:`BW_PORT`) and the
    verbs BenchEx server (:data:`BENCHEX_PORT`), each restarted after every
    run (a perftest server serves one run).
``rdma-lat``
    the latency-sensitive tenant: ``ib_send_lat`` runs of ``resex.iters``
    messages of ``resex.size`` bytes to ``resex.peer`` back to back (or,
    with ``resex.lat=benchex``, the verbs BenchEx client at ``resex.rate``
    requests/s, only while the host's gate ``resex.vgate=IP:PORT``, when
    given, accepts a TCP connection: on/off phases); each run's summary
    goes to the latency channel as a BenchEx report and to the console as
    a ``resex-lat`` line.
``rdma-bulk``
    the interferer: ``ib_write_bw`` bursts of ``resex.burst`` seconds of
    ``resex.size``-byte writes to ``resex.peer``, each only while the host's
    gate ``resex.gate=IP:PORT`` accepts a TCP connection; each burst's
    result on the console as a ``resex-bw`` line.

Measured facts behind this (doc/source/lab.rst): perftest needs ``-x 1``
(the IPv4-mapped RoCEv2 GID) and ``-F``; a guest's ``/init`` must never
exit.
"""

import glob
import hashlib
import json
import logging
import os
import shutil
import subprocess

from tests.lab import harness

LOG = logging.getLogger(__name__)

#: Debian packages the image is made of (besides the harness's own).
PACKAGES = ("perftest", "ibverbs-providers", "libibverbs1", "librdmacm1", "ibverbs-utils",
            "rdmacm-utils", "iproute2", "libibverbs-dev", "librdmacm-dev", "gcc",
            "libc6-dev")

#: The guest kernel's modules, in the order they are wanted (dependencies are added first).
MODULES = ("e1000",
           "virtio_ring", "virtio", "virtio_pci_legacy_dev", "virtio_pci_modern_dev",
           "virtio_pci", "virtio_console",
           "crc32_generic", "ib_core", "ib_uverbs", "udp_tunnel", "ip6_udp_tunnel",
           "rdma_rxe", "ib_cm", "iw_cm", "configfs", "rdma_cm", "rdma_ucm")

#: Programs copied from the host (Debian packages) with their libraries.
PROGRAMS = ("/usr/bin/ib_send_lat", "/usr/bin/ib_write_lat", "/usr/bin/ib_write_bw",
            "/usr/bin/ib_send_bw", "/usr/bin/rping", "/usr/bin/ibv_devinfo",
            "/usr/bin/rdma")
PROVIDER_GLOB = "/usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav*.so"
PROVIDER_DRIVER = "/etc/libibverbs.d/rxe.driver"

LAT_PORT = 18515
BW_PORT = 18516
BENCHEX_PORT = 18517

#: Sourced by ``/init`` before the role: libraries, and ``RESEX_<name>`` from ``resex.<name>=``.
ENV = b"""export LD_LIBRARY_PATH=/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
for arg in $(cat /proc/cmdline); do
    case "$arg" in
        resex.*=*) k="${arg%%=*}"; k="${k#resex.}"; v="${arg#*=}"
                   case "$k" in *[!a-z0-9_]*) ;; *) eval "export RESEX_$k=\\$v";; esac;;
    esac
done
"""

#: eth0 up: the address from ``resex.ip=`` (/24; ``mac:A.B.C`` takes the MAC's
#: last byte as the fourth number, as the cloud's neutron stand-in assigns them),
#: else busybox's DHCP client.
NET_UP = b"""#!/bin/busybox sh
ip link set lo up
ip link set eth0 up
case "$RESEX_ip" in
    mac:*) mac=$(cat /sys/class/net/eth0/address)
           RESEX_ip="${RESEX_ip#mac:}.$((0x${mac##*:}))";;
esac
if [ -n "$RESEX_ip" ]; then
    ip addr add "$RESEX_ip/24" dev eth0
else
    udhcpc -i eth0 -n -q -t 10 -s /bin/resex-udhcpc
fi
echo "resex: eth0 $(ip -4 -o addr show dev eth0 | awk '{print $4}')"
"""

#: What udhcpc calls with the lease (busybox ships no default script).
UDHCPC = b"""#!/bin/busybox sh
case "$1" in
    bound|renew)
        ip addr flush dev "$interface"
        ip addr add "$ip/${mask:-24}" dev "$interface"
        [ -n "$router" ] && ip route replace default via ${router%% *} dev "$interface"
        ;;
esac
exit 0
"""

#: rxe0 on eth0, then wait until its port is active (e1000's link comes up late on a
#: loaded TCG host: up to 3 minutes).
RXE_UP = b"""#!/bin/busybox sh
rdma link add rxe0 type rxe netdev eth0 || echo "resex: rdma link add failed"
i=0
while [ $i -lt 900 ]; do
    if ibv_devinfo -d rxe0 2>/dev/null | grep -q PORT_ACTIVE; then
        echo "resex: rxe0 up ($(rdma link show rxe0/1 2>/dev/null))"
        exit 0
    fi
    i=$((i + 1))
    sleep 0.2
done
echo "resex: rxe0 not active"
exit 1
"""

#: The latency channel's device, linked as udev would (a busybox guest has no udev).
CHANNEL_LINK = b"""#!/bin/busybox sh
mkdir -p /dev/virtio-ports
for p in /sys/class/virtio-ports/vport*; do
    [ -e "$p/name" ] || continue
    n=$(cat "$p/name")
    [ -n "$n" ] && ln -sfn "/dev/${p##*/}" "/dev/virtio-ports/$n"
done
[ -e /dev/virtio-ports/org.resex.latency.0 ]
"""

#: perftest output -> one BenchEx report on the channel and one ``resex-lat`` console line.
#: ib_send_lat's result row: #bytes #iterations t_min t_max t_typical t_avg t_stdev p99 p99.9
PERFTEST_REPORT = b"""#!/bin/busybox sh
awk -v chan="$1" -v peer="$2" '
$1 ~ /^[0-9]+$/ && NF >= 9 && $2 ~ /^[0-9]+$/ {
    printf "resex-lat tool=perftest bytes=%s n=%s min=%s max=%s", $1, $2, $3, $4
    printf " typical=%s mean=%s std=%s p99=%s p999=%s\\n", $5, $6, $7, $8, $9
    if (chan != "" && $6 + 0 > 0 && $8 + 0 > 0 && $6 + 0 < 1e7 && $8 + 0 < 1e7) {
        if (peer != "")
            printf "{\\"v\\":2,\\"peer\\":\\"%s\\",", peer > chan
        else
            printf "{\\"v\\":1,", "" > chan
        printf "\\"n\\":%d,\\"mean_us\\":%.3f,", $2, $6 > chan
        printf "\\"std_us\\":%.3f,\\"p99_us\\":%.3f}\\n", $7, $8 > chan
        fflush(chan)
    }
}'
"""

COMMON = "/bin/resex-net-up\n/bin/resex-rxe-up\n"

ROLES = {
    "rxe": COMMON + "echo resex: rdma ready\nwhile :; do sleep 3600; done\n",
    "rdma-server": (
        COMMON
        + "size=${RESEX_size:-2}; iters=${RESEX_iters:-1000}; bsize=${RESEX_bsize:-65536}\n"
        + "burst=${RESEX_burst:-5}\n"
        + "( while :; do ib_send_lat -x 1 -F -p %d -s $size -n $iters >/dev/null 2>&1;"
          " done ) &\n" % LAT_PORT
        + "( while :; do ib_write_bw -x 1 -F -p %d -s $bsize -D $burst >/dev/null 2>&1;"
          " sleep 0.1; done ) &\n" % BW_PORT
        + "if [ -x /bin/benchex-verbs ]; then\n"
          "    ( while :; do /bin/benchex-verbs server --transport verbs --bind 0.0.0.0"
          " --port %d --compute-us ${RESEX_compute:-10}; sleep 0.5; done ) &\n"
          "fi\n" % BENCHEX_PORT
        + "echo resex: rdma servers up\nwhile :; do sleep 3600; done\n"),
    "rdma-lat": (
        COMMON
        + "chan=\nresex-channel-link && chan=/dev/virtio-ports/org.resex.latency.0\n"
        + "echo \"resex: latency client to $RESEX_peer (channel ${chan:-none})\"\n"
        + "size=${RESEX_size:-2}; iters=${RESEX_iters:-1000}\n"
        + "sleep 2\n"
        + "if [ \"$RESEX_lat\" = benchex ] && [ -x /bin/benchex-verbs ]; then\n"
          # With resex.vgate=IP:PORT the client runs only while the host's
          # gate answers (on/off phases): stopped (SIGTERM: it disconnects)
          # within a second of the gate closing.
          "    vhost=${RESEX_vgate%%:*}; vport=${RESEX_vgate##*:}\n"
          "    von() { [ -z \"$RESEX_vgate\" ] || [ \"$(nc -w 2 $vhost $vport </dev/null"
          " 2>/dev/null)\" = go ]; }\n"
          "    while :; do\n"
          "        if ! von; then sleep 0.5; continue; fi\n"
          "        /bin/benchex-verbs client --transport verbs --host $RESEX_peer --port %d"
          " --rate ${RESEX_rate:-50} --requests 100000000 --request-bytes $size"
          " --verb ${RESEX_verb:-send} --print-samples 1 ${chan:+--report-channel $chan}"
          " --report-interval ${RESEX_report:-0.5} &\n"
          "        pid=$!\n"
          "        while kill -0 $pid 2>/dev/null && von; do sleep 1; done\n"
          "        kill $pid 2>/dev/null; wait $pid\n"
          "        sleep 1\n"
          "    done\n"
          "fi\n" % BENCHEX_PORT
        + "while :; do\n"
          # A channel hot-plugged after boot (a Nova guest's, by the agent) is
          # linked before the next run.
          "    [ -z \"$chan\" ] && resex-channel-link"
          " && chan=/dev/virtio-ports/org.resex.latency.0 && echo resex: channel up\n"
          "    ib_send_lat -x 1 -F -p %d -s $size -n $iters $RESEX_peer 2>&1"
          " | resex-perftest-report \"$chan\" \"$RESEX_peer\"\n"
          "    sleep 0.2\n"
          "done\n" % LAT_PORT),
    "rdma-bulk": (
        COMMON
        + "bsize=${RESEX_bsize:-65536}; burst=${RESEX_burst:-5}\n"
        + "gate_host=${RESEX_gate%:*}; gate_port=${RESEX_gate##*:}\n"
        + "echo \"resex: bulk writes to $RESEX_peer while $RESEX_gate is open\"\n"
        + "while :; do\n"
          "    if [ -n \"$RESEX_gate\" ] && [ \"$(nc -w 2 $gate_host $gate_port </dev/null"
          " 2>/dev/null)\" != go ]; then sleep 1; continue; fi\n"
          "    ib_write_bw -x 1 -F -p %d -s $bsize -D $burst $RESEX_peer 2>&1 | awk '\n"
          "        $1 ~ /^[0-9]+$/ && NF >= 5 && $2 ~ /^[0-9]+$/ {\n"
          "            printf \"resex-bw bytes=%%s iters=%%s peak=%%s avg_MBps=%%s"
          " mpps=%%s\\n\", $1, $2, $3, $4, $5 }'\n"
          "    sleep 0.2\n"
          "done\n" % BW_PORT),
}


# -- kernel modules ------------------------------------------------------------------

def _module_index(modules_dir):
    """``{name: path}`` of every ``.ko`` under ``modules_dir/kernel`` (``-`` read as ``_``)."""
    index = {}
    for path in glob.glob(os.path.join(modules_dir, "kernel", "**", "*.ko"), recursive=True):
        index[os.path.basename(path)[:-3].replace("-", "_")] = path
    return index


def module_depends(path):
    """The ``depends=`` of a ``.ko`` (its ``.modinfo`` strings), as module names."""
    with open(path, "rb") as f:
        data = f.read()
    for entry in data.split(b"\0"):
        if entry.startswith(b"depends="):
            names = entry[len(b"depends="):].decode("ascii", "replace")
            return [n.replace("-", "_") for n in names.split(",") if n]
    return []


def module_closure(modules_dir, names=MODULES):
    """``.ko`` paths of ``names`` and their dependencies, each after what it depends on.

    A name with no ``.ko`` is taken as built into the kernel (``configfs``
    may be either) and skipped; a missing *dependency* is an error.
    """
    index = _module_index(modules_dir)
    ordered, seen = [], set()

    def visit(name, wanted_by=None):
        if name in seen:
            return
        seen.add(name)
        path = index.get(name)
        if path is None:
            if wanted_by is not None:
                raise FileNotFoundError("module %s (needed by %s) not under %s"
                                        % (name, wanted_by, modules_dir))
            LOG.debug("module %s not found: taken as built in", name)
            return
        for dep in module_depends(path):
            visit(dep, name)
        ordered.append(path)

    for name in names:
        visit(name)
    return ordered


# -- userland ------------------------------------------------------------------------

def ldd_closure(paths):
    """Every shared library ``paths`` load (``ldd``), the dynamic loader included."""
    libs = set()
    for path in paths:
        out = subprocess.run(["ldd", path], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            line = line.strip()
            if "=>" in line:
                target = line.split("=>", 1)[1].split("(")[0].strip()
            else:
                target = line.split("(")[0].strip()
            if target.startswith("/"):
                libs.add(target)
            elif "not found" in line:
                raise FileNotFoundError("%s: %s" % (path, line))
    return sorted(libs)


def userland_files(programs=PROGRAMS, extra_programs=()):
    """``{path in the image: bytes}``: the programs, the rxe provider and their libraries.

    Libraries keep their path (``/lib/x86_64-linux-gnu/...``), read through
    symlinks; programs go to ``/usr/bin``.
    """
    providers = glob.glob(PROVIDER_GLOB)
    missing = [p for p in programs if not os.path.exists(p)]
    if missing or not providers or not os.path.exists(PROVIDER_DRIVER):
        raise FileNotFoundError("RDMA userland missing (install %s): %s" % (
            " ".join(PACKAGES), ", ".join(missing or [PROVIDER_GLOB, PROVIDER_DRIVER])))
    files = {}
    binaries = list(programs) + list(extra_programs) + providers
    for path in binaries + ldd_closure(binaries):
        with open(path, "rb") as f:
            data = f.read()
        if path in programs:
            path = "/usr/bin/" + os.path.basename(path)
        files[path] = data
    with open(PROVIDER_DRIVER, "rb") as f:
        files[PROVIDER_DRIVER] = f.read()
    return files


def build_benchex_verbs(outdir):
    """The verbs BenchEx (``benchex/build.sh``): its path, or None if it cannot be built here."""
    script = os.path.join(harness.ROOT, "benchex", "build.sh")
    proc = subprocess.run([script, outdir], capture_output=True, text=True)
    path = os.path.join(outdir, "benchex-verbs")
    if proc.returncode or not os.path.exists(path):
        LOG.warning("verbs BenchEx not built: %s", (proc.stderr or proc.stdout).strip())
        return None
    return path


SCRIPTS = {
    "/etc/resex.env": ENV,
    "/bin/resex-net-up": NET_UP,
    "/bin/resex-udhcpc": UDHCPC,
    "/bin/resex-rxe-up": RXE_UP,
    "/bin/resex-channel-link": CHANNEL_LINK,
    "/bin/resex-perftest-report": PERFTEST_REPORT,
}


def build_rdma_initramfs(path, modules_dir, roles=None, default_role="rxe", benchex=None,
                         extra_files=None):
    """Write the RDMA initramfs to ``path``; returns ``(path, manifest)``.

    ``benchex`` is the verbs BenchEx binary to include (or None).
    The manifest lists modules, programs and sizes (``manifest.json`` beside it).
    """
    files = dict(SCRIPTS)
    extra = [benchex] if benchex else []
    files.update(userland_files(extra_programs=extra))
    if benchex:
        files.pop(benchex, None)
        with open(benchex, "rb") as f:
            files["/bin/benchex-verbs"] = f.read()
    files.update(extra_files or {})
    modules = module_closure(modules_dir)
    harness.build_initramfs(path, roles=dict(ROLES if roles is None else roles),
                            modules=modules, files=files, default_role=default_role)
    manifest = {
        "initrd": path, "initrd_bytes": os.path.getsize(path),
        "unpacked_bytes": sum(len(v) for v in files.values())
        + sum(os.path.getsize(m) for m in modules) + os.path.getsize(shutil.which("busybox")),
        "modules": [os.path.basename(m)[:-3] for m in modules],
        "files": sorted(files), "default_role": default_role,
        "roles": sorted(ROLES if roles is None else roles),
    }
    with open(path + ".manifest.json", "w") as f:
        json.dump(manifest, f, indent=1)
    return path, manifest


def guest_image(role="rxe", cache=harness.CACHE, install=True):
    """``(kernel, initrd)`` of the RDMA guest image whose default role is ``role``.

    Built once per role and content (kept under ``cache/rdma``); what a
    cloud registers as its kernel and ramdisk images. ``resex.role=`` on
    the kernel command line still selects another role.
    """
    if role not in ROLES:
        raise ValueError("unknown role %r (known: %s)" % (role, ", ".join(sorted(ROLES))))
    if install:
        harness.install_packages(harness.PACKAGES + PACKAGES)
    kernel, modules_dir = harness.guest_kernel(cache)
    outdir = os.path.join(cache, "rdma")
    os.makedirs(outdir, exist_ok=True)
    benchex = build_benchex_verbs(os.path.join(outdir, "bin"))
    digest = hashlib.sha256()
    for part in (kernel, repr(sorted(ROLES.items())), repr(sorted(SCRIPTS.items())),
                 harness.INIT_TEMPLATE, repr(MODULES)):
        digest.update(part.encode())
    for program in PROGRAMS + ((benchex,) if benchex else ()):
        with open(program, "rb") as f:
            digest.update(hashlib.sha256(f.read()).digest())
    initrd = os.path.join(outdir, "initrd-%s-%s.img" % (role, digest.hexdigest()[:12]))
    if not os.path.exists(initrd):
        tmp = initrd + ".tmp%d" % os.getpid()
        _path, info = build_rdma_initramfs(tmp, modules_dir, default_role=role,
                                           benchex=benchex)
        info["initrd"] = initrd
        with open(initrd + ".manifest.json", "w") as f:
            json.dump(info, f, indent=1)
        os.remove(tmp + ".manifest.json")
        os.replace(tmp, initrd)
    return kernel, initrd


def manifest(initrd):
    """The manifest :func:`build_rdma_initramfs` wrote beside ``initrd``."""
    with open(initrd + ".manifest.json") as f:
        return json.load(f)
