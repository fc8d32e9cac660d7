"""The broker node: what puts the layers below together into one running process.

`app` (the engine actor, its services and the TCP and HTTP servers under one nursery), `ha`
(the role loop of a broker on PostgreSQL: standby or active) with `forwarding` and `identity`,
`cli` (the `trioq` command), `config` and `logs`. Nothing below imports this package
(tests/test_layering.py checks it for broker/server/, broker/mcp/ and broker/services/).
"""
