"""One process of the exchange test: three rounds of 3 MB values (chunked through the key-value store),
then prints which keys remain (only the last round's); the exchange object counts its rounds and bytes per tag."""

from __future__ import annotations

import json
import sys

from ggtrain.distributed import DistributedSpec, initialize

if __name__ == "__main__":
    port, pid = sys.argv[1], int(sys.argv[2])
    host = initialize(
        DistributedSpec(coordinator=f"localhost:{port}", num_processes=2, process_id=pid, peer_timeout_s=60)
    )
    assert (host.process_index, host.process_count, host.timeout_s) == (pid, 2, 60)
    for r in range(3):
        out = host.exchange("t", {"p": pid, "r": r, "blob": bytes([pid]) * (3 << 20)})
        assert [(o["p"], o["r"], o["blob"][:1], len(o["blob"])) for o in out] == [
            (p, r, bytes([p]), 3 << 20) for p in (0, 1)
        ], "wrong values"
    host.exchange("sync", None)
    assert host.rounds == {"t": 3, "sync": 1}, host.rounds
    keys = sorted(k for k, _ in host.client.key_value_dir_get_bytes("ggtrain/t/"))
    print(json.dumps({"process": pid, "keys": keys, "traffic": host.traffic()}), flush=True)
