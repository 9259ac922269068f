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


"""The neutron stand-in answers what Nova asks, as Neutron would (no root, no services)."""

import io
import json
import os
import subprocess
import tempfile
import unittest

from tests.cloud import neutron_stub

CONF = {"network_id": "net-1", "subnet_id": "sub-1", "cidr": "10.229.0.0/24",
        "nodes": {"node1": {"netns": "resexc-node1", "bridge": "resexcnbr",
                            "ifb": "resexc1ifb"}}}


class StubTest(unittest.TestCase):

    def setUp(self):
        self.stub = neutron_stub.Stub(CONF)

    def call(self, method, path, query="", body=None):
        data = json.dumps(body).encode() if body is not None else b""
        environ = {"REQUEST_METHOD": method, "PATH_INFO": path, "QUERY_STRING": query,
                   "CONTENT_LENGTH": str(len(data)), "wsgi.input": io.BytesIO(data)}
        status = []
        out = b"".join(self.stub(environ, lambda s, h: status.append(s)))
        return int(status[0].split()[0]), json.loads(out) if out else None

    def test_no_extensions_and_one_shared_network_without_port_security(self):
        self.assertEqual((200, {"extensions": []}), self.call("GET", "/v2.0/extensions"))
        status, body = self.call("GET", "/v2.0/networks", "shared=True")
        self.assertEqual(200, status)
        (net,) = body["networks"]
        self.assertEqual(("net-1", ["sub-1"], False),
                         (net["id"], net["subnets"], net["port_security_enabled"]))
        # The tenant's own networks: none (the network is shared, owned by nobody).
        self.assertEqual([], self.call("GET", "/v2.0/networks",
                                       "tenant_id=p1&shared=False")[1]["networks"])

    def test_subnet_has_no_dhcp_and_no_gateway(self):
        subnet = self.call("GET", "/v2.0/subnets/sub-1")[1]["subnet"]
        self.assertEqual((False, None, "10.229.0.0/24"),
                         (subnet["enable_dhcp"], subnet["gateway_ip"], subnet["cidr"]))

    def test_a_port_mac_ends_in_its_address_last_octet(self):
        status, body = self.call("POST", "/v2.0/ports", body={"port": {
            "network_id": "net-1", "fixed_ips": [{"ip_address": "10.229.0.42"}]}})
        self.assertEqual(201, status)
        self.assertEqual("fa:16:3e:1d:00:2a", body["port"]["mac_address"])

    def test_addresses_are_allocated_once_and_the_free_ip_check_sees_them(self):
        first = self.call("POST", "/v2.0/ports", body={"port": {"network_id": "net-1"}})[1]
        second = self.call("POST", "/v2.0/ports", body={"port": {"network_id": "net-1"}})[1]
        ip1 = first["port"]["fixed_ips"][0]["ip_address"]
        ip2 = second["port"]["fixed_ips"][0]["ip_address"]
        self.assertNotEqual(ip1, ip2)
        found = self.call("GET", "/v2.0/ports", "fixed_ips=ip_address%3D" + ip1)[1]["ports"]
        self.assertEqual([first["port"]["id"]], [p["id"] for p in found])

    def test_binding_to_a_host_makes_a_tap_port_and_delete_removes_it(self):
        port = self.call("POST", "/v2.0/ports", body={"port": {"network_id": "net-1"}})[1]
        port_id = port["port"]["id"]
        self.assertEqual("unbound", port["port"]["binding:vif_type"])
        bound = self.call("PUT", "/v2.0/ports/" + port_id, body={"port": {
            "binding:host_id": "node1", "device_id": "vm-1"}})[1]["port"]
        self.assertEqual(("tap", "normal", "ACTIVE"), (
            bound["binding:vif_type"], bound["binding:vnic_type"], bound["status"]))
        by_device = self.call("GET", "/v2.0/ports", "device_id=vm-1")[1]["ports"]
        self.assertEqual([port_id], [p["id"] for p in by_device])
        self.assertEqual(204, self.call("DELETE", "/v2.0/ports/" + port_id)[0])
        self.assertEqual(404, self.call("GET", "/v2.0/ports/" + port_id)[0])

    def test_a_node_written_into_its_configuration_is_served_from_then_on(self):
        # A compute node joining the running cloud (the rack's node3).
        path = os.path.join(self.enterContext(tempfile.TemporaryDirectory()), "conf.json")
        with open(path, "w") as f:
            json.dump(CONF, f)
        self.assertTrue(self.stub.reload_nodes(path))
        self.assertFalse(self.stub.reload_nodes(path))       # unchanged: not read again
        node3 = {"netns": "resexc-node3", "bridge": "resexcnbr", "ifb": "resexc3ifb"}
        with open(path, "w") as f:
            json.dump(dict(CONF, nodes=dict(CONF["nodes"], node3=node3)), f)
        os.utime(path, ns=(0, os.stat(path).st_mtime_ns + 1))
        self.assertTrue(self.stub.reload_nodes(path))
        self.assertEqual(["node1", "node3"], sorted(self.stub.conf["nodes"]))
        self.assertEqual("net-1", self.stub.conf["network_id"])

    def test_the_tap_name_is_novas(self):
        self.assertEqual("tap8c6b3e2f-2d",
                         neutron_stub.tap_name("8c6b3e2f-2d6a-4b5e-9a29-000000000001"))


@unittest.skipUnless(os.geteuid() == 0, "creates a bridge and a tap: needs root")
class TapAttachTest(unittest.TestCase):
    """The stub, as a Neutron agent, puts Nova's tap on its node's bridge and shapes it.

    Needs root (a network namespace, a bridge, an ifb and a tap, all
    removed at the end).
    """

    def setUp(self):
        if os.geteuid() != 0:
            self.skipTest("needs root: makes a network namespace")
        self.ns = "resextst%d" % (os.getpid() % 100000)
        subprocess.run(["ip", "netns", "add", self.ns], check=True)
        self.addCleanup(subprocess.run, ["ip", "netns", "del", self.ns], capture_output=True)
        for name, kind in (("resextbr", "bridge"), ("resextifb", "ifb")):
            subprocess.run(["ip", "-n", self.ns, "link", "add", name, "type", kind], check=True)
        self.net = {"netns": self.ns, "bridge": "resextbr", "ifb": "resextifb"}
        self.stub = neutron_stub.Stub(dict(CONF, nodes={"node1": self.net}))

    def test_a_ports_tap_goes_on_its_nodes_bridge_shaped_and_leaves_with_the_namespace(self):
        port = self.stub.create_port({"network_id": "net-1"})
        tap = neutron_stub.tap_name(port["id"])
        # What Nova's libvirt driver does for a tap VIF: a persistent tap
        # (here before the port is bound, as on a live migration's target).
        subprocess.run(["ip", "-n", self.ns, "tuntap", "add", "dev", tap, "mode", "tap"],
                       check=True)
        self.stub.attach_taps()
        self.stub.attach_taps()          # idempotent: on the bridge already
        links = {link["ifname"]: link for link in neutron_stub._links(self.ns)}
        self.assertEqual("resextbr", links[tap].get("master"))
        filters = subprocess.run(["tc", "-n", self.ns, "filter", "show", "dev", tap,
                                  "parent", "ffff:"], capture_output=True, text=True).stdout
        self.assertIn("resextifb", filters)
        self.assertEqual(1, filters.count("mirred"))
        # Teardown deletes the namespace: Nova's persistent tap goes with it.
        subprocess.run(["ip", "netns", "del", self.ns], check=True)
        self.assertFalse(os.path.exists("/sys/class/net/%s" % tap))
