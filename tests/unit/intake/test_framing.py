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

"""Newline framing never buffers more than one bounded line."""

import unittest

from hypothesis import given
from hypothesis import strategies as st

from benchex import framing

lines_st = st.lists(st.binary(max_size=80).map(lambda b: b.replace(b"\n", b"")), max_size=30)


def chunked(data, cuts):
    points = sorted({c % (len(data) + 1) for c in cuts})
    out, last = [], 0
    for p in points + [len(data)]:
        out.append(data[last:p])
        last = p
    return out


class TestLineFramer(unittest.TestCase):

    @given(lines_st, st.lists(st.integers(0, 10_000), max_size=20))
    def test_lines_come_out_whole_however_the_stream_is_cut(self, lines, cuts):
        data = b"".join(x + b"\n" for x in lines)
        f = framing.LineFramer(max_bytes=128)
        out = []
        for piece in chunked(data, cuts):
            out.extend(f.feed(piece))
        self.assertEqual(lines, out)
        self.assertEqual(0, f.pending)

    @given(st.lists(st.binary(max_size=3000), max_size=20), st.integers(2, 700))
    def test_pending_bytes_stay_below_the_limit(self, pieces, limit):
        f = framing.LineFramer(max_bytes=limit)
        for piece in pieces:
            for out in f.feed(piece):
                self.assertTrue(out is framing.TOO_LONG or len(out) + 1 <= limit)
            self.assertLess(f.pending, limit)

    def test_a_too_long_line_is_reported_once_and_the_next_line_survives(self):
        f = framing.LineFramer(max_bytes=16)
        out = f.feed(b"x" * 10)
        out += f.feed(b"y" * 10)
        out += f.feed(b"z" * 100_000)
        out += f.feed(b"tail\nok\n")
        self.assertEqual([framing.TOO_LONG, b"ok"], out)

    def test_a_line_of_exactly_the_limit_with_its_newline_is_accepted(self):
        f = framing.LineFramer(max_bytes=8)
        self.assertEqual([b"1234567", framing.TOO_LONG], f.feed(b"1234567\n12345678\n"))
