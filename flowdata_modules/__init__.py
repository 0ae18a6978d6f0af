"""Ready-made flowdata function modules, written against the public API only."""
