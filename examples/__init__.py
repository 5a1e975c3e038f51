"""Example applications built on streamapp (importable from a source checkout)."""
