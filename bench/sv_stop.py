"""Run with the bench venv's Python: graceful-stop latency of supervisord over XML-RPC."""

import json
import sys
import time
import xmlrpc.client

from supervisor.xmlrpc import SupervisorTransport


def main() -> None:
    sock, count = sys.argv[1], int(sys.argv[2])
    for _ in range(100):
        proxy = xmlrpc.client.ServerProxy(
            "http://127.0.0.1", transport=SupervisorTransport(None, None, f"unix://{sock}")
        )
        try:
            proxy.supervisor.getState()
            break
        except Exception:
            time.sleep(0.1)
    latencies = []
    for _ in range(count):
        proxy.supervisor.startProcess("waiter", True)
        time.sleep(0.01)  # as for xce-agent: let the child reach pause()
        began = time.perf_counter()
        proxy.supervisor.stopProcess("waiter", True)
        latencies.append((time.perf_counter() - began) * 1000)
    print(json.dumps(latencies))


main()
