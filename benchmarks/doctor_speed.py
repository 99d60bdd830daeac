"""How fast `kvwise doctor` reads big logs (no bar in the brief; "quickly" in issue 5).

Builds logs of 5 and 50 MB of two kinds (a day of request lines, and dense DEBUG lines) with
a start-up failure at the end, and prints the median wall time of `diagnose` over N runs.

    .venv/bin/python benchmarks/doctor_speed.py [N]
"""

from __future__ import annotations

import statistics
import sys
import time

from kvwise.doctor.diagnose import diagnose

FAILURE = (
    b"(EngineCore_0 pid=62) ERROR 08-29 02:03:11 [core.py:700] ValueError: To serve at least one"
    b" request with the model's max seq len (32768), (1.75 GiB KV cache is needed, which is "
    b"larger than the available KV cache memory (1.60 GiB). Based on the available memory, the "
    b"estimated maximum model length is 29952.\n"
)
FILLERS = {
    "request lines": b'(APIServer pid=1) INFO:     127.0.0.1:51234 - "POST /v1/chat/completions '
    b'HTTP/1.1" 200 OK\n',
    "dense DEBUG": b"(EngineCore_0 pid=62) DEBUG 08-29 02:03:11 [core.py:700] EngineCore loop: "
    b"3 running, 1024 of 2048 blocks free (50.0%)\n",
}


def main(runs: int) -> None:
    for name, filler in FILLERS.items():
        for megabytes in (5, 50):
            data = filler * (megabytes * 2**20 // len(filler)) + FAILURE
            times = []
            for _ in range(runs):
                start = time.perf_counter()
                kind = diagnose(data).diagnosis.kind
                times.append(time.perf_counter() - start)
            print(f"{name:14} {megabytes:3} MB: {statistics.median(times):6.2f} s median ({kind})")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
