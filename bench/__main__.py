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

"""Run every ``bench/bench_*.py`` module's ``main()``, or the ones named.

    python -m bench                         # all
    python -m bench market                  # bench/bench_market.py only
    python -m bench sim --skip-paper        # flags go to the named benchmark(s)
    python -m bench market --intervals 500

Everything after the first option is passed to each named benchmark's
``main(argv)``; with no name given, all run with their defaults. A
benchmark during which the project logged an error, or which found it timed
a failure (:class:`bench.guard.ErrorPath`), stops the run with status 1:
its figures would be those of the failure.
"""

import gc
import importlib
import logging
import pathlib
import sys

from bench import guard


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    here = pathlib.Path(__file__).parent
    # The goals table first (make bench prints it), then the detailed benchmarks.
    names = sorted((p.stem[len("bench_"):] for p in here.glob("bench_*.py")),
                   key=lambda n: (n != "goals", n))
    first_opt = next((i for i, a in enumerate(argv) if a.startswith("-")), len(argv))
    wanted, flags = argv[:first_opt], argv[first_opt:]
    if flags and not wanted:
        print("options need a benchmark name: python -m bench NAME %s" % " ".join(flags),
              file=sys.stderr)
        return 2
    wanted = wanted or names
    for name in wanted:
        if name not in names:
            print("unknown benchmark %r; known: %s" % (name, ", ".join(names)), file=sys.stderr)
            return 2
        print("== bench_%s ==" % name, flush=True)
        # Objects an earlier benchmark left alive (bench_board's 10,000-host
        # boards, say) would otherwise be walked by every GC pass charged to
        # the ones after it: each benchmark starts with them frozen.
        # Thawed afterwards, so that what becomes garbage can still be collected.
        gc.collect()
        gc.freeze()
        try:
            with guard.Problems(logging.ERROR) as problems:
                rc = importlib.import_module("bench.bench_%s" % name).main(list(flags))
            problems.check("bench_%s" % name)
        except guard.ErrorPath as exc:
            print("%s: its figures are not measures" % exc, file=sys.stderr)
            return 1
        finally:
            gc.unfreeze()
        if rc:
            return rc
        print(flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
