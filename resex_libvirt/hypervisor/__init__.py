"""Hypervisor adapters: discovery, CPU sampling and scheduler knobs per VM."""
