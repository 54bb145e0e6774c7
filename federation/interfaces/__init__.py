"""How people and agents reach the federation: the CLI, the HTTP service, the MCP
server, the Jupyter executors, the demo, doctor and figures."""
