"""Modules and the per-rank program of the ``torch.distributed`` tests (tests/run/distributed/test_ranks.py)."""
