"""The response cache: its stores, the coalescer, and the Redis connection of the request path (README.md)."""
