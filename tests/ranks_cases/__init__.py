"""Modules and the per-rank program of the ``torch.distributed`` tests (tests/test_ranks.py)."""
