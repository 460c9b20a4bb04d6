"""State a cluster's serving processes share over Redis, each deciding on its own memory (README.md)."""
