# Importing nova.tests.functional eventlet-monkey-patches the whole process
# unless this is set (nova/monkey_patch.py). The project runs native threads
# only (DESIGN.md), and the rest of the test run must not be patched either.
import os

os.environ.setdefault("OS_NOVA_DISABLE_EVENTLET_PATCHING", "1")
