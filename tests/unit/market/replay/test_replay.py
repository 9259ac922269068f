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

"""The market decides exactly as recorded, interval by interval.

``streams.json.gz`` (written by ``make_fixture.py``) holds interval streams
with VMs joining, leaving and changing SLA mid-epoch, under FreeMarket and
IOShares, and what the market answered when they were recorded. Any change
of the market's internals must give the same caps, weights and rates every
interval, and the same balances and epoch summaries, to within 1e-9
relative.
"""

import gzip
import json
import math

import pytest

from tests.unit.market.replay import make_fixture

REL = 1e-9


def _streams():
    with gzip.open(make_fixture.FIXTURE, "rt", encoding="utf-8") as f:
        return json.load(f)


STREAMS = _streams()


def _close(a, b):
    if isinstance(a, (bool, str)) or a is None or b is None:
        return a == b
    return math.isclose(a, b, rel_tol=REL, abs_tol=1e-12)


def _same(got, want):
    if isinstance(want, list):
        return (isinstance(got, list) and len(got) == len(want)
                and all(_same(g, w) for g, w in zip(got, want)))
    if isinstance(want, dict):
        return got.keys() == want.keys() and all(_same(got[k], want[k]) for k in want)
    return _close(got, want)


@pytest.mark.parametrize("stream", STREAMS, ids=lambda s: "%s-seed%d" % (s["policy"], s["seed"]))
def test_replayed_stream_gives_the_recorded_decisions_balances_and_epochs(stream):
    market = make_fixture.new_market(stream)
    expected = stream["expected"]
    state = {}
    balances = dict((i, rows) for i, rows in expected["balances"])
    epochs = dict((i, rec) for i, rec in expected["epochs"])
    for i, (rec, changed) in enumerate(zip(stream["steps"], expected["changes"])):
        for vm in rec["leave"]:
            market.remove(vm)
            state.pop(vm, None)
        for d in rec["join"]:
            market.add(make_fixture.spec_of(d))
        samples, windows = make_fixture.inputs(rec)
        market.step(samples, windows)
        for vm, cap, weight, rate in changed:
            state[vm] = [cap, weight, rate]
        assert sorted(market.specs) == sorted(state), "interval %d: VMs differ" % i
        for vm, want in state.items():
            d = market.decision(vm)
            got = [d.cap_pct, d.weight, d.rate]
            assert _same(got, want), "interval %d, %s: %r != %r" % (i, vm, got, want)
        if i in balances:
            got = sorted([vm, b] for vm, b in market.balances().items())
            assert _same(got, balances[i]), "interval %d: balances differ" % i
        if rec["end_epoch"]:
            got = make_fixture.epoch_record(market.end_epoch())
            got = json.loads(json.dumps(got))
            assert _same(got, epochs[i]), "interval %d: epoch summary differs" % i


def test_the_fixture_has_joins_leaves_taxes_and_thousands_of_intervals():
    intervals = sum(len(s["steps"]) for s in STREAMS)
    leaves = sum(len(r["leave"]) for s in STREAMS for r in s["steps"])
    late_joins = sum(len(r["join"]) for s in STREAMS for r in s["steps"][1:])
    taxes = sum(len(e["taxes"]) for s in STREAMS for _i, e in s["expected"]["epochs"])
    assert {s["policy"] for s in STREAMS} == {"free_market", "io_shares"}
    assert intervals >= 6000 and leaves >= 10 and late_joins >= 10 and taxes > 0
