"""The service interfaces: an HTTP API (``app``), its tokens, and the operations behind it
and the MCP server (``ops``, ``models``)."""
