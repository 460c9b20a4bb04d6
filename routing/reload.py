"""Configuration-change signals (filled in below)."""
