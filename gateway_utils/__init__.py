"""Utilities every room of the gateway uses, below all of them (docs/architecture.md).

`logs`, `metrics`, `tracing` (observability), `outbound` and `addresses` (calling others' URLs through the
guard), `realtime` (NOTIFY and the in-process waiter registry), `configfile` (YAML with unique keys and
`${NAME}`). Nothing here imports an app or the project package `gateway`.
"""
