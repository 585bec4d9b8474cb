"""The procedural families, by category. `ALL` keeps the original eight first."""
from __future__ import annotations

from tasks.families.algos import FIB_LIKE, FLATTEN, GCD_K, STAIRS
from tasks.families.base import SELF, Family, Level, leveled
from tasks.families.basic import BASIC
from tasks.families.edges import EDGES
from tasks.families.maps import MAPS
from tasks.families.numbers import NUMBERS
from tasks.families.scans import SCANS
from tasks.families.seqs import SEQS
from tasks.families.text import TEXT
from tasks.families.verify import LONGER, RENAMED, REWORDED, VERIFY

ALL: list[Family] = [*BASIC, *NUMBERS, *TEXT, *SEQS, *MAPS, FIB_LIKE, FLATTEN, STAIRS, GCD_K,
                     *SCANS, *VERIFY, *EDGES, *REWORDED, *RENAMED, *LONGER]

__all__ = ["ALL", "SELF", "Family", "Level", "leveled"]
