"""The parts of `make bench` (bench/run.py), one module each, in the order they run."""
