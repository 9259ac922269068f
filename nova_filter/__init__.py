"""Nova scheduler plugin: congestion filter, weigher, extra-spec validators (no libvirt)."""
