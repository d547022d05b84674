"""Gate measurements, one module per area; each function is registered with @measures."""
