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

"""The lab's host probe against a local BenchEx server: it records what the client measured.

Its recorder stands where the client expects a reporter, so it must answer
every call the client makes of one (``add``, ``connected``).
"""

import json
import os
import tempfile
import unittest

from benchex import server as server_mod
from tests.lab import probe


class ProbeTest(unittest.TestCase):

    def test_the_probe_writes_its_samples_through_a_real_client(self):
        server = server_mod.BenchexServer("127.0.0.1", 0, 10.0, 64).start()
        self.addCleanup(server.close)
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "probe.json")
            self.assertEqual(0, probe.main(["--host", "127.0.0.1", "--port",
                                            str(server.address[1]), "--rate", "200",
                                            "--seconds", "0.25", "--out", out]))
            with open(out) as f:
                result = json.load(f)
        self.assertEqual(50, len(result["samples"]))
        self.assertEqual(0, result["reports_sent"])
