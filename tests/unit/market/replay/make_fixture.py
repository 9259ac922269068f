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

"""Record interval streams and the market's decisions into ``streams.json.gz``.

    python -m tests.unit.market.replay.make_fixture

Each stream drives one :class:`~resex_libvirt.market.market.Market` through
thousands of intervals under one policy: VMs with and without a latency SLA,
with reservations, limits and unequal shares, joining and leaving mid-epoch,
some intervals without a sample for some VMs, latency windows calm and
interfered, epochs closing. The file keeps the inputs (so the replay does not
depend on this generator) and what the market answered: the decisions that
changed each interval, every balance every ``BALANCE_EVERY`` intervals, and
each epoch's summary. ``test_replay`` feeds the same inputs to the market of
today and requires the same answers.

Regenerate only when a change of the market's *behaviour* is intended.
"""

import gzip
import json
import pathlib
import random

from resex_libvirt.market import market as market_mod
from resex_libvirt.market import records
from resex_libvirt import sla as sla_mod
from resex_research import policy_catalog

HERE = pathlib.Path(__file__).parent
FIXTURE = HERE / "streams.json.gz"
BALANCE_EVERY = 25
#: (policy, seed, intervals, intervals per epoch, VMs at the start)
STREAMS = (("free_market", 1, 3000, 250, 10),
           ("io_shares", 2, 3000, 250, 10),
           ("io_shares", 3, 1500, 300, 20))


def _sla(rng):
    kind = rng.random()
    if kind < 0.4:
        return {"latency_sla_us": rng.choice((200.0, 209.0, 350.0)),
                "interference_threshold_pct": rng.choice((5.0, 10.0, 20.0))}
    if kind < 0.6:
        return {"reservation_pct": rng.choice((5.0, 20.0)),
                "limit_pct": rng.choice((50.0, 80.0, None)), "shares": rng.choice((50, 200))}
    if kind < 0.7:
        return {"io_class": "bulk"}
    return {}


def make_stream(policy, seed, intervals, ipe, n_start):
    """The inputs of one stream: a list of interval records (plain JSON)."""
    rng = random.Random(seed)
    alive = {}
    counter = 0
    steps = []

    def join():
        nonlocal counter
        counter += 1
        vm = "vm-%03d" % counter
        alive[vm] = {"vm": vm, "id": counter, "vcpus": rng.choice((1, 1, 1, 2)), "sla": _sla(rng),
                     "heavy": rng.random() < 0.3}
        return alive[vm]

    first = [join() for _ in range(n_start)]
    for i in range(intervals):
        rec = {"join": [], "leave": [], "samples": [], "windows": []}
        if i == 0:
            rec["join"] = first
        else:
            if rng.random() < 0.01:
                rec["join"].append(join())
            if rng.random() < 0.008 and len(alive) > 4:
                vm = rng.choice(sorted(alive))
                del alive[vm]
                rec["leave"].append(vm)
            if rng.random() < 0.003:
                # An SLA change of a running VM (re-adopted with new bounds).
                vm = rng.choice(sorted(alive))
                alive[vm]["sla"] = _sla(rng)
                rec["join"].append(dict(alive[vm]))
        phase = (i // 300) % 3   # calm, interfered, mixed
        for vm, d in sorted(alive.items()):
            if rng.random() < 0.05:
                continue   # no sample this interval
            full = 100.0 * d["vcpus"]
            cpu = float(rng.randrange(0, int(full) + 1)) if rng.random() < 0.8 else full
            if d["heavy"]:
                tx = rng.randrange(0, 2048) * 1024 + rng.choice((0, 0, 0, 100))
            else:
                tx = rng.randrange(0, 96) * 1024
            rec["samples"].append([d["id"], cpu, tx])
            if d["sla"].get("latency_sla_us") and rng.random() < 0.9:
                base = d["sla"]["latency_sla_us"]
                spread = {0: 0.04, 1: 0.6, 2: 0.2}[phase]
                mean = round(base * (1.0 + rng.uniform(-0.03, spread)), 1)
                std = round(rng.uniform(1.0, 30.0 if phase else 5.0), 1)
                count = rng.choice((0, 1, 8, 16, 64)) if rng.random() < 0.05 else 16
                rec["windows"].append([d["id"], count, mean, std])
        rec["end_epoch"] = (i + 1) % ipe == 0
        steps.append(rec)
    return {"policy": policy, "seed": seed, "intervals_per_epoch": ipe,
            "pcpus": max(4, n_start // 2), "steps": steps}


def spec_of(d):
    return records.VMSpec(vm=d["vm"], vcpus=d["vcpus"], sla=sla_mod.SLA(**d["sla"]))


#: The streams were recorded under the paper's rules; where the policies keep
#: them under a variant name (the default having moved on), replay that one.
PAPER_VARIANTS = {"free_market": "free_market_paper", "io_shares": "io_shares_paper"}


def policy_name(recorded):
    variant = PAPER_VARIANTS.get(recorded)
    return variant if variant in policy_catalog.names() else recorded


def new_market(stream, name=None):
    params = market_mod.MarketParams(interval_s=0.001,
                                     intervals_per_epoch=stream["intervals_per_epoch"],
                                     pcpus=stream["pcpus"])
    return market_mod.Market(params, policy_catalog.load(name or policy_name(stream["policy"])))


def inputs(rec):
    """``(samples, windows)`` of one interval, as the market takes them."""
    samples = {}
    for vm_id, cpu, tx in rec["samples"]:
        vm = "vm-%03d" % vm_id
        samples[vm] = records.Sample(vm, 0.0, cpu, tx, -(-tx // 1024))
    windows = {}
    for vm_id, count, mean, std in rec["windows"]:
        windows["vm-%03d" % vm_id] = records.LatencyWindow(count, mean, std, mean * 1.3)
    return samples, windows


def epoch_record(summary):
    return {"epoch": summary.epoch, "intervals": summary.intervals,
            "link_utilisation": _g(summary.link_utilisation),
            "cpu_price": _g(summary.cpu_price), "io_price": _g(summary.io_price),
            "latency_inflation_pct": _g(summary.latency_inflation_pct),
            "taxes": [[t["victim"], t["interferer"], _g(t["rate"])] for t in summary.taxes],
            "vms": sorted([[v.vm] + [_g(x) for x in (
                v.allocation, v.spent_cpu, v.spent_io, v.balance, v.rate, v.cap_mean,
                v.cap_min, v.cpu_pct_mean, v.tx_mtus, v.tx_bytes, v.interference_pct)]
                + [v.sensitive, v.io_class] for v in summary.vms])}


def _g(x):
    """A float to 12 significant digits (the replay compares within 1e-9)."""
    return x if x is None or isinstance(x, (int, str)) else float("%.12g" % x)


def record(stream):
    """Run ``stream`` through today's market; the expected answers."""
    market = new_market(stream)
    last = {}
    changes, balances, epochs = [], [], []
    for i, rec in enumerate(stream["steps"]):
        for vm in rec["leave"]:
            market.remove(vm)
            last.pop(vm, None)
        for d in rec["join"]:
            market.add(spec_of(d))
        samples, windows = inputs(rec)
        decisions = market.step(samples, windows)
        changed = []
        for vm, dec in sorted(decisions.items()):
            cur = [_g(dec.cap_pct), dec.weight, _g(dec.rate)]
            if last.get(vm) != cur:
                changed.append([vm] + cur)
                last[vm] = cur
        changes.append(changed)
        if i % BALANCE_EVERY == 0:
            balances.append([i, sorted([vm, _g(b)] for vm, b in market.balances().items())])
        if rec["end_epoch"]:
            epochs.append([i, epoch_record(market.end_epoch())])
    return {"changes": changes, "balances": balances, "epochs": epochs}


def main():
    out = []
    for policy, seed, intervals, ipe, n in STREAMS:
        stream = make_stream(policy, seed, intervals, ipe, n)
        stream["expected"] = record(stream)
        out.append(stream)
    with gzip.open(FIXTURE, "wt", encoding="utf-8") as f:
        json.dump(out, f, separators=(",", ":"))
    print("wrote %s (%d bytes)" % (FIXTURE, FIXTURE.stat().st_size))


if __name__ == "__main__":
    main()
