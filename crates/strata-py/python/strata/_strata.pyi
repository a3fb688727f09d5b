from os import PathLike
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union, final

import pyarrow

__version__: str
__all__ = ["Database", "Error", "Table", "Transaction", "__version__", "open"]

_Key = Any  # a scalar for a one-column primary key, a tuple of values otherwise
_Row = Union[Mapping[str, Any], Sequence[Any]]

class Error(Exception):
    """An error reported by strata."""

    kind: str
    """The cause: "sql", "unknown_table", "unknown_column", "type_mismatch", "closed", ..."""
    sqlstate: Optional[str]
    """The SQLSTATE code of a SQL error, None for other errors."""

def open(path: Union[str, PathLike[str]], *, create: bool = True) -> Database:
    """Opens (by default creating) the database in directory ``path``."""

@final
class Database:
    @property
    def path(self) -> Path: ...
    @property
    def closed(self) -> bool: ...
    def sql(self, query: str, params: Optional[Sequence[Any]] = None) -> Union[pyarrow.Table, int, None]:
        """Runs SQL: a query returns a pyarrow.Table, INSERT/UPDATE/DELETE the rows touched,
        DDL None. With several statements, the last one's result. ``params`` fill $1, $2, ..."""
    def table(self, name: str) -> Table: ...
    def transaction(self, *, read_only: bool = False) -> Transaction:
        """Begins a snapshot-isolated transaction; as a context manager it commits at the end of
        the block and rolls back if the block raises."""
    def tables(self) -> List[str]: ...
    def create_table(
        self,
        name: str,
        schema: pyarrow.Schema,
        primary_key: Sequence[str],
        *,
        layout: Optional[str] = None,
        engine: str = "lsm",
    ) -> Table: ...
    def drop_table(self, name: str) -> None: ...
    def flush(self) -> None: ...
    def compact(self, table: Optional[str] = None) -> None: ...
    def close(self) -> None: ...
    def __enter__(self) -> Database: ...
    def __exit__(self, *exc: Any) -> bool: ...

@final
class Table:
    @property
    def name(self) -> str: ...
    @property
    def primary_key(self) -> List[str]: ...
    @property
    def schema(self) -> pyarrow.Schema: ...
    def get(self, key: _Key, columns: Optional[Sequence[str]] = None) -> Optional[Dict[str, Any]]: ...
    def insert(self, row: _Row) -> None: ...
    def update(self, key: _Key, values: Optional[Mapping[str, Any]] = None, **kwargs: Any) -> None: ...
    def delete(self, key: _Key) -> None: ...
    def scan(
        self,
        columns: Optional[Sequence[str]] = None,
        *,
        where: Optional[str] = None,
        start: Optional[_Key] = None,
        end: Optional[_Key] = None,
        limit: Optional[int] = None,
    ) -> pyarrow.Table: ...
    def multi_get(
        self, keys: Sequence[_Key], columns: Optional[Sequence[str]] = None
    ) -> List[Optional[Dict[str, Any]]]:
        """The rows with these keys (dicts or None, in the order of ``keys``), read at one read point."""
    def insert_arrow(self, data: Any) -> int:
        """Bulk-loads a pyarrow Table/RecordBatch/RecordBatchReader, a pandas DataFrame or any
        Arrow stream, ingested straight into the deepest free level in atomic chunks of 200,000
        rows; returns the rows written."""

@final
class Transaction:
    def get(self, table: Table, key: _Key, columns: Optional[Sequence[str]] = None) -> Optional[Dict[str, Any]]: ...
    def insert(self, table: Table, row: _Row) -> None: ...
    def update(
        self, table: Table, key: _Key, values: Optional[Mapping[str, Any]] = None, **kwargs: Any
    ) -> None: ...
    def delete(self, table: Table, key: _Key) -> None: ...
    def scan(
        self,
        table: Table,
        columns: Optional[Sequence[str]] = None,
        *,
        where: Optional[str] = None,
        start: Optional[_Key] = None,
        end: Optional[_Key] = None,
        limit: Optional[int] = None,
    ) -> pyarrow.Table: ...
    def commit(self) -> None:
        """Applies every write, or none: raises Error (kind "conflict") when another commit
        wrote one of its rows after it began."""
    def rollback(self) -> None: ...
    def __enter__(self) -> Transaction: ...
    def __exit__(self, *exc: Any) -> bool: ...
