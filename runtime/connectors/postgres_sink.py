"""PostgresSink: rows into a PostgreSQL table exactly once, by two-phase commit.

A :class:`~statekit.runtime.connectors.two_phase_commit.TwoPhaseCommitSink` whose transaction is one
PostgreSQL transaction per subtask and checkpoint. Each subtask holds two connections
(psycopg 3, the optional extra ``statekit[postgres]``): a *data* connection that streams
the rows of the current transaction with ``COPY ... FROM STDIN`` and prepares it, and an
autocommit *control* connection that commits, rolls back and lists prepared transactions
(``COMMIT PREPARED`` cannot run inside the data connection's next transaction).

* *begin*: nothing happens on the server until the first record; then ``BEGIN`` and a
  ``COPY`` that stays open while records arrive (psycopg sends 32 KiB blocks).
* *pre-commit* (barrier of checkpoint N): the ``COPY`` ends, the server's transaction id
  (``pg_current_xact_id()``) is noted and ``PREPARE TRANSACTION 'statekit:<lineage>:<sink
  uid>:<subtask>:<N>'`` makes the rows durable and invisible; (N, lineage, subtask, gid,
  xid) goes into the union list state ``pending-transactions`` (its ``job`` field). A subtask
  without records since the last barrier prepares nothing.
* *lineage*: the id of the job that started the chain of restores this job continues — its
  own id on a fresh start, else the one the restored state records. Every job restored from
  the same chain prepares under the same prefix, so a job restored from a checkpoint finds
  what *any* job of the chain prepared after that checkpoint (a job killed before it
  completed a checkpoint of its own included), while other jobs' transactions (another
  lineage) are never touched. Two jobs of one lineage must not run against one database at
  once (as with Flink's transactional id prefixes).
* *commit* (checkpoint N complete): ``COMMIT PREPARED`` on the control connection. An id
  the server no longer knows is looked up by its transaction id (``pg_xact_status``):
  committed already is fine (commit is idempotent); rolled back means someone else
  discarded it, which is logged as a warning.
* *recovery* (restore, subtask 0, before any record flows): commit every prepared id the
  snapshot lists, then roll back every other prepared id of the same sink uid and lineage (or
  of the current job) — transactions prepared after the snapshot by any job of the lineage,
  whose checkpoint never completed (or is not the one restored); their records are replayed.
* *connection loss* raises psycopg's ``OperationalError`` in the task: the attempt fails
  and the restart strategy restores from the latest completed checkpoint. The server
  rolled back the open transaction when its session ended; prepared ones survive and are
  resolved by the recovery above.

Setup errors are :class:`~statekit.statefmt.errors.BadInputError` (exit 2): psycopg not
installed, a malformed DSN, ``max_prepared_transactions = 0``, a table that is missing (and
not to be created) or does not match the declared columns.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from statekit.runtime.api.functions import FunctionInitializationContext, RuntimeContext
from statekit.runtime.api.state import ListStateDescriptor
from statekit.runtime.connectors.two_phase_commit import TwoPhaseCommitSink
from statekit.statefmt.errors import BadInputError
from statekit.statefmt.job_id import is_job_id

if TYPE_CHECKING:
    import psycopg
    from psycopg import sql

__all__ = [
    "PostgresSink",
    "PostgresTransaction",
    "transaction_id",
    "PENDING_TRANSACTIONS",
    "GID_PREFIX",
    "MAX_GID_BYTES",
    "transaction_prefix",
]

log = logging.getLogger(__name__)

PENDING_TRANSACTIONS = ListStateDescriptor(
    "pending-transactions", value_type="struct<checkpoint:int,job:string,subtask:int,gid:string,xid:int>"
)
GID_PREFIX = "statekit"
MAX_GID_BYTES = 199  # PostgreSQL's GIDSIZE is 200 including the terminating zero
_GID_TAIL = re.compile(r"[0-9]+:[0-9]+")  # <subtask>:<checkpoint> after the job and uid prefix
_INSTALL_HINT = "PostgresSink needs psycopg 3; install it with: pip install 'statekit[postgres]'"


def transaction_prefix(job_id: str, uid: str) -> str:
    """The start of every global transaction id of one sink of one job."""
    return f"{GID_PREFIX}:{job_id}:{uid}:"


def transaction_id(job_id: str, uid: str, subtask: int, checkpoint_id: int) -> str:
    """The global id a subtask prepares its transaction of ``checkpoint_id`` under.

    Unambiguous although uids may contain ``:``: the rest after a sink's prefix is exactly
    ``<digits>:<digits>``, while another uid that extends this one leaves more fields.
    """
    return f"{transaction_prefix(job_id, uid)}{subtask}:{checkpoint_id}"


@dataclass
class PostgresTransaction:
    """One subtask's PostgreSQL transaction between two barriers.

    Attributes:
        job_id: The lineage it was prepared under (the job id in its global id; recovery
            rolls back leftovers of that lineage).
        subtask: The subtask that opened it.
        started: Whether ``BEGIN`` was sent (a record arrived).
        gid: The global id it was prepared under ("" while open).
        xid: The server's transaction id (an ``xid8``), noted before ``PREPARE``.
    """

    job_id: str
    subtask: int
    started: bool = False
    gid: str = ""
    xid: int | None = None


@dataclass(frozen=True)
class _Column:
    name: str
    type: str


class PostgresSink(TwoPhaseCommitSink[PostgresTransaction]):
    """Exactly-once rows into a PostgreSQL table: one prepared transaction per subtask and checkpoint.

    The server needs ``max_prepared_transactions`` > 0 (at least the sink's parallelism
    times the checkpoints that can be pending at once, typically 2x the parallelism).

    Args:
        dsn: A libpq connection string or URL (``host=... dbname=...``, ``postgresql://...``).
        table: The table, optionally schema-qualified (``schema.table``).
        columns: Column name -> SQL type (``{"word": "text", "count": "bigint"}``), in the
            order of each row's values. An existing table must have these columns with
            these types; its other columns must be nullable or have defaults.
        create_table: Create the table with ``columns`` when it does not exist.
        to_row: Turns a record into the row's values; by default the record is the row
            (a tuple or list in column order).
    """

    def __init__(self, dsn: str, table: str, columns: Mapping[str, str], *, create_table: bool = False,
                 to_row: Callable[[Any], Sequence[Any]] | None = None) -> None:
        super().__init__()
        if not columns:
            raise BadInputError(f"PostgresSink for table {table!r}: no columns given")
        if not table or len(table.split(".")) > 2 or not all(table.split(".")):
            raise BadInputError(f"PostgresSink: invalid table name {table!r}; use table or schema.table")
        self.dsn = dsn
        self.table = table
        self.columns = tuple(_Column(name, type_) for name, type_ in columns.items())
        self.create_table = create_table
        self.to_row = to_row
        self.job_id = ""
        self.lineage = ""  # the job id of every global id this sink prepares (see the module docstring)
        self.uid = ""
        self.subtask = 0
        self.target = f"table {table}"
        self._control: psycopg.Connection[Any] | None = None
        self._data: psycopg.Connection[Any] | None = None
        self._copy: psycopg.Copy | None = None
        self._copy_scope: contextlib.ExitStack | None = None

    # ------------------------------------------------------------ state

    def state_descriptor(self) -> ListStateDescriptor:
        return PENDING_TRANSACTIONS

    def transaction_entry(self, txn: PostgresTransaction, checkpoint_id: int | None) -> dict[str, Any] | None:
        return {"checkpoint": checkpoint_id, "job": txn.job_id, "subtask": txn.subtask, "gid": txn.gid or None,
                "xid": txn.xid}

    def restore_transaction(self, entry: dict[str, Any]) -> tuple[PostgresTransaction, int | None]:
        checkpoint = entry.get("checkpoint")
        xid = entry.get("xid")
        txn = PostgresTransaction(str(entry["job"]), int(entry["subtask"]), gid=str(entry.get("gid") or ""),
                                  xid=int(xid) if xid is not None else None)
        return txn, int(checkpoint) if checkpoint is not None else None

    # ------------------------------------------------------------ set-up

    def initialize_state(self, ctx: FunctionInitializationContext) -> None:
        """Adopt the restored lineage (every subtask sees the whole union state), then restore."""
        restored = ctx.operator_state_store.get_union_list_state(self.state_descriptor()).get()
        self.lineage = _lineage(restored, ctx.runtime_context.job_id)
        super().initialize_state(ctx)

    def setup(self, runtime: RuntimeContext) -> None:
        self.job_id, self.uid, self.subtask = runtime.job_id, runtime.operator_uid, runtime.index_of_this_subtask
        self.lineage = self.lineage or self.job_id
        self._check_gid_fits(runtime.number_of_parallel_subtasks)
        self.target = f"{_describe_dsn(self.dsn)} table {self.table}"
        self._control = self._connect()
        self._check_two_phase_commit(self._control)
        self._check_table(self._control)
        self._data = self._connect()

    def _check_gid_fits(self, parallelism: int) -> None:
        longest = transaction_id(self.lineage, self.uid, parallelism - 1, 10**15)
        if len(longest.encode("utf-8")) > MAX_GID_BYTES:
            raise BadInputError(f"PostgresSink uid {self.uid!r} is too long for a prepared transaction id "
                                f"(at most {MAX_GID_BYTES} bytes with job id, subtask and checkpoint); "
                                "use a shorter uid")

    def _connect(self) -> psycopg.Connection[Any]:
        _require_psycopg()
        import psycopg

        try:
            return psycopg.connect(self.dsn, autocommit=True)
        except psycopg.ProgrammingError as error:  # a malformed DSN: retrying cannot help
            raise BadInputError(f"PostgresSink {self.target}: invalid connection string: {_one_line(error)}") from None

    def _check_two_phase_commit(self, conn: psycopg.Connection[Any]) -> None:
        row = conn.execute("SHOW max_prepared_transactions").fetchone()
        if row is None or int(row[0]) == 0:
            raise BadInputError(
                f"{self.target}: the server has max_prepared_transactions = 0, so PREPARE TRANSACTION is "
                "disabled; PostgresSink needs two-phase commit: set max_prepared_transactions to at least "
                "2 x the sink's parallelism in postgresql.conf and restart the server"
            )

    def _check_table(self, conn: psycopg.Connection[Any]) -> None:
        wanted = {c.name: self._type_oid(conn, c) for c in self.columns}
        relation = self._relation(conn)
        if relation is None and self.create_table:
            self._create_table(conn)
            relation = self._relation(conn)
        if relation is None:
            raise BadInputError(f"{self.target}: the table does not exist; create it with columns "
                                f"{self._column_list()} or pass create_table=True")
        problems = self._table_problems(conn, relation, wanted)
        if problems:
            raise BadInputError(f"{self.target}: the table does not match the sink's columns "
                                f"{self._column_list()}: {'; '.join(problems)}")

    def _column_list(self) -> str:
        return "(" + ", ".join(f"{c.name} {c.type}" for c in self.columns) + ")"

    def _type_oid(self, conn: psycopg.Connection[Any], column: _Column) -> int:
        from psycopg import errors

        try:
            row = conn.execute("SELECT to_regtype(%s)::oid", [column.type]).fetchone()
        except errors.SyntaxError:
            row = None
        if row is None or row[0] is None:
            raise BadInputError(f"{self.target}: column {column.name!r} has an unknown type {column.type!r}")
        return int(row[0])

    def _relation(self, conn: psycopg.Connection[Any]) -> int | None:
        row = conn.execute("SELECT to_regclass(%s)::oid", [self._table_sql().as_string(conn)]).fetchone()
        return int(row[0]) if row is not None and row[0] is not None else None

    def _create_table(self, conn: psycopg.Connection[Any]) -> None:
        from psycopg import sql

        columns = sql.SQL(", ").join(sql.SQL("{} {}").format(sql.Identifier(c.name), sql.SQL(c.type))
                                     for c in self.columns)
        with conn.transaction():  # one creator at a time: subtasks check and create concurrently
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"statekit-create:{self.table}"])
            conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(self._table_sql(), columns))
        log.info("postgres sink %s: created %s %s", self.uid, self.table, self._column_list())

    def _table_problems(self, conn: psycopg.Connection[Any], relation: int, wanted: dict[str, int]) -> list[str]:
        row = conn.execute("SELECT relkind, has_table_privilege(oid, 'INSERT') FROM pg_class WHERE oid = %s",
                           [relation]).fetchone()
        if row is None or row[0] not in ("r", "p"):
            return [f"it is not a table (relkind {row[0] if row else '?'})"]
        problems = [] if row[1] else ["the user may not INSERT into it"]
        live = {name: (oid, shown, required) for name, oid, shown, required in conn.execute(
            "SELECT attname, atttypid, format_type(atttypid, atttypmod), "
            "attnotnull AND NOT atthasdef AND attidentity = '' AND attgenerated = '' "
            "FROM pg_attribute WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
            [relation])}
        for column in self.columns:
            if column.name not in live:
                problems.append(f"no column {column.name!r}")
            elif live[column.name][0] != wanted[column.name]:
                problems.append(f"column {column.name!r} is {live[column.name][1]}, the sink writes {column.type}")
        problems += [f"column {name!r} is NOT NULL without a default and the sink does not write it"
                     for name, (_, _, required) in live.items() if required and name not in wanted]
        return problems

    def _table_sql(self) -> sql.Identifier:
        from psycopg import sql

        return sql.Identifier(*self.table.split("."))

    # ------------------------------------------------------------ transactions

    def begin_transaction(self) -> PostgresTransaction:
        return PostgresTransaction(self.lineage, self.subtask)

    def invoke(self, txn: PostgresTransaction, record: Any) -> None:
        # the base writes only into the current transaction, which __call__ writes to
        if self._copy is None:
            self._start(txn)
        self(record)

    def __call__(self, record: Any) -> None:
        # the per-record path: invoke(current transaction, record), one call shorter
        copy = self._copy
        if copy is None:
            copy = self._start(self._transaction)  # type: ignore[arg-type]
        to_row = self.to_row
        copy.write_row(record if to_row is None else to_row(record))

    def _start(self, txn: PostgresTransaction) -> psycopg.Copy:
        from psycopg import sql

        data = self._data
        assert data is not None
        data.execute("BEGIN")
        txn.started = True
        statement = sql.SQL("COPY {} ({}) FROM STDIN").format(
            self._table_sql(), sql.SQL(", ").join(sql.Identifier(c.name) for c in self.columns))
        scope = contextlib.ExitStack()
        self._copy = copy = scope.enter_context(data.cursor().copy(statement))
        self._copy_scope = scope
        return copy

    def is_empty(self, txn: PostgresTransaction) -> bool:
        return not txn.started

    def pre_commit(self, txn: PostgresTransaction, checkpoint_id: int) -> None:
        from psycopg import sql

        data = self._data
        assert data is not None
        scope, self._copy_scope, self._copy = self._copy_scope, None, None
        if scope is not None:
            scope.close()  # ends the COPY; a row the server refused raises here
        row = data.execute("SELECT pg_current_xact_id()::text").fetchone()
        assert row is not None
        txn.xid = int(row[0])
        txn.gid = transaction_id(self.lineage, self.uid, self.subtask, checkpoint_id)
        data.execute(sql.SQL("PREPARE TRANSACTION {}").format(sql.Literal(txn.gid)))

    def commit(self, txn: PostgresTransaction) -> None:
        from psycopg import errors, sql

        control = self._control
        assert control is not None
        try:
            control.execute(sql.SQL("COMMIT PREPARED {}").format(sql.Literal(txn.gid)))
        except errors.UndefinedObject:
            self._check_committed(txn)

    def _check_committed(self, txn: PostgresTransaction) -> None:
        """A prepared id the server no longer knows: committed before (fine), or discarded (logged)."""
        status = self._status(txn.xid)
        if status == "committed":
            return
        if status is None:  # the server truncated the status of old transactions (an old snapshot)
            log.debug("postgres sink %s: %s was resolved long ago; assuming it was committed", self.uid, txn.gid)
            return
        log.warning("postgres sink %s: prepared transaction %s is gone and was never committed "
                    "(server says: %s); its rows are lost", self.uid, txn.gid, status)

    def _status(self, xid: int | None) -> str | None:
        """``pg_xact_status`` of ``xid`` (None: too old to know), or why it cannot be known."""
        from psycopg import errors

        control = self._control
        assert control is not None
        if xid is None:
            return "no transaction id recorded"
        try:
            row = control.execute("SELECT pg_xact_status(%s::text::xid8)", [str(xid)]).fetchone()
        except errors.InvalidParameterValue as error:  # an id from the future: another cluster
            return _one_line(error)
        return str(row[0]) if row is not None and row[0] is not None else None

    def abort(self, txn: PostgresTransaction) -> None:
        if txn.gid:
            self._rollback_prepared(txn.gid)
            return
        scope, self._copy_scope, self._copy = self._copy_scope, None, None
        data = self._data
        if not txn.started or data is None or data.closed:
            return
        import psycopg

        try:
            if scope is not None:
                aborted = _TransactionAborted("transaction aborted")
                scope.__exit__(type(aborted), aborted, None)  # cancels the COPY on the server
            data.execute("ROLLBACK")
        except psycopg.Error as error:  # a lost session: the server rolled the transaction back
            log.debug("postgres sink %s: rollback of the open transaction: %s", self.uid, _one_line(error))

    def recover_and_abort(self, txn: PostgresTransaction) -> None:
        """Nothing to do on the server: the session of a transaction open in the snapshot ended,
        so the server rolled it back; if it was prepared later, ``finish_recovering`` rolls it back."""

    def finish_recovering(self, committed: list[PostgresTransaction], aborted: list[PostgresTransaction]) -> None:
        known = {t.gid for t in committed}
        jobs = sorted({self.job_id, self.lineage} | {t.job_id for t in committed + aborted if is_job_id(t.job_id)})
        leftovers = [gid for job in jobs for gid in self._prepared(job) if gid not in known]
        for gid in leftovers:
            self._rollback_prepared(gid)
        if committed or leftovers:
            log.info("postgres sink %s: recovery committed %d and rolled back %d prepared transaction(s)",
                     self.uid, len(committed), len(leftovers))

    def _prepared(self, job_id: str) -> list[str]:
        """Prepared ids of this sink uid and ``job_id`` in the sink's database."""
        control = self._control
        assert control is not None
        prefix = transaction_prefix(job_id, self.uid)
        rows = control.execute("SELECT gid FROM pg_prepared_xacts WHERE database = current_database() "
                               "AND starts_with(gid, %s) ORDER BY prepared", [prefix]).fetchall()
        return [gid for (gid,) in rows if _GID_TAIL.fullmatch(gid[len(prefix):])]

    def _rollback_prepared(self, gid: str) -> None:
        from psycopg import errors, sql

        control = self._control
        assert control is not None
        with contextlib.suppress(errors.UndefinedObject):  # resolved meanwhile
            control.execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(gid)))

    def close(self) -> None:
        """Abort the open transaction and close both connections (prepared ones stay on the server)."""
        try:
            super().close()
        finally:
            for conn in (self._data, self._control):
                if conn is not None:
                    conn.close()
            self._data = self._control = None


def _lineage(entries: list[Any], job_id: str) -> str:
    """The lineage a restored union state records (the smallest, should several), else ``job_id``."""
    jobs = sorted({str(e["job"]) for e in entries if isinstance(e, dict) and is_job_id(str(e.get("job")))})
    return jobs[0] if jobs else job_id


class _TransactionAborted(Exception):
    """Handed to the open COPY to cancel it."""


def _require_psycopg() -> None:
    """Raise a BadInputError naming the extra to install when psycopg is missing."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        raise BadInputError(_INSTALL_HINT) from None


def _describe_dsn(dsn: str) -> str:
    """``postgresql://host:port/dbname`` of a DSN, without credentials."""
    _require_psycopg()
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    try:
        parts = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as error:
        raise BadInputError(f"PostgresSink: invalid connection string: {_one_line(error)}") from None
    host = parts.get("host") or parts.get("hostaddr") or "localhost"
    port = parts.get("port") or "5432"
    return f"postgresql://{host}:{port}/{parts.get('dbname') or parts.get('user') or ''}"


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())
