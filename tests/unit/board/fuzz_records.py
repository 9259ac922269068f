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

"""A coverage-guided fuzz target for the board's record readers (atheris, libFuzzer).

Run it for as long as you like (not part of ``make test``)::

    pip install atheris
    python -m tests.unit.board.fuzz_records -max_total_time=300 -max_len=9000 CORPUS_DIR

Arguments are libFuzzer's; an empty ``CORPUS_DIR`` is seeded with valid
records first (instrumenting takes a minute or two before the first run). An
input is one stored value for :meth:`HostReport.from_json
<resex_libvirt.board.report.HostReport.from_json>`, and also up to four
board rows (``key\\nvalue``, separated by NUL bytes) for
:class:`~resex_libvirt.board.backend.RecordDecoder`. A crash is any
exception but :class:`~resex_libvirt.board.report.InvalidReport` from the
parser, an error logged by the decoder (its last-resort guard caught
something), or an accepted record that breaks :func:`check_report`.
``tests/unit/board/test_untrusted_records.py`` runs :func:`one_input` on a
few hundred inputs, so the target cannot rot.
"""

import json
import logging
import math
import os
import sys

from resex_libvirt.board import backend
from resex_libvirt.board import report as report_mod
from tests.unit.board import reports


def check_report(rec, host=None):
    """Raise AssertionError unless ``rec`` is a record every reader can use as it is."""
    assert host is None or rec.host == host, (rec.host, host)
    for text in [rec.host, rec.agent_version, rec.state] + [p.project for p in rec.projects]:
        text.encode("utf-8")  # no lone surrogate: printable, loggable, storable
    for name in ("ts", "link_capacity_bytes_per_s", "link_utilisation", "untaxable_utilisation",
                 "cpu_price", "io_price", "latency_inflation_pct", "sensitive_io_share",
                 "heavy_io_share", "congestion_index"):
        value = getattr(rec, name)
        assert type(value) is float and math.isfinite(value) and value >= 0.0, (name, value)
    assert rec.congestion_index <= max(report_mod.MAX_INFLATION_PCT,
                                       report_mod.MAX_VM_INFLATION_PCT)
    for name in ("epoch", "vms", "sensitive_vms", "heavy_io_vms", "inflation_reporters"):
        value = getattr(rec, name)
        assert type(value) is int and 0 <= value <= report_mod.MAX_COUNT, (name, value)
    # What a reader accepts, an agent can write back (no NaN, no surrogates).
    again = report_mod.HostReport.from_dict(json.loads(rec.to_json()))
    assert again == rec, (again, rec)


class _Errors(logging.Handler):
    """Collects ERROR records: the decoder's last-resort guard caught a parser bug."""

    def __init__(self):
        super().__init__(logging.ERROR)
        self.records = []

    def emit(self, record):
        self.records.append(record)


def one_input(data):
    """Feed ``data`` to every reader of board records; raise only on a reader's bug."""
    try:
        rec = report_mod.HostReport.from_json(data)
    except report_mod.InvalidReport:
        pass
    else:
        check_report(rec)
    rows = []
    for chunk in data.split(b"\0")[:4]:
        key, _, value = chunk.partition(b"\n")
        rows.append((key.decode("utf-8", "replace"), value))
    errors = _Errors()
    backend.LOG.addHandler(errors)
    try:
        decoder = backend.RecordDecoder("fuzz")
        for host, rec in decoder.decode(rows).items():
            check_report(rec, host)
        for host, rec in decoder.decode_changes(rows[::-1]).items():
            if rec is not None:
                check_report(rec, host)
    finally:
        backend.LOG.removeHandler(errors)
    assert not errors.records, [r.getMessage() for r in errors.records]


def write_seeds(directory):
    """Valid records (alone, and as rows) in an empty corpus ``directory`` to mutate from."""
    if not os.path.isdir(directory) or os.listdir(directory):
        return
    records = [reports.make("c1").to_json().encode(),
               reports.make("c1", vms=3, projects=[{"project": "p", "vms": 2}]).to_json().encode()]
    seeds = records + [b"c1\n" + records[0] + b"\0c2\n" + records[1]]
    for i, seed in enumerate(seeds):
        with open(os.path.join(directory, "seed-%d" % i), "wb") as f:
            f.write(seed)


def main(argv):
    try:
        import atheris
    except ImportError:
        print("atheris is not installed (pip install atheris; it needs a wheel for this "
              "Python or clang to build one); the hypothesis tests in "
              "tests/unit/board/test_untrusted_records.py cover the same readers",
              file=sys.stderr)
        return 2
    for arg in argv[1:]:
        if not arg.startswith("-"):
            write_seeds(arg)  # a corpus directory
    logging.disable(logging.WARNING)  # dropped records are the normal case here
    atheris.instrument_all()
    atheris.Setup(argv, one_input)
    atheris.Fuzz()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
