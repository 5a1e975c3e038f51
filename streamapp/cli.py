"""The `streamapp` command line."""


def main() -> None:
    raise SystemExit("streamapp: not yet implemented")
