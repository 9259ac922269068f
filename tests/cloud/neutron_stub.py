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


"""A neutron stand-in: what Nova asks of Neutron for servers with plain tap NICs.

Nova 34 cannot boot a server without a ``network`` endpoint, and this
machine has no room for Neutron's agents, so this WSGI app answers the
calls Nova makes (FIELD facts in doc/source/cloud.rst): extensions (none),
one shared network with one subnet (no DHCP, no gateway), quotas,
ports (create, the free-IP check, binding to a host with
``binding:vif_type = tap``, delete), floating IPs and security groups
(none). It does what a Neutron agent would do for a tap port: a thread
puts each port's ``tap<port id[:11]>`` (created by Nova in the compute
node's network namespace) on that node's bridge, and redirects what the
guest sends into the node's shaped ``ifb`` (the node's link).

A port's MAC address ends in its IPv4 address's last octet: the guests
take their address from it (no DHCP in a busybox guest).

Configuration: the JSON file named by ``RESEX_CLOUD_NEUTRON_CONF``
(``network_id``, ``subnet_id``, ``cidr``, ``nodes``: node -> ``netns``,
``bridge``, ``ifb``); its nodes are read again when it changes (a node
joining the running cloud).
"""

import ipaddress
import json
import logging
import os
import subprocess
import threading
import time
import urllib.parse
import uuid

LOG = logging.getLogger(__name__)

MAC_PREFIX = "fa:16:3e:1d:00:"


def tap_name(port_id):
    """The tap Nova's libvirt driver creates for a port (``nova.network.model``)."""
    return ("tap" + port_id)[:14]


class Stub:

    def __init__(self, conf):
        self.conf = conf
        self.net = ipaddress.ip_network(conf["cidr"])
        self.ports = {}
        self.lock = threading.Lock()
        #: The configuration file's mtime when its nodes were read (None: never).
        self.conf_stamp = None

    # -- resources -------------------------------------------------------------

    def network(self):
        return {"id": self.conf["network_id"], "name": "resex-net", "status": "ACTIVE",
                "admin_state_up": True, "shared": True, "router:external": False,
                "subnets": [self.conf["subnet_id"]], "mtu": 1500,
                "port_security_enabled": False, "tenant_id": "", "project_id": "",
                "provider:network_type": "flat", "provider:physical_network": "resex"}

    def subnet(self):
        hosts = list(self.net.hosts())
        return {"id": self.conf["subnet_id"], "name": "resex-subnet",
                "network_id": self.conf["network_id"], "cidr": str(self.net),
                "ip_version": 4, "enable_dhcp": False, "gateway_ip": None,
                "dns_nameservers": [], "host_routes": [], "tenant_id": "",
                "project_id": "", "ipv6_ra_mode": None, "ipv6_address_mode": None,
                "allocation_pools": [{"start": str(hosts[9]), "end": str(hosts[-5])}]}

    def _allocate_ip(self):
        used = {ip["ip_address"] for p in self.ports.values() for ip in p["fixed_ips"]}
        for last in range(10, 250):
            candidate = str(self.net.network_address + last)
            if candidate not in used:
                return candidate
        raise ValueError("no free address in %s" % self.net)

    def create_port(self, body):
        with self.lock:
            port_id = str(uuid.uuid4())
            fixed = body.get("fixed_ips") or [{}]
            ip = fixed[0].get("ip_address") or self._allocate_ip()
            port = {
                "id": port_id, "name": body.get("name", ""),
                "network_id": body.get("network_id", self.conf["network_id"]),
                "tenant_id": body.get("tenant_id", body.get("project_id", "")),
                "project_id": body.get("project_id", body.get("tenant_id", "")),
                "mac_address": MAC_PREFIX + "%02x" % (int(ip.rsplit(".", 1)[1]),),
                "fixed_ips": [{"subnet_id": self.conf["subnet_id"], "ip_address": ip}],
                "admin_state_up": True, "status": "DOWN",
                "device_id": body.get("device_id", ""),
                "device_owner": body.get("device_owner", ""),
                "security_groups": [], "port_security_enabled": False,
                "binding:host_id": "", "binding:vif_type": "unbound",
                "binding:vnic_type": body.get("binding:vnic_type", "normal"),
                "binding:vif_details": {}, "binding:profile": {},
                "dns_name": "", "extra_dhcp_opts": [], "allowed_address_pairs": [],
                "qos_policy_id": None, "resource_request": None,
            }
            self.ports[port_id] = port
            return port

    def update_port(self, port_id, body):
        with self.lock:
            port = self.ports[port_id]
            port.update({k: v for k, v in body.items() if k != "id"})
            if port.get("binding:host_id"):
                port["binding:vif_type"] = "tap"
                port["binding:vnic_type"] = "normal"
                port["status"] = "ACTIVE"
            else:
                port["binding:vif_type"] = "unbound"
            return port

    def list_ports(self, query):
        wanted_ips = [v.split("=", 1)[1] for v in query.get("fixed_ips", [])
                      if v.startswith("ip_address=")]
        out = []
        with self.lock:
            for port in self.ports.values():
                if wanted_ips and not any(ip["ip_address"] in wanted_ips
                                          for ip in port["fixed_ips"]):
                    continue
                if all(_matches(port, key, values) for key, values in query.items()
                       if key not in ("fixed_ips", "fields", "limit", "marker")):
                    out.append(port)
        return out

    # -- the Neutron agent's part ------------------------------------------------

    def attach_taps(self):
        """Put each port's tap on its node's bridge and shape it (idempotent).

        A tap is looked for in every node's network namespace, whatever the
        port's binding says: during a live migration the target's tap exists
        before Nova binds the port to the target.
        """
        with self.lock:
            taps = {tap_name(port_id): port_id for port_id in self.ports}
        for node, net in sorted(self.conf["nodes"].items()):
            for link in _links(net["netns"]):
                name = link.get("ifname")
                if name not in taps or link.get("master") == net["bridge"]:
                    continue
                self.attach(net, name)
                LOG.info("port %s: %s on %s's %s, shaped by %s", taps[name], name, node,
                         net["bridge"], net["ifb"])

    @staticmethod
    def attach(net, tap):
        """What a Neutron agent does for a tap: on the bridge, its traffic into the ifb."""
        ns = net["netns"]
        _ip("-n", ns, "link", "set", tap, "master", net["bridge"])
        _ip("-n", ns, "link", "set", tap, "up")
        _tc("-n", ns, "qdisc", "add", "dev", tap, "handle", "ffff:", "ingress")
        _tc("-n", ns, "filter", "add", "dev", tap, "parent", "ffff:", "protocol", "all",
            "u32", "match", "u32", "0", "0",
            "action", "mirred", "egress", "redirect", "dev", net["ifb"])

    def reload_nodes(self, path):
        """The nodes of the configuration file at ``path`` if it changed (a node joined)."""
        stamp = os.stat(path).st_mtime_ns
        if stamp == self.conf_stamp:
            return False
        with open(path) as f:
            nodes = json.load(f)["nodes"]
        with self.lock:
            self.conf = dict(self.conf, nodes=nodes)
        self.conf_stamp = stamp
        return True

    def run_attacher(self, path=None):
        while True:
            try:
                if path is not None and self.reload_nodes(path):
                    LOG.info("nodes: %s", ", ".join(sorted(self.conf["nodes"])))
                self.attach_taps()
            except Exception:
                LOG.exception("attaching taps failed")
            time.sleep(0.5)

    # -- WSGI ------------------------------------------------------------------

    def __call__(self, environ, start_response):
        method = environ["REQUEST_METHOD"]
        path = environ.get("PATH_INFO", "").rstrip("/")
        if path.endswith(".json"):
            path = path[:-5]
        query = urllib.parse.parse_qs(environ.get("QUERY_STRING", ""))
        body = {}
        length = int(environ.get("CONTENT_LENGTH") or 0)
        if length:
            body = json.loads(environ["wsgi.input"].read(length))
        try:
            status, payload = self.route(method, path, query, body)
        except KeyError as e:
            status, payload = 404, {"NeutronError": {"type": "NotFound",
                                                     "message": "%s not found" % e}}
        LOG.info("%s %s?%s -> %s", method, path, environ.get("QUERY_STRING", ""), status)
        data = b"" if payload is None else json.dumps(payload).encode()
        reason = {200: "OK", 201: "Created", 204: "No Content", 404: "Not Found"}
        start_response("%d %s" % (status, reason.get(status, "Error")),
                       [("Content-Type", "application/json"),
                        ("Content-Length", str(len(data)))])
        return [data]

    def route(self, method, path, query, body):
        parts = [p for p in path.split("/") if p]
        if parts and parts[0] == "v2.0":
            parts = parts[1:]
        if not parts:
            return 200, {"resources": [{"name": n, "collection": n + "s"}
                                       for n in ("network", "subnet", "port")]}
        kind, rest = parts[0], parts[1:]
        if kind == "extensions":
            if rest:
                raise KeyError(rest[0])
            return 200, {"extensions": []}
        if kind == "networks":
            net = self.network()
            if rest:
                if rest[0] != net["id"]:
                    raise KeyError(rest[0])
                return 200, {"network": net}
            return 200, {"networks": [net] if all(
                _matches(net, k, v) for k, v in query.items()
                if k not in ("fields",)) else []}
        if kind == "subnets":
            sub = self.subnet()
            if rest:
                if rest[0] != sub["id"]:
                    raise KeyError(rest[0])
                return 200, {"subnet": sub}
            return 200, {"subnets": [sub] if all(
                _matches(sub, k, v) for k, v in query.items()
                if k not in ("fields",)) else []}
        if kind == "quotas":
            return 200, {"quota": {"network": -1, "subnet": -1, "port": -1,
                                   "floatingip": -1, "security_group": -1,
                                   "security_group_rule": -1, "router": -1}}
        if kind in ("floatingips", "security-groups", "routers", "qos", "trunks",
                    "segments", "address-groups"):
            return 200, {kind.replace("-", "_"): []}
        if kind == "ports":
            if method == "POST":
                return 201, {"port": self.create_port(body.get("port", {}))}
            if not rest:
                return 200, {"ports": self.list_ports(query)}
            port_id = rest[0]
            if method == "PUT":
                return 200, {"port": self.update_port(port_id, body.get("port", {}))}
            if method == "DELETE":
                with self.lock:
                    del self.ports[port_id]
                return 204, None
            with self.lock:
                return 200, {"port": self.ports[port_id]}
        raise KeyError(kind)


def _matches(record, key, values):
    if key not in record:
        return True
    value = record[key]
    return any(str(value).lower() == v.lower() for v in values)


def _links(netns):
    """``ip -j link show`` in ``netns`` ([] if it is gone)."""
    proc = subprocess.run(("ip", "-j", "-n", netns, "link", "show"), capture_output=True,
                          text=True)
    if proc.returncode:
        LOG.warning("ip -n %s link show: %s", netns, proc.stderr.strip())
        return []
    return json.loads(proc.stdout or "[]")


def _ip(*args):
    proc = subprocess.run(("ip",) + args, capture_output=True, text=True)
    if proc.returncode:
        LOG.warning("ip %s: %s", " ".join(args), proc.stderr.strip())


def _tc(*args):
    proc = subprocess.run(("tc",) + args, capture_output=True, text=True)
    if proc.returncode and "File exists" not in proc.stderr:
        LOG.warning("tc %s: %s", " ".join(args), proc.stderr.strip())


def make_application():
    """The WSGI app, configured from ``RESEX_CLOUD_NEUTRON_CONF``, its tap thread running."""
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(process)d %(levelname)s %(name)s %(message)s")
    path = os.environ["RESEX_CLOUD_NEUTRON_CONF"]
    with open(path) as f:
        stub = Stub(json.load(f))
    stub.conf_stamp = os.stat(path).st_mtime_ns
    threading.Thread(target=stub.run_attacher, args=(path,), name="tap-attacher",
                     daemon=True).start()
    return stub
