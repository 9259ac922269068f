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

"""Lab smoke test: guests created and destroyed under the real agent cost its loop nothing.

Destroying a TCG guest takes libvirtd 1-2 s, and every call that walks the
domain list (the bulk statistics the loop reads every interval among them)
waits for it. The real agent runs at 0.1 s intervals next to a guest it
caps (``resex:cpu_limit_pct``) while :data:`CYCLES` other guests are
created and destroyed one after the other. Asserted: the loop was never
late by more than one interval, the capped guest kept its cap (libvirt's
read-back) through the churn, and the agent saw every guest come and go.
The lateness figures are printed.
"""

import re
import time
import unittest

from tests.lab import base
from tests.lab import harness
from tests import machine

CYCLES = 10
LIMIT_PCT = 20
LATE = re.compile(r"control loop late by ([0-9.]+) ms; skipping (\d+) interval")


class ChurnTest(base.LabTestCase):

    @classmethod
    def set_up_lab(cls):
        initrd = cls.lab.initramfs()
        cls.bulk = cls.capped_burner("resex-churn-bulk", LIMIT_PCT, initrd)
        cls.conn = cls.connect()
        cls.agent = cls.agent_process("churn")
        cls.agent.start(vms=1)
        cls._churn(initrd)

    @classmethod
    def _cap(cls):
        return harness.cap_pct(harness.knobs(cls.conn, cls.bulk))

    @classmethod
    def _churn(cls, initrd):
        machine.wait_for(lambda: cls._cap() is not None, 30.0, step=0.1)
        mark = len(cls.agent.log())
        cls.caps = []
        cls.destroy_s = []
        for i in range(CYCLES):
            guest = harness.Guest("resex-churn-%d" % i, cls.lab.kernel, initrd, role="idle",
                                  workdir=cls.workdir)
            cls.lab.guests.append(guest)
            guest.start(cls.conn)
            time.sleep(1.0)
            cls.caps.append(cls._cap())
            started = time.monotonic()
            cls.conn.lookupByUUIDString(guest.uuid).destroy()
            cls.destroy_s.append(time.monotonic() - started)
            cls.conn.lookupByUUIDString(guest.uuid).undefine()
            cls.lab.guests.remove(guest)
            cls.caps.append(cls._cap())
        time.sleep(1.5)
        cls.log = cls.agent.log()[mark:]
        cls.late = [(float(ms), int(n)) for ms, n in LATE.findall(cls.log)]
        cls.exit_code = cls.agent.stop()
        print("\n%d creates and destroys under the agent (destroy %.2f-%.2f s): loop late %d "
              "time(s), %d interval(s) skipped, worst %.0f ms" % (
                  CYCLES, min(cls.destroy_s), max(cls.destroy_s), len(cls.late),
                  sum(n for _ms, n in cls.late), max([ms for ms, _n in cls.late] or [0.0])))

    def test_destroys_cost_the_loop_no_interval_beyond_one(self):
        self.assertEqual([], [(ms, n) for ms, n in self.late if n > 1], self.log)

    def test_the_capped_guest_kept_its_cap_through_the_churn(self):
        self.assertTrue(all(c is not None and c <= LIMIT_PCT + 0.5 for c in self.caps),
                        self.caps)

    def test_the_agent_saw_every_guest_come_and_go(self):
        for i in range(CYCLES):
            self.assertIn("resex-churn-%d" % i, self.log)
        self.assertEqual(0, self.exit_code)


if __name__ == "__main__":
    unittest.main()
