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

"""A minimal agent process for the lab: the real actuator, journal and signal path.

``python -m tests.lab.actuator --uri URI --journal PATH --uuid UUID --cap PCT``
does what the agent does around its loop and nothing else: reconcile the
journal at start, ``journal.remember(uuid, hyp.get_knobs(uuid))`` before the
first ``hyp.set_knobs(uuid, cap, weight)``, print ``ready``, then wait; on
SIGTERM/SIGINT ``journal.restore_all(hyp)`` and exit 0. The lab sends it
SIGTERM (restore must happen) or SIGKILL (the next start must reconcile).
"""

import argparse
import logging
import signal
import sys
import threading

from resex_agent import journal as journal_mod
from resex_libvirt.hypervisor import libvirt_host


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--uri", default=libvirt_host.DEFAULT_URI)
    parser.add_argument("--journal", required=True)
    parser.add_argument("--uuid", required=True)
    parser.add_argument("--cap", type=float, required=True)
    parser.add_argument("--weight", type=int, default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="actuator %(levelname)s %(name)s: %(message)s")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *a: stop.set())
    signal.signal(signal.SIGINT, lambda *a: stop.set())
    hyp = libvirt_host.LibvirtHypervisor(args.uri, backoff_min=0.2, backoff_max=2.0)
    try:
        journal = journal_mod.Journal(args.journal)
        journal.reconcile(hyp)
        hyp.vms()
        journal.remember(args.uuid, hyp.get_knobs(args.uuid))
        hyp.set_knobs(args.uuid, args.cap, args.weight)
        print("ready", flush=True)
        while not stop.wait(0.2):
            pass
        failed = journal.restore_all(hyp)
        print("restored" if not failed else "failed %s" % failed, flush=True)
        return 0 if not failed else 1
    finally:
        hyp.close()


if __name__ == "__main__":
    sys.exit(main())
