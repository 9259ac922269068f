"""Host reports for tests: a valid record with the fields a test cares about."""

import time

from resex_libvirt.board import report as report_mod


def make(host="compute1", ts=None, **fields):
    """A valid :class:`HostReport` for ``host``, now unless ``ts`` is given."""
    values = dict(
        host=host, ts=time.time() if ts is None else ts, epoch=7,
        link_capacity_bytes_per_s=float(1 << 30), link_utilisation=0.0, cpu_price=1.0,
        io_price=1.0, latency_inflation_pct=0.0, vms=4, sensitive_vms=0, heavy_io_vms=0,
        sensitive_io_share=0.0, heavy_io_share=0.0, agent_version="test")
    values.update(fields)
    return report_mod.HostReport(**values)
