"""What a batch agent's table pays per record to encode and decode, Faust's json codec called
as it is and through `streamapp.codecs.json_once`, side by side in one process.

    .venv/bin/python -m bench.table_codecs [--calls 200000] [--rounds 5]

Per call, in µs (best of ``--rounds`` alternating rounds, on a busy machine the best is the
least disturbed): a str key encoded, an int value encoded, an int value decoded with no
declared type (the throughput app's table: ``app.Table("sums", default=int)``), and a small
dict value both ways. "Faust's call" encodes with the codec (``codec.dumps``) and decodes with
the registry (``Registry.loads_value``: the codec, then its check for a model); "json_once"
is what `streamapp.codecs.resolved` now returns for them. Never part of the tests.
"""

from __future__ import annotations

import argparse
from typing import Any

from faust.serializers.codecs import get_codec
from faust.serializers.registry import Registry

from bench.lib.per_call import Case, best_of_rounds, print_table
from streamapp.codecs import json_once
from streamapp.codecs import resolved as resolved_codecs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    codec = get_codec("json")
    registry = Registry(key_serializer="json", value_serializer="json")
    fast_dumps = json_once.dumps_for(codec)
    # The table's value decoding (resolved_codecs), which now takes json_once's path.
    fast_loads = resolved_codecs.loader(registry, "value", None, "json")
    assert fast_dumps is not None and fast_loads is not None

    def codec_loads(data: bytes) -> Any:  # Faust's registry: the codec, then the model check
        return registry.loads_value(None, data)

    small = {"clicks": 3, "campaign": "c-17"}
    cases: list[Case] = [
        ("str key, encode", codec.dumps, fast_dumps, "k1234"),
        ("int value, encode", codec.dumps, fast_dumps, 12345),
        ("int value, decode", codec_loads, fast_loads, b"12345"),
        ("dict value, encode", codec.dumps, fast_dumps, small),
        ("dict value, decode", codec_loads, fast_loads, codec.dumps(small)),
    ]
    best = best_of_rounds(cases, rounds=args.rounds, calls=args.calls)
    header = ("case", "Faust's call µs", "json_once µs")
    print_table(best, header, rounds=args.rounds, calls=args.calls, ratio_digits=1)


if __name__ == "__main__":
    main()
