# nova in native-threading mode before etcd3gw or nova import eventlet.
from tests import native_threading  # noqa: F401
