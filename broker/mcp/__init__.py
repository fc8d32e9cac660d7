"""trioq's MCP server (Model Context Protocol, on the official `mcp` SDK): the reference's
`bunqueue_*` tools, resources and prompts, so AI agents can run and inspect queues.

In the broker it is served at `/mcp` on the HTTP port (Streamable HTTP, asgi.py), running
commands through the engine; `trioq mcp --url tcp://HOST:PORT` serves it over stdio for desktop
agents, talking to a running broker over TCP (connection.py). Both build the same server
(server.py) over a `Backend` (backend.py): something that runs one protocol command.
"""
