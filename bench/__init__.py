"""Benchmarks (`make bench`); not run by `make test`."""
