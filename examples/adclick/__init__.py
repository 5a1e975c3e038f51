"""The ad-click join demo: impressions and clicks joined per auction, co-partitioned.

Modules, one job each: `model` (records and wire format), `join` (the pure join
decisions), `events` (deterministic synthetic traffic), `generator` (producing it
to Kafka), `topology` (topic names and the co-partition check), `app` (the
streamapp.App), `spark/` (reference join, reconciliation, Structured Streaming peer),
`demo` (the end-to-end run behind ``streamapp demo``).
"""
