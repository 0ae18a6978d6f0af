"""Modules of the sample-cache tests (tests/test_sample_cache.py)."""
