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

"""SLA from Nova flavor extra specs through the compute API, the keystoneauth way.

The server is a test double of Keystone v3 and Nova's compute API on
loopback (``http.server``), speaking just the requests keystoneauth makes
here: token issue with a service catalogue, version discovery and
``GET /servers/{id}`` with the embedded flavor (microversion >= 2.47) and the
server's group (2.71).
The agent's ``[nova]`` group is a real ``ConfigOpts`` loaded by
keystoneauth's loading helpers (``resex_agent.nova_client``); keystoneauth and
the HTTP on the wire are real.
"""

import http.server
import json
import os
import tempfile
import threading
import unittest

from oslo_config import cfg

from resex_agent import conf as agent_conf
from resex_agent import nova_client
from resex_libvirt import exceptions
from resex_libvirt.hypervisor import libvirt_host
from resex_libvirt.hypervisor import nova_sla
from resex_libvirt import sla

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
URI = "test://" + os.path.join(ROOT, "etc", "resex", "node-test.xml")
SENSITIVE = "6a1e4b8c-0000-4000-8000-000000000001"
PLAIN = "6a1e4b8c-0000-4000-8000-000000000004"


class FakeNova(http.server.ThreadingHTTPServer):
    """Keystone + Nova test double: ``servers`` maps uuid -> flavor extra specs."""

    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.servers = {}
        self.groups = {}            # uuid -> the server group's UUID (microversion 2.71)
        self.requests = []
        self.microversions = []
        self.hold = threading.Event()
        self.hold.set()

    @property
    def base(self):
        return "http://127.0.0.1:%d" % self.server_address[1]


class _Handler(http.server.BaseHTTPRequestHandler):

    def log_message(self, *args):
        pass

    def _send(self, status, body, headers=()):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.requests.append(("POST", self.path))
        if self.path.rstrip("/") != "/identity/v3/auth/tokens":
            return self._send(404, {"error": "not found"})
        compute = self.server.base + "/compute/v2.1"
        token = {
            "methods": ["password"], "expires_at": "2099-01-01T00:00:00.000000Z",
            "issued_at": "2026-01-01T00:00:00.000000Z",
            "user": {"id": "u1", "name": "resex", "domain": {"id": "default", "name": "Default"}},
            "project": {"id": "p1", "name": "service",
                        "domain": {"id": "default", "name": "Default"}},
            "roles": [{"id": "r1", "name": "admin"}],
            "catalog": [{"type": "compute", "name": "nova", "id": "c1", "endpoints": [
                {"id": "e1", "interface": "public", "region": "RegionOne",
                 "region_id": "RegionOne", "url": compute}]}],
        }
        self._send(201, {"token": token}, headers=[("X-Subject-Token", "tok")])

    def do_GET(self):
        self.server.requests.append(("GET", self.path))
        self.server.microversions.append(self.headers.get("OpenStack-API-Version"))
        path = self.path.split("?")[0].rstrip("/")
        compute = self.server.base + "/compute/v2.1/"
        version = {"id": "v2.1", "status": "CURRENT", "version": "2.96", "min_version": "2.1",
                   "updated": "2013-07-23T11:33:21Z",
                   "links": [{"rel": "self", "href": compute}]}
        if path == "/identity/v3":
            return self._send(200, {"version": {
                "id": "v3.14", "status": "stable", "updated": "2020-04-07T00:00:00Z",
                "links": [{"rel": "self", "href": self.server.base + "/identity/v3/"}],
                "media-types": [{"base": "application/json",
                                 "type": "application/vnd.openstack.identity-v3+json"}]}})
        if path in ("/compute", ""):
            return self._send(200, {"versions": [version]})
        if path == "/compute/v2.1":
            return self._send(200, {"version": version})
        prefix = "/compute/v2.1/servers/"
        if path.startswith(prefix):
            self.server.hold.wait(30)
            uuid = path[len(prefix):]
            if uuid not in self.server.servers:
                return self._send(404, {"itemNotFound": {
                    "code": 404, "message": "Instance %s could not be found." % uuid}})
            flavor = {"original_name": "m1.resex", "vcpus": 1, "ram": 512, "disk": 1,
                      "ephemeral": 0, "swap": 0, "extra_specs": self.server.servers[uuid]}
            server = {"id": uuid, "name": "vm", "status": "ACTIVE", "flavor": flavor}
            if uuid in self.server.groups:
                server["server_groups"] = [self.server.groups[uuid]]
            return self._send(200, {"server": server})
        self._send(404, {"error": "not found"})


class NovaCase(unittest.TestCase):

    def setUp(self):
        super().setUp()
        self.nova = FakeNova()
        thread = threading.Thread(target=self.nova.serve_forever, daemon=True)
        thread.start()
        self.addCleanup(thread.join, 5)
        self.addCleanup(self.nova.server_close)
        self.addCleanup(self.nova.shutdown)
        self.addCleanup(self.nova.hold.set)
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.tmp = tmp.name

    def conf(self, nova_section=None):
        """The agent's configuration with a ``[nova]`` section (a real file)."""
        if nova_section is None:
            nova_section = ("sla_lookup = true\nauth_type = password\n"
                            "auth_url = %s/identity/v3\nusername = resex\n"
                            "password = secret\nproject_name = service\n"
                            "user_domain_name = Default\nproject_domain_name = Default\n"
                            "region_name = RegionOne\ntimeout = 5\n" % self.nova.base)
        conf = cfg.ConfigOpts()
        agent_conf.register_opts(conf)
        path = os.path.join(self.tmp, "resex-agent.conf")
        with open(path, "w") as f:
            f.write("[nova]\n" + nova_section)
        conf(["--config-file", path], project="resex")
        return conf

    def connect(self):
        return nova_client.compute_adapter(self.conf())

    def source(self, **kwargs):
        src = nova_sla.NovaSLASource(self.connect, **kwargs)
        self.addCleanup(src.close)
        return src


class NovaSLASourceTest(NovaCase):

    def test_extra_specs_arrive_in_the_background_then_come_from_the_cache(self):
        self.nova.servers[PLAIN] = {"resex:latency_sla_us": "150", "hw:cpu_policy": "shared"}
        src = self.source()
        self.assertIsNone(src.lookup(PLAIN))
        self.assertTrue(src.wait_idle(30))
        self.assertEqual({"resex:latency_sla_us": "150"}, src.lookup(PLAIN))
        gets = [p for m, p in self.nova.requests if p.endswith(PLAIN)]
        self.assertEqual(1, len(gets))
        self.assertIn("2.71", " ".join(v for v in self.nova.microversions if v))

    def test_the_servers_group_is_its_ensemble(self):
        group = "3f1c2b9e-5d7a-4c11-9b0e-8a2f6c4d1e77"
        self.nova.servers[PLAIN] = {}
        self.nova.groups[PLAIN] = group
        src = self.source()
        hyp = libvirt_host.LibvirtHypervisor(URI, nova_sla=src)
        self.addCleanup(hyp.close)
        self.assertIsNone(hyp.vms()[PLAIN].ensemble)
        self.assertTrue(src.wait_idle(30))
        self.assertEqual({nova_sla.SERVER_GROUP: group}, src.lookup(PLAIN))
        self.assertEqual(group, hyp.vms()[PLAIN].ensemble)

    def test_lookup_never_blocks_on_a_slow_nova(self):
        self.nova.servers[PLAIN] = {"resex:shares": "5"}
        self.nova.hold.clear()
        src = self.source()
        for _ in range(3):
            self.assertIsNone(src.lookup(PLAIN))
        self.assertFalse(src.wait_idle(0.2))
        self.nova.hold.set()
        self.assertTrue(src.wait_idle(30))
        self.assertEqual({"resex:shares": "5"}, src.lookup(PLAIN))

    def test_an_instance_unknown_to_nova_has_no_specs(self):
        src = self.source()
        src.lookup("00000000-0000-4000-8000-000000000000")
        self.assertTrue(src.wait_idle(30))
        self.assertEqual({}, src.lookup("00000000-0000-4000-8000-000000000000"))

    def test_an_unreachable_keystone_is_a_warning_and_no_answer(self):
        self.nova.shutdown()
        self.nova.server_close()
        src = self.source(failure_ttl=60)
        with self.assertLogs("resex_libvirt.hypervisor.nova_sla", "WARNING"):
            src.lookup(PLAIN)
            self.assertTrue(src.wait_idle(60))
        self.assertIsNone(src.lookup(PLAIN))


class PrecedenceTest(NovaCase):

    def test_metadata_over_nova_over_configured_defaults(self):
        self.nova.servers[PLAIN] = {"resex:latency_sla_us": "150", "resex:shares": "7"}
        self.nova.servers[SENSITIVE] = {"resex:latency_sla_us": "999", "resex:io_class": "bulk",
                                        "resex:cpu_limit_pct": "120"}
        src = self.source()
        hyp = libvirt_host.LibvirtHypervisor(URI, sla_defaults=sla.SLA(shares=50),
                                             nova_sla=src)
        self.addCleanup(hyp.close)
        first = hyp.vms()
        self.assertEqual("default", first[PLAIN].sla_source)
        self.assertTrue(src.wait_idle(30))
        vms = hyp.vms()
        plain, sens = vms[PLAIN], vms[SENSITIVE]
        self.assertEqual(("nova", 150.0, 7), (plain.sla_source, plain.sla.latency_sla_us,
                                              plain.sla.shares))
        # sensitive-1's metadata sets latency_sla_us=180 and shares=300: they win;
        # the limit it does not set comes from Nova.
        self.assertEqual(("metadata", 180.0, 300, 120.0),
                         (sens.sla_source, sens.sla.latency_sla_us, sens.sla.shares,
                          sens.sla.limit_pct))

    def test_invalid_nova_value_warns_naming_vm_and_key(self):
        self.nova.servers[PLAIN] = {"resex:shares": "lots"}
        src = self.source()
        hyp = libvirt_host.LibvirtHypervisor(URI, sla_defaults=sla.SLA(shares=50),
                                             nova_sla=src)
        self.addCleanup(hyp.close)
        hyp.vms()
        self.assertTrue(src.wait_idle(30))
        with self.assertLogs("resex_libvirt.hypervisor", "WARNING") as logs:
            vms = hyp.vms()
        line = [x for x in logs.output if "plain-1" in x][0]
        self.assertIn("resex:shares", line)
        self.assertIn("nova", line)
        self.assertEqual(50, vms[PLAIN].sla.shares)


class NovaConfTest(NovaCase):

    def test_the_lookup_is_off_by_default_and_needs_no_credentials(self):
        conf = self.conf("")
        self.assertFalse(conf.nova.sla_lookup)
        self.assertIsNone(nova_client.sla_source(conf))
        self.assertEqual("compute", conf.nova.service_type)
        self.assertEqual(5.0, conf.nova.timeout)

    def test_the_lookup_from_the_nova_group_reaches_nova_with_its_credentials(self):
        src = nova_client.sla_source(self.conf())
        self.addCleanup(src.close)
        self.nova.servers[PLAIN] = {"resex:io_class": "bulk"}
        src.lookup(PLAIN)
        self.assertTrue(src.wait_idle(30))
        self.assertEqual({"resex:io_class": "bulk"}, src.lookup(PLAIN))
        self.assertIn(("POST", "/identity/v3/auth/tokens"), self.nova.requests)

    def test_the_lookup_without_credentials_is_a_clear_config_error(self):
        with self.assertRaisesRegex(exceptions.ConfigError, r"\[nova\] sla_lookup = true needs "
                                    r"credentials: set \[nova\] auth_type"):
            nova_client.sla_source(self.conf("sla_lookup = true\n"))

    def test_the_old_libvirt_names_still_work(self):
        conf = cfg.ConfigOpts()
        agent_conf.register_opts(conf)
        path = os.path.join(self.tmp, "old.conf")
        with open(path, "w") as f:
            f.write("[libvirt]\nnova_lookup = true\nnova_timeout = 7\nnova_cache_ttl = 60\n")
        conf(["--config-file", path], project="resex")
        self.assertEqual((True, 7, 60.0),
                         (conf.nova.sla_lookup, conf.nova.timeout, conf.nova.cache_ttl))
