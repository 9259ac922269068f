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

"""Latency intake throughput: reports per second on one core.

Three figures:

* ``store``: validated reports per second through the parser and the store
  alone (:meth:`ReportStore.offer`, one thread), valid and malformed lines;
* ``probe socket``: reports per second through the real selector thread,
  sent by a separate process over the probe socket (so the sender does not
  share the intake's core or GIL; the figure includes that process's start);
* ``channel``: the same over a per-VM channel (this process plays QEMU).

Rate limits are lifted for the measurement. Run: ``python -m bench.bench_intake``.
"""

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

from benchex import wire
from resex_agent.intake import IntakeParams
from resex_agent.intake import LatencyIntake
from resex_agent.intake import params as params_mod
from resex_agent.intake import store as store_mod
from resex_libvirt.hypervisor import base
from resex_libvirt import sla as sla_mod

VM = "5e1f0c9a-0000-4000-8000-00000000be0c"
OTHER = "5e1f0c9a-0000-4000-8000-00000000be0d"

_SENDER = """
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
s.sendall(sys.stdin.buffer.read())
s.close()
"""


def _params(**kw):
    return IntakeParams(rate_limit_per_s=1e4, rate_burst=100000, log_interval_s=3600.0, **kw)


def _slas():
    return {VM: sla_mod.SLA(latency_sla_us=100.0), OTHER: sla_mod.SLA(latency_sla_us=100.0)}


def bench_store(n):
    store = store_mod.ReportStore(params_mod.IntakeParams(
        rate_limit_per_s=1e9, rate_burst=10 ** 9, log_interval_s=3600.0), time.monotonic)
    store.set_vms(_slas())
    lines = [wire.encode(100 + i % 50, 200.0 + i % 7, 3.0, 250.0).rstrip(b"\n")
             for i in range(1000)]
    bad = [b'{"v":1,"n":1,"mean_us":NaN,"std_us":0,"p99_us":1}', b"\xff\xfe", b"[[[[",
           wire.encode(1, 1.0, 0.0, 1.0, vm=OTHER).rstrip(b"\n")]
    t0 = time.perf_counter()
    for i in range(n):
        store.offer(wire.SOURCE_CHANNEL, lines[i % 1000], vm=VM)
    valid_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for i in range(n):
        store.offer(wire.SOURCE_CHANNEL, bad[i % 4], vm=VM)
    bad_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(200):
        store.windows()
    windows_us = (time.perf_counter() - t0) / 200 * 1e6
    return n / valid_s, n / bad_s, windows_us


def _wait_accepted(intake, vm, n, timeout=120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if intake.stats().get(vm, {}).get("accepted", 0) >= n:
            return time.perf_counter()
        time.sleep(0.001)
    raise RuntimeError("intake accepted %s of %d" % (intake.stats().get(vm), n))


def bench_probe_socket(n, workdir):
    path = os.path.join(workdir, "probe.sock")
    intake = LatencyIntake(_params(probe_socket_path=path))
    intake.start()
    try:
        intake.sync({v: base.VMInfo(uuid=v, name=v[:8], sla=s) for v, s in _slas().items()})
        payload = b"".join(wire.encode(10, 200.0 + i % 9, 2.0, 220.0, vm=VM) for i in range(n))
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-c", _SENDER, path], stdin=subprocess.PIPE)
        proc.communicate(payload, timeout=120)
        t1 = _wait_accepted(intake, VM, n)
        return n / (t1 - t0)
    finally:
        intake.close()


def bench_channel(n, workdir):
    path = os.path.join(workdir, "vm.chan")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    intake = LatencyIntake(_params(probe_socket_path=None, channel_retry_s=0.01))
    intake.start()
    try:
        intake.sync({VM: base.VMInfo(uuid=VM, name="vm", sla=sla_mod.SLA(latency_sla_us=100.0),
                                     latency_channel=path)})
        conn, _ = listener.accept()
        payload = b"".join(wire.encode(10, 200.0 + i % 9, 2.0, 220.0) for i in range(n))
        t0 = time.perf_counter()
        sender = threading.Thread(target=conn.sendall, args=(payload,))
        sender.start()
        t1 = _wait_accepted(intake, VM, n)
        sender.join()
        conn.close()
        return n / (t1 - t0)
    finally:
        intake.close()
        listener.close()


def main(argv=None):
    parser = argparse.ArgumentParser(prog="bench_intake", description=__doc__.split("\n")[0])
    parser.add_argument("--reports", type=int, default=100_000)
    args = parser.parse_args(argv)
    n = args.reports
    valid, bad, windows_us = bench_store(n)
    print("intake store (parse+validate+window, 1 thread): %.0f valid reports/s, "
          "%.0f malformed/s; windows() %.1f us" % (valid, bad, windows_us))
    workdir = tempfile.mkdtemp(prefix="bench-intake-")
    try:
        print("intake via probe socket (selector thread, sender in another process): "
              "%.0f reports/s" % bench_probe_socket(n, workdir))
        print("intake via a VM channel (selector thread): %.0f reports/s"
              % bench_channel(n, workdir))
    finally:
        shutil.rmtree(workdir, True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
