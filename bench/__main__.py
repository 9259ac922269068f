"""Run every ``bench/bench_*.py`` module's ``main()``, or the ones named.

    python -m bench            # all
    python -m bench market     # bench/bench_market.py only
"""

import importlib
import pathlib
import sys


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    here = pathlib.Path(__file__).parent
    names = sorted(p.stem[len("bench_"):] for p in here.glob("bench_*.py"))
    wanted = [a for a in argv if not a.startswith("-")] or names
    for name in wanted:
        if name not in names:
            print("unknown benchmark %r; known: %s" % (name, ", ".join(names)), file=sys.stderr)
            return 2
        print("== bench_%s ==" % name, flush=True)
        importlib.import_module("bench.bench_%s" % name).main([])
        print(flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
