"""Job ids: made and checked in one place (``statefmt.job_id``), used by the runtime and the writers."""

from __future__ import annotations

import pytest

from statekit.runtime.control import registry
from statekit.statefmt.errors import BadInputError
from statekit.statefmt.job_id import JOB_ID_FORMAT, check_job_id, is_job_id, is_job_id_prefix, new_job_id
from statekit.writers.savepoint_writer import SavepointWriter


def test_new_job_ids_are_valid_and_distinct() -> None:
    ids = {new_job_id() for _ in range(100)}
    assert len(ids) == 100 and all(is_job_id(i) and check_job_id(i) == i for i in ids)


@pytest.mark.parametrize("text", ["0" * 31, "0" * 33, "A" * 32, "0" * 32 + "\n", "../" + "0" * 29, "", "g" * 32, None, 7])
def test_anything_else_is_not_a_job_id(text: object) -> None:
    assert not is_job_id(text)
    with pytest.raises(BadInputError, match=f"^invalid job id .*: expected {JOB_ID_FORMAT}$"):
        check_job_id(text)  # type: ignore[arg-type]


def test_prefixes() -> None:
    assert is_job_id_prefix("a") and is_job_id_prefix("0123456789abcdef" * 2)
    assert not any(is_job_id_prefix(t) for t in ("", "0" * 33, "A", "ab\n", "a/b"))


def test_every_user_has_the_same_definition() -> None:
    assert (registry.new_job_id, registry.check_job_id) == (new_job_id, check_job_id)
    assert is_job_id(SavepointWriter.new_savepoint().job_id)
