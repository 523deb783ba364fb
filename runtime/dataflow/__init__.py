"""The job as the API builds it and the executor runs it: the environment, DataStream and its
kinds, the job graph (operators chained into vertices), run options, job capture, the
executor seam and the job handle."""
