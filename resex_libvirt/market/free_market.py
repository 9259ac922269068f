"""FreeMarket: maximise resource utilisation (paper Section VI-B, Algorithm 1).

Every VM pays the same fixed price (1 Reso per CPU percent, 1 Reso per MTU)
and may spend its whole allocation as it likes. "When the VM's remaining
Resos is below a certain limit (10% in our case), and more than 10% of the
epoch is remaining, we start decreasing the CPU for that VM gradually. The
CPU is decremented by 10% from its earlier allocated value" — every
interval, until the epoch ends; caps reset when the Resos are replenished.

Parameters are the paper's: ``low_balance`` 0.10, ``epoch_left`` 0.10,
``step`` 0.10. The only addition is mClock's: the market clamps the cap to
the VM's [reservation, limit], and to a 1% floor (a Xen cap of 0 means
"uncapped", so 0 is not a cap).
"""

from resex_libvirt.market import policy


class FreeMarket(policy.Policy):
    name = "free_market"

    def __init__(self, low_balance=0.10, epoch_left=0.10, step=0.10):
        for label, value in (("low_balance", low_balance), ("epoch_left", epoch_left),
                             ("step", step)):
            if not 0.0 <= value < 1.0:
                raise ValueError("%s must be in [0, 1), got %r" % (label, value))
        self.low_balance = low_balance
        self.epoch_left = epoch_left
        self.step = step
        self._caps = {}

    def balance_cap(self, view, vm):
        """Algorithm 1's GETCPUCAP: the cap after this interval's charge."""
        spec = view.specs[vm]
        cap = self._caps.get(vm, spec.limit_pct)
        if (vm in view.ledger and view.ledger.fraction_left(vm) < self.low_balance
                and view.epoch_fraction_left > self.epoch_left):
            cap *= 1.0 - self.step
        cap = view.clamp(vm, cap)
        self._caps[vm] = cap
        return cap

    def decide(self, view):
        return {vm: (self.balance_cap(view, vm), 1.0) for vm in view.specs}

    def start_epoch(self, view):
        self._caps.clear()

    def forget(self, vm):
        self._caps.pop(vm, None)
