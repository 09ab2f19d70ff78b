"""``--verify full`` with the store's own checksums against reading the objects back.

On a real moto_server and a real Azurite (started through ``skyplane_ops/testing/emulators.py``),
writes one multipart object (4 parts) and some small objects through each store twice: with
its checksums on (S3 ``checksums=crc32c``: verification HEADs each object; Azure
``checksums=md5``: every upload carries a transactional Content-MD5 and the CRC32C goes into
the blob's metadata, which the listing returns) and off (verification reads every byte back).
The time to write the multipart object is shown too (Azure: the MD5 costs CPU on upload).
Prints a table and writes ``benchmarks/results/verify_native.json``.

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

from gateway_agent.stores import open_store  # noqa: E402
from gateway_agent.stores.checksum import crc32c  # noqa: E402
from skyplane_ops.testing.emulators import run_azurite, run_moto  # noqa: E402
from skyplane_ops.transfer.verify import verify_objects  # noqa: E402

MiB = 1 << 20


STORES = {
    # store: (emulator, [(checksums option, what it does)]); the first mode is the default
    "s3": (run_moto, ["crc32c", "off"]),
    "azure": (run_azurite, ["md5", "off"]),
}


def measure(store_name: str, args: argparse.Namespace) -> list[dict[str, object]]:
    """Write one multipart object and ``--small`` small ones per mode, then time verify."""
    rows: list[dict[str, object]] = []
    run, modes = STORES[store_name]
    with run() as emu:
        os.environ.update(emu.env)
        for mode in modes:
            store = open_store(
                emu.make_bucket(f"v{uuid.uuid4().hex[:8]}"), {**emu.options, "checksums": mode}
            )
            parts = [os.urandom(args.part_mib * MiB) for _ in range(4)]
            t0 = time.perf_counter()
            upload = store.create_multipart("big")
            for n, part in enumerate(parts, 1):
                store.upload_part("big", upload, n, part)
            store.complete_multipart("big", upload, [1, 2, 3, 4])
            write_s = time.perf_counter() - t0
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
                rows.append({"store": store_name, "checksums": mode, "objects": name,
                             "write_s": round(write_s, 3) if name.startswith("1 ") else None,
                             "seconds": round(seconds, 3), "method": check.method})  # fmt: skip
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part-mib", type=int, default=64, help="size of each of the 4 parts")
    ap.add_argument("--small", type=int, default=200, help="number of 1 KiB objects")
    ap.add_argument("--stores", default="s3,azure", help="s3 and/or azure")
    args = ap.parse_args()
    rows = [r for name in args.stores.split(",") if name for r in measure(name, args)]
    print(f"{'store':<6} {'checksums':<10} {'objects':<22} {'write s':>8} {'verify s':>9}  method")
    for r in rows:
        w = f"{r['write_s']:.2f}" if r["write_s"] is not None else "-"
        print(
            f"{r['store']:<6} {r['checksums']:<10} {r['objects']:<22} {w:>8} "
            f"{r['seconds']:>9.2f}  {r['method']}"
        )
    out = REPO / "benchmarks" / "results" / "verify_native.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"part_mib": args.part_mib, "rows": rows}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
