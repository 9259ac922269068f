"""resex-libvirt: ResourceExchange (ResEx) for libvirt and OpenStack.

The core library. It imports neither ``agent`` nor ``nova_filter``; the
dependency direction is ``agent -> resex_libvirt`` and
``nova_filter -> resex_libvirt.board, resex_libvirt.sla``.
"""

import importlib.metadata


def version():
    """The installed distribution's version, or ``"unknown"`` from a bare tree."""
    try:
        return importlib.metadata.version("resex-libvirt")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
