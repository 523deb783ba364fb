"""The rich renderers, one module per area; ``statekit.cli.render`` is their one table.

A renderer is ``(console, result) -> None`` for one result type, named in its signature.
Values that come from snapshots or users (paths, uids, state names, keys, messages) go
through ``markup._e`` (or ``rich.markup.escape``): a ``[`` in a uid is text, never markup.
"""
