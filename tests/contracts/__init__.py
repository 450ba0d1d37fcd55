"""Contract tests: properties every unit of one kind must keep, as harnesses its tests reuse."""
