"""Which Parquet files make up an iteration: a small manifest that switches in one rename.

`trajectories/iteration=<n>/_manifest.json` names the iteration's live files and the shards each
holds. Every change of an iteration (a shard written, a retry's attempt replacing the last one,
shards dropped, a compaction) writes its new files under names of its own generation, then
replaces the manifest (the one atomic step readers see), then deletes every Parquet file the
manifest does not name. A crash before the manifest's rename leaves the previous attempt in force;
one after it leaves only files nobody reads, removed by the next change. The leading "_" keeps
the manifest out of pyarrow's and pandas' folder reads, and it is not a `.parquet` for globs.

A folder without a manifest (written before there was one) is read by its file names: a file
whose shard range lies inside another's is superseded; the first change writes a manifest.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

from storage.fs import Location, atomic_write_bytes

NAME = "_manifest.json"
_SHARD = re.compile(r"^shard-(\d+)(?:-g(\d+))?\.parquet$")
_RANGE = re.compile(r"^shards-(\d+)-(\d+)(?:-g(\d+))?\.parquet$")


@dataclass(frozen=True)
class ShardFile:
    """A Parquet file of one iteration and the inclusive range of shards it holds."""

    loc: Location
    first: int
    last: int

    def holds(self, shard: int) -> bool:
        return self.first <= shard <= self.last


@dataclass(frozen=True)
class State:
    generation: int  # 0: no manifest yet
    files: tuple[ShardFile, ...]  # live files, sorted by first shard


def file_name(first: int, last: int, generation: int) -> str:
    """Unique per generation, so a file a reader may be reading is never overwritten."""
    if first == last:
        return f"shard-{first:05d}-g{generation:06d}.parquet"
    return f"shards-{first:05d}-{last:05d}-g{generation:06d}.parquet"


def _parse(folder: Location, name: str) -> ShardFile | None:
    if m := _SHARD.match(name):
        return ShardFile(folder.join(name), int(m[1]), int(m[1]))
    if m := _RANGE.match(name):
        return ShardFile(folder.join(name), int(m[1]), int(m[2]))
    return None


def _legacy(folder: Location) -> tuple[ShardFile, ...]:
    files = [f for n in folder.names() if (f := _parse(folder, n)) is not None]
    # Ranges are nested or disjoint (compaction merged whole files), so a file is superseded
    # exactly when an earlier-starting, wider file reaches past its end.
    files.sort(key=lambda f: (f.first, -f.last))
    live, reach = [], -1
    for f in files:
        if f.last > reach:
            live.append(f)
        reach = max(reach, f.last)
    return tuple(live)


def read(folder: Location) -> State:
    loc = folder.join(NAME)
    try:
        data = json.loads(loc.read_bytes())
    except FileNotFoundError:
        return State(0, _legacy(folder))
    files = tuple(ShardFile(folder.join(name), int(a), int(b)) for name, a, b in data["files"])
    return State(int(data["generation"]), files)


def commit(folder: Location, generation: int, files: list[ShardFile]) -> State:
    """Make `files` the iteration's live set (the manifest's rename), then delete the rest."""
    files = sorted(files, key=lambda f: f.first)
    for a, b in zip(files, files[1:]):
        if a.last >= b.first:
            raise ValueError(f"{a.loc.name} and {b.loc.name} both hold shard {b.first}")
    body = {"generation": generation, "files": [[f.loc.name, f.first, f.last] for f in files]}
    atomic_write_bytes(folder.join(NAME), json.dumps(body).encode())
    state = State(generation, tuple(files))
    sweep(folder, state)
    return state


def sweep(folder: Location, state: State) -> None:
    """Delete the Parquet files `state` does not name: retired by its switch, or left by a
    writer that crashed before or after one. Only a writer of the iteration calls it."""
    keep = {f.loc.name for f in state.files}
    for name in folder.names():
        if name.endswith(".parquet") and name not in keep:
            folder.join(name).remove()
