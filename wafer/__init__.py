"""wafer."""
