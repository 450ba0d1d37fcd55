"""programs."""
