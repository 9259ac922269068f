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

"""A real OpenStack on one machine, with the plugin in it (``make cloud``).

Everything runs on 127.0.0.1 as a child process recorded by PID
(:mod:`tests.cloud.procs`) under one state directory (``RESEX_CLOUD_DIR``,
default ``/var/tmp/resex-cloud``): MariaDB, epmd and RabbitMQ, memcached,
etcd (the price board), keystone, glance, placement and nova-api under
gunicorn, a neutron stand-in (:mod:`tests.cloud.neutron_stub`), a TCP sink
for the guests' bulk traffic, nova-conductor and nova-scheduler, and per
compute node a libvirtd in its own mount and UTS namespace with its
nova-compute and resex-agent inside. The plugin is configured by
``devstack/plugin.sh``'s own post-config phase (nova.conf of the
scheduler; each node's agent configuration). doc/source/cloud.rst says
what runs where and why.
"""

import contextlib
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import uuid

import yaml

from tests.cloud import procs
from tests.cloud import unit_sandbox
from tests import machine

LOG = logging.getLogger(__name__)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STATE_DIR = os.environ.get("RESEX_CLOUD_DIR", "/var/tmp/resex-cloud")
#: The process table's name of the ``sleep`` that holds the lab lock for the cloud.
LAB_LOCK_HOLDER = "lab-lock"
VENV_BIN = os.path.dirname(os.path.abspath(sys.executable))
HOST = "127.0.0.1"
REGION = "RegionOne"
PASSWORD = "resex-cloud"

#: Debian packages of the control plane (the lab's libvirt/QEMU come with the nodes).
PACKAGES = ("mariadb-server", "rabbitmq-server", "memcached", "qemu-utils", "etcd-server",
            "libvirt-daemon", "libvirt-daemon-driver-qemu", "libvirt-clients",
            "qemu-system-x86", "busybox-static", "cpio", "iproute2", "util-linux")

#: Every service's port, below the kernel's ephemeral range (32768-60999 by
#: default): a port in it may be taken as the local port of any outgoing
#: connection on the machine. Seen with 46672: RabbitMQ died at bring-up
#: ("could_not_start_listener ... eaddrinuse").
PORTS = {
    "mariadb": 26306, "epmd": 26369, "rabbitmq": 26672, "rabbitmq-dist": 26671,
    "memcached": 26211, "etcd": 26379, "etcd-peer": 26380, "keystone": 26500,
    "glance": 26292, "placement": 26778, "nova-api": 26774, "neutron": 26696,
    "sink": 5001, "metrics-node1": 26791, "metrics-node2": 26792, "metrics-node3": 26793,
}

#: The guests' network: a bridge with the host's address; each node a network
#: namespace joined to it by a veth, with its own bridge and a shaped ifb.
BRIDGE = "resexcbr0"
CIDR = "10.229.0.0/24"
HOST_CIDR = "10.229.0.1/24"
#: Inside each node's network namespace: its bridge (the taps' and the veth's).
NODE_BRIDGE = "resexcnbr"
#: The veth's end inside each node's network namespace.
NODE_UPLINK = "resexcup"
#: Each node's address on the guests' network: its my_ip, libvirtd's TCP
#: listener and the migrations' end point.
NODE_IPS = {"node1": "10.229.0.2", "node2": "10.229.0.3", "node3": "10.229.0.4"}
NETWORK_ID = "8c6b3e2f-2d6a-4b5e-9a29-000000000001"
SUBNET_ID = "8c6b3e2f-2d6a-4b5e-9a29-000000000002"
#: Each node's link: guests' transmit through a tbf of this rate (the lab's bottleneck).
LINK_MBIT = 45.0
#: The agents' link capacity: the tbf's rate (Gb/s).
LINK_GBPS = 0.05

NODES = ("node1", "node2")

#: The rack (:meth:`Cloud.start_rack`, the ``shared_link`` row): node1 and a
#: third node behind one shaped uplink, the link both share.
RACK_NODE = "node3"
RACK = ("node1", RACK_NODE)
#: Every node a cloud may run (its teardown looks for each).
ALL_NODES = NODES + (RACK_NODE,)
RACK_BRIDGE = "resexcrack"
#: The uplink, a veth: its rack end (on RACK_BRIDGE), its cloud end (on BRIDGE).
UPLINK_RACK = "resexcupr"
UPLINK_CLOUD = "resexcupc"
#: The uplink's name in the topology file, and its rate each way (below a
#: node's LINK_MBIT: one node's sender fills it).
UPLINK = "rack1-uplink"
UPLINK_MBIT = 20.0

DATABASES = ("keystone", "glance", "placement", "nova_api", "nova", "nova_cell0")

#: The nodes' helpers (:meth:`Cloud._write_node_helpers`).
SUDO = """#!/bin/sh
# Everything runs as root already: the command, in %(node)s's network namespace.
while [ $# -gt 0 ]; do case "$1" in -*) shift;; *) break;; esac; done
exec nsenter --net=/run/netns/%(netns)s -- "$@"
"""

NODE_PID = """node_pid() {
    case "$1" in %(cases)s
    *) echo "no cloud node at $1" >&2; exit 255;;
    esac
    cat "$pidfile"
}
"""

SSH = """#!/bin/sh
# ssh [-o OPTION]... NODE_IP COMMAND...: COMMAND in that node's namespaces.
%(node_pid)s
while [ $# -gt 0 ]; do case "$1" in
    -o|-p|-i|-l) shift 2;; -*) shift;; *) break;; esac; done
pid=$(node_pid "$1") || exit 255
shift
exec nsenter -t "$pid" -m -u -- sh -c "$*"
"""

SCP = """#!/bin/sh
# scp [-r] [-C] SOURCE TARGET, one of them NODE_IP:PATH: a tar pipe between
# the two nodes' mount namespaces.
%(node_pid)s
while [ $# -gt 0 ]; do case "$1" in
    -o|-P|-i|-l) shift 2;; -*) shift;; *) break;; esac; done
src=$1
dst=$2
from=""
to=""
case "$src" in
    *:*) from="nsenter -t $(node_pid "${src%%%%:*}") -m -u --" || exit 255; src=${src#*:};;
esac
case "$dst" in
    *:*) to="nsenter -t $(node_pid "${dst%%%%:*}") -m -u --" || exit 255; dst=${dst#*:};;
esac
# scp's rule: into TARGET if it is a directory, else as TARGET.
if $to test -d "$dst"; then
    dir=$dst
    name=$(basename "$src")
else
    dir=$(dirname "$dst")
    name=$(basename "$dst")
fi
base=$(basename "$src")
$from tar -C "$(dirname "$src")" -cf - --transform "s|^$base|$name|" "$base" |
    $to tar -C "$dir" -xf -
"""


#: The shipped systemd unit every agent of the cloud runs under (:mod:`unit_sandbox`).
AGENT_UNIT = os.path.join(ROOT, "etc", "resex", "resex-agent.service")
#: The nodes' QEMU user: Debian's (libvirt's packaging default), not root, so
#: that the guests' channel directories are another user's, as in production.
QEMU_USER = "libvirt-qemu"


def agent_drop_in(writable, readable):
    """A drop-in for the agent's unit where its paths are not the unit's defaults.

    What an operator writes (``systemctl edit resex-agent``) when ``[agent]
    state_dir`` and the probe socket's directory (``writable``) are not
    ``/var/lib/resex`` and ``/run/resex`` and the agent's files
    (``readable``: its configuration, its Python) lie under paths the unit
    hides: ``PrivateTmp=`` hides ``/tmp`` and ``/var/tmp``, ``ProtectHome=``
    ``/home``, ``/root`` and ``/run/user`` (then ``tmpfs`` instead, with the
    paths bound into it). The cloud's state lives in ``/var/tmp`` and this
    machine's Python in ``/root``.
    """
    tmp = unit_sandbox.TMP_PATHS
    home = unit_sandbox.HOME_PATHS

    def under(path, roots):
        return any(path == r or path.startswith(r + "/") for r in roots)
    lines = ["# The cloud's node: the agent's paths are not the unit's defaults.",
             "[Service]", "StateDirectory=", "RuntimeDirectory="]
    lines += [("BindPaths=%s" if under(p, tmp) else "ReadWritePaths=%s") % p for p in writable]
    hidden = sorted({p for p in readable if under(p, tmp + home)})
    if any(under(p, home) for p in hidden):
        lines.append("ProtectHome=tmpfs")
    lines += ["BindReadOnlyPaths=%s" % p for p in hidden]
    return "\n".join(lines) + "\n"


def _system_user(name):
    """A system user and group ``name`` (Debian's packages make ``libvirt-qemu`` so)."""
    if subprocess.run(["getent", "group", name], capture_output=True).returncode:
        _run(["groupadd", "--system", name])
    if subprocess.run(["getent", "passwd", name], capture_output=True).returncode:
        _run(["useradd", "--system", "-g", name, "-d", "/var/lib/libvirt", "-s",
              "/usr/sbin/nologin", name])


def _package_root():
    """The directory the agent's package is imported from (an editable install's checkout)."""
    import resex_agent
    return os.path.dirname(os.path.dirname(os.path.realpath(resex_agent.__file__)))


class CloudError(RuntimeError):
    """The cloud could not be brought up (the message says which part and its log)."""


def _run(argv, env=None, timeout=600, cwd=None):
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout,
                          cwd=cwd)
    if proc.returncode:
        why = (proc.stderr or proc.stdout)[-2000:]
        raise CloudError("%s failed (%d): %s" % (" ".join(argv), proc.returncode, why))
    return proc.stdout


def _write(path, text, mode=0o644):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)


def _ini(sections):
    out = []
    for section, options in sections.items():
        out.append("[%s]" % section)
        out += ["%s = %s" % (k, v) for k, v in options.items()]
        out.append("")
    return "\n".join(out)


def wait_for_port(port, proc_entry, log, timeout=120.0, host=HOST):
    def listening():
        with contextlib.suppress(OSError):
            with socket.create_connection((host, port), timeout=1.0):
                return True
        if proc_entry is not None and not machine.alive(proc_entry.pid):
            raise CloudError("exited before listening on %d; see %s" % (port, log))
        return False
    if not machine.wait_for(listening, timeout, step=0.2):
        raise CloudError("nothing listens on %d after %.0f s; see %s" % (port, timeout, log))


def wait_for_http(url, proc_entry, log, timeout=180.0):
    last = []

    def answer():
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                return resp.status
        except urllib.error.HTTPError as e:
            if e.code < 500:
                return e.code
            last.append(e)
        except OSError as e:
            last.append(e)
        if proc_entry is not None and not machine.alive(proc_entry.pid):
            raise CloudError("exited before answering %s; see %s" % (url, log))
        return None
    status = machine.wait_for(answer, timeout, step=0.3)
    if status is None:
        raise CloudError("%s does not answer after %.0f s (%s); see %s"
                         % (url, timeout, last[-1] if last else None, log))
    return status


def hold_lab_lock(table, log, with_caller=False, path=None, timeout=1800.0):
    """The lab lock, held by a ``sleep`` child recorded in ``table`` (:data:`LAB_LOCK_HOLDER`).

    The holder outlives ``make cloud`` and is the last process ``make
    cloud-down`` stops. With ``with_caller`` (a test owns the cloud) it dies
    with the process that took the lock instead. Nothing is taken if the
    table's holder still runs.
    """
    held = table.get(LAB_LOCK_HOLDER)
    if held and machine.alive(held["pid"], held["started"]):
        return
    lock = machine.LabLock(path)
    try:
        lock.acquire(timeout)
    except machine.LockTimeout as exc:
        raise CloudError(str(exc)) from exc
    try:
        proc, argv = lock.hand_over(log, with_caller)
    finally:
        lock.release()
    table.add(LAB_LOCK_HOLDER, proc.pid, argv, log)


class Cloud:
    """The cloud's layout, bring-up and teardown."""

    def __init__(self, state_dir=STATE_DIR, nodes=NODES, lock_with_caller=False):
        self.dir = state_dir
        #: The lab lock is released if this process dies (a test owns the cloud).
        self.lock_with_caller = lock_with_caller
        self.nodes = tuple(nodes)
        self.etc = os.path.join(state_dir, "etc")
        self.logs = os.path.join(state_dir, "log")
        self.run_dir = os.path.join(state_dir, "run")
        self.data = os.path.join(state_dir, "data")
        self.bin = os.path.join(state_dir, "bin")
        self.table = procs.ProcessTable(os.path.join(self.run_dir, "procs.json"))
        self.figures = {}

    # -- paths -------------------------------------------------------------------

    def log(self, name):
        return os.path.join(self.logs, name + ".log")

    def node_dir(self, node):
        return os.path.join(self.dir, "nodes", node)

    def nova_conf(self, node=None):
        if node is None:
            return os.path.join(self.etc, "nova", "nova.conf")
        return os.path.join(self.node_dir(node), "etc", "nova.conf")

    def agent_conf(self, node):
        return os.path.join(self.node_dir(node), "etc", "resex", "resex-agent.conf")

    def ifb(self, node):
        """The node's link (a shaped ifb, in the node's network namespace)."""
        return "resexc%sifb" % node[-1]

    def netns(self, node):
        return "resexc-%s" % node

    def veth(self, node):
        """The host's end of the node's veth (on the cloud's bridge)."""
        return "resexc%sv" % node[-1]

    @property
    def instances_path(self):
        """Every node's instances path (its own directory, bind-mounted in its namespace).

        Live block migration needs one path on both ends.
        """
        return os.path.join(self.dir, "instances")

    @property
    def board_url(self):
        return "etcd3+http://%s:%d" % (HOST, PORTS["etcd"])

    @property
    def auth_url(self):
        return "http://%s:%d/v3" % (HOST, PORTS["keystone"])

    def db_url(self, name):
        return "mysql+pymysql://root@%s:%d/%s" % (HOST, PORTS["mariadb"], name)

    @property
    def transport_url(self):
        return "rabbit://guest:guest@%s:%d/" % (HOST, PORTS["rabbitmq"])

    def env(self, **extra):
        env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
        env["PATH"] = ":".join((self.bin, VENV_BIN, "/usr/local/sbin", "/usr/local/bin",
                                "/usr/sbin", "/usr/bin", "/sbin", "/bin"))
        # The caller's path after the checkout (a worktree's links to its own
        # agent/ and nova_filter/ where the editable install names another tree).
        env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH"))
                                            if p)
        env["OS_NOVA_DISABLE_EVENTLET_PATCHING"] = "1"
        env["HOME"] = os.path.join(self.run_dir, "home")
        env.update(extra)
        return env

    def clouds_yaml(self):
        return {"auth": {"auth_url": self.auth_url, "username": "admin", "password": PASSWORD,
                         "project_name": "admin", "user_domain_name": "Default",
                         "project_domain_name": "Default"},
                "region_name": REGION, "identity_api_version": "3"}

    def openstack_hint(self):
        return ("OS_AUTH_URL=%s OS_USERNAME=admin OS_PASSWORD=%s OS_PROJECT_NAME=admin "
                "OS_USER_DOMAIN_NAME=Default OS_PROJECT_DOMAIN_NAME=Default "
                "OS_REGION_NAME=%s %s server list"
                % (self.auth_url, PASSWORD, REGION, os.path.join(VENV_BIN, "openstack")))

    def connect(self):
        import openstack
        return openstack.connect(**self.clouds_yaml()["auth"], region_name=REGION,
                                 compute_api_version="2.90")

    # -- bring-up ----------------------------------------------------------------

    def running(self):
        """True if a cloud holds the lab lock from this state directory (``make cloud``)."""
        held = self.table.get(LAB_LOCK_HOLDER)
        return bool(held) and machine.alive(held["pid"], held["started"])

    def up(self, install=True):
        if os.geteuid() != 0:
            raise CloudError("the cloud runs libvirtd, namespaces and bridges: run it as root")
        for sub in (self.etc, self.logs, self.run_dir, self.data, self.bin,
                    os.path.join(self.run_dir, "home")):
            os.makedirs(sub, exist_ok=True)
        t_lock = time.monotonic()
        hold_lab_lock(self.table, self.log("lab-lock"), self.lock_with_caller)
        t0 = time.monotonic()
        self.figures["lab_lock_wait_s"] = t0 - t_lock
        if install:
            _run([os.path.join(ROOT, "tools", "install-deb.sh"), *PACKAGES])
        self._write_helpers()
        _system_user(QEMU_USER)
        # QEMU (QEMU_USER) opens the instances' files under it (a test's
        # state directory is mkdtemp's, 0700).
        os.chmod(self.dir, 0o755)
        steps = [self.start_mariadb, self.start_rabbitmq, self.start_memcached,
                 self.start_etcd, self.start_keystone, self.register_services,
                 self.start_glance, self.start_placement, self.start_network,
                 self.configure_nova, self.start_nova_control]
        for step in steps:
            self._phase(step.__name__, step)
        for node in self.nodes:
            self._phase("start_node " + node, lambda: self.start_node(node))
        self._phase("wait_for_computes", self.wait_for_computes)
        self.figures["bring_up_s"] = time.monotonic() - t0
        return self

    def _phase(self, name, step):
        t0 = time.monotonic()
        step()
        LOG.info("cloud: %s done in %.1f s", name, time.monotonic() - t0)

    def _write_helpers(self):
        # nova-compute's privsep runs "sudo privsep-helper ...": there is no
        # sudo here and everything already runs as root.
        _write(os.path.join(self.bin, "sudo"),
               "#!/bin/sh\n# the cloud runs as root: run the command as is\n"
               "while [ $# -gt 0 ]; do case \"$1\" in -*) shift;; *) break;; esac; done\n"
               "exec \"$@\"\n", 0o755)

    def _start(self, name, argv, env=None, cwd=None):
        entry = self.table.get(name)
        if entry and machine.alive(entry["pid"], entry["started"]):
            raise CloudError("%s already runs (pid %d): make cloud-down first"
                             % (name, entry["pid"]))
        return self.table.start(name, argv, self.log(name), env=env or self.env(),
                                cwd=cwd or ROOT)

    # MariaDB ------------------------------------------------------------------

    def start_mariadb(self):
        datadir = os.path.join(self.data, "mariadb")
        sock = os.path.join(self.run_dir, "mariadb.sock")
        if not os.path.isdir(os.path.join(datadir, "mysql")):
            _run(["mariadb-install-db", "--no-defaults", "--datadir=" + datadir, "--user=root",
                  "--auth-root-authentication-method=normal", "--skip-test-db"])
        proc = self._start("mariadb", [
            "mariadbd", "--no-defaults", "--datadir=" + datadir, "--user=root",
            "--socket=" + sock, "--port=%d" % PORTS["mariadb"], "--bind-address=" + HOST,
            "--pid-file=" + os.path.join(self.run_dir, "mariadb.pid"),
            "--skip-name-resolve", "--innodb-buffer-pool-size=64M",
            "--innodb-log-file-size=16M", "--max-connections=500",
            "--innodb-flush-log-at-trx-commit=0", "--sync-binlog=0",
            "--performance-schema=OFF", "--character-set-server=utf8mb4"])
        wait_for_port(PORTS["mariadb"], proc, self.log("mariadb"))
        sql = "".join("CREATE DATABASE IF NOT EXISTS %s CHARACTER SET utf8mb4;" % db
                      for db in DATABASES)
        _run(["mariadb", "--no-defaults", "--socket=" + sock, "-uroot", "-e", sql])

    # RabbitMQ -----------------------------------------------------------------

    def start_rabbitmq(self):
        base = os.path.join(self.data, "rabbitmq")
        os.makedirs(base, exist_ok=True)
        env = self.env(ERL_EPMD_PORT=str(PORTS["epmd"]), ERL_EPMD_ADDRESS=HOST)
        epmd = self._start("epmd", ["epmd", "-port", str(PORTS["epmd"])], env=env)
        wait_for_port(PORTS["epmd"], epmd, self.log("epmd"))
        conf = os.path.join(self.etc, "rabbitmq", "rabbitmq")
        _write(conf + ".conf", "listeners.tcp.1 = %s:%d\nloopback_users = none\n"
               "distribution.listener.interface = %s\n"
               "distribution.listener.port_range.min = %d\n"
               "distribution.listener.port_range.max = %d\n"
               % (HOST, PORTS["rabbitmq"], HOST, PORTS["rabbitmq-dist"],
                  PORTS["rabbitmq-dist"]))
        _write(os.path.join(self.etc, "rabbitmq", "enabled_plugins"), "[].\n")
        env.update({
            "RABBITMQ_NODENAME": "resexcloud@localhost",
            "RABBITMQ_NODE_IP_ADDRESS": HOST,
            "RABBITMQ_NODE_PORT": str(PORTS["rabbitmq"]),
            "RABBITMQ_DIST_PORT": str(PORTS["rabbitmq-dist"]),
            "RABBITMQ_CONFIG_FILE": conf,
            "RABBITMQ_ENABLED_PLUGINS_FILE": os.path.join(self.etc, "rabbitmq",
                                                          "enabled_plugins"),
            "RABBITMQ_MNESIA_BASE": os.path.join(base, "mnesia"),
            "RABBITMQ_LOG_BASE": os.path.join(self.logs, "rabbitmq"),
            "RABBITMQ_LOGS": "-",
            "RABBITMQ_PID_FILE": os.path.join(self.run_dir, "rabbitmq.pid"),
            "HOME": base,
        })
        script = sorted(p for p in _glob("/usr/lib/rabbitmq/lib/rabbitmq_server-*/sbin/"
                                         "rabbitmq-server"))[-1]
        proc = self._start("rabbitmq", [script], env=env)
        wait_for_port(PORTS["rabbitmq"], proc, self.log("rabbitmq"), timeout=180)

    # memcached, etcd ------------------------------------------------------------

    def start_memcached(self):
        proc = self._start("memcached", ["memcached", "-u", "root", "-l", HOST,
                                         "-p", str(PORTS["memcached"]), "-m", "64", "-U", "0"])
        wait_for_port(PORTS["memcached"], proc, self.log("memcached"))

    def start_etcd(self):
        client = "http://%s:%d" % (HOST, PORTS["etcd"])
        peer = "http://%s:%d" % (HOST, PORTS["etcd-peer"])
        proc = self._start("etcd", [
            "etcd", "--name", "resexcloud", "--data-dir", os.path.join(self.data, "etcd"),
            "--listen-client-urls", client, "--advertise-client-urls", client,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", "resexcloud=" + peer,
            "--auto-compaction-retention", "1"])
        wait_for_port(PORTS["etcd"], proc, self.log("etcd"))

    # WSGI services --------------------------------------------------------------

    def _gunicorn(self, name, app, port, env, threads=4):
        argv = [os.path.join(VENV_BIN, "gunicorn"), "--bind", "%s:%d" % (HOST, port),
                "--workers", "1", "--threads", str(threads), "--timeout", "300",
                "--no-control-socket", "--keep-alive", "30", "--name", name,
                "tests.cloud.wsgi_apps:" + app]
        return self._start(name, argv, env=env)

    def _authtoken(self, user):
        return {"www_authenticate_uri": self.auth_url, "auth_url": self.auth_url,
                "auth_type": "password", "project_domain_name": "Default",
                "user_domain_name": "Default", "project_name": "service",
                "username": user, "password": PASSWORD, "region_name": REGION}

    def _service_auth(self, user):
        return {"auth_type": "password", "auth_url": self.auth_url,
                "project_domain_name": "Default", "user_domain_name": "Default",
                "project_name": "service", "username": user, "password": PASSWORD,
                "region_name": REGION}

    def start_keystone(self):
        conf_dir = os.path.join(self.etc, "keystone")
        keys = os.path.join(self.data, "keystone")
        _write(os.path.join(conf_dir, "keystone.conf"), _ini({
            "DEFAULT": {"use_stderr": "true"},
            "database": {"connection": self.db_url("keystone")},
            "token": {"provider": "fernet"},
            "fernet_tokens": {"key_repository": os.path.join(keys, "fernet")},
            "credential": {"key_repository": os.path.join(keys, "credential")},
            "cache": {"enabled": "true", "backend": "dogpile.cache.pymemcache",
                      "memcache_servers": "%s:%d" % (HOST, PORTS["memcached"])},
        }))
        env = self.env(OS_KEYSTONE_CONFIG_DIR=conf_dir)
        manage = [os.path.join(VENV_BIN, "keystone-manage"), "--config-dir", conf_dir]
        for d in ("fernet", "credential"):
            os.makedirs(os.path.join(keys, d), exist_ok=True)
        _run(manage + ["db_sync"], env=env)
        _run(manage + ["fernet_setup", "--keystone-user", "root", "--keystone-group", "root"],
             env=env)
        _run(manage + ["credential_setup", "--keystone-user", "root",
                       "--keystone-group", "root"], env=env)
        url = "http://%s:%d/v3" % (HOST, PORTS["keystone"])
        _run(manage + ["bootstrap", "--bootstrap-password", PASSWORD,
                       "--bootstrap-admin-url", url, "--bootstrap-internal-url", url,
                       "--bootstrap-public-url", url, "--bootstrap-region-id", REGION],
             env=env)
        proc = self._gunicorn("keystone", "keystone", PORTS["keystone"], env)
        wait_for_http(url, proc, self.log("keystone"))

    def register_services(self):
        """Service users, services and endpoints (what devstack's lib/* create)."""
        conn = self.connect()
        project = conn.identity.find_project("service") or conn.identity.create_project(
            name="service", domain_id="default")
        admin_role = conn.identity.find_role("admin")
        services = (("glance", "image", PORTS["glance"], ""),
                    ("placement", "placement", PORTS["placement"], ""),
                    ("nova", "compute", PORTS["nova-api"], "/v2.1"),
                    ("neutron", "network", PORTS["neutron"], ""))
        for user, stype, port, path in services:
            u = conn.identity.find_user(user) or conn.identity.create_user(
                name=user, password=PASSWORD, domain_id="default",
                default_project_id=project.id)
            conn.identity.assign_project_role_to_user(project, u, admin_role)
            if not list(conn.identity.services(type=stype)):
                svc = conn.identity.create_service(name=user, type=stype)
                for interface in ("public", "internal", "admin"):
                    conn.identity.create_endpoint(
                        service_id=svc.id, interface=interface, region_id=REGION,
                        url="http://%s:%d%s" % (HOST, port, path))
        conn.close()

    def start_glance(self):
        conf_dir = os.path.join(self.etc, "glance")
        store = os.path.join(self.data, "glance")
        for sub in ("images", "staging", "tasks"):
            os.makedirs(os.path.join(store, sub), exist_ok=True)
        os.makedirs(conf_dir, exist_ok=True)
        shutil.copy(os.path.join(VENV_BIN, "..", "etc", "glance", "glance-api-paste.ini"),
                    conf_dir)
        _write(os.path.join(conf_dir, "glance-api.conf"), _ini({
            "DEFAULT": {"use_stderr": "true", "enabled_backends": "fs:file",
                        "bind_host": HOST, "bind_port": PORTS["glance"]},
            "database": {"connection": self.db_url("glance")},
            "glance_store": {"default_backend": "fs"},
            "fs": {"filesystem_store_datadir": os.path.join(store, "images")},
            "os_glance_staging_store": {"filesystem_store_datadir":
                                        os.path.join(store, "staging")},
            "os_glance_tasks_store": {"filesystem_store_datadir":
                                      os.path.join(store, "tasks")},
            "paste_deploy": {"flavor": "keystone",
                             "config_file": os.path.join(conf_dir, "glance-api-paste.ini")},
            "keystone_authtoken": self._authtoken("glance"),
            "oslo_concurrency": {"lock_path": os.path.join(self.data, "glance-locks")},
        }))
        env = self.env(OS_GLANCE_CONFIG_DIR=conf_dir)
        _run([os.path.join(VENV_BIN, "glance-manage"), "--config-file",
              os.path.join(conf_dir, "glance-api.conf"), "db_sync"], env=env)
        proc = self._gunicorn("glance", "glance", PORTS["glance"], env)
        wait_for_http("http://%s:%d/" % (HOST, PORTS["glance"]), proc, self.log("glance"))

    def start_placement(self):
        conf_dir = os.path.join(self.etc, "placement")
        _write(os.path.join(conf_dir, "placement.conf"), _ini({
            "DEFAULT": {"use_stderr": "true"},
            "placement_database": {"connection": self.db_url("placement")},
            "api": {"auth_strategy": "keystone"},
            "keystone_authtoken": self._authtoken("placement"),
        }))
        env = self.env(OS_PLACEMENT_CONFIG_DIR=conf_dir)
        _run([os.path.join(VENV_BIN, "placement-manage"), "--config-dir", conf_dir,
              "db", "sync"], env=env)
        proc = self._gunicorn("placement", "placement", PORTS["placement"], env)
        wait_for_http("http://%s:%d/" % (HOST, PORTS["placement"]), proc,
                      self.log("placement"))

    # the guests' network ----------------------------------------------------------

    def start_network(self):
        """The bridge (host address), the nodes' networks, the neutron stand-in, the sink."""
        if shutil.which("modprobe"):
            subprocess.run(["modprobe", "ifb", "numifbs=0"], capture_output=True)
        for name in [BRIDGE, RACK_BRIDGE, UPLINK_RACK] + [self.veth(n) for n in ALL_NODES]:
            if _link_exists(name):
                raise CloudError("%s exists: a previous cloud was not torn down "
                                 "(make cloud-down)" % name)
        for node in ALL_NODES:
            if os.path.exists(os.path.join("/run/netns", self.netns(node))):
                raise CloudError("network namespace %s exists: a previous cloud was not "
                                 "torn down (make cloud-down)" % self.netns(node))
        _run(["ip", "link", "add", BRIDGE, "type", "bridge"])
        self._record_link(BRIDGE)
        _run(["ip", "link", "set", BRIDGE, "up"])
        _run(["ip", "addr", "add", HOST_CIDR, "dev", BRIDGE])
        for node in self.nodes:
            self._node_network(node)
        self._write_neutron_conf()
        proc = self._gunicorn("neutron", "neutron()", PORTS["neutron"],
                              self.env(RESEX_CLOUD_NEUTRON_CONF=self.neutron_conf), threads=8)
        wait_for_http("http://%s:%d/v2.0/networks" % (HOST, PORTS["neutron"]), proc,
                      self.log("neutron"))
        sink = self._start("sink", [sys.executable, "-m", "tests.cloud.sink",
                                    HOST_CIDR.split("/")[0], str(PORTS["sink"])])
        wait_for_port(PORTS["sink"], sink, self.log("sink"), host=HOST_CIDR.split("/")[0])

    @property
    def neutron_conf(self):
        return os.path.join(self.etc, "neutron-stub.json")

    def _write_neutron_conf(self):
        """The neutron stand-in's configuration: the network and every node's (it re-reads it)."""
        tmp = self.neutron_conf + ".tmp"
        _write(tmp, json.dumps({"network_id": NETWORK_ID, "subnet_id": SUBNET_ID,
                                "cidr": CIDR,
                                "nodes": {n: {"netns": self.netns(n), "bridge": NODE_BRIDGE,
                                              "ifb": self.ifb(n)} for n in self.nodes}}))
        os.replace(tmp, self.neutron_conf)

    def _node_network(self, node, bridge=BRIDGE):
        """``node``'s network namespace: its bridge, address, shaped ifb, a veth out.

        The node's bridge holds its taps and the veth into ``bridge`` (the
        cloud's, or the rack's).
        """
        ns = self.netns(node)
        _run(["ip", "netns", "add", ns])
        self._record_link("netns:" + ns)
        inside = ["ip", "-n", ns]
        _run(["ip", "link", "add", self.veth(node), "type", "veth", "peer", "name",
              NODE_UPLINK, "netns", ns])
        _run(["ip", "link", "set", self.veth(node), "master", bridge, "up"])
        _run(inside + ["link", "set", "lo", "up"])
        _run(inside + ["link", "add", NODE_BRIDGE, "type", "bridge"])
        _run(inside + ["link", "set", NODE_UPLINK, "master", NODE_BRIDGE, "up"])
        _run(inside + ["link", "set", NODE_BRIDGE, "up"])
        _run(inside + ["addr", "add", "%s/%s" % (NODE_IPS[node], CIDR.split("/")[1]),
                       "dev", NODE_BRIDGE])
        _run(inside + ["link", "add", self.ifb(node), "type", "ifb"])
        _run(inside + ["link", "set", self.ifb(node), "up"])
        self.set_link_rate(node, LINK_MBIT)

    def set_link_rate(self, node, mbit):
        _run(["tc", "-n", self.netns(node), "qdisc", "replace", "dev", self.ifb(node), "root",
              "tbf", "rate", "%gmbit" % mbit, "burst", "16384", "latency", "50ms"])

    def topology_file(self, node):
        """The shared links, as the operator declares them (``RESEX_TOPOLOGY_FILE``).

        Beside the node's agent configuration: the agent's unit sees that
        directory (its private /tmp and /var/tmp hide the rest of the state).
        """
        return os.path.join(os.path.dirname(self.agent_conf(node)), "topology.yaml")

    def start_rack(self):
        """node1 and node3 behind one shaped uplink: node3 joins the running cloud (idempotent).

        The rack's bridge (host side) holds node1's and node3's veths and
        the uplink's rack end; the uplink (a veth, a tbf of
        :data:`UPLINK_MBIT` on each end: each way) joins it to the cloud's
        bridge, where node2, the host's sink and the rest are. node1's veth
        moves onto the rack's bridge (its guests' addresses stay). node3's
        agent reads the topology file naming the uplink (node1's agent, started
        before, does not: it has no heavy sender in the ``shared_link`` row).
        """
        if RACK_NODE in self.nodes:
            return
        if "node1" not in self.nodes:
            raise CloudError("the rack needs node1 (a cloud of %s)" % ", ".join(self.nodes))
        _run(["ip", "link", "add", RACK_BRIDGE, "type", "bridge"])
        self._record_link(RACK_BRIDGE)
        _run(["ip", "link", "set", RACK_BRIDGE, "up"])
        _run(["ip", "link", "add", UPLINK_RACK, "type", "veth", "peer", "name", UPLINK_CLOUD])
        self._record_link(UPLINK_RACK)
        _run(["ip", "link", "set", UPLINK_RACK, "master", RACK_BRIDGE, "up"])
        _run(["ip", "link", "set", UPLINK_CLOUD, "master", BRIDGE, "up"])
        for dev in (UPLINK_RACK, UPLINK_CLOUD):
            _run(["tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate",
                  "%gmbit" % UPLINK_MBIT, "burst", "16384", "latency", "50ms"])
        _run(["ip", "link", "set", self.veth("node1"), "master", RACK_BRIDGE])
        _write(self.topology_file(RACK_NODE), yaml.safe_dump({"links": [
            {"name": UPLINK, "capacity_gbps": UPLINK_MBIT / 1000.0, "hosts": list(RACK)}]}))
        self._node_network(RACK_NODE, bridge=RACK_BRIDGE)
        self.nodes += (RACK_NODE,)
        self._write_neutron_conf()
        self.start_node(RACK_NODE, {"RESEX_TOPOLOGY_FILE": self.topology_file(RACK_NODE)})
        self.wait_for_computes()

    def _record_link(self, name):
        path = os.path.join(self.run_dir, "links")
        with open(path, "a") as f:
            f.write(name + "\n")

    # nova -----------------------------------------------------------------------

    def _nova_common(self):
        return {
            "DEFAULT": {
                "transport_url": self.transport_url, "my_ip": HOST,
                "state_path": os.path.join(self.data, "nova"), "use_stderr": "true",
                "compute_driver": "libvirt.LibvirtDriver",
                "vif_plugging_is_fatal": "false", "vif_plugging_timeout": "0",
                "graceful_shutdown_timeout": "5",
                "default_log_levels": ",".join((
                    "amqp=WARN", "amqplib=WARN", "sqlalchemy=WARN", "oslo.messaging=INFO",
                    "oslo_messaging=INFO", "iso8601=WARN", "requests=WARN",
                    "urllib3=WARN", "stevedore=WARN", "keystonemiddleware=WARN",
                    "keystoneauth=WARN", "oslo_policy=WARN", "resex_nova=DEBUG",
                    "nova.scheduler.filter_scheduler=DEBUG", "nova.filters=DEBUG")),
            },
            "wsgi": {"api_paste_config": os.path.join(self.etc, "nova", "api-paste.ini")},
            "api": {"auth_strategy": "keystone"},
            "api_database": {"connection": self.db_url("nova_api")},
            "database": {"connection": self.db_url("nova")},
            "keystone_authtoken": self._authtoken("nova"),
            "placement": self._service_auth("placement"),
            "neutron": self._service_auth("neutron"),
            "glance": {"region_name": REGION},
            "scheduler": {"discover_hosts_in_cells_interval": "2", "workers": "1"},
            "conductor": {"workers": "1"},
            "oslo_concurrency": {"lock_path": os.path.join(self.data, "nova", "locks")},
            "libvirt": {"virt_type": "qemu", "cpu_mode": "none"},
            "vnc": {"enabled": "false"},
            "workarounds": {"disable_rootwrap": "true",
                            "disable_deep_image_inspection": "true"},
            "oslo_messaging_notifications": {"driver": "noop"},
        }

    def _plugin_post_config(self, services, nova_conf, extra_env):
        """Run devstack/plugin.sh's post-config phase, as devstack would on this node."""
        script = "\n".join((
            "set -o errexit",
            "source %s" % os.path.join(ROOT, "tools", "devstack-functions.sh"),
            "function sudo { \"$@\"; }",
            "function echo_summary { echo \"$*\"; }",
            "function define_plugin { :; }",
            "source %s" % os.path.join(ROOT, "devstack", "settings"),
            "source %s stack post-config" % os.path.join(ROOT, "devstack", "plugin.sh"),
        ))
        env = self.env(DEST=os.path.dirname(ROOT), RESEX_DIR=ROOT, SERVICE_HOST=HOST,
                       STACK_USER="root", ENABLED_SERVICES=services, NOVA_CONF=nova_conf,
                       RESEX_BOARD_URL=self.board_url, **extra_env)
        out = _run(["bash", "-c", script], env=env)
        with open(self.log("devstack-plugin"), "a") as f:
            f.write("== %s %s\n%s" % (services, nova_conf, out))

    def iniset(self, path, section, option, value):
        """devstack's iniset (tools/devstack-functions.sh) on ``path``."""
        _run(["bash", "-c", "source %s; iniset \"$@\"" % os.path.join(
            ROOT, "tools", "devstack-functions.sh"), "iniset", path, section, option, value])

    def configure_nova(self):
        conf = self.nova_conf()
        os.makedirs(os.path.join(self.data, "nova", "locks"), exist_ok=True)
        _write(conf, _ini(self._nova_common()))
        shutil.copy(os.path.join(VENV_BIN, "..", "etc", "nova", "api-paste.ini"),
                    os.path.dirname(conf))
        # The scheduler's nova.conf, by the devstack plugin (filter, weigher, board).
        self._plugin_post_config("n-api,n-cond,n-sch,placement-api,etcd3", conf, {})
        env = self.env(OS_NOVA_CONFIG_DIR=os.path.dirname(conf))
        manage = [os.path.join(VENV_BIN, "nova-manage"), "--config-file", conf]
        _run(manage + ["api_db", "sync"], env=env)
        out = subprocess.run(manage + ["cell_v2", "list_cells"], env=env, capture_output=True,
                             text=True).stdout
        if "cell0" not in out:
            _run(manage + ["cell_v2", "map_cell0", "--database_connection",
                           self.db_url("nova_cell0")], env=env)
        if "cell1" not in out:
            _run(manage + ["cell_v2", "create_cell", "--name", "cell1"], env=env)
        _run(manage + ["db", "sync"], env=env)

    def start_nova_control(self):
        conf = self.nova_conf()
        env = self.env(OS_NOVA_CONFIG_DIR=os.path.dirname(conf))
        api = self._gunicorn("nova-api", "nova", PORTS["nova-api"], env)
        for name in ("nova-conductor", "nova-scheduler"):
            self._start(name, [os.path.join(VENV_BIN, name), "--config-file", conf], env=env)
        wait_for_http("http://%s:%d/" % (HOST, PORTS["nova-api"]), api, self.log("nova-api"))

    # compute nodes ------------------------------------------------------------------

    def libvirtd_pid(self, node):
        entry = self.table.get("%s-libvirtd" % node)
        return entry["pid"] if entry else None

    def nsenter(self, node):
        """The prefix that runs a command inside ``node``'s namespaces."""
        return ["nsenter", "-t", str(self.libvirtd_pid(node)), "-m", "-u", "--"]

    def start_node(self, node, plugin_env=None):
        """``node``'s libvirtd (own mount, UTS, network namespaces), nova-compute, agent.

        nova-compute and the agent join the node's mount and UTS namespaces and
        stay in the host's network namespace, where the control plane listens
        on the loopback. ``plugin_env``: more of the devstack plugin's
        settings for the node.
        """
        ndir = self.node_dir(node)
        private = {"/etc/libvirt": "etc-libvirt", "/run/libvirt": "run-libvirt",
                   "/var/lib/libvirt": "lib-libvirt", "/var/log/libvirt": "log-libvirt",
                   "/var/cache/libvirt": "cache-libvirt",
                   self.instances_path: os.path.join("nova", "instances")}
        for sub in list(private.values()) + ["cgroup-hold", os.path.join("nova", "locks")]:
            os.makedirs(os.path.join(ndir, sub), exist_ok=True)
        # The mount points (a fresh host has no /run/libvirt until a libvirtd ran).
        for target in private:
            os.makedirs(target, exist_ok=True)
        for sub in ("qemu", "qemu/channel/target", "dnsmasq"):
            os.makedirs(os.path.join(ndir, "lib-libvirt", sub), exist_ok=True)
        os.makedirs(os.path.join(ndir, "log-libvirt", "qemu"), exist_ok=True)
        etc = os.path.join(ndir, "etc-libvirt")
        # Each libvirtd listens on its node's address (live migrations), with its
        # own host UUID.
        _write(os.path.join(etc, "libvirtd.conf"),
               "unix_sock_group = \"root\"\nunix_sock_rw_perms = \"0770\"\n"
               "auth_unix_rw = \"none\"\nauth_unix_ro = \"none\"\n"
               "listen_tls = 0\nlisten_tcp = 1\nauth_tcp = \"none\"\n"
               "listen_addr = \"%s\"\nhost_uuid = \"%s\"\n"
               % (NODE_IPS[node], uuid.uuid5(uuid.NAMESPACE_DNS, "resex-" + node)))
        _write(os.path.join(etc, "qemu.conf"),
               "user = \"%s\"\ngroup = \"%s\"\nstdio_handler = \"file\"\n"
               "security_driver = \"none\"\n"
               # No private /dev per guest: it would move the node's /dev/kvm
               # mount (below) into each guest's namespace, which fails.
               "namespaces = []\n" % (QEMU_USER, QEMU_USER))
        # /sys as the node's network namespace sees it (its taps, bridge and ifb:
        # for libvirtd, nova's privileged helper and the agent), with the host's
        # cgroup hierarchies kept under it.
        hold = os.path.join(ndir, "cgroup-hold")
        sysfs = ("mount --rbind /sys/fs/cgroup %s\nmount -t sysfs sysfs /sys\n"
                 "mount --rbind %s /sys/fs/cgroup\numount -l %s\n" % (hold, hold, hold))
        mounts = "".join("mount --bind %s %s\n" % (os.path.join(ndir, sub), target)
                         for target, sub in private.items())
        # No /dev/kvm for the node (its guests run on TCG): libvirt probes
        # QEMU with CAP_DAC_OVERRIDE, so a /dev/kvm only root may open (this
        # machine's, mode 0600; Debian's is root:kvm 0660 with QEMU_USER in
        # kvm) puts KVM in the capabilities, which libvirt then finds unusable
        # by QEMU_USER at every lookup and probes again (about 7 s each: one
        # server's spawn took 65-260 s). An empty file over it keeps the two in
        # agreement (and qemu.conf's namespaces off, above).
        no_kvm = os.path.join(ndir, "no-kvm")
        with open(no_kvm, "w"):
            os.chmod(no_kvm, 0o600)
        mounts += "if [ -e /dev/kvm ]; then mount --bind %s /dev/kvm; fi\n" % no_kvm
        script = ("set -e\nhostname %s\n%s%s"
                  "exec libvirtd --listen --pid-file %s\n"
                  % (node, sysfs, mounts, os.path.join(ndir, "libvirtd.pid")))
        proc = self._start("%s-libvirtd" % node, [
            "unshare", "--mount", "--uts", "--propagation", "private", "--",
            "nsenter", "--net=/run/netns/%s" % self.netns(node), "--",
            "sh", "-c", script])
        self._wait_for_libvirtd(node, proc)
        self._write_node_helpers(node)

        conf = self.nova_conf(node)
        common = self._nova_common()
        common["DEFAULT"].update({
            "host": node, "my_ip": NODE_IPS[node], "state_path": os.path.join(ndir, "nova"),
            "instances_path": self.instances_path})
        common["oslo_concurrency"]["lock_path"] = os.path.join(ndir, "nova", "locks")
        # The node's own provider config directory: the plugin writes its
        # CUSTOM_RESEX_MANAGED file there (the host's /etc/nova stays alone).
        common["compute"] = {"provider_config_location": os.path.join(ndir, "provider_config")}
        # Live migrations go from libvirtd to libvirtd over the guests' network:
        # qemu+tcp://<the target's address>/system.
        common["libvirt"].update({"live_migration_scheme": "tcp",
                                  "live_migration_inbound_addr": NODE_IPS[node]})
        _write(conf, _ini(common))
        # The node's agent configuration, by the devstack plugin.
        self._plugin_post_config("n-cpu,resex-agent", conf, {
            "RESEX_CONF_DIR": os.path.dirname(self.agent_conf(node)),
            "RESEX_AGENT_CONF": self.agent_conf(node),
            "RESEX_STATE_DIR": os.path.join(ndir, "resex-state"),
            "RESEX_RUN_DIR": os.path.join(ndir, "resex-run"),
            "RESEX_UPLINK_NETDEV": self.ifb(node),
            "RESEX_LINK_CAPACITY_GBPS": str(LINK_GBPS),
            # install.rst's agent turns the metrics endpoint on; one port per node.
            "RESEX_METRICS_ENABLED": "True",
            "RESEX_METRICS_PORT": str(PORTS["metrics-" + node]),
            # Each node acts on the other's remote claims (the remote_victim row).
            "RESEX_REMOTE_CLAIMS": "True",
            **(plugin_env or {}),
        })
        self.start_compute(node)
        self.start_agent(node)

    def restart_libvirtd(self, node):
        """Stop ``node``'s libvirtd and start another in the same namespaces.

        The guests' QEMU processes run on. The node's mount and UTS
        namespaces are held by its nova-compute meanwhile; the new libvirtd
        joins them and the node's network namespace.
        """
        holder = self.table.get("%s-nova-compute" % node)
        if holder is None or not machine.alive(holder["pid"], holder["started"]):
            raise CloudError("%s: no nova-compute holds the node's namespaces" % node)
        self.table.stop("%s-libvirtd" % node, timeout=30)
        proc = self._start("%s-libvirtd" % node, [
            "nsenter", "-t", str(holder["pid"]), "-m", "-u",
            "--net=/run/netns/%s" % self.netns(node), "--",
            "libvirtd", "--listen", "--pid-file",
            os.path.join(self.node_dir(node), "libvirtd.pid")])
        self._wait_for_libvirtd(node, proc)
        return proc

    def _wait_for_libvirtd(self, node, proc, timeout=60.0):
        probes = []

        def up():
            return probes[-1].returncode == 0 and probes[-1].stdout.strip() == node

        def answers_or_died():
            probes.append(subprocess.run(self.nsenter(node) + ["virsh", "-c", "qemu:///system",
                                                               "hostname"],
                                         capture_output=True, text=True))
            return up() or not machine.alive(proc.pid)
        machine.wait_for(answers_or_died, timeout, step=0.3)
        if not up():
            raise CloudError("%s's libvirtd did not come up: %s; see %s"
                             % (node, probes[-1].stderr.strip(), self.log(node + "-libvirtd")))

    def compute_env(self, node):
        """nova-compute's environment: the node's ``sudo``, ``ssh`` and ``scp`` first."""
        env = self.env()
        env["PATH"] = os.path.join(self.node_dir(node), "bin") + ":" + env["PATH"]
        return env

    def start_compute(self, node):
        return self._start("%s-nova-compute" % node, self.nsenter(node) + [
            os.path.join(VENV_BIN, "nova-compute"), "--config-file", self.nova_conf(node)],
            env=self.compute_env(node))

    def stop_compute(self, node):
        return self.table.stop("%s-nova-compute" % node, timeout=40)

    def _write_node_helpers(self, node):
        """``sudo``, ``ssh`` and ``scp`` on the node's nova-compute's PATH.

        ``sudo`` (privsep's helper, which creates the taps) runs its command in
        the node's network namespace; ``ssh NODE_IP CMD`` runs CMD in that
        node's mount namespace and ``scp`` copies into or out of it (cold
        migration, resize): the nodes are namespaces of one machine.
        """
        bin_dir = os.path.join(self.node_dir(node), "bin")
        _write(os.path.join(bin_dir, "sudo"), SUDO % {"node": node, "netns": self.netns(node)},
               0o755)
        lookup = NODE_PID % {"cases": " ".join(
            "%s) pidfile=%s;;" % (NODE_IPS[n], os.path.join(self.node_dir(n), "libvirtd.pid"))
            for n in self.nodes)}
        _write(os.path.join(bin_dir, "ssh"), SSH % {"node_pid": lookup}, 0o755)
        _write(os.path.join(bin_dir, "scp"), SCP % {"node_pid": lookup}, 0o755)

    def agent_drop_in(self, node):
        """The node's drop-in for the shipped unit (:func:`agent_drop_in`)."""
        return os.path.join(self.node_dir(node), "etc", "resex-agent.service.d", "cloud.conf")

    def agent_argv(self, node):
        """``node``'s agent under the shipped unit's restrictions (:mod:`unit_sandbox`).

        In the node's mount and UTS namespaces, through the unit and the
        node's drop-in, as systemd would start it there.
        """
        ndir = self.node_dir(node)
        _write(self.agent_drop_in(node), agent_drop_in(
            writable=[os.path.join(ndir, "resex-state"), os.path.join(ndir, "resex-run")],
            readable=[os.path.dirname(self.agent_conf(node)), ROOT, sys.prefix,
                      sys.base_prefix, _package_root()]
            + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
        return self.nsenter(node) + [
            sys.executable, "-m", "tests.cloud.unit_sandbox", "--unit", AGENT_UNIT,
            "--drop-in", self.agent_drop_in(node), "--",
            os.path.join(VENV_BIN, "resex-agent"), "--config-file", self.agent_conf(node)]

    def start_agent(self, node):
        check = subprocess.run(self.agent_argv(node) + ["--check"], env=self.env(),
                               capture_output=True, text=True, timeout=120)
        with open(self.log("%s-resex-agent-check" % node), "w") as f:
            f.write(check.stdout + check.stderr)
        if check.returncode:
            raise CloudError("resex-agent --check failed on %s:\n%s"
                             % (node, (check.stdout + check.stderr)[-3000:]))
        proc = self._start("%s-resex-agent" % node, self.agent_argv(node))
        self._wait_for_exec(proc, "resex-agent", self.log("%s-resex-agent" % node))
        return proc

    @staticmethod
    def _wait_for_exec(proc, program, log, timeout=60.0):
        """Until ``proc`` runs ``program`` (past nsenter, the unit sandbox and setpriv).

        Until then it is the sandbox, with root's capabilities: what a row
        reads of the process must be the agent's.
        """
        def execd():
            if not machine.alive(proc.pid):
                raise CloudError("%s exited before it started; see %s" % (program, log))
            try:
                with open("/proc/%d/cmdline" % proc.pid, "rb") as f:
                    argv = f.read().decode(errors="replace").split("\0")
            except OSError:
                return False
            return (os.path.basename(argv[0]) not in ("nsenter", "setpriv")
                    and "tests.cloud.unit_sandbox" not in argv
                    and any(os.path.basename(a) == program for a in argv[:2]))
        if not machine.wait_for(execd, timeout, step=0.1):
            raise CloudError("%s did not start within %.0f s; see %s" % (program, timeout, log))

    def stop_agent(self, node):
        return self.table.stop("%s-resex-agent" % node, timeout=30)

    # resex-placement-sync -----------------------------------------------------------

    def placement_sync_conf(self):
        return os.path.join(self.etc, "resex", "resex-placement-sync.conf")

    def start_placement_sync(self, reconcile_interval=10.0):
        """resex-placement-sync on the cloud's board and Placement (its own credentials).

        Not part of the bring-up: the rows of ``tests/cloud/scenarios.py``
        that use it start it. A short reconciliation interval, so that a row
        sees a removed trait come back within seconds.
        """
        _write(self.placement_sync_conf(), _ini({
            "DEFAULT": {"use_stderr": "true", "debug": "true",
                        "default_log_levels": "keystoneauth=WARN,urllib3=WARN"},
            "resex": {"board_url": self.board_url},
            "placement_sync": dict(self._service_auth("placement"),
                                   reconcile_interval=str(reconcile_interval)),
        }))
        return self._start("resex-placement-sync", [
            os.path.join(VENV_BIN, "resex-placement-sync"), "--config-file",
            self.placement_sync_conf()])

    def stop_placement_sync(self):
        return self.table.stop("resex-placement-sync", timeout=20)

    def restart_scheduler(self):
        """nova-scheduler again, reading nova.conf anew (a filter list changed)."""
        self.table.stop("nova-scheduler", timeout=30)
        conf = self.nova_conf()
        return self._start("nova-scheduler", [os.path.join(VENV_BIN, "nova-scheduler"),
                                              "--config-file", conf],
                           env=self.env(OS_NOVA_CONFIG_DIR=os.path.dirname(conf)))

    def wait_for_computes(self, timeout=240.0):
        """Until every node is an enabled, up hypervisor mapped to the cell."""
        conn = self.connect()
        seen = set()

        def all_up():
            for node in self.nodes:
                entry = self.table.get("%s-nova-compute" % node)
                if entry is None or not machine.alive(entry["pid"], entry["started"]):
                    raise CloudError("nova-compute on %s exited; see %s"
                                     % (node, self.log(node + "-nova-compute")))
            seen.clear()
            seen.update(h.name for h in conn.compute.hypervisors(details=True)
                        if getattr(h, "state", "up") == "up")
            services = {s.host for s in conn.compute.services(binary="nova-compute")
                        if s.state == "up"}
            return set(self.nodes) <= seen and set(self.nodes) <= services
        try:
            if not machine.wait_for(all_up, timeout, step=1.0):
                raise CloudError("compute nodes up: %s of %s" % (sorted(seen), list(self.nodes)))
            env = self.env(OS_NOVA_CONFIG_DIR=os.path.dirname(self.nova_conf()))
            _run([os.path.join(VENV_BIN, "nova-manage"), "--config-file", self.nova_conf(),
                  "cell_v2", "discover_hosts"], env=env)
        finally:
            conn.close()

    # -- status and teardown ---------------------------------------------------------

    def status_lines(self):
        """One line per recorded process: name, pid, state, RSS, log."""
        lines = []
        for entry in self.table.load():
            pid = entry["pid"]
            up = machine.alive(pid, entry["started"])
            lines.append("%-22s pid %-7d %-4s %7s  %s" % (
                entry["name"], pid, "up" if up else "DOWN",
                ("%d MiB" % (rss_kib(pid) // 1024)) if up else "-", entry["log"]))
        return lines

    def rss_mib(self):
        """Total RSS (MiB) of every process in the table and their descendants."""
        pids = set()
        for entry in self.table.load():
            if machine.alive(entry["pid"], entry["started"]):
                pids |= _descendants(entry["pid"])
        return sum(rss_kib(p) for p in pids) / 1024.0

    def down(self, keep_logs=True):
        """Stop every process by PID, remove domains, links, data (idempotent)."""
        t0 = time.monotonic()
        # Every node a cloud may have run (the rack's joins late: a `make
        # cloud-down` process does not know it ran).
        for node in ALL_NODES:
            with contextlib.suppress(Exception):
                self.stop_agent(node)
        for node in ALL_NODES:
            self._destroy_domains(node)
        timeouts = {"nova-compute": 40.0, "rabbitmq": 60.0, "mariadb": 60.0}
        for entry in reversed(self.table.load()):
            if entry["name"] == LAB_LOCK_HOLDER:
                continue
            wait = next((t for k, t in timeouts.items() if entry["name"].endswith(k)), 20.0)
            self.table.stop(entry["name"], timeout=wait)
        for node in ALL_NODES:
            self._kill_qemus(node)
        links = os.path.join(self.run_dir, "links")
        if os.path.exists(links):
            with open(links) as f:
                for name in reversed(f.read().split()):
                    if name.startswith("netns:"):
                        subprocess.run(["ip", "netns", "del", name[len("netns:"):]],
                                       capture_output=True)
                    elif _link_exists(name):
                        subprocess.run(["ip", "link", "del", name], capture_output=True)
            os.unlink(links)
        for path in (self.data, os.path.join(self.dir, "nodes"), self.etc, self.bin,
                     self.instances_path):
            shutil.rmtree(path, ignore_errors=True)
        self.table.stop(LAB_LOCK_HOLDER, timeout=5)
        if not keep_logs:
            shutil.rmtree(self.dir, ignore_errors=True)
        self.figures["teardown_s"] = time.monotonic() - t0

    def _destroy_domains(self, node):
        pid = self.libvirtd_pid(node)
        if pid is None or not machine.alive(pid):
            return
        virsh = self.nsenter(node) + ["virsh", "-c", "qemu:///system"]
        out = subprocess.run(virsh + ["list", "--all", "--name"], capture_output=True,
                             text=True, timeout=60).stdout
        for name in out.split():
            subprocess.run(virsh + ["destroy", name], capture_output=True, timeout=60)
            subprocess.run(virsh + ["undefine", "--nvram", name], capture_output=True,
                           timeout=60)

    def _kill_qemus(self, node):
        """QEMU processes whose pid files the node's libvirtd left (libvirtd died first)."""
        for pidfile in _glob(os.path.join(self.node_dir(node), "run-libvirt", "qemu",
                                          "*.pid")):
            with contextlib.suppress(OSError, ValueError):
                with open(pidfile) as f:
                    pid = int(f.read().strip())
                if machine.alive(pid):
                    machine.stop_pid(pid, machine.start_time(pid), 10.0)


def _glob(pattern):
    import glob
    return glob.glob(pattern)


def _link_exists(name):
    return os.path.exists("/sys/class/net/%s" % name)


def rss_kib(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _descendants(pid):
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        if p in out:
            continue
        out.add(p)
        todo += children.get(p, [])
    return out
