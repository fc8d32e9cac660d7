"""The engine's runtime: the actor that serialises access, its commit pipeline, fan-out of replies
and events, start-up loading, and large commands worked through in slices."""
