"""The gateway's record of every request, token-exact, one file per turn of an episode:

    <records>/<episode_id>/turn-000000.json   the first request tagged with that episode
                           turn-000001.json   the next one, ...

A turn file holds what was asked (the prompts as token ids, the sampling settings, the chat
messages where there were some) and what the sampler returned for each choice (token ids,
per-token log-probs, finish reason, text), with the policy version and the episode id. JSON
floats round-trip exactly, so the log-probs read back are the ones sampled.

Atomic and safe under concurrency: a turn is written whole to a temporary file, fsynced, and
then hard-linked to its name, which fails if the name is taken; the writer then takes the next
index. So a crash leaves no half record (at most a `.tmp-*` file that readers skip), and two
requests of one episode in flight at once, in one gateway or in two sharing the folder, never
overwrite each other: each gets its own turn index, in the order they finished.
"""
from __future__ import annotations

import json
import os
import re
import threading
import uuid
from pathlib import Path

EPISODE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
RECORD_FORMAT = 1
_TURN = re.compile(r"^turn-(\d{6,})\.json$")


def check_episode_id(episode_id: str) -> str:
    """The id as given, or ValueError naming what an id may hold (it names a folder)."""
    if not EPISODE_ID.match(episode_id):
        raise ValueError(f"episode id {episode_id[:80]!r}: expected 1 to 128 characters of letters, "
                         "digits and . _ : - (starting with a letter or digit)")
    return episode_id


def new_episode_id() -> str:
    return f"ep-{uuid.uuid4().hex[:16]}"


class EpisodeLog:
    """The turn files under `root` (see the module docstring)."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self._lock = threading.Lock()
        self._next: dict[str, int] = {}  # episode -> the index to try first (a hint only)

    def episode_dir(self, episode_id: str) -> Path:
        return self.root / check_episode_id(episode_id)

    def append(self, episode_id: str, record: dict) -> int:
        """Write `record` as the episode's next turn; returns its turn index (also stored in
        the record as `turn`)."""
        folder = self.episode_dir(episode_id)
        folder.mkdir(parents=True, exist_ok=True)
        with self._lock:
            turn = self._next.get(episode_id)
            if turn is None:
                turn = len(self._turn_files(folder))
            while True:
                body = json.dumps({**record, "format": RECORD_FORMAT, "episode_id": episode_id,
                                   "turn": turn}, separators=(",", ":"))
                if self._publish(folder, f"turn-{turn:06d}.json", body):
                    break
                turn += 1  # taken (another writer on this folder): the next index
            self._next[episode_id] = turn + 1
        return turn

    @staticmethod
    def _publish(folder: Path, name: str, body: str) -> bool:
        tmp = folder / f".tmp-{uuid.uuid4().hex}"
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(body)
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(tmp, folder / name)  # atomic, and refuses a name that exists
            except FileExistsError:
                return False
        finally:
            tmp.unlink(missing_ok=True)
        fd = os.open(folder, os.O_RDONLY)  # the new name survives a power cut too
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        return True

    @staticmethod
    def _turn_files(folder: Path) -> list[tuple[int, Path]]:
        if not folder.is_dir():
            return []
        found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := _TURN.match(p.name))]
        return sorted(found)

    def turns(self, episode_id: str) -> list[dict]:
        """The episode's turn records in turn order ([] for an episode never seen)."""
        return [json.loads(p.read_text(encoding="utf-8"))
                for _, p in self._turn_files(self.episode_dir(episode_id))]

    def episodes(self) -> list[str]:
        """Every episode with at least one turn, sorted."""
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir()
                      if EPISODE_ID.match(p.name) and self._turn_files(p))
