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

"""The board on a real etcd that requires client certificates (``--client-cert-auth``).

The agent, the scheduler's reader (``[resex] board_cert_file`` and
``board_key_file``) and ``resex-board`` (``--cert-file``, ``--key-file``)
each present one; without it etcd refuses the TLS handshake.
"""

import io
import json
import unittest

from oslo_config import cfg

from resex_libvirt import board as board_mod
from resex_libvirt.board import resex_board
from resex_libvirt import exceptions
from resex_nova import conf as nova_conf
from tests.functional.board import etcd_server
from tests.unit.board import reports


@unittest.skipUnless(etcd_server.EtcdServer.available(), "needs Debian's etcd-server")
class EtcdClientCertificateTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.etcd = etcd_server.EtcdServer(tls=True)
        cls.etcd.setUp()
        cls.addClassCleanup(cls.etcd.cleanUp)
        certs = cls.etcd.certs
        cls.agent_opts = {"ca_cert": certs["ca"], "cert_cert": certs["client_cert"],
                          "cert_key": certs["client_key"], "timeout": 5}
        with board_mod.open_board(cls.etcd.url, **cls.agent_opts) as board:
            board.publish(reports.make("c1", sensitive_vms=2))

    def test_the_scheduler_reads_with_its_certificate_from_its_options(self):
        conf = cfg.ConfigOpts()
        nova_conf.register_opts(conf)
        conf([], default_config_files=[])
        certs = self.etcd.certs
        for name, value in (("board_url", self.etcd.url), ("board_ca_cert", certs["ca"]),
                            ("board_cert_file", certs["client_cert"]),
                            ("board_key_file", certs["client_key"])):
            # The [resex] group object is the module's: an override outlives this conf.
            conf.set_override(name, value, "resex")
            self.addCleanup(conf.clear_override, name, "resex")
        opts = nova_conf.board_options(conf.resex)
        with board_mod.open_board(self.etcd.url, **opts) as board:
            self.assertEqual(2, board.snapshot()["c1"].sensitive_vms)

    def test_without_a_client_certificate_etcd_refuses(self):
        with board_mod.open_board(self.etcd.url, ca_cert=self.etcd.certs["ca"],
                                  timeout=2) as board:
            with self.assertRaises(exceptions.BoardUnavailable):
                board.snapshot()

    def test_a_certificate_without_its_key_is_a_configuration_error(self):
        with self.assertRaises(exceptions.ConfigError):
            board_mod.open_board(self.etcd.url, ca_cert=self.etcd.certs["ca"],
                                 cert_cert=self.etcd.certs["client_cert"])

    def test_resex_board_reads_with_its_certificate(self):
        certs = self.etcd.certs
        out = io.StringIO()
        status = resex_board.main(["--url", self.etcd.url, "--json", "--ca-cert", certs["ca"],
                                   "--cert-file", certs["client_cert"],
                                   "--key-file", certs["client_key"]], out=out)
        self.assertEqual(0, status)
        self.assertEqual(["c1"], [h["host"] for h in json.loads(out.getvalue())["hosts"]])
