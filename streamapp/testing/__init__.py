"""What streamapp's own tests, benchmarks and the ad-click demo share to drive real workers.

- `streamapp.testing.worker.WorkerProcess`: one ``streamapp worker`` subprocess with its own
  data dir, web port and log file, stopped cleanly or killed like a crash;
- `streamapp.testing.kafka_io`: the few broker operations they need (create topics, produce
  keyed events, read end offsets and partition counts);
- ``free_port`` lives with the broker tools (`streamapp.kafka.probe.free_port`).

It is importable from an installed streamapp, so an app's own integration tests can use it.
"""
