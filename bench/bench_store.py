"""Trajectory store benchmark: the store's atomic, idempotent shard writes against a plain
`pyarrow.dataset.write_dataset` of the same table, in one run; size on disk against JSONL; a
filtered query through `rollforge query`.

    .venv/bin/python bench/bench_store.py                 # 1,000,000 rows
    .venv/bin/python bench/bench_store.py --rows 100000   # quicker

Target: store rows/s >= plain rows/s / 1.25 (atomic writes cost at most 25% over the plain write).
Both writers get the same Arrow table, zstd, the same row-group size and the same number of
threads (--threads); both write one hive partition per iteration. The store additionally
validates the table against the schema, writes each shard under a temporary name, fsyncs it
and renames it into place.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import duckdb  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.dataset as ds  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from storage.synthetic import example_rows, synthetic_table  # noqa: E402
from storage.trajectories import (COMPRESSION, ROW_GROUP_SIZE, compact,  # noqa: E402
                                  write_shard, write_shard_table)

QUERY = "SELECT count(*) AS n, avg(reward) AS mean_reward FROM trajectories WHERE iteration = {it} AND reward > 0.5"


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB"


def write_plain(table: pa.Table, base: Path, threads: int) -> None:
    fmt = ds.ParquetFileFormat()
    ds.write_dataset(table, base, format=fmt, partitioning=["iteration"], partitioning_flavor="hive",
                     file_options=fmt.make_write_options(compression=COMPRESSION),
                     max_rows_per_group=ROW_GROUP_SIZE, min_rows_per_group=min(ROW_GROUP_SIZE, 1 << 16),
                     existing_data_behavior="overwrite_or_ignore", use_threads=threads > 1)


def write_store(shards: list[tuple[int, int, pa.Table]], run_dir: Path, threads: int) -> None:
    def one(job: tuple[int, int, pa.Table]) -> str:
        it, k, t = job
        return write_shard_table(str(run_dir), it, k, t)

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, shards))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--iterations", type=int, default=4)
    ap.add_argument("--shards", type=int, default=8, help="shards per iteration")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                    help="writer threads for both writers (default: cores)")
    ap.add_argument("--workdir", default=None, help="where to write (default: a temporary folder)")
    ap.add_argument("--repeats", type=int, default=2, help="writes of each writer (best is reported)")
    ap.add_argument("--keep", action="store_true", help="keep the written data")
    ap.add_argument("--jsonl-rows", type=int, default=100_000,
                    help="rows written as JSONL to measure its size, scaled to --rows (0: all rows)")
    args = ap.parse_args()

    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench_store_"))
    work.mkdir(parents=True, exist_ok=True)
    store, plain, jsonl = work / "store", work / "plain", work / "rows.jsonl"
    for p in (store, plain):
        shutil.rmtree(p, ignore_errors=True)
    try:
        t0 = time.perf_counter()
        per_it = args.rows // args.iterations
        parts = [synthetic_table(per_it + (args.rows % args.iterations if i == args.iterations - 1 else 0),
                                 run_id="bench", iteration=i, seed=i) for i in range(args.iterations)]
        table = pa.concat_tables(parts)
        shards = []
        for i, part in enumerate(parts):
            size = -(-part.num_rows // args.shards)
            shards += [(i, k, part.slice(k * size, size)) for k in range(args.shards)]
        gen_s = time.perf_counter() - t0
        n = table.num_rows
        print(f"rows: {n:,} ({args.iterations} iterations x {args.shards} shards), "
              f"in memory {mb(table.nbytes)}, generated in {gen_s:.1f} s; threads: {args.threads}")

        # Alternate the writers (plain, store, plain, store, ...) so neither gets a warmer
        # page cache; the store's repeats overwrite the same shards (the idempotent path).
        plain_times, store_times = [], []
        for _ in range(args.repeats):
            shutil.rmtree(plain, ignore_errors=True)
            t0 = time.perf_counter()
            write_plain(table, plain, args.threads)
            plain_times.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            write_store(shards, store / "bench", args.threads)
            store_times.append(time.perf_counter() - t0)
        plain_s, store_s = min(plain_times), min(store_times)
        stored_rows = sum(pq.read_metadata(p).num_rows for p in (store / "bench").rglob("*.parquet"))
        if stored_rows != n:
            raise SystemExit(f"the store holds {stored_rows} rows after {args.repeats} writes of {n}")

        dict_rows = example_rows(min(20_000, n), run_id="bench", iteration=0)
        t0 = time.perf_counter()
        write_shard(str(work / "dicts" / "bench"), 0, 0, dict_rows)
        dict_s = time.perf_counter() - t0

        # JSON serialisation is slow (~10 s per 100k rows here), so by default a slice of the
        # (identically distributed) rows is written and its size scaled to all rows.
        sample = table if args.jsonl_rows <= 0 else table.slice(0, min(args.jsonl_rows, n))
        t0 = time.perf_counter()
        con = duckdb.connect()
        con.register("t", sample)
        con.execute(f"COPY t TO '{jsonl}' (FORMAT JSON)")
        con.close()
        jsonl_s = time.perf_counter() - t0
        jsonl_bytes = jsonl.stat().st_size * n / sample.num_rows
        jsonl_note = ("all rows" if sample.num_rows == n else
                      f"{sample.num_rows:,} rows written, size scaled x{n / sample.num_rows:.1f}")

        s_before = du(store)
        t0 = time.perf_counter()
        for i in range(args.iterations):
            compact(str(store / "bench"), i)
        compact_s = time.perf_counter() - t0

        it = min(2, args.iterations - 1)
        cmd = [str(Path(sys.executable).parent / "rollforge"), "query", "--store", str(store),
               "--format", "csv", QUERY.format(it=it)]
        t0 = time.perf_counter()
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        query_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        from storage.query import connect
        qcon, _ = connect(str(store))
        in_proc = qcon.sql(QUERY.format(it=it)).fetchall()
        inproc_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        # The plain dataset keeps NaN rewards, which DuckDB sorts above every number: without
        # the isnan guard `reward > 0.5` would count the rollouts that could not be scored.
        direct = duckdb.sql(QUERY.format(it=it).replace(
            "FROM trajectories", f"FROM read_parquet('{plain}/*/*.parquet', hive_partitioning=true)")
            + " AND NOT isnan(reward)").fetchall()
        direct_s = time.perf_counter() - t0
        if in_proc[0][0] != direct[0][0] or abs(in_proc[0][1] - direct[0][1]) > 1e-9:
            raise SystemExit(f"store and plain dataset disagree: {in_proc} vs {direct}")

        ratio = store_s / plain_s
        print()
        print(f"{'write':<44}{'seconds':>10}{'rows/s':>14}")
        print(f"{'plain pyarrow.dataset.write_dataset':<44}{plain_s:>10.2f}{n / plain_s:>14,.0f}")
        print(f"{'store write_shard_table (atomic, fsync)':<44}{store_s:>10.2f}{n / store_s:>14,.0f}")
        print(f"(best of {args.repeats}, alternating; each: plain "
              f"{', '.join(f'{t:.2f}' for t in plain_times)} s, store {', '.join(f'{t:.2f}' for t in store_times)} s; "
              f"the store's repeats replace the same shards and it still holds {stored_rows:,} rows)")
        print(f"store / plain time: {ratio:.3f}  (overhead {100 * (ratio - 1):+.1f}%; target <= +25%: "
              f"{'MET' if ratio <= 1.25 else 'NOT MET'})")
        print(f"(for reference: write_shard from {len(dict_rows):,} row dicts: "
              f"{len(dict_rows) / dict_s:,.0f} rows/s, dominated by the dict -> Arrow conversion)")
        print()
        s_store, s_plain, s_json = du(store), du(plain), jsonl_bytes
        print(f"{'size on disk':<44}{'bytes':>14}{'vs JSONL':>10}")
        print(f"{'JSONL (DuckDB COPY, same rows)':<44}{mb(s_json):>14}{1.0:>10.3f}")
        print(f"{'plain Parquet (zstd)':<44}{mb(s_plain):>14}{s_plain / s_json:>10.3f}")
        print(f"{'store Parquet (zstd), as written':<44}{mb(s_before):>14}{s_before / s_json:>10.3f}")
        print(f"{'store Parquet (zstd), compacted':<44}{mb(s_store):>14}{s_store / s_json:>10.3f}")
        print(f"(JSONL: {jsonl_note}, in {jsonl_s:.1f} s; compaction of {args.iterations * args.shards} "
              f"shard files into {len(list(store.rglob('*.parquet')))}: {compact_s:.1f} s)")
        print()
        print(f"filtered query (iteration = {it} AND reward > 0.5) on the compacted store -> "
              f"{out.strip().splitlines()[-1]} (n, mean_reward)")
        print(f"{'query':<44}{'seconds':>10}")
        print(f"{'rollforge query (new process, CLI)':<44}{query_s:>10.3f}")
        print(f"{'storage.query.connect + query (in process)':<44}{inproc_s:>10.3f}")
        print(f"{'duckdb read_parquet on the plain dataset':<44}{direct_s:>10.3f}")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"\nkept: {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
