"""Knowledge-editing methods, their weight deltas, and the edit runner (no Kedro here)."""
