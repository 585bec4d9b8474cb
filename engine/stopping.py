"""The stop every sampler honours: the process sets `stop_sampling` when it is asked to stop
(flows/stop.py), and a sampler raises `SamplingStopped` rather than sample or retry on."""
from __future__ import annotations

import threading

# Set when the process is asked to stop (flows/stop.py); every sampler honours it: a batch being
# sampled in another thread ends (the local sampler at its next token, an engine's requests
# without their retries) instead of holding the process's exit until it is done (Python joins
# a thread pool's threads at exit; a batch of the real model takes minutes on a CPU).
stop_sampling = threading.Event()


class SamplingStopped(BaseException):
    """A batch left unfinished because the process is stopping (`stop_sampling`). A
    BaseException, as the stop itself is: not a failure a stage's retries should try again
    (a retried batch would sample on, for minutes, through the process's exit)."""
