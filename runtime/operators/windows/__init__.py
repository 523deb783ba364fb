"""The window operator: window contents in keyed state, window timers, live windows."""
