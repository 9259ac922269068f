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

"""Plots of simulated runs: matplotlib's ``Agg`` backend, imported only when a plot is written."""


def pyplot():
    """matplotlib's pyplot on the ``Agg`` backend (imported lazily)."""
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    return plt


def save_figure(fig, path):
    """Lay out ``fig``, write it as a PNG to ``path`` and free it."""
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    pyplot().close(fig)


def plot_run(result, path):
    """Caps and Reso balances over time, and the latency histogram, of one run."""
    plt = pyplot()
    fig, axes = plt.subplots(3, 1, figsize=(8, 9))
    t = result.series["t_s"]
    for name, caps in result.series["cap_pct"].items():
        axes[0].plot(t, caps, label=name)
    axes[0].set_ylabel("CPU cap (%)")
    axes[0].legend(loc="best")
    for name, bal in result.series["balance"].items():
        axes[1].plot(t, bal, label=name)
    axes[1].set_ylabel("Resos left")
    axes[1].set_xlabel("simulated time (s)")
    for name, lat in result.latencies_us.items():
        if lat:
            axes[2].hist(lat, bins=80, histtype="step", label=name)
    axes[2].set_xlabel("server latency (us)")
    axes[2].set_ylabel("requests")
    axes[2].legend(loc="best")
    fig.suptitle("%s, policy %s" % (result.scenario, result.policy))
    save_figure(fig, path)
