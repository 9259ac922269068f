# Every test run starts with nova in native-threading mode (see native_threading).
from tests import native_threading  # noqa: F401
