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


"""Images and flavors an operator would boot on the cloud (``make cloud`` publishes them).

Images: AMI-style, as Nova boots a kernel directly: the lab's Debian kernel
(aki), one busybox initramfs (ari) with every role, and a 1 MiB root disk
(ami) per role whose ``os_command_line`` names the role
(:func:`tests.lab.harness.build_initramfs` reads ``resex.role=``):

* ``resex-report``: the static C BenchEx server and client on the guest's
  loopback, reporting through ``/dev/virtio-ports/org.resex.latency.0``
  (:data:`tests.lab.nova_guest.REPORT_ROLE`); ``hw_qemu_guest_agent=yes``
  gives the guest the virtio-serial controller the channel needs;
* ``resex-bulk``: TCP to the host's sink as fast as its vCPU goes, through
  its NIC (address from its MAC, see :mod:`tests.cloud.neutron_stub`);
* ``resex-idle``.

Flavors: ``resex.sensitive`` (``resex:latency_sla_us``), ``resex.bulk``
(``resex:io_class=bulk``), ``resex.bulk.large`` (the same, 192 MiB: a
resize's target), ``resex.plain``.

RDMA guests (:func:`publish_rdma`, for ``make cloud-test``'s ``rdma_guests``):
the lab's Soft-RoCE image (:func:`tests.lab.rdma.guest_image`: ``rdma_rxe``,
perftest, the verbs BenchEx) as a second ramdisk, with an e1000 NIC
(``hw_vif_model``: the image's driver) addressed from its MAC; images
``resex-rdma-server`` (perftest's servers, at :data:`RDMA_SERVER_IP`),
``resex-rdma-lat`` (``ib_send_lat`` runs to the server, each run's mean and
p99 a report on the latency channel) and ``resex-rdma-bulk``
(``ib_write_bw`` to the server without pause); flavors ``resex.rdma.*`` of
192 MiB, the lab's size for these guests.
"""

import os

from tests.lab import experiment
from tests.lab import harness
from tests.lab import nova_guest
from tests.lab import rdma

SLA_US = 500
MEMORY_MIB = 128

MODULES = ("virtio_ring", "virtio", "virtio_pci_legacy_dev", "virtio_pci_modern_dev",
           "virtio_pci", "virtio_console", "failover", "net_failover", "virtio_net")

BULK_ROLE = (
    "RESEX_ip=mac:%(prefix)s /bin/resex-net-up\n"
    "echo resex: bulk sender to %(sink)s\n"
    "while :; do nc %(sink)s %(port)d < /dev/zero; sleep 1; done\n")

FLAVORS = {
    "resex.sensitive": {"resex:latency_sla_us": str(SLA_US)},
    "resex.bulk": {"resex:io_class": "bulk"},
    "resex.plain": {},
    # The bulk flavor, bigger: what a resize moves to.
    "resex.bulk.large": {"resex:io_class": "bulk"},
}
#: Memory of the flavors that have more than MEMORY_MIB.
FLAVOR_MEMORY_MIB = {"resex.bulk.large": 192, "resex.rdma.sensitive": 192,
                     "resex.rdma.bulk": 192, "resex.rdma.plain": 192}

#: The RDMA flavors (publish_rdma).
RDMA_FLAVORS = {
    "resex.rdma.sensitive": {"resex:latency_sla_us": str(SLA_US)},
    "resex.rdma.bulk": {"resex:io_class": "bulk"},
    "resex.rdma.plain": {},
}
#: The perftest servers' address (its port is made with it).
RDMA_SERVER_IP = "10.229.0.250"
#: ib_send_lat's iterations per run of the short pair (the client's and the server's).
SHORT_ITERS = 200
#: Image -> the guest's role and its parameters (kernel command line). The
#: client's and the server's perftest parameters must match (a run with
#: fewer iterations than the server expects never ends): both defaults.
RDMA_IMAGES = {
    "resex-rdma-server": "resex.role=rdma-server",
    "resex-rdma-lat": "resex.role=rdma-lat resex.peer=%s" % RDMA_SERVER_IP,
    "resex-rdma-bulk": "resex.role=rdma-bulk resex.peer=%s resex.burst=5" % RDMA_SERVER_IP,
    # The remote_victim row's pair: 200 iterations a run, a report every few
    # seconds on TCG (1,000 take 6-18 s: a remote claim would go quiet
    # longer than its expiry between two).
    "resex-rdma-server-short": "resex.role=rdma-server resex.iters=%d" % SHORT_ITERS,
    "resex-rdma-lat-short": "resex.role=rdma-lat resex.peer=%s resex.iters=%d"
                            % (RDMA_SERVER_IP, SHORT_ITERS),
}


def roles(sink_ip, sink_port):
    prefix = sink_ip.rsplit(".", 1)[0]
    return {
        "report": nova_guest.REPORT_ROLE,
        "bulk": BULK_ROLE % {"prefix": prefix, "sink": sink_ip, "port": sink_port},
        "idle": harness.ROLES["idle"],
    }


def build(workdir, sink_ip, sink_port):
    """``(kernel, initramfs)`` paths: the lab's kernel, an initramfs with every role."""
    kernel, modules_dir = harness.guest_kernel()
    benchex = experiment.build_benchex(os.path.join(workdir, "benchex"))
    with open(benchex, "rb") as f:
        files = {"/bin/benchex": f.read()}
    # The address from the NIC's MAC (Nova's port), as the RDMA guests take it.
    files["/bin/resex-net-up"] = rdma.NET_UP
    initrd = harness.build_initramfs(
        os.path.join(workdir, "resex-initramfs.img"), roles=roles(sink_ip, sink_port),
        modules=[harness.kernel_module(modules_dir, m) for m in MODULES], files=files)
    return kernel, initrd


def publish(cloud):
    """Upload the images and create the flavors (idempotent)."""
    from tests.cloud import cloud as cloud_mod
    conn = cloud.connect()
    try:
        workdir = os.path.join(cloud.dir, "data", "images")
        os.makedirs(workdir, exist_ok=True)
        kernel, initrd = build(workdir, cloud_mod.HOST_CIDR.split("/")[0],
                               cloud_mod.PORTS["sink"])
        aki = _image(conn, "resex-kernel", kernel, "aki")
        ari = _image(conn, "resex-ramdisk", initrd, "ari")
        root = os.path.join(workdir, "root.img")
        with open(root, "wb") as f:
            f.truncate(1 << 20)
        for role in ("report", "bulk", "idle"):
            _image(conn, "resex-" + role, root, "ami", kernel_id=aki.id, ramdisk_id=ari.id,
                   os_command_line="%s resex.role=%s" % (harness.CMDLINE, role),
                   hw_qemu_guest_agent="yes")
        _flavors(conn, FLAVORS)
    finally:
        conn.close()


def publish_rdma(cloud):
    """Upload the Soft-RoCE images and create their flavors (idempotent)."""
    from tests.cloud import cloud as cloud_mod
    kernel, initrd = rdma.guest_image("rxe")
    prefix = cloud_mod.CIDR.split("/")[0].rsplit(".", 1)[0]
    conn = cloud.connect()
    try:
        aki = _image(conn, "resex-kernel", kernel, "aki")
        ari = _image(conn, "resex-rdma-ramdisk", initrd, "ari")
        root = os.path.join(cloud.dir, "data", "images", "root.img")
        os.makedirs(os.path.dirname(root), exist_ok=True)
        with open(root, "wb") as f:
            f.truncate(1 << 20)
        for name, args in RDMA_IMAGES.items():
            _image(conn, name, root, "ami", kernel_id=aki.id, ramdisk_id=ari.id,
                   os_command_line="%s resex.ip=mac:%s %s" % (harness.CMDLINE, prefix, args),
                   hw_qemu_guest_agent="yes", hw_vif_model="e1000")
        _flavors(conn, RDMA_FLAVORS)
    finally:
        conn.close()


def _flavors(conn, flavors):
    for name, specs in flavors.items():
        flavor = conn.compute.find_flavor(name)
        if flavor is None:
            flavor = conn.compute.create_flavor(
                name=name, ram=FLAVOR_MEMORY_MIB.get(name, MEMORY_MIB), vcpus=1, disk=1,
                is_public=True)
            if specs:
                conn.compute.create_flavor_extra_specs(flavor, specs)


def _image(conn, name, path, fmt, **properties):
    found = conn.image.find_image(name)
    if found is not None:
        return found
    return conn.create_image(name, filename=path, disk_format=fmt, container_format=fmt,
                             visibility="public", wait=True, **properties)
