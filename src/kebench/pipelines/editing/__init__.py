"""The editing pipeline: edit requests -> weight deltas plus a manifest."""
