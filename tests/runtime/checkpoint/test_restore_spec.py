"""A restore plan in plain values: a task's host reopens the snapshot from its spec and takes the
same subtask slices the job master would hand out."""

from __future__ import annotations

import pickle
from pathlib import Path

from statekit.runtime.checkpoint.restore import RestorePlan, RestoreSpec
from statekit.statefmt.metadata import StateDescriptor, StateKind
from statekit.writers.savepoint_writer import SavepointWriter


def test_a_plan_reopened_from_its_spec_gives_the_same_slices(tmp_path: Path) -> None:
    count = StateDescriptor("count", StateKind.VALUE, value_type="int")
    path = str(tmp_path / "sp")
    SavepointWriter.new_savepoint(max_parallelism=128) \
        .with_operator("counter", {count: [(f"k{i}", i) for i in range(200)]}, parallelism=2).write(path)
    plan = RestorePlan.open(path, trust_pickle=True)
    plan.own_job_dir = str(tmp_path / "job")
    plan.migrations = {("counter", "count"): StateDescriptor("count", StateKind.VALUE, value_type="long")}

    spec = plan.spec()
    assert isinstance(spec, RestoreSpec) and pickle.loads(pickle.dumps(spec)) == spec
    again = RestorePlan.from_spec(spec)
    assert (again.path, again.own_job_dir, again.migrations) == (plan.path, plan.own_job_dir, plan.migrations)
    for subtask in range(3):
        ours, theirs = plan.subtask("counter", subtask, 3, 128), again.subtask("counter", subtask, 3, 128)
        assert ours is not None and theirs is not None and ours.key_groups == theirs.key_groups
        assert [(d, sorted(e.key for e in entries)) for d, entries in ours.keyed_states()] == \
               [(d, sorted(e.key for e in entries)) for d, entries in theirs.keyed_states()]
