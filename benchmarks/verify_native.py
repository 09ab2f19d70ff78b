"""``--verify full`` on S3 with the store's own CRC32C against reading the objects back.

On a real moto_server (started through ``tests/fixtures/emulators.py``), writes one multipart
object (4 parts) and some small objects through the S3 store twice: with S3 additional
checksums (``checksums=crc32c``, the default: verification HEADs each object) and without
(``checksums=off``: verification reads every byte back). Prints a table and writes
``benchmarks/results/verify_native.json``.

    .venv/bin/python benchmarks/verify_native.py                 # 256 MiB + 200 x 1 KiB
    .venv/bin/python benchmarks/verify_native.py --part-mib 8    # 32 MiB smoke run

On loopback the request overhead of moto dominates small objects (one HEAD costs about what a
1 KiB GET does); the gain is in bytes not read back (on a cloud: time and egress).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from gateway_agent.checksum import crc32c  # noqa: E402
from gateway_agent.stores import open_store  # noqa: E402
from skyplane_ops.transfer.verify import verify_objects  # noqa: E402
from tests.fixtures.emulators import run_moto  # noqa: E402

MiB = 1 << 20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part-mib", type=int, default=64, help="size of each of the 4 parts")
    ap.add_argument("--small", type=int, default=200, help="number of 1 KiB objects")
    args = ap.parse_args()
    rows = []
    with run_moto() as emu:
        os.environ.update(emu.env)
        for mode in ("crc32c", "off"):
            store = open_store(
                emu.make_bucket(f"v{uuid.uuid4().hex[:8]}"), {**emu.options, "checksums": mode}
            )
            parts = [os.urandom(args.part_mib * MiB) for _ in range(4)]
            upload = store.create_multipart("big")
            for n, part in enumerate(parts, 1):
                store.upload_part("big", upload, n, part)
            store.complete_multipart("big", upload, [1, 2, 3, 4])
            big = {"big": (4 * args.part_mib * MiB, crc32c(b"".join(parts)))}
            small = {}
            for i in range(args.small):
                data = os.urandom(1024)
                store.write(f"s/{i:04d}", data)
                small[f"s/{i:04d}"] = (1024, crc32c(data))
            for name, expected in (("1 multipart object", big), (f"{args.small} x 1 KiB", small)):
                t0 = time.perf_counter()
                check = verify_objects(store, expected)
                seconds = time.perf_counter() - t0
                assert check.status == "passed", check.to_dict()
                rows.append({"checksums": mode, "objects": name, "seconds": round(seconds, 3),
                             "method": check.method})  # fmt: skip
    print(f"{'checksums':<10} {'objects':<22} {'verify s':>9}  method")
    for r in rows:
        print(f"{r['checksums']:<10} {r['objects']:<22} {r['seconds']:>9.2f}  {r['method']}")
    out = REPO / "benchmarks" / "results" / "verify_native.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"part_mib": args.part_mib, "rows": rows}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
