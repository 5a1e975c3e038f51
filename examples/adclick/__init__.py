"""The ad-click join demo: impressions and clicks joined per auction, co-partitioned.

Modules, one job each: `model` (records and wire format), `attribution` (the
attribution rule and what is counted; the join itself is `streamapp.joins`'),
`events` (deterministic synthetic traffic), `generator` (producing it to Kafka),
`topology` (topic names and settings), `app` (the streamapp.App), `spark/`
(reference join, reconciliation, Structured Streaming peer),
`demo` (the end-to-end run behind ``streamapp demo``).
"""
