"""The engine's rules: checks and timer rules, functions over the part of the state they need
(each named as a Protocol)."""
