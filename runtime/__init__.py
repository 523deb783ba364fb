"""statekit.runtime: the mini stream runtime (see docs/RUNTIME.md).

Entry points (imported from their modules; this package imports nothing eagerly):
    * ``statekit.runtime.environment.get_execution_environment`` / ``StreamEnvironment``
    * ``statekit.runtime.functions`` (KeyedProcessFunction, ...), ``statekit.runtime.state``
      (state descriptors), ``statekit.runtime.sources``, ``statekit.runtime.sinks``
    * ``statekit.runtime.run_options`` (RunOptions, job listeners), ``statekit.runtime.job``
      (JobHandle, JobStatus), ``statekit.runtime.launcher`` (run_job_file)
"""
