"""Modules of the sample-cache tests (tests/run/caching/test_sample_cache.py)."""
