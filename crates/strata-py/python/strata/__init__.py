"""strata: an embedded HTAP storage engine.

Open a database with :func:`open` (a context manager), run SQL with ``Database.sql`` (queries
return ``pyarrow.Table``), read and write rows with ``Table.get/insert/update/delete``, scan
with ``Table.scan``, bulk-load Arrow or pandas data with ``Table.insert_arrow``, and group reads
and writes into snapshot-isolated transactions with ``Database.transaction``.
"""

from ._strata import Database, Error, Table, Transaction, __version__, open

__all__ = ["Database", "Error", "Table", "Transaction", "open", "__version__"]
