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

"""The model's calibration against the paper, as figures anyone can re-measure.

Three observations of the paper fix the model (:mod:`~resex_libvirt.sim.model`):

* Fig. 1: the 64 KB server alone is "highly stable at around 209 us";
* Figs. 3-4: capping the interfering VM's CPU at ``100 / buffer ratio``
  (buffer ratio = its buffer over the reporting VM's 64 KB: 2 to 32 for
  128 KB to 2 MB) brings the reporting VM back to its base latency;
* Figs. 1, 5, 7: an uncapped 2 MB interferer inflates that latency a lot.

:func:`measure` runs the packaged scenarios with *fixed* caps (no market)
and returns these figures; ``tests/unit/research/test_calibration.py`` asserts
them and ``resex-sim calibrate`` prints them.
"""

from resex_libvirt.sim import host as host_mod
from resex_libvirt.sim import run_output
from resex_libvirt.sim import scenario as scenario_mod

REPORTING = "vm64k"
BASE = "paper_64k_alone"
#: (buffer ratio, scenario, interfering VM) of Fig. 3 and Fig. 4.
RATIOS = ((2, "paper_64k_vs_128k", "vm128k"), (4, "paper_64k_vs_256k", "vm256k"),
          (8, "paper_64k_vs_512k", "vm512k"), (16, "paper_64k_vs_1m", "vm1m"),
          (32, "paper_64k_vs_2m", "vm2m"))


def run_fixed(scenario, caps, duration_s=None, model=None):
    """Run ``scenario`` with fixed ``caps`` ({VM name: percent}); per-VM results."""
    if duration_s is not None:
        scenario = scenario.with_duration(duration_s)
    host = host_mod.SimHost(scenario, model=model)
    for name, cap in caps.items():
        host.set_knobs(host.uuid_of(name), cap, host_mod.DEFAULT_WEIGHT)
    host.advance_to(scenario.duration_s)
    return host.results()


def measure(duration_s=5.0, model=None):
    """The calibration figures: reporting VM's latency stats per configuration."""
    base = run_fixed(scenario_mod.load(BASE), {}, duration_s, model)[REPORTING]
    out = {"base": run_output.latency_stats(base["latencies_us"]), "ratios": []}
    for ratio, name, interferer in RATIOS:
        sc = scenario_mod.load(name)
        capped = run_fixed(sc, {interferer: 100.0 / ratio}, duration_s, model)
        uncapped = run_fixed(sc, {}, duration_s, model)
        out["ratios"].append({
            "ratio": ratio, "scenario": name, "interferer": interferer,
            "cap_pct": 100.0 / ratio,
            "capped": run_output.latency_stats(capped[REPORTING]["latencies_us"]),
            "uncapped": run_output.latency_stats(uncapped[REPORTING]["latencies_us"]),
            "interferer_capped_mb_s": capped[interferer]["throughput_mb_s"],
            "interferer_uncapped_mb_s": uncapped[interferer]["throughput_mb_s"],
        })
    return out


def format_table(data):
    base = data["base"]
    lines = [run_output.table(
        "Fig. 1: the 64 KB server alone (paper: stable near 209 us)",
        ["case", "mean us", "p50 us", "p99 us", "std us"],
        [["alone", run_output.fmt(base["mean_us"]), run_output.fmt(base["p50_us"]),
          run_output.fmt(base["p99_us"]), run_output.fmt(base["std_us"])]])]
    rows = []
    for r in data["ratios"]:
        c, u = r["capped"], r["uncapped"]
        rows.append([
            "%d (%s)" % (r["ratio"], r["interferer"][2:].upper()), "%.2f" % r["cap_pct"],
            run_output.fmt(c["mean_us"]),
            "%+.1f%%" % (100.0 * (c["mean_us"] / base["mean_us"] - 1)),
            run_output.fmt(c["std_us"]), run_output.fmt(u["mean_us"]),
            "%+.1f%%" % (100.0 * (u["mean_us"] / base["mean_us"] - 1)),
            "%.0f" % r["interferer_capped_mb_s"], "%.0f" % r["interferer_uncapped_mb_s"]])
    lines.append("")
    lines.append(run_output.table(
        "Figs. 3-4: interferer capped at 100/buffer-ratio vs uncapped (64 KB VM latency)",
        ["ratio", "cap %", "capped us", "vs base", "std us", "uncapped us", "vs base",
         "intf MB/s capped", "uncapped"], rows))
    return "\n".join(lines)
