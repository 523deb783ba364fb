"""Records between subtasks: input gates (bounded data lane, priority lane), record writers
(buffers per channel, keyed routing, backlogs), partitioning, in-band events, and the batch
paths (whole buffers handed over in one call)."""
