"""Caching: what a result depends on, and where it is kept.

- :mod:`.installed`: which code is the user's (read into keys) and which is installed
  (keyed by its package's version);
- :mod:`.digest`: a stable digest of a value by its content; :mod:`.fingerprint`: the code
  key of a function and everything it reaches, and :func:`.fingerprint.digest`, the entry
  point that keys the functions met in a value by their code;
- :mod:`.keys`: the pass cache's key of one pass (what its reductions depend on);
  :mod:`.passcache`: reduction states on disk under that key;
- :mod:`.samplecache`: the sample cache's per-node keys (``cache=``), with
  :mod:`.itemkeys`, the sample's part of a key; :mod:`.store`: its on-disk store, of
  :mod:`.segments` (the file format) holding :mod:`.records` (a chunk's small values as one
  column record) and codec records;
- :mod:`.codec`: the value codec that writes and reads values without pickling (the
  store's records, folding's loose values, what ranks send each other).

Nothing here imports the engine; the engine and the loader import these.
"""
