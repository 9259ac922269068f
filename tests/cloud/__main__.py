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


"""``python -m tests.cloud up|down|status|test`` (``make cloud``, ``make cloud-down``,
``make cloud-test``)."""

import argparse
import logging
import sys
import time

from tests.cloud import cloud as cloud_mod


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tests.cloud")
    parser.add_argument("command", choices=("up", "down", "status", "test"))
    parser.add_argument("--nodes", type=int, default=len(cloud_mod.NODES),
                        help="compute nodes (1 or 2)")
    parser.add_argument("--no-install", action="store_true",
                        help="skip the Debian packages (tools/install-deb.sh)")
    parser.add_argument("--purge", action="store_true",
                        help="down: remove the logs too (the whole state directory)")
    parser.add_argument("scenarios", nargs="*", metavar="SCENARIO",
                        help="test: these scenarios only, in this order (default: all)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    # `test` owns its cloud for its run: the lab lock dies with it. `up`
    # leaves the lock held until `down`.
    cloud = cloud_mod.Cloud(nodes=cloud_mod.NODES[:args.nodes],
                            lock_with_caller=args.command == "test")
    if args.command == "up":
        try:
            cloud.up(install=not args.no_install)
            from tests.cloud import guests
            guests.publish(cloud)
        except Exception:
            print("bring-up failed; the state so far (make cloud-down stops it):",
                  file=sys.stderr)
            print("\n".join(cloud.status_lines()), file=sys.stderr)
            raise
        print("\n".join(cloud.status_lines()))
        print("cloud up in %.0f s, %.0f MiB RSS; state and logs under %s"
              % (cloud.figures["bring_up_s"], cloud.rss_mib(), cloud.dir))
        print("try: %s" % cloud.openstack_hint())
        return 0
    if args.command == "status":
        lines = cloud.status_lines()
        print("\n".join(lines) if lines else "no cloud under %s" % cloud.dir)
        return 0
    if args.command == "down":
        t0 = time.monotonic()
        cloud.down(keep_logs=not args.purge)
        print("cloud down in %.0f s" % (time.monotonic() - t0))
        return 0
    from tests.cloud import scenarios
    unknown = set(args.scenarios) - set(scenarios.ORDER)
    if unknown:
        parser.error("no scenario %s (%s)" % (", ".join(sorted(unknown)),
                                              ", ".join(scenarios.ORDER)))
    return scenarios.main(cloud, tuple(args.scenarios) or scenarios.ORDER)


if __name__ == "__main__":
    sys.exit(main())
