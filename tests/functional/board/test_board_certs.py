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

"""The operator's commands of doc/source/board.rst, run as written, on a real etcd.

``tools/board-certs.sh`` makes the CA and the certificates, etcd starts with
them and ``--client-cert-auth``, ``tools/board-users.sh`` makes the users and
roles with etcdctl (as root, by its certificate) and switches authentication
on. Then each host's certificate and user publish through the project's etcd
backend, and only to its own key.
"""

import os
import shutil
import stat
import subprocess
import tempfile
import unittest
import urllib.parse

from resex_libvirt import board as board_mod
from resex_libvirt import exceptions
from tests.functional.board import etcd_server
from tests.unit.board import reports

TOOLS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "tools")
PREFIX = "/resex/board/"
HOSTS = ("host-a", "host-b")


def _missing():
    if not etcd_server.EtcdServer.available():
        return "needs Debian's etcd-server"
    for tool in ("etcdctl", "openssl"):
        if shutil.which(tool) is None:
            return "needs %s (make bootstrap installs it)" % tool
    return None


def _run(*args, env=None):
    return subprocess.run(args, check=True, capture_output=True, text=True, env=env,
                          timeout=120).stdout


@unittest.skipIf(_missing(), _missing())
class OperatorCertificatesTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="resex-certs-")
        cls.addClassCleanup(shutil.rmtree, cls.dir, True)
        certs = os.path.join(cls.dir, "certs")
        cls.made = _run(os.path.join(TOOLS, "board-certs.sh"), "-d", "2",
                        "-m", "resex-test=127.0.0.1,localhost", "-c", HOSTS[0],
                        "-c", HOSTS[1], "-s", "nova-scheduler", certs)
        cls.certs = certs
        cls.etcd = etcd_server.EtcdServer(certs={
            "ca": cls.path("ca.pem"), "server_cert": cls.path("member-resex-test.pem"),
            "server_key": cls.path("member-resex-test.key"),
            "client_cert": cls.path("client-root.pem"),
            "client_key": cls.path("client-root.key")})
        cls.etcd.setUp()
        cls.addClassCleanup(cls.etcd.cleanUp)
        cls.pwdir = os.path.join(cls.dir, "passwords")
        cls.ran = _run(os.path.join(TOOLS, "board-users.sh"), "-p", PREFIX,
                       "-r", "nova-scheduler", "-r", "resex-board", cls.pwdir, *HOSTS,
                       env=cls.etcdctl_env("root"))

    @classmethod
    def path(cls, name):
        return os.path.join(cls.certs, name)

    @classmethod
    def etcdctl_env(cls, who):
        """etcdctl's environment as board.rst sets it: ``who``'s certificate."""
        return dict(os.environ, ETCDCTL_API="3",
                    ETCDCTL_ENDPOINTS="https://127.0.0.1:%d" % cls.etcd.client_port,
                    ETCDCTL_CACERT=cls.path("ca.pem"),
                    ETCDCTL_CERT=cls.path("client-%s.pem" % who),
                    ETCDCTL_KEY=cls.path("client-%s.key" % who))

    def board(self, who, password=True):
        """The project's etcd board with ``who``'s certificate (and its password)."""
        user = ""
        if password:
            with open(os.path.join(self.pwdir, who + ".password")) as f:
                user = "%s:%s@" % (who, urllib.parse.quote(f.read().strip(), safe=""))
        board = board_mod.open_board(
            "etcd3+https://%s127.0.0.1:%d" % (user, self.etcd.client_port), prefix=PREFIX,
            timeout=5, ca_cert=self.path("ca.pem"),
            cert_cert=self.path("client-%s.pem" % who),
            cert_key=self.path("client-%s.key" % who))
        self.addCleanup(board.close)
        return board

    def test_every_key_is_private_and_every_client_has_a_certificate(self):
        self.assertIn("client-root.pem (/CN=root)", self.made)
        for who in ("nova-scheduler", "resex-board") + HOSTS:
            self.assertIn("client-%s.pem (/O=resex-board/OU=%s)" % (who, who), self.made)
        keys = [n for n in os.listdir(self.certs) if n.endswith(".key")]
        self.assertLessEqual({"ca.key", "member-resex-test.key", "client-host-a.key"},
                             set(keys))
        for name in keys:
            self.assertEqual(0o600, stat.S_IMODE(os.stat(self.path(name)).st_mode), name)

    def test_each_host_publishes_its_own_report_and_the_scheduler_reads_both(self):
        self.board("host-a").publish(reports.make("host-a", sensitive_vms=1))
        self.board("host-b").publish(reports.make("host-b", sensitive_vms=2))
        for reader in ("nova-scheduler", "resex-board"):
            seen = self.board(reader).snapshot()
            self.assertEqual({"host-a": 1, "host-b": 2},
                             {h: r.sensitive_vms for h, r in seen.items()})

    def test_a_hosts_certificate_cannot_write_another_hosts_key(self):
        with self.assertRaises(exceptions.BoardUnavailable) as ctx:
            self.board("host-a").publish(reports.make("host-b", sensitive_vms=3))
        self.assertIn("permission denied", str(ctx.exception).lower())

    def test_etcdctl_is_root_by_its_certificates_common_name(self):
        out = _run("etcdctl", "role", "get", "host-a", env=self.etcdctl_env("root"))
        self.assertIn(PREFIX + "host-a", out)
        self.assertIn("etcdctl role grant-permission host-a readwrite %shost-a" % PREFIX,
                      self.ran)

    def test_a_certificate_with_a_common_name_is_refused_by_the_json_gateway(self):
        with open(os.path.join(self.pwdir, "root.password")) as f:
            password = urllib.parse.quote(f.read().strip(), safe="")
        board = board_mod.open_board(
            "etcd3+https://root:%s@127.0.0.1:%d" % (password, self.etcd.client_port),
            prefix=PREFIX, timeout=5, ca_cert=self.path("ca.pem"),
            cert_cert=self.path("client-root.pem"), cert_key=self.path("client-root.key"))
        self.addCleanup(board.close)
        with self.assertRaises(exceptions.BoardUnavailable) as ctx:
            board.snapshot()
        self.assertIn("400", str(ctx.exception))

    def test_the_scheduler_cannot_write(self):
        with self.assertRaises(exceptions.BoardUnavailable):
            self.board("nova-scheduler").publish(reports.make("nova-scheduler"))

    def test_the_json_gateway_needs_the_password_besides_the_certificate(self):
        with self.assertRaises(exceptions.BoardUnavailable):
            self.board("nova-scheduler", password=False).snapshot()

    def test_running_the_scripts_again_adds_a_host_and_keeps_the_rest(self):
        with open(self.path("ca.pem")) as f:
            ca = f.read()
        _run(os.path.join(TOOLS, "board-certs.sh"), "-m", "resex-test=127.0.0.1",
             "-c", "host-c", "-s", "nova-scheduler", self.certs)
        with open(self.path("ca.pem")) as f:
            self.assertEqual(ca, f.read())
        _run(os.path.join(TOOLS, "board-users.sh"), "-r", "nova-scheduler", self.pwdir,
             "host-c", env=self.etcdctl_env("root"))
        self.board("host-c").publish(reports.make("host-c", sensitive_vms=3))
        self.assertEqual(3, self.board("nova-scheduler").snapshot()["host-c"].sensitive_vms)
        with self.assertRaises(exceptions.BoardUnavailable):
            self.board("host-c").publish(reports.make("host-a"))
