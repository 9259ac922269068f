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

"""The libvirt connection: error translation, reconnect backoff, retry, event loop.

Real libvirt throughout (the test driver, and a unix socket nobody listens
on for an unreachable libvirtd). The disconnection errors that only a dying
libvirtd produces are built as ``libvirtError`` values carrying libvirt's
own codes (``VIR_ERR_SYSTEM_ERROR`` from ``VIR_FROM_RPC``, what libvirt
raises on a closed socket); the real thing is exercised in the lab.
"""

import os
import tempfile
import unittest

import libvirt

from resex_libvirt import exceptions
from resex_libvirt.hypervisor import connection


def libvirt_error(code, domain, message="boom"):
    exc = libvirt.libvirtError(message)
    exc.err = (code, domain, message, libvirt.VIR_ERR_ERROR, None, None, None, 0, 0)
    return exc


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


class TranslateTest(unittest.TestCase):

    def test_no_domain_is_vm_gone(self):
        conn = libvirt.open("test:///default")
        self.addCleanup(conn.close)
        try:
            conn.lookupByName("no-such-vm")
        except libvirt.libvirtError as exc:
            error = connection.translate(exc, "lookup")
        self.assertIsInstance(error, exceptions.VMGone)
        self.assertIn("lookup", str(error))

    def test_rpc_failures_are_disconnections(self):
        for code in (libvirt.VIR_ERR_SYSTEM_ERROR, libvirt.VIR_ERR_INTERNAL_ERROR,
                     libvirt.VIR_ERR_RPC):
            error = connection.translate(libvirt_error(code, libvirt.VIR_FROM_RPC), "x")
            self.assertIsInstance(error, exceptions.HypervisorUnavailable)
        error = connection.translate(
            libvirt_error(libvirt.VIR_ERR_INVALID_CONN, libvirt.VIR_FROM_NONE), "x")
        self.assertIsInstance(error, exceptions.HypervisorUnavailable)

    def test_everything_else_is_a_plain_hypervisor_error(self):
        for code, domain in ((libvirt.VIR_ERR_INTERNAL_ERROR, libvirt.VIR_FROM_QEMU),
                             (libvirt.VIR_ERR_OPERATION_INVALID, libvirt.VIR_FROM_DOMAIN),
                             (libvirt.VIR_ERR_NO_SUPPORT, libvirt.VIR_FROM_NONE)):
            error = connection.translate(libvirt_error(code, domain), "x")
            self.assertIs(exceptions.HypervisorError, type(error))


class BackoffTest(unittest.TestCase):

    def setUp(self):
        super().setUp()
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        self.clock = FakeClock()
        socket_path = os.path.join(self.dir.name, "nobody-listens")
        self.conn = connection.Connection(
            "qemu+unix:///system?socket=%s" % socket_path, backoff_min=1.0, backoff_max=4.0,
            events=False, clock=self.clock)
        self.addCleanup(self.conn.close)

    def _attempt(self):
        with self.assertRaises(exceptions.HypervisorUnavailable) as ctx:
            self.conn.get()
        return ctx.exception

    def test_unreachable_libvirtd_is_unavailable_with_the_cause_chained(self):
        error = self._attempt()
        self.assertIsInstance(error.__cause__, libvirt.libvirtError)
        self.assertEqual(1, self.conn.failures)

    def test_reopen_attempts_back_off_exponentially_without_sleeping(self):
        delays = []
        for _ in range(5):
            self._attempt()
            delays.append(self.conn.retry_delay())
            self._attempt()  # before the delay: fails fast, no new attempt
            self.clock.now += delays[-1]
        self.assertEqual([1.0, 2.0, 4.0, 4.0, 4.0], delays)
        self.assertEqual(5, self.conn.failures)

    def test_config_refuses_a_backoff_max_below_min(self):
        with self.assertRaises(exceptions.ConfigError):
            connection.Connection("test:///default", backoff_min=5, backoff_max=1)


class RetryTest(unittest.TestCase):

    def setUp(self):
        super().setUp()
        self.conn = connection.Connection("test:///default")
        self.addCleanup(self.conn.close)

    def test_a_disconnection_is_retried_once_on_a_fresh_connection(self):
        calls = []

        def flaky(conn):
            calls.append(conn)
            if len(calls) == 1:
                raise libvirt_error(libvirt.VIR_ERR_SYSTEM_ERROR, libvirt.VIR_FROM_RPC,
                                    "End of file while reading data")
            return conn.getHostname()

        self.conn.get()
        self.assertTrue(self.conn.call("hostname", flaky))
        self.assertEqual(2, len(calls))
        self.assertEqual(2, self.conn.opens)

    def test_other_errors_are_not_retried(self):
        calls = []

        def bad(conn):
            calls.append(conn)
            raise libvirt_error(libvirt.VIR_ERR_OPERATION_INVALID, libvirt.VIR_FROM_DOMAIN)

        self.conn.get()
        with self.assertRaises(exceptions.HypervisorError) as ctx:
            self.conn.call("bad", bad)
        self.assertNotIsInstance(ctx.exception, exceptions.HypervisorUnavailable)
        self.assertEqual(1, len(calls))
        self.assertEqual(1, self.conn.opens)

    def test_closed_connection_refuses_calls(self):
        self.conn.close()
        with self.assertRaises(exceptions.HypervisorUnavailable):
            self.conn.get()


class EventLoopTest(unittest.TestCase):

    def test_event_thread_runs_while_a_connection_is_open_and_stops_on_close(self):
        others = connection.EVENT_LOOP.users
        conn = connection.Connection("test:///default")
        conn.get()
        self.assertTrue(connection.EVENT_LOOP.running)
        self.assertEqual(others + 1, connection.EVENT_LOOP.users)
        conn.close()
        conn.close()  # idempotent
        self.assertEqual(others, connection.EVENT_LOOP.users)
        if others == 0:
            self.assertFalse(connection.EVENT_LOOP.running)
