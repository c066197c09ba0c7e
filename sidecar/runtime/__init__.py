"""The runtime: dispatch of scorer runs, per-partition offset tracking, commit policy and settings."""
