"""The engine's components: each owns the commands of one area (its `routes()` table) and
works on the state through the state's owners."""
