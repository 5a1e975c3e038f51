"""The Spark side of the demo: what a user's data team would run against the same topics."""
