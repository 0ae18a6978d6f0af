"""Where a group's samples come from.

- :mod:`.contract`: the ``Source`` and ``ItemIndex`` contracts every adapter follows, and
  ``guarded`` iteration (a source's error names it);
- :mod:`.adapters`: what a source function's return value becomes -- indexes of lists,
  Arrow tables and DataFrames, a ``datasets.Dataset``, an Arrow file of a generator's
  items; plain iterables, read once;
- :mod:`.arrowindex`: the Arrow file of a generator's items, written once and
  memory-mapped by every worker;
- :mod:`.sharded`: streams in shards (``datasets.IterableDataset``, anything with
  ``num_shards``/``shard``), each shard read on its own;
- :mod:`.huggingface`: everything flowdata knows of Hugging Face ``datasets`` (which
  value is a dataset, how its rows and shards are read, when a stream must be read whole,
  its fingerprint): the one module that reads the library's attributes.
"""
