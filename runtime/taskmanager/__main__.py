"""``python -m statekit.runtime.taskmanager SPEC``: one TaskManager process (started by a job master).

The process ends with ``os._exit`` once the TaskManager has closed: its tasks have ended and
reported, its files are written and its scratch directory is gone, so nothing is left for the
interpreter's shutdown but freeing the heap, which for a job that held millions of records takes
longer than the job's last second (the job master waits for its TaskManagers to exit).
"""

import logging
import os
import sys

from statekit.runtime.taskmanager.task_manager import main

code = main()
logging.shutdown()
sys.stdout.flush()
sys.stderr.flush()
os._exit(code)
