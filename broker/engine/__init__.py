"""The single-writer engine: all job state, its rules, and the actor that serialises access."""
