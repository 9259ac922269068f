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

"""The C BenchEx's status reader (benchex/benchex.c) against benchex/status.py.

``status_harness.c`` compiles the C program's reader on its own; the same
lines go to it and to :func:`benchex.status.parse` (and the same reads to it
and :class:`benchex.status.StatusReader`), and the answers must be the same,
byte for byte the JSON the Python reporter writes to its ``--status-file``.
The lines are generated from a fixed seed: valid statuses with numbers in
every spelling JSON allows, escapes, duplicate and unknown keys, and
mutations of them (wrong types, out of range, truncated, not UTF-8).
The same harness holds the C reporter's ``--report-peer`` check and its
report lines against :mod:`benchex.wire`.
"""

import json
import os
import random
import shutil
import struct
import subprocess
import tempfile
import unittest

from benchex import status
from benchex import wire

HERE = os.path.dirname(os.path.abspath(__file__))
BENCHEX = os.path.join(HERE, "..", "..", "..", "benchex")

NUMBERS = ["0", "-0", "-0.0", "1", "1.5", "200.0", "1e16", "1e15", "123456789012345678",
           "1e-5", "0.0001", "1.7976931348623157e308", "5e-324", "0.1", "2.5E+3", "1e22",
           "0.30000000000000004", "9007199254740993", "12345.678e-2", "1e-7", "123e-20",
           "-3.25", "1e400", "-1", "1" + "0" * 400]
NOT_NUMBERS = ["true", "null", '"1"', "[1]", "{}", "01", "1.", ".5", "NaN", "Infinity", "-1e400"]
NAMES = ['"met"', '"missed"', '"no_sla"', '"congestion"', '"' + "a" * 32 + '"', '"\\u005f"',
         '"m\\u0065an"', '"mean"', '"p99"']
NOT_NAMES = ['"' + "a" * 33 + '"', '""', '"Met"', '"mean\\u0000"', '"caf\u00e9"', '"x\\ud800"',
             '"tab\\t"', "1", "null", "true", "[]"]
PEERS = ['"10.0.0.7:7788"', '"[2001:db8::1]:80"', '"FE80:0000:0000:0000:0002:c903:0003:1234"',
         '"2001:DB8::1"', '"\\u0031.2.3.4"', "null"]
NOT_PEERS = ['"host.example"', '"10.0.0.7:0"', '""', '"10.0.0.07"', '"fe80::1%eth0"', "7", "[]",
             '"1.2.3.4\\u0000"', '"' + "1" * 70 + '"', '"caf\u00e9"']


def peer_corpus(rnd, count):
    """--report-peer values: real addresses and GIDs in every spelling, and mutations of them."""
    pieces = ["10.0.0.7", "255.255.255.255", "0.0.0.0", "::", "::1", "2001:db8::1",
              "::ffff:10.0.0.7", "1:2:3:4:5:6:7::", "::1:2:3:4:5:6:7", "1::2::3",
              "fe80:0000:0000:0000:0002:c903:0003:1234", "FE80::2:C903:3:1234", "1.2.3",
              "1.2.3.4.5", "01.2.3.4", "256.1.1.1", "12345::", "::ffff:1.2.3.04", ":::"]
    out = []
    for _ in range(count):
        text = rnd.choice(pieces)
        r = rnd.random()
        if r < 0.2:
            text = "%s:%s" % (text, rnd.choice(["1", "80", "65535", "65536", "0", "080", ""]))
        elif r < 0.4:
            text = "[%s]:%s" % (text, rnd.choice(["1", "443", "65536", "x"]))
        elif r < 0.6:
            text = "".join(rnd.choice("0123456789abcdefABCDEF:.[]%x") for _ in
                           range(rnd.randint(0, 50)))
        elif r < 0.7:
            i = rnd.randrange(len(text) + 1)
            text = text[:i] + rnd.choice("0:.f]") + text[i:]
        elif r < 0.75:
            text = ":".join("%04x" % rnd.randrange(65536) for _ in range(8))
        out.append(text)
    return out


class Generator:

    def __init__(self, seed):
        self.rnd = random.Random(seed)

    def pick(self, good, bad, p_good=0.9):
        return self.rnd.choice(good if self.rnd.random() < p_good else bad)

    def number(self):
        return self.pick(NUMBERS, NOT_NUMBERS)

    def any(self, depth=0):
        r = self.rnd.random()
        if r < 0.3 or depth > 2:
            return self.rnd.choice(NUMBERS + NOT_NUMBERS)
        if r < 0.6:
            return self.rnd.choice(NAMES + NOT_NAMES[:-4])
        if r < 0.8:
            return self.obj([("k", lambda: self.any(depth + 1))] * self.rnd.randint(0, 2))
        return "[%s]" % ",".join(self.any(depth + 1) for _ in range(self.rnd.randint(0, 2)))

    def obj(self, members):
        items = [(k, make()) for k, make in members if self.rnd.random() < 0.95]
        if self.rnd.random() < 0.2:
            items.append(("extra", self.any()))
        if items and self.rnd.random() < 0.1:
            items.append((items[0][0], self.any()))    # a duplicate: the last one counts
        self.rnd.shuffle(items)
        ws = self.rnd.choice(["", " ", "\t", "\r\n"])
        body = ("," + ws).join('"%s"%s:%s%s' % (k, ws, ws, v) for k, v in items)
        return "{%s%s%s}" % (ws, body, ws)

    def member(self, members):
        r = self.rnd.random()
        return self.obj(members) if r < 0.85 else "null" if r < 0.95 else self.any()

    def line(self):
        sla = [("latency_us", self.number), ("threshold_pct", self.number),
               ("statistic", lambda: self.pick(NAMES[6:], NOT_NAMES + NAMES[:3]))]
        window = [("requests", lambda: self.pick(["0", "-0", "2400", "1" + "0" * 30],
                                                 ["-1", "1.0", "1e3", "true"])),
                  ("mean_us", self.number),
                  ("p99_us", lambda: self.pick(["null"] + NUMBERS, NOT_NUMBERS)),
                  ("interference_pct", lambda: self.pick(["null"] + NUMBERS, NOT_NUMBERS)),
                  ("peer", lambda: self.pick(PEERS, NOT_PEERS, 0.7))]
        cap = [("pct", self.number), ("limit_pct", self.number),
               ("reason", lambda: self.pick(NAMES, NOT_NAMES)),
               ("enforced", lambda: self.pick(["true", "false"], ["1", "null", '"yes"']))]
        text = self.obj([("v", lambda: self.pick(["1"], ["2", "1.0", "true", '"1"'], 0.95)),
                         ("state", lambda: self.pick(NAMES, NOT_NAMES)),
                         ("sla", lambda: self.member(sla)),
                         ("window", lambda: self.member(window)),
                         ("cap", lambda: self.member(cap))])
        line = text.encode("utf-8")
        r = self.rnd.random()
        if r < 0.03:
            line = line[:self.rnd.randrange(len(line))]
        elif r < 0.05:
            line += self.rnd.choice([b"\xff", b"\xed\xa0\x80", b"\xc0\xaf", b" x", b"{}"])
        elif r < 0.06:
            line = b"\xef\xbb\xbf" + line
        return line


def records(chunks):
    return b"".join(struct.pack(">I", len(c)) + c for c in chunks)


def python_json(obj):
    """What the Python reporter writes to its status file (json.dump, sort_keys)."""
    return json.dumps(obj, sort_keys=True) + "\n"


@unittest.skipUnless(shutil.which(os.environ.get("CC", "gcc")), "no C compiler")
class TestCStatusReader(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.dir = tempfile.mkdtemp(prefix="benchex-status-")
        cls.harness = os.path.join(cls.dir, "status_harness")
        subprocess.run([os.environ.get("CC", "gcc"), "-O2", "-Wall", "-Wextra", "-Werror",
                        "-I", BENCHEX, "-o", cls.harness,
                        os.path.join(HERE, "status_harness.c"), "-lm"],
                       check=True, capture_output=True, timeout=300)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, True)
        super().tearDownClass()

    def run_harness(self, mode, chunks):
        out = subprocess.run([self.harness, mode], input=records(chunks), capture_output=True,
                             timeout=120, check=True)
        return out.stdout.decode("utf-8")

    def assertSameAsPython(self, lines):
        got = self.run_harness("parse", lines).splitlines(True)
        self.assertEqual(len(lines), len(got))
        valid = 0
        for line, c_out in zip(lines, got):
            found = status.parse(line)
            valid += found is not None
            self.assertEqual("NONE\n" if found is None else python_json(found), c_out, line)
        return valid

    def test_lines_are_accepted_and_refused_as_status_py_does(self):
        gen = Generator(1)
        lines = [gen.line() for _ in range(20000)]
        valid = self.assertSameAsPython([line for line in lines if len(line) < 1024])
        self.assertGreater(valid, 100)   # the corpus holds valid statuses too

    def test_a_report_peer_is_taken_and_refused_as_wire_py_does(self):
        peers = peer_corpus(random.Random(4), 20000)
        got = self.run_harness("peer", [p.encode() for p in peers]).splitlines()
        self.assertEqual(len(peers), len(got))
        valid = 0
        for text, c_out in zip(peers, got):
            found = wire.parse_peer(text)
            valid += found is not None
            self.assertEqual("NONE" if found is None else text.lower(), c_out, text)
            if found is not None:       # the same address, however each spells it
                self.assertEqual(found, wire.parse_peer(c_out))
        self.assertGreater(valid, 1000)

    def test_both_reporters_write_the_same_report(self):
        rnd = random.Random(5)
        peers = [p for p in peer_corpus(rnd, 3000) if wire.parse_peer(p) is not None]
        vm = "3c9d6a52-0000-4000-8000-0000000000be"
        cases = [(rnd.randint(1, 10 ** 6), rnd.uniform(0.001, 1e7), rnd.uniform(0, 1e7),
                  rnd.uniform(0.001, 1e7), rnd.choice([None, vm]), rnd.choice(peers + [None]))
                 for _ in range(2000)]
        records_in = [("%d %r %r %r %s %s" % (n, m, sd, p, v or "-", peer or "-")).encode()
                      for n, m, sd, p, v, peer in cases]
        got = self.run_harness("report", records_in).splitlines(True)
        self.assertEqual(len(cases), len(got))
        for (n, m, sd, p, v, peer), c_line in zip(cases, got):
            source = wire.SOURCE_PROBE if v else wire.SOURCE_CHANNEL
            py = wire.parse(wire.encode(n, m, sd, p, vm=v, peer=peer).rstrip(b"\n"), source)
            c = wire.parse(c_line.encode().rstrip(b"\n"), source)
            self.assertEqual((py.n, py.vm, py.peer), (c.n, c.vm, c.peer), c_line)
            self.assertEqual(json.loads(c_line)["v"], 2 if peer else 1)
            for a, b in ((py.mean_us, c.mean_us), (py.std_us, c.std_us), (py.p99_us, c.p99_us)):
                self.assertAlmostEqual(a, b, delta=0.0011)

    def test_numbers_are_written_as_python_writes_them(self):
        rnd = random.Random(2)
        values = [rnd.uniform(0, 1e6) for _ in range(3000)]
        values += [10 ** rnd.uniform(-330, 308) for _ in range(3000)]
        values += [round(rnd.uniform(0, 1e5), rnd.randint(0, 4)) for _ in range(3000)]
        values += [float(rnd.randint(0, 10 ** rnd.randint(1, 22))) for _ in range(3000)]
        lines = [('{"v":1,"state":"met","window":{"requests":1,"mean_us":%r,'
                  '"interference_pct":%r}}' % (v, -v)).encode() for v in values]
        self.assertEqual(len(lines), self.assertSameAsPython(lines))

    def test_a_stream_is_framed_as_framing_py_frames_it(self):
        rnd = random.Random(3)
        for _ in range(200):
            parts = []
            for _ in range(rnd.randint(1, 30)):
                line = status.encode({"state": "met", "sla": None, "cap": None, "window": {
                    "requests": rnd.randint(0, 10 ** 6), "mean_us": rnd.uniform(0, 1e4),
                    "p99_us": None, "interference_pct": rnd.uniform(-50, 50)}})
                r = rnd.random()
                if r < 0.3:     # around the bound: 1015 to 1030 bytes
                    pad = rnd.randint(1015, 1030) - len(line) - len(',"p":""')
                    line = line[:-2] + (',"p":"%s"}\n' % ("x" * pad)).encode()
                elif r < 0.5:
                    line = bytes(rnd.randrange(256) for _ in range(rnd.randint(0, 3000)))
                elif r < 0.6:
                    line = b"\n" * rnd.randint(1, 3)
                parts.append(line)
            data = b"".join(parts)
            chunks, i = [], 0
            while i < len(data):
                k = rnd.choice([1, 2, 7, 100, 1023, 1024, 1025, 4096, 5000])
                chunks.append(data[i:i + k])
                i += k
            reader = status.StatusReader()
            for chunk in chunks:
                reader.feed(chunk)
            expected = "%d %d\n%s" % (reader.received, reader.skipped,
                                      python_json(reader.latest) if reader.latest else "NONE\n")
            self.assertEqual(expected, self.run_harness("feed", chunks))
