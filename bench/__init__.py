"""Switchboard's benchmark: `python -m bench.run` (make bench), `python -m bench.compare`."""
