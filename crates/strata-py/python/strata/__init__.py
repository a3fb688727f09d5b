"""strata: an embedded HTAP storage engine.

Open a database with :func:`open` (a context manager), run SQL with ``Database.sql`` (queries
return ``pyarrow.Table``), read and write rows with ``Table.get/insert/update/delete``, scan
with ``Table.scan`` and bulk-load Arrow or pandas data with ``Table.insert_arrow``.
"""

from ._strata import Database, Error, Table, __version__, open

__all__ = ["Database", "Error", "Table", "open", "__version__"]
