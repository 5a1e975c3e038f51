"""assignor package."""
