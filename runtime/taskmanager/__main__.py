"""``python -m statekit.runtime.taskmanager SPEC``: one TaskManager process (started by a job master)."""

import sys

from statekit.runtime.taskmanager.task_manager import main

sys.exit(main())
