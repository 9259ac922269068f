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


"""The nodes' ``ssh`` and ``scp``: commands and copies into another node's namespaces.

Both "nodes" here are this test's own namespaces (their libvirtd pid files
name this process), so only the address mapping and scp's rules are tested.
"""

import os
import subprocess
import tempfile
import unittest

from tests.cloud import cloud as cloud_mod


@unittest.skipUnless(os.geteuid() == 0, "nsenter needs root")
class NodeHelpersTest(unittest.TestCase):

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="resex-cloud-helpers-")
        self.addCleanup(subprocess.run, ["rm", "-rf", self.dir])
        self.cloud = cloud_mod.Cloud(state_dir=self.dir)
        for node in self.cloud.nodes:
            os.makedirs(self.cloud.node_dir(node))
            with open(os.path.join(self.cloud.node_dir(node), "libvirtd.pid"), "w") as f:
                f.write(str(os.getpid()))
        self.cloud._write_node_helpers("node1")
        self.bin = os.path.join(self.cloud.node_dir("node1"), "bin")
        self.src = os.path.join(self.dir, "src", "inst")
        os.makedirs(self.src)
        with open(os.path.join(self.src, "disk"), "w") as f:
            f.write("disk")

    def helper(self, name, *args):
        return subprocess.run([os.path.join(self.bin, name), *args], capture_output=True,
                              text=True)

    def test_ssh_runs_the_command_on_the_node_at_that_address(self):
        target = os.path.join(self.dir, "made")
        proc = self.helper("ssh", "-o", "BatchMode=yes", cloud_mod.NODE_IPS["node2"],
                           "mkdir", "-p", target)
        self.assertEqual(0, proc.returncode, proc.stderr)
        self.assertTrue(os.path.isdir(target))

    def test_an_address_that_is_no_node_fails_as_ssh_does(self):
        proc = self.helper("ssh", "192.0.2.1", "true")
        self.assertEqual(255, proc.returncode)
        self.assertIn("no cloud node at 192.0.2.1", proc.stderr)

    def test_scp_copies_as_the_target_or_into_it_when_it_is_a_directory(self):
        node2 = cloud_mod.NODE_IPS["node2"]
        dst = os.path.join(self.dir, "dst")
        os.makedirs(dst)
        for args in (("-r", os.path.join(self.src, "disk"), node2 + ":" + dst + "/renamed"),
                     ("-C", "-r", self.src, node2 + ":" + dst),
                     (node2 + ":" + os.path.join(self.src, "disk"), dst + "/pulled")):
            proc = self.helper("scp", *args)
            self.assertEqual(0, proc.returncode, proc.stderr)
        for path in ("renamed", "inst/disk", "pulled"):
            with open(os.path.join(dst, path)) as f:
                self.assertEqual("disk", f.read())
