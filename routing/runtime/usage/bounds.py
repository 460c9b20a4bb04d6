"""How much of a usage record is stored: one definition for the Python conversion
(routing.runtime.usage.writer) and the SQL one (routing.runtime.usage.pgbatch)."""

MAX_TEXT = 1 << 20  # request/response bodies: already cut at capture; this bounds a hostile spool row
MAX_JSON_ITEMS = 32  # a trail is at most fallback_max_depth + 1 links; this only bounds a hostile row
TRAIL_ITEM_VALUES = 4  # values kept of one trail entry ([model id, outcome])
TRAIL_VALUE_CHARS = 200  # characters kept of one trail value
