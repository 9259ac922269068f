"""quiet_neighbours: hold the VMs without a latency SLA down while a sensitive VM suffers."""

import numpy as np

from resex_libvirt.market import policy


class QuietNeighbours(policy.Policy):
    """A sensitive VM over its threshold holds every VM without an SLA at ``share``."""

    name = "quiet_neighbours"
    taxes_interferers = True
    options = (
        policy.Option("share", 0.5, min=0.01, max=1.0,
                      help="The part of its limit a neighbour keeps while held."),
        policy.Option("hold_s", 0.5, min=0.0, max=60.0,
                      help="Seconds a neighbour is held after the last complaint."),
    )
    # Its own per-VM state: intervals each VM is still held for.
    columns = {"quiet_left": (0, np.int64)}

    def __init__(self, **options):
        self.opts = policy.configure(self.options, options)

    def decide(self, step):
        vms, left = step.vms, step.state.quiet_left
        if (vms.interference_pct > vms.threshold_pct).any():    # NaN: no report
            left[~vms.sensitive] = round(self.opts.hold_s / step.interval_s)
        else:
            np.subtract(left, 1, out=left, where=left > 0)
        quiet = left > 0
        caps = np.where(quiet, vms.limit_pct * self.opts.share, vms.limit_pct)
        answer = policy.Answer().cap(np.arange(len(vms)), caps, 1.0)
        answer.why(np.flatnonzero(quiet), "quiet")
        return answer.why(np.flatnonzero(~quiet), policy.UNCAPPED)
