"""Site descriptions and the backends that reach them."""
