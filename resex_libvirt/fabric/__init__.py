"""RDMA/InfiniBand and network usage monitors: bytes and MTUs per VM."""
