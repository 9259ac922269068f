# nova in native-threading mode before etcd3gw or nova import eventlet.
from tests.unit.nova_filter import native_threading  # noqa: F401
