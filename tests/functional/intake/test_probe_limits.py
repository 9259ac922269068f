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

"""The probe socket's bounds in time and number, and its directory's ownership."""

import os
import socket
import time

from resex_agent.intake import server as intake_server
from resex_agent.intake import store as store_mod
from resex_libvirt import exceptions
from tests.functional.intake.fake_qemu import wait_for
from tests.functional.intake.test_channels import A
from tests.functional.intake.test_channels import IntakeTestCase

REPORT = (b'{"v": 1, "vm": "%s", "n": 10, "mean_us": 120.0, "std_us": 5.0, '
          b'"p99_us": 150.0}\n' % A.encode())


class ProbeLimitsTest(IntakeTestCase):

    def rejected(self, intake):
        return intake.stats().get(store_mod.UNATTRIBUTED, {}).get("rejected", {})

    def closed(self, sock):
        sock.settimeout(5)
        try:
            return sock.recv(1) == b""
        except (ConnectionResetError, socket.timeout):
            return False

    def test_a_half_line_left_unfinished_is_closed_after_the_line_timeout(self):
        intake = self.start_intake(probe_line_timeout_s=0.2)
        sock = self.probe()
        sock.sendall(b'{"v": 1, "vm": ')
        self.assertTrue(self.closed(sock))
        self.assertEqual({intake_server.LINE_TIMEOUT: 1}, self.rejected(intake))

    def test_a_connection_that_reports_nothing_is_closed_after_the_idle_timeout(self):
        intake = self.start_intake(probe_idle_timeout_s=0.2)
        self.assertTrue(self.closed(self.probe()))
        self.assertEqual({intake_server.IDLE_TIMEOUT: 1}, self.rejected(intake))

    def test_a_probe_that_keeps_reporting_is_never_idle(self):
        intake = self.start_intake(probe_idle_timeout_s=0.3)
        intake.sync({A: self.vm(A)})
        sock = self.probe()
        for _ in range(6):
            sock.sendall(REPORT)
            time.sleep(0.1)
        self.assertNotIn(intake_server.IDLE_TIMEOUT, self.rejected(intake))

    def test_when_full_the_connection_longest_without_a_report_makes_room(self):
        intake = self.start_intake(max_probe_clients=4)
        intake.sync({A: self.vm(A)})
        idle = [self.probe() for _ in range(4)]
        wait_for(lambda: len(intake._probe_clients) == 4)
        honest = self.probe()
        honest.sendall(REPORT)
        self.assertEqual({A}, set(wait_for(lambda: intake.windows())))
        self.assertTrue(self.closed(idle[0]), "the oldest idle connection was not evicted")
        self.assertEqual({intake_server.EVICTED: 1}, self.rejected(intake))

    def test_a_socket_directory_others_can_write_is_refused(self):
        run = os.path.dirname(self.probe_path)
        os.makedirs(run)
        os.chmod(run, 0o777)
        with self.assertRaises(exceptions.ConfigError) as cm:
            self.start_intake()
        self.assertIn("writable by its group and others", str(cm.exception))
        self.assertFalse(os.path.exists(self.probe_path))

    def test_a_socket_directory_of_another_user_is_refused(self):
        if os.geteuid() != 0:
            self.skipTest("needs root to give the directory to another uid")
        run = os.path.dirname(self.probe_path)
        os.makedirs(run, mode=0o755)
        os.chown(run, 65534, -1)
        with self.assertRaises(exceptions.ConfigError) as cm:
            self.start_intake()
        self.assertIn("owned by uid", str(cm.exception))

    def test_a_grandparent_others_can_write_is_refused(self):
        # self.dir/g (0777, not sticky)/run/latency.sock
        grand = os.path.join(self.dir, "g")
        os.makedirs(os.path.join(grand, "run"), mode=0o755)
        os.chmod(grand, 0o777)
        with self.assertRaises(exceptions.ConfigError) as cm:
            self.start_intake(probe_socket_path=os.path.join(grand, "run", "latency.sock"))
        self.assertIn("%s is writable by its group and others" % grand, str(cm.exception))

    def test_a_sticky_world_writable_ancestor_such_as_tmp_is_accepted(self):
        sticky = os.path.join(self.dir, "tmp")
        os.makedirs(os.path.join(sticky, "run"), mode=0o755)
        os.chmod(sticky, 0o1777)
        self.start_intake(probe_socket_path=os.path.join(sticky, "run", "latency.sock"))

    def test_a_parent_reached_through_another_users_symlink_is_refused(self):
        if os.geteuid() != 0:
            self.skipTest("needs root to give the symlink to another uid")
        real = os.path.join(self.dir, "real")
        os.makedirs(real, mode=0o755)
        link = os.path.join(self.dir, "link")
        os.symlink(real, link)
        os.lchown(link, 65534, -1)
        with self.assertRaises(exceptions.ConfigError) as cm:
            self.start_intake(probe_socket_path=os.path.join(link, "run", "latency.sock"))
        self.assertIn("%s is a symlink owned by uid 65534" % link, str(cm.exception))

    def test_a_parent_symlinked_into_another_users_directory_is_refused(self):
        if os.geteuid() != 0:
            self.skipTest("needs root to give the directory to another uid")
        theirs = os.path.join(self.dir, "theirs")
        os.makedirs(theirs, mode=0o755)
        os.chown(theirs, 65534, -1)
        os.makedirs(os.path.join(theirs, "run"), mode=0o755)
        link = os.path.join(self.dir, "link")
        os.symlink(theirs, link)
        with self.assertRaises(exceptions.ConfigError) as cm:
            self.start_intake(probe_socket_path=os.path.join(link, "run", "latency.sock"))
        self.assertIn("%s is owned by uid 65534" % theirs, str(cm.exception))


class ProbeSocketCheckTest(IntakeTestCase):
    """``check_probe_socket_path`` (``--check``) refuses what the start does, creating nothing."""

    def agree(self, path, fragment):
        with self.assertRaises(exceptions.ConfigError) as checked:
            intake_server.check_probe_socket_path(path)
        self.assertIn(fragment, str(checked.exception))
        created = sorted(os.listdir(self.dir))
        with self.assertRaises(exceptions.ConfigError) as started:
            self.start_intake(probe_socket_path=path)
        self.assertIn(fragment, str(started.exception))
        return created

    def test_a_directory_others_can_write_is_refused_by_both(self):
        run = os.path.dirname(self.probe_path)
        os.makedirs(run)
        os.chmod(run, 0o777)
        self.agree(self.probe_path, "writable by its group and others (mode 0777)")

    def test_a_missing_directory_under_one_others_can_write_is_refused_by_both(self):
        grand = os.path.join(self.dir, "g")
        os.makedirs(grand)
        os.chmod(grand, 0o777)
        path = os.path.join(grand, "run", "latency.sock")
        self.assertEqual(["g"], self.agree(path, "%s is writable by its group and others"
                                           % grand))

    def test_a_file_where_the_socket_goes_is_refused_by_both(self):
        os.makedirs(os.path.dirname(self.probe_path), mode=0o755)
        with open(self.probe_path, "w"):
            pass
        self.agree(self.probe_path, "exists and is not a socket")

    def test_a_running_agents_socket_and_a_directory_still_to_create_pass(self):
        intake_server.check_probe_socket_path(self.probe_path)
        self.assertEqual([], os.listdir(self.dir))
        self.start_intake()
        intake_server.check_probe_socket_path(self.probe_path)
