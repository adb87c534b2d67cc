"""Plumbline's test and bench tools, a distribution of their own (``plumbline-kit``), never in the
gateway's wheel: `fakes` (fake upstreams the tests and benchmarks answer from) and `loadgen` (the
load generator behind ``plumbline bench`` and ``bench/*.py``). The kit may import the gateway; the
gateway never imports the kit."""
