"""`rollforge query [--store PATH] "SQL"`: DuckDB over the trajectory store.

Views: trajectories (one row per rollout), runs, metrics (one row per run and iteration),
checkpoints. Prints a table, or writes CSV / Parquet (atomically, to --output).
"""
from __future__ import annotations

import argparse
import sys

DEFAULT_STORE = "runs/"
FORMATS = ("table", "csv", "parquet")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "query", help="run SQL (DuckDB) over the trajectory store",
        description="Run SQL (DuckDB dialect) over the store. Views: trajectories (one row per "
                    "rollout; iteration is a column), runs, metrics (metric names with '/' must "
                    "be double-quoted, e.g. \"rollout/pass_rate\"), checkpoints. Note: rewards "
                    "that could not be scored are NULL, so avg(reward) skips them.",
        epilog='example: rollforge query "SELECT family, iteration, avg(reward > 0) AS pass_rate '
               'FROM trajectories GROUP BY ALL ORDER BY ALL"')
    p.add_argument("sql", help="the query")
    p.add_argument("--store", default=DEFAULT_STORE,
                   help="store folder or fsspec URI (default: %(default)s)")
    p.add_argument("--format", choices=FORMATS, default=None,
                   help="table (default), csv (to stdout or --output), or parquet (needs --output); "
                        "inferred from the --output extension when not given")
    p.add_argument("--output", "-o", default=None, help="write the result to this file (atomic)")
    p.add_argument("--max-rows", type=int, default=100,
                   help="rows a table shows before eliding the middle (default: %(default)s)")
    p.set_defaults(func=run_query)


def _resolve_format(args: argparse.Namespace) -> str:
    from flows.cli import UsageError

    fmt = args.format
    if fmt is None:
        fmt = "table"
        if args.output:
            ext = args.output.rsplit(".", 1)[-1].lower()
            if ext not in ("csv", "parquet"):
                raise UsageError(f"--output {args.output!r}: say --format csv or --format parquet "
                                 "(or give the file a .csv / .parquet extension)")
            fmt = ext
    if fmt == "parquet" and not args.output:
        raise UsageError("--format parquet needs --output FILE (Parquet is not printed)")
    return fmt


def run_query(args: argparse.Namespace) -> int:
    from flows.cli import UsageError

    fmt = _resolve_format(args)
    import duckdb

    from storage.query import VIEWS, connect
    from storage.trajectories import retrying

    def once():
        con, summary = connect(args.store)
        rel = con.sql(args.sql)
        if rel is None:
            raise UsageError("the SQL returned no result; use a query (SELECT ..., DESCRIBE ...)")
        return con, summary, rel.fetch_arrow_table()

    try:  # one consistent set of files: started over if a compaction retires one it named
        con, summary, result = retrying(once, "query")
    except FileNotFoundError as exc:
        raise UsageError(str(exc)) from None
    except duckdb.Error as exc:
        hint = f" (views: {', '.join(VIEWS)})" if isinstance(exc, duckdb.CatalogException) else ""
        raise UsageError(f"SQL error: {exc}{hint}") from None
    for note in summary.notes:
        print(f"rollforge query: note: {note}", file=sys.stderr)
    _emit(con, result, fmt, args)
    return 0


def _emit(con, result, fmt: str, args: argparse.Namespace) -> None:  # noqa: ANN001
    import os
    import tempfile

    import pyarrow.parquet as pq

    from storage.fs import atomic_write, atomic_write_bytes, locate

    if fmt == "table":
        import pandas as pd

        frame = result.to_pandas()
        with pd.option_context("display.max_rows", args.max_rows, "display.min_rows", min(args.max_rows, 20),
                               "display.max_columns", None, "display.width", 200,
                               "display.max_colwidth", 60):
            text = frame.to_string(index=False, max_rows=args.max_rows) if len(frame.columns) else ""
        text += f"\n({len(frame)} row{'s' if len(frame) != 1 else ''})\n"
        if args.output:
            atomic_write_bytes(locate(args.output), text.encode())
        else:
            sys.stdout.write(text)
        return
    if fmt == "parquet":
        atomic_write(locate(args.output), lambda t: pq.write_table(result, t, compression="zstd"))
        print(f"wrote {result.num_rows} rows to {args.output}", file=sys.stderr)
        return
    # CSV through DuckDB, which writes list and map columns as readable literals.
    con.register("_result", result)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "result.csv")
        con.execute(f"COPY _result TO '{path}' (FORMAT CSV, HEADER)")
        if args.output:
            with open(path, "rb") as f:
                atomic_write_bytes(locate(args.output), f.read())
            print(f"wrote {result.num_rows} rows to {args.output}", file=sys.stderr)
        else:
            with open(path, encoding="utf-8") as f:
                sys.stdout.write(f.read())

