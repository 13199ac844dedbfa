"""free_port.py -- picks a free loopback port for a listener a test names: the one place the
Python tests (test/e2e/sftest.py) and test/tools/zk-server.sh take their ports from.

Run as a program it prints one port."""
import random
import socket


def free_port():
    """A loopback port free a moment ago, taken below the kernel's ephemeral range: a port
    picked there and released could be handed out again by the kernel, to a listener on port
    0 (snowflaked's own Thrift port) or to an outgoing connection, before the listener it was
    picked for binds it."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    for _ in range(200):
        port = random.randint(10000, low - 1) if low > 10001 else 0
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise AssertionError("no free loopback port found below %d" % low)


if __name__ == "__main__":
    print(free_port())
