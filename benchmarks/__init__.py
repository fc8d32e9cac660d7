"""Throughput and memory benchmarks for trioq and the bunqueue reference server.

Run ``python -m benchmarks --help``; ``benchmarks/README.md`` explains every row.

Modules:

* :mod:`benchmarks.client` -- a framed, pipelining client on a plain blocking socket.
* :mod:`benchmarks.scenarios` -- the timed scenarios (PUSH, PUSHB, PULL+ACK, PULLB+ACKB).
* :mod:`benchmarks.servers` -- starting and stopping servers, and the RSS sampler.
* :mod:`benchmarks.__main__` -- the command line and the result tables.
"""
