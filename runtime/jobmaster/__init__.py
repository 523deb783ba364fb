"""Runs one job: the job master (attempts, restarts, finishing), execution attempts (deploying
tasks), the checkpoint coordinator, job-side metrics, the restore-compatibility check, the
thread executor."""
