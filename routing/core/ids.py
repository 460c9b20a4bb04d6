"""Request and record ids: 128 random bits as 32 hex digits, with no system call per id.

`uuid.uuid4()` reads the kernel's random source on every call, and that read releases
the GIL: on the request path it was two system calls per request, each a chance for a
background thread to take the interpreter for up to a switch interval
(docs/performance.md#writer). Ids need to be unique, not secret (a client may send its
own X-Request-Id), so a private generator seeded from the kernel's source is enough; it
is re-seeded in a forked child so two workers never share a sequence, and being private,
a test that seeds the `random` module cannot make two ids collide.
"""

from __future__ import annotations

import os
import random

_rng = random.Random()  # seeded from os.urandom
_bits = _rng.getrandbits
os.register_at_fork(after_in_child=_rng.seed)


def new_id() -> str:
    """32 lowercase hex digits, like `uuid.uuid4().hex`."""
    return f"{_bits(128):032x}"
