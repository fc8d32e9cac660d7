"""The transports: the TCP port (tcp.py, its idle connections read by the hub, hub.py) and the
HTTP port (http.py: REST routes by one table, routes.py; WebSocket, websocket.py; server-sent
events, sse.py; the dashboard's files and views; MCP at /mcp). Every session passes the same
front door (frontdoor.py) and talks only to the engine actor; nothing here imports the node
that composes them (broker/node/).
"""
