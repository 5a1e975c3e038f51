"""Faust apps as a Faust user writes them, run by the Faust compatibility suite on stock Faust
and, migrated, on streamapp (tests/integration/test_faust_compat.py)."""
