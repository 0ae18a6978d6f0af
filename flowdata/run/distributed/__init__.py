"""Ranks of ``torch.distributed`` sharing a pass (:mod:`.ranks`): the deal of blocks, the
chain of reducer states, the status messages that keep any rank from waiting forever."""
