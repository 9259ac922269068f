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

"""The per-interval rules' paths for a few rows in Python floats: the columns' bits."""

import types
import unittest
from unittest import mock

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
import numpy as np

from resex_libvirt.market import market as market_mod
from resex_libvirt.market import policy
from resex_libvirt.market import settle

_VALUES = st.one_of(st.floats(-1e6, 1e6, width=64), st.sampled_from([0.0, -0.0, np.nan]),
                    st.sampled_from([1.0, 2.0, 100.0, 200.0]))


def _bits(values):
    return [np.float64(v).tobytes() for v in values]


class InterferenceRowsTest(unittest.TestCase):
    """``market.interference_rows`` gives the column rule's values and learned deviations."""

    @settings(max_examples=400, deadline=None)
    @given(st.integers(1, market_mod.SMALL_ROWS).flatmap(lambda n: st.tuples(
        st.lists(st.integers(0, 4), min_size=n, max_size=n),
        st.lists(_VALUES, min_size=n, max_size=n),
        st.lists(_VALUES, min_size=n, max_size=n),
        st.lists(st.floats(1e-3, 1e6, width=64), min_size=n, max_size=n),
        st.lists(st.one_of(st.floats(0.0, 500.0), st.just(np.nan)), min_size=n, max_size=n),
        st.lists(_VALUES, min_size=n, max_size=n))))
    def test_the_same_bits_as_the_columns(self, case):
        count, mean, std, base, threshold, learned = case
        n = len(count)
        args = (np.array(count, dtype=np.int64), np.array(mean), np.array(std),
                np.array(base), np.array(threshold))
        rows = np.arange(n, dtype=np.intp)
        columns = types.SimpleNamespace(table=types.SimpleNamespace(base_std=np.array(learned)),
                                        _odd_base=False)
        want = market_mod.Market._intf_columns(columns, rows, *args, None)
        small_std = np.array(learned)
        got = market_mod.interference_rows(*args, small_std, rows)
        if any(s == 0.0 and np.signbit(s) for s in std):
            # A deviation of -0.0 (never a window's): the columns decide.
            self.assertIsNone(got)
            self.assertEqual(_bits(learned), _bits(small_std))
            return
        self.assertEqual(_bits(want[0]), _bits(got[0]))
        self.assertEqual(_bits(want[1]), _bits(got[1]))
        self.assertEqual(_bits(columns.table.base_std), _bits(small_std))


class BandRowsTest(unittest.TestCase):
    """``settle.band`` on a few rows gives the columns' bits."""

    @settings(max_examples=300, deadline=None)
    @given(st.integers(1, settle.SMALL_ROWS).flatmap(lambda n: st.tuples(
           st.lists(st.one_of(st.floats(0.0, 500.0), st.sampled_from([0.0, np.nan, np.inf])),
                    min_size=n, max_size=n),
           st.lists(st.one_of(st.floats(0.0, 1e6), st.sampled_from([np.nan, np.inf, 0.0])),
                    min_size=n, max_size=n))),
           st.floats(0.05, 1.0), st.floats(0.0, 10.0), st.floats(0.0, 1.0))
    def test_the_same_bits_as_the_columns(self, case, target, noise_z, hold_below):
        threshold, sd = case
        opts = policy.configure(settle.OPTIONS, {"target": target, "noise_z": noise_z,
                                                 "hold_below": min(hold_below, target)})
        step = types.SimpleNamespace(vms=types.SimpleNamespace(threshold_pct=np.array(threshold)),
                                     state=types.SimpleNamespace(st_sd=np.array(sd)))
        rows = settle.band(step, opts)
        with mock.patch.object(settle, "SMALL_ROWS", 0), np.errstate(all="ignore"):
            columns = settle.band(step, opts)
        for got, want in zip(rows, columns):
            self.assertEqual(_bits(want), _bits(got))
