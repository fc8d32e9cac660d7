"""Durable state behind one interface (SQLite by default, memory-only as an option).

The memory-only mode of the broker core keeps every job in the engine itself, so nothing is
written here yet; the store interface and its SQLite backend arrive with durable persistence.
This package must never import `broker`.
"""
