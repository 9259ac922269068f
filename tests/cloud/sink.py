# Licensed under the Apache License, Version 2.0 (the "License"); you may
# not use this file except in compliance with the License. You may obtain
# a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
# WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
# License for the specific language governing permissions and limitations
# under the License.


"""A TCP sink on the guests' bridge: what the bulk guests send ends here.

``python -m tests.cloud.sink ADDRESS PORT``: accepts every connection and
reads and discards what arrives, one thread per connection; prints the
total every 10 s while bytes arrive.
"""

import socket
import sys
import threading
import time

TOTAL = [0]
LOCK = threading.Lock()


def drain(conn):
    buf = bytearray(1 << 16)
    with conn:
        while True:
            try:
                n = conn.recv_into(buf)
            except OSError:
                return
            if not n:
                return
            with LOCK:
                TOTAL[0] += n


def report():
    last = 0
    while True:
        time.sleep(10.0)
        with LOCK:
            now = TOTAL[0]
        if now != last:
            print("sink: %d bytes (%.1f Mbit/s over 10 s)" % (now, (now - last) * 8 / 1e7),
                  flush=True)
        last = now


def main(argv):
    address, port = argv[0], int(argv[1])
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((address, port))
    listener.listen(16)
    print("sink: listening on %s:%d" % (address, port), flush=True)
    threading.Thread(target=report, daemon=True).start()
    while True:
        conn, _peer = listener.accept()
        threading.Thread(target=drain, args=(conn,), daemon=True).start()


if __name__ == "__main__":
    main(sys.argv[1:])
