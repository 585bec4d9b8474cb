"""The procedural families, by category. `ALL` keeps the original eight first."""
from __future__ import annotations

from envs.io.families.algos import FIB_LIKE, FLATTEN, GCD_K, STAIRS
from envs.io.families.base import SELF, Family, Level, leveled
from envs.io.families.basic import BASIC
from envs.io.families.edges import EDGES
from envs.io.families.maps import MAPS
from envs.io.families.numbers import NUMBERS
from envs.io.families.scans import SCANS
from envs.io.families.seqs import SEQS
from envs.io.families.text import TEXT
from envs.io.families.verify import LONGER, RENAMED, REWORDED, VERIFY

ALL: list[Family] = [*BASIC, *NUMBERS, *TEXT, *SEQS, *MAPS, FIB_LIKE, FLATTEN, STAIRS, GCD_K,
                     *SCANS, *VERIFY, *EDGES, *REWORDED, *RENAMED, *LONGER]

__all__ = ["ALL", "SELF", "Family", "Level", "leveled"]
