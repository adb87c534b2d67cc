"""Fakes for tests and benchmarks: a fault-injecting fake upstream and what it answers. Not used
when serving."""
