"""What a job script declares (Flink's API): user functions, state descriptors and TTL, watermark
strategies, window assigners and triggers, sources' interfaces, side outputs, restart strategies,
checkpoint configuration, durations. Imports no other room."""
