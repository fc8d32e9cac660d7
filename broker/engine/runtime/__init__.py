"""The engine's runtime: the actor that serialises access (and runs large commands' slices, which
components/bulk.py defines), its commit pipeline, fan-out of replies and events, start-up
loading."""
