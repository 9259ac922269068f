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

"""CPU contention: single-vCPU VMs sharing fewer pCPUs, by weight, one period at a time.

At the start of every scheduling period the pCPUs' time is divided among
the VMs as a proportional-share scheduler would (Xen's credit scheduler by
``weight``, Linux CFS by ``cpu.shares``): weighted max-min fairness over
each VM's demand, a VM never getting more than one pCPU (one vCPU) nor more
than its cap. A VM's demand is the time it was *runnable* (running, or
waiting with work) in the last period, at most its cap. What a VM is
entitled to becomes its budget for the period, exactly as a cap's quota
(:mod:`~resex_libvirt.sim.credit_scheduler`): once it has used it, a VM with work
waits, and that wait is the run delay the host reports
(``vcpu.<n>.delay``).

Limits, stated: a VM whose demand rises within a period (it was idle, a
request arrived) is entitled at once to at least its weighted share of the
pCPUs (``pcpus x weight / sum of weights``, at most one pCPU), so for that
one period the entitlements may add up to more than the pCPUs; the time
slices inside a period are not modelled (a VM runs its entitlement first
and then waits, where a real scheduler interleaves the runnable vCPUs in
slices of a few milliseconds).
"""

FULL_PCT = 100.0


def fair_shares(demands, weights, pcpus):
    """Weighted max-min fair division of ``pcpus`` pCPUs (percent of one pCPU each).

    ``demands[i]`` is VM ``i``'s demand in percent of one pCPU (at most
    100), ``weights[i]`` its weight (> 0). Water-filling: the pCPUs' time
    is split by weight among the VMs still wanting more; a VM that wants
    less than its part keeps what it wants and leaves the rest to the
    others. Returns each VM's share (never above its demand; the shares add
    up to at most ``100 x pcpus``).
    """
    n = len(demands)
    share = [0.0] * n
    left = FULL_PCT * pcpus
    want = {i for i in range(n) if demands[i] > 0.0}
    while want and left > 1e-9:
        total = float(sum(weights[i] for i in want))
        fair = {i: left * weights[i] / total for i in want}
        met = [i for i in sorted(want) if demands[i] - share[i] <= fair[i]]
        if not met:
            for i in want:
                share[i] += fair[i]
            break
        for i in met:
            left -= demands[i] - share[i]
            share[i] = float(demands[i])
            want.discard(i)
    return share


def entitlements(demands, weights, caps, pcpus):
    """Each VM's budget for the next period, in percent of one pCPU (``None``: a whole pCPU).

    ``demands``: runnable percent of the last period; ``caps``: each VM's
    cap (``None``: uncapped). The weighted fair division of
    :func:`fair_shares` over the demands (each at most its cap), raised to
    each VM's guaranteed share (``100 x pcpus x weight / sum``, at most one
    pCPU and its cap) so that a VM idle in the last period can run at once.
    """
    n = len(demands)
    if n <= pcpus:
        return [None] * n
    capped = [min(FULL_PCT, d if c is None else min(d, c)) for d, c in zip(demands, caps)]
    shares = fair_shares(capped, weights, pcpus)
    total = float(sum(weights))
    out = []
    for share, w, c in zip(shares, weights, caps):
        floor = min(FULL_PCT, FULL_PCT * pcpus * w / total)
        if c is not None:
            floor = min(floor, c)
        got = max(share, floor)
        out.append(None if got >= FULL_PCT - 1e-9 else got)
    return out
